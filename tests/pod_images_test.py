"""The rendered base's pod run from the five built images with podman (simnode.kubelet.podman),
on the simulated node of tests/pod_scenario_test.py: declare completes, weston 14 runs the
layout shell, the operator registers and publishes, capture answers HTTPS /healthz from its
start-up leaf and serves a still, with no 403.

Runs only where the images exist (`deploy/images/build.sh`, CI's image phase); the ports are
the manifest's on the host's network, so it cannot run beside the bwrap scenario.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from simnode.kubelet.manifest import daemonset, load_documents, pod_template
from simnode.kubelet.podman import PodmanLauncher, built_ref, image_tag, podman, podman_env
from simnode.kubelet.testing import IMAGES_ENV
from simnode.node import pod_node
from tests.pod_scenario_test import (
    NODE,
    REPO,
    _dist,
    capture_get,
    denials,
    rendered,
    slice_devices,
    statuses,
    wait_for,
)
from tests.pod_scenario_test import (
    test_claim_release_hotplug_hang_roll_capture_with_no_403 as claim_hotplug_hang_roll,
)
from tests.support.tenant import Tenant
from tests.tenants_test import GREEN, RED, Tenants, _claim_socket
from tests.tenants_test import (
    test_a_claims_mode_and_its_release_cut_no_other_tenant as mode_and_release_cut_no_tenant,
)

# vfs copies each image per container created (the weston and capture images are 600 MB):
# minutes on a busy 2-core machine.
START_TIMEOUT_S = 900.0
PNG = b"\x89PNG\r\n\x1a\n"
# The tag the images were built at (build.sh --tag), when not build.sh's default (libdisplay's
# version): a branch's own images beside the ones at the default tag.
TAG_ENV = "DISPLAY_OPERATOR_IMAGES_TAG"


def missing_images(images: list[str], tag: str) -> list[str]:
    """Which of `images`, at `tag`, podman's storage lacks; all of them without podman."""
    if shutil.which("podman") is None:
        return images
    return [i for i in images if podman("image", "exists", built_ref(i, tag), env=podman_env(REPO),
                                        check=False).returncode != 0]


@pytest.fixture(scope="module")
def node() -> Iterator[pod_node.PodNode]:
    manifests = rendered()
    template = pod_template(daemonset(load_documents(manifests)))
    trixie = os.environ.get("TRIXIE_ROOT")
    tag = os.environ.get(TAG_ENV) or image_tag(REPO)
    missing = missing_images([c.image for c in template.all_containers()], tag)
    # Only when asked (.ci/run's image phase, after build.sh): stale images carry the same tag.
    if os.environ.get(IMAGES_ENV) != "1" or os.getuid() != 0 or not trixie or missing:
        pytest.skip(f"runs with {IMAGES_ENV}=1, as root, with TRIXIE_ROOT and the images built"
                    f" by deploy/images/build.sh (missing at tag {tag}: {missing})")
    state = Path(tempfile.mkdtemp(prefix="podi-", dir="/tmp"))
    launcher = PodmanLauncher(repo=REPO, tag=tag)
    config = pod_node.NodeConfig(state=state, repo=REPO, dist=_dist(), manifests=manifests,
                                 trixie_root=Path(trixie), node_name=NODE,
                                 start_timeout_s=START_TIMEOUT_S, images=True)
    node = pod_node.PodNode(config, launcher=launcher)
    try:
        node.start()
        yield node
    finally:
        try:
            node.stop()
        finally:
            launcher.close()
            print_logs(state / "logs")  # shown when a test failed
            shutil.rmtree(state, ignore_errors=True)


def print_logs(logs: Path) -> None:
    for path in sorted(logs.rglob("*.log")):
        tail = path.read_text(errors="replace").splitlines()[-40:]
        print(f"--- {path.relative_to(logs)}", *tail, sep="\n")


def host_pid(namespace_pid: int, like: int) -> int:
    """The host pid of `namespace_pid` in the PID namespace of host pid `like`."""
    namespace = os.readlink(f"/proc/{like}/ns/pid")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdecimal():
            continue
        try:
            if os.readlink(entry / "ns/pid") != namespace:
                continue
            for line in (entry / "status").read_text().splitlines():
                if line.startswith("NSpid:") and line.split()[-1] == str(namespace_pid):
                    return int(entry.name)
        except OSError:
            continue
    raise AssertionError(f"no pid {namespace_pid} in {namespace}")


def entrypoint(node: pod_node.PodNode, image: str) -> list[str]:
    launcher = node.launcher
    assert isinstance(launcher, PodmanLauncher)
    found = json.loads(podman("image", "inspect", built_ref(image, launcher.tag),
                              env=launcher.env).stdout)
    return list(found[0]["Config"]["Entrypoint"])


def test_the_pod_from_its_images(node: pod_node.PodNode) -> None:
    assert node.pod is not None
    inits = statuses(node, "initContainerStatuses")
    mains = statuses(node, "containerStatuses")
    assert inits["declare"]["state"]["terminated"]["reason"] == "Completed"
    assert "running" in inits["weston"]["state"]
    assert {n: "running" in s["state"] for n, s in mains.items()} == {
        "operator": True, "capture": True}
    namespaces = set()
    for container in node.template.all_containers():
        if container.name == "declare":
            continue
        pid = node.pod.runner.pid(container.name)
        assert pid is not None, container.name
        namespaces.add(os.readlink(f"/proc/{pid}/ns/pid"))
        # The image's ENTRYPOINT (a venv's script: its interpreter, maybe -sE, the script)
        # with the manifest's args, or the image's CMD when it states none (the operator).
        argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")]
        assert entrypoint(node, container.image)[0] in argv[:3], (container.name, argv)
        expected = list(container.args) if container.args is not None else ["operator"]
        assert argv[:-1][-len(expected):] == expected, (container.name, argv)
        status = Path(f"/proc/{pid}/status").read_text()
        assert "CapEff:\t0000000000000000" in status and "NoNewPrivs:\t1" in status
        if container.memory_limit is not None:
            group = next(line.split(":", 2)[2] for line in
                         Path(f"/proc/{pid}/cgroup").read_text().splitlines()
                         if ":memory:" in line)
            limit = Path(f"/sys/fs/cgroup/memory{group}/memory.limit_in_bytes").read_text()
            assert int(limit) == container.memory_limit, container.name
    # One PID namespace for the pod (shareProcessNamespace), not the host's.
    assert len(namespaces) == 1 and os.readlink("/proc/self/ns/pid") not in namespaces

    # weston 14 with the layout module as its shell, by the pid westonctl wrote (the pod's).
    weston_ns = int((node.pod.volumes.source("weston-config") / "weston.pid").read_text())
    sidecar = node.pod.runner.pid("weston")
    assert sidecar is not None
    maps = Path(f"/proc/{host_pid(weston_ns, sidecar)}/maps").read_text()
    assert "layout-shell.so" in maps and "libweston-14" in maps

    # Registered with the kubelet stand-in (start did the handshake), and publishing.
    wait_for(lambda: set(slice_devices(node)) == {m.device for m in node.monitors},
             what="the slice of every monitor", timeout=300)
    # Its start-up leaf: no Secret exists (the liveness probe's HTTPS answers from the start).
    wait_for(lambda: capture_get("/healthz", "")[0] == 200, what="capture's /healthz",
             timeout=300)
    output = node.monitors[0].output
    answers = []

    def still() -> bool:
        answers.append(capture_get(f"/api/v1/outputs/{output}/still.png",
                                   node.control.viewer_token))
        return answers[-1][0] == 200

    try:
        wait_for(still, what="a still for the viewer", timeout=300)
    finally:
        if answers[-1][0] != 200:
            print("last answer:", answers[-1][0], answers[-1][1][:300])
    assert answers[-1][1].startswith(PNG)
    assert denials(node) == []


@pytest.fixture
def tenants(node: pod_node.PodNode) -> Iterator[Tenants]:
    """Two tenants of the images' pod, on the first two monitors' claims; released after."""
    assert node.pod is not None
    wait_for(lambda: set(slice_devices(node)) == {m.device for m in node.monitors},
             what="the slice of every monitor", timeout=300)
    with contextlib.ExitStack() as stack:
        drawing = []
        for monitor, colour in ((node.monitors[0], RED), (node.monitors[1], GREEN)):
            name, uid = pod_node.claim(node, monitor.device, {})
            stack.callback(pod_node.release, node, name, uid)
            tenant = Tenant(_claim_socket(node, uid), colour=colour, output=monitor.output)
            stack.callback(tenant.stop)
            drawing.append(tenant)
        pid = (node.pod.volumes.source("weston-config") / "weston.pid").read_text()
        found = Tenants(node, drawing[0], drawing[1], pid)
        found.kept()
        yield found


def test_a_claims_mode_and_release_cut_no_other_tenant_from_the_images(
        tenants: Tenants) -> None:
    """While two tenants' clients draw on the first two monitors, the third is claimed at
    another mode and released, live: weston keeps its pid, both tenants their connection
    (`wl_display.sync` answered) and their pixels, the third output reports each mode."""
    mode_and_release_cut_no_tenant(tenants)


def test_claim_hotplug_hang_and_roll_from_the_images(node: pod_node.PodNode) -> None:
    """The pod-runner scenario's claim with a mode, release, hotplug, hang (counted on the
    sidecar's status and in the operator's crash metric), roll and captures, under podman."""
    claim_hotplug_hang_roll(node)
