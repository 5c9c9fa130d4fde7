"""PodmanLauncher on toy pods from the declare image: args, env, mounts, capabilities, the
shared PID namespace, exit codes, restarts, OOM kills, signals, and clean-up after a SIGKILL.

The image has no shell: the toy containers are python3.11 scripts (`command:` replaces the
image's entrypoint), one container keeps the entrypoint with the manifest's `args`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simnode.kubelet import manifest
from simnode.kubelet.assemble import Assembler, Machine
from simnode.kubelet.launcher import Bind, LaunchSpec
from simnode.kubelet.podman import (
    OWNER_LABEL,
    PodmanLauncher,
    missing_images,
    podman,
    podman_env,
    sweep,
)
from simnode.kubelet.runner import PodRunner
from simnode.kubelet.testing import DECLARE_IMAGE, IMAGES_ENV, NODE, REPO, toy_daemonset, wait_for
from simnode.kubelet.volumes import PodVolumes

PYTHON = "/usr/bin/python3.11"
# vfs copies the image per container created, and the machine is shared: generous bounds.
START_S = 300.0
EXIT_S = 120.0
REMOVE_S = 300.0

# Only when asked (.ci/run's image phase, after build.sh): images left by an earlier build carry
# the same tag, and a test of stale images tests nothing.
pytestmark = pytest.mark.skipif(
    os.environ.get(IMAGES_ENV) != "1" or os.getuid() != 0
    or bool(missing_images([DECLARE_IMAGE])),
    reason=f"runs with {IMAGES_ENV}=1, as root, after deploy/images/build.sh")


def py(script: str) -> list[str]:
    return [PYTHON, "-c", script]


def pod_exists(name: str) -> bool:
    return podman("pod", "exists", name, env=podman_env(), check=False).returncode == 0


def owned_by(token: str) -> list[str]:
    listing = podman("ps", "-a", "--filter", f"label={OWNER_LABEL}={token}", "--format",
                     "{{.Names}}", env=podman_env()).stdout
    return listing.split()


@pytest.fixture
def launcher() -> Iterator[PodmanLauncher]:
    launcher = PodmanLauncher()
    try:
        yield launcher
    finally:
        launcher.close()


class PodmanToyPod:
    """A toy DaemonSet's pod run by the runner with PodmanLauncher."""

    def __init__(self, root: Path, spec: dict[str, Any], launcher: PodmanLauncher) -> None:
        self.root = root
        self.host = root / "host"
        self.template = manifest.from_text(toy_daemonset(spec))
        self.pod = {"metadata": {"name": "toy-podman", "namespace": "toyns", "uid": "u-2"},
                    "spec": {"nodeName": NODE, **self.template.spec}}
        self.volumes = PodVolumes(self.template, host_root=self.host, pod_dir=root / "pod")
        machine = Machine(repo=REPO, dist=REPO / "dist", trixie_root=None,
                          pex_root=root / "pex-root")
        (root / "logs").mkdir()
        self.assembler = Assembler(self.template, machine=machine, pod=self.pod,
                                   volumes=self.volumes, service_account=None, api=None,
                                   cdi={}, logs=root / "logs", scratch=root / "scratch")
        self.runner = PodRunner(self.template, launcher=launcher,
                                spec_for=self.assembler.spec, images={})

    def container(self, name: str) -> dict[str, Any]:
        status = self.runner.status()
        for entry in status["initContainerStatuses"] + status["containerStatuses"]:
            if entry["name"] == name:
                return dict(entry)
        raise KeyError(name)


HOST_VOLUME = {"name": "host", "hostPath": {"path": "/var/lib/toy", "type": "DirectoryOrCreate"}}
DROP_ALL = {"capabilities": {"drop": ["ALL"]}, "allowPrivilegeEscalation": False}
# Records what the container sees, then waits to be ended.
FINDINGS = """
import json, os, time
def cap(path):
    return next(l.split()[1] for l in open(path) if l.startswith('CapEff'))
while not os.path.exists('/host/b.pid'):
    time.sleep(0.05)
b = open('/host/b.pid').read()
try:
    open('/ro/x', 'w')
    ro = 'writable'
except OSError as e:
    ro = e.strerror
found = {'env': [os.environ.get('NODE'), os.environ.get('GREETING')],
         'caps': cap('/proc/self/status'), 'seen': open('/shared/file').read(),
         'ro': ro, 'b_cmdline': open(f'/proc/{b}/cmdline').read().split('\\0'),
         'pid1': open('/proc/1/comm').read().strip()}
open('/host/a.tmp', 'w').write(json.dumps(found))
os.rename('/host/a.tmp', '/host/a.json')
while True:
    time.sleep(1)
"""
MARKER_B = "import os, time; open('/host/b.pid', 'w').write(str(os.getpid())); time.sleep(3600)"
# Exits 3 on its first run, runs on the next.
CRASH_ONCE = """
import os, sys, time
if not os.path.exists('/host/crashed'):
    open('/host/crashed', 'w').close()
    sys.exit(3)
while True:
    time.sleep(1)
"""


def test_toy_pod_from_the_image(tmp_path: Path, launcher: PodmanLauncher) -> None:
    pod = PodmanToyPod(tmp_path, {
        "terminationGracePeriodSeconds": 5,
        "shareProcessNamespace": True,
        "initContainers": [
            {"name": "version", "image": DECLARE_IMAGE, "args": ["--version"]},
            {"name": "first", "image": DECLARE_IMAGE,
             "command": py("open('/shared/file', 'w').write('from-init')"),
             "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]},
        ],
        "containers": [
            {"name": "a", "image": DECLARE_IMAGE, "command": py(FINDINGS),
             "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                     {"name": "GREETING", "value": "hello"}],
             "securityContext": DROP_ALL,
             "volumeMounts": [{"name": "shared", "mountPath": "/shared"},
                              {"name": "host", "mountPath": "/host"},
                              {"name": "shared", "mountPath": "/ro", "readOnly": True}]},
            {"name": "b", "image": DECLARE_IMAGE, "command": py(MARKER_B),
             "securityContext": DROP_ALL,
             "volumeMounts": [{"name": "host", "mountPath": "/host"}]},
            {"name": "crash", "image": DECLARE_IMAGE, "command": py(CRASH_ONCE),
             "volumeMounts": [{"name": "host", "mountPath": "/host"}]},
        ],
        "volumes": [{"name": "shared", "emptyDir": {}}, HOST_VOLUME],
    }, launcher)
    pod.volumes.create()
    try:
        pod.runner.start(timeout_s=START_S)
        host = pod.host / "var/lib/toy"
        wait_for(lambda: (host / "a.json").exists(), timeout=START_S, what="a's findings")
        found = json.loads((host / "a.json").read_text())
        # The image's ENTRYPOINT with the manifest's args.
        version = pod.container("version")
        assert version["state"]["terminated"]["reason"] == "Completed"
        assert "declare, version" in (tmp_path / "logs" / "version.log").read_text()
        assert found["env"] == [NODE, "hello"]
        assert found["caps"] == "0000000000000000"
        assert found["seen"] == "from-init"
        assert found["ro"] == "Read-only file system"
        # One PID namespace for the pod: a sees b's process, and pid 1 is the pod's infra.
        assert found["b_cmdline"][:2] == py(MARKER_B)[:2]
        assert found["pid1"] == "catatonit"
        a, b = pod.runner.pid("a"), pod.runner.pid("b")
        assert a is not None and b is not None
        assert os.readlink(f"/proc/{a}/ns/pid") == os.readlink(f"/proc/{b}/ns/pid")
        assert os.readlink(f"/proc/{a}/ns/pid") != os.readlink("/proc/self/ns/pid")
        caps = Path(f"/proc/{a}/status").read_text()
        assert "CapEff:\t0000000000000000" in caps and "NoNewPrivs:\t1" in caps
        # The exit code, and the restart after the backoff.
        wait_for(lambda: pod.container("crash")["restartCount"] >= 1
                 and "running" in pod.container("crash")["state"],
                 timeout=START_S, what="crash restarted")
        last = pod.container("crash")["lastState"]["terminated"]
        assert (last["exitCode"], last["reason"]) == (3, "Error")
        names = {c["Names"][0] for c in json.loads(podman(
            "ps", "-a", "--filter", f"label={OWNER_LABEL}={launcher.owner}", "--format",
            "json", env=launcher.env).stdout)}
    finally:
        pod.runner.stop()
    # The runner's SIGTERM ends the scripts (no handler): 128+15.
    assert pod.container("a")["state"]["terminated"]["exitCode"] == 143
    launcher.close()
    assert names and not set(owned_by(launcher.owner)) & names


def test_oom_kill_and_signals(tmp_path: Path, launcher: PodmanLauncher) -> None:
    host = tmp_path / "host"
    host.mkdir()

    def spec(name: str, script: str, limit: int | None = None) -> LaunchSpec:
        return LaunchSpec(name=name, argv=(), env={}, binds=(Bind(host, "/host", False),),
                          log_path=tmp_path / f"{name}.log", scratch=tmp_path / name,
                          image=DECLARE_IMAGE, command=(PYTHON, "-c"), args=(script,),
                          memory_limit=limit, pod="signals")

    if not launcher.memory:
        pytest.skip("no memory cgroup here: the runner's RSS check is the OOM killer")
    # It allocates only once the launch has returned (the watch is set up by then).
    hog = launcher.launch(spec("hog", "import os, time\nwhile not os.path.exists('/host/go'):"
                                      " time.sleep(0.05)\nx = bytearray(300 << 20)\n"
                                      "time.sleep(60)", limit=64 << 20))
    (host / "go").touch()
    wait_for(hog.exited, timeout=EXIT_S, what="the hog's end")
    assert (hog.reap(), hog.oom_killed) == (137, True)

    sleeper = launcher.launch(spec("sleeper", "import time; time.sleep(3600)", 64 << 20))
    assert not sleeper.exited()
    sleeper.send_signal(signal.SIGTERM)
    wait_for(sleeper.exited, timeout=EXIT_S, what="the sleeper's end on SIGTERM")
    assert (sleeper.reap(), sleeper.oom_killed) == (143, False)
    # A restart is the same container started again; SIGKILL is 128+9.
    again = launcher.launch(spec("sleeper", "import time; time.sleep(3600)", 64 << 20))
    assert again.pid != sleeper.pid
    assert (again.kill_and_reap(), again.oom_killed) == (137, False)


OWNER = """
import sys, time
from pathlib import Path
from simnode.kubelet.launcher import LaunchSpec
from simnode.kubelet.podman import PodmanLauncher
launcher = PodmanLauncher()
root = Path(sys.argv[1])
c = launcher.launch(LaunchSpec(name="s", argv=(), env={}, binds=(), log_path=root / "s.log",
                               scratch=root, image=sys.argv[2], command=(sys.argv[3], "-c"),
                               args=("import time; time.sleep(3600)",), pod="orphan"))
print(launcher._pods["orphan"].name, flush=True)
time.sleep(3600)
"""


def test_a_sigkilled_owner_leaves_no_pod(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path), DECLARE_IMAGE, PYTHON],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        line = ""
        deadline = time.monotonic() + START_S
        assert owner.stdout is not None
        os.set_blocking(owner.stdout.fileno(), False)
        while not line and time.monotonic() < deadline and owner.poll() is None:
            line = owner.stdout.readline().strip()
            time.sleep(0.1)
        assert line, "the owner did not start its pod"
        assert pod_exists(line)
        owner.send_signal(signal.SIGKILL)
        owner.wait(EXIT_S)
        # Its reaper removes the pod; no finalizer of the owner ran.
        wait_for(lambda: not pod_exists(line), timeout=REMOVE_S, what=f"pod {line} removed")
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(EXIT_S)


def test_sweep_removes_what_a_dead_owner_left() -> None:
    env = podman_env()
    name = f"simnode-sweep-test-{os.getpid()}"
    # No process has this pid (pid_max is at most 2^22).
    podman("pod", "create", "--name", name, "--label", f"{OWNER_LABEL}=99999999:1", env=env,
           timeout=START_S)
    try:
        assert name in sweep(env)
        assert not pod_exists(name)
    finally:
        podman("pod", "rm", "-f", "--ignore", name, env=env, timeout=REMOVE_S, check=False)
