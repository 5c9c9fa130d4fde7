"""The pod runner on toy pods: order, mounts, env, restarts, probes, OOM and termination."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from simnode.kubelet.testing import DECLARE_IMAGE, NODE, WESTON_IMAGE, ToyPod, free_port, wait_for

Make = Callable[[dict[str, Any]], ToyPod]
# A shell loop that records SIGTERM in /host/order and exits 0 on it.
# The trap comes first: a SIGTERM before it would end the shell unrecorded.
TRAP = "trap 'echo {name} >> /host/order; exit 0' TERM; "
LOOP = TRAP + "touch /host/{name}.trapped; while :; do sleep 0.05; done"


def sh(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def host_volume() -> dict[str, Any]:
    return {"name": "host", "hostPath": {"path": "/var/lib/toy", "type": "DirectoryOrCreate"}}


def test_order_mounts_env_and_capabilities(toy_pod: Make) -> None:
    pod = toy_pod({
        # Generous: a loaded machine must not turn the SIGTERM the test checks into a SIGKILL.
        "terminationGracePeriodSeconds": 30,
        "initContainers": [
            {"name": "first", "image": DECLARE_IMAGE,
             "command": sh("echo from-init > /shared/file"),
             "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]},
            {"name": "side", "image": DECLARE_IMAGE, "restartPolicy": "Always",
             "command": sh(LOOP.format(name="side")),
             "volumeMounts": [{"name": "host", "mountPath": "/host"}]},
        ],
        "containers": [{
            "name": "main", "image": DECLARE_IMAGE,
            "command": sh(TRAP.format(name="main") +
                          "cat /shared/file > /host/seen; echo \"$NODE $POD\" > /host/env;"
                          " grep CapEff /proc/self/status > /host/caps;"
                          " touch /ro/x 2> /host/ro-error; ls /var/run/secrets > /host/sa 2>&1;"
                          + LOOP.format(name="main")),
            "env": [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
            "securityContext": {"capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "shared", "mountPath": "/shared"},
                             {"name": "host", "mountPath": "/host"},
                             {"name": "shared", "mountPath": "/ro", "readOnly": True}],
        }],
        "volumes": [{"name": "shared", "emptyDir": {}}, host_volume()],
    })
    pod.start()
    host = pod.host / "var/lib/toy"
    wait_for(lambda: (host / "sa").exists(), timeout=30, what="main wrote its findings")
    assert (host / "seen").read_text() == "from-init\n"
    assert (host / "env").read_text() == f"{NODE} toy-abcde\n"
    assert (host / "caps").read_text().split() == ["CapEff:", "0000000000000000"]
    assert "Read-only file system" in (host / "ro-error").read_text()
    assert pod.container("first")["state"]["terminated"]["reason"] == "Completed"
    assert "running" in pod.container("side")["state"]
    emptydir = pod.volumes.source("shared")
    assert (emptydir / "file").exists()
    wait_for(lambda: all((host / f"{n}.trapped").exists() for n in ("main", "side")),
             timeout=30, what="both containers trap SIGTERM")
    pod.runner.stop()
    # The container before the sidecar, each on SIGTERM.
    assert (host / "order").read_text().split() == ["main", "side"]
    pod.volumes.remove()
    assert not emptydir.exists() and host.is_dir()


def test_trixie_image_runs_weston_14(toy_pod: Make) -> None:
    if not os.environ.get("TRIXIE_ROOT"):
        pytest.skip("TRIXIE_ROOT unset (./pants sets it)")
    pod = toy_pod({"containers": [{
        "name": "w", "image": WESTON_IMAGE,
        "command": sh("weston --version > /host/version; python3.11 -c 'import ssl' &&"
                      " echo ok >> /host/version; " + LOOP.format(name="w")),
        "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
        "volumes": [host_volume()]})
    pod.start()
    version = pod.host / "var/lib/toy/version"
    wait_for(lambda: "ok" in (version.read_text() if version.exists() else ""), timeout=30,
             what="weston --version in the weston image")
    assert version.read_text().startswith("weston 14.")


def test_crash_is_restarted_with_backoff_and_counted(toy_pod: Make) -> None:
    pod = toy_pod({"initContainers": [
        {"name": "side", "image": DECLARE_IMAGE, "restartPolicy": "Always",
         "command": sh("exit 3")}],
        "containers": [{"name": "main", "image": DECLARE_IMAGE,
                        "command": sh(LOOP.format(name="main")),
                        "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
        "volumes": [host_volume()]})
    pod.start()
    wait_for(lambda: pod.container("side")["restartCount"] >= 2, timeout=30,
             what="two restarts (1 s, then 2 s of backoff)")
    side = pod.container("side")
    assert side["lastState"]["terminated"]["exitCode"] == 3
    assert side["lastState"]["terminated"]["reason"] == "Error"
    published = [s for s in pod.statuses if s["initContainerStatuses"][0]["restartCount"] >= 1]
    assert published, "the restart count reached on_status"
    assert any("waiting" in s["initContainerStatuses"][0]["state"] and
               s["initContainerStatuses"][0]["state"]["waiting"]["reason"] == "CrashLoopBackOff"
               for s in pod.statuses)
    assert pod.container("main")["restartCount"] == 0


def test_failing_init_container_is_retried_and_holds_the_containers(toy_pod: Make) -> None:
    pod = toy_pod({"initContainers": [
        {"name": "first", "image": DECLARE_IMAGE, "command": sh("exit 1")}],
        "containers": [{"name": "main", "image": DECLARE_IMAGE, "command": sh("sleep 60")}]})
    # At the deadline `first` is in its backoff or started again; either way it holds the pod.
    with pytest.raises(Exception,
                       match="container first is (waiting|running) .*last exit 1, Error"):
        # Long enough for the first `exit 1` on a loaded 2-core machine (a bwrap start).
        pod.start(timeout=20.0)


def test_over_its_memory_limit_is_oom_killed(toy_pod: Make) -> None:
    pod = toy_pod({"containers": [{
        "name": "hog", "image": DECLARE_IMAGE,
        "command": ["/usr/bin/python3.11", "-c",
                    "import time; b = bytearray(96 << 20); time.sleep(120)"],
        "resources": {"limits": {"memory": "64Mi"}}}]})
    pod.start()
    wait_for(lambda: bool(pod.container("hog")["lastState"]), timeout=30,
             what="the hog OOMKilled")
    ended = pod.container("hog")["lastState"]["terminated"]
    assert (ended["reason"], ended["exitCode"]) == ("OOMKilled", 137)


def _self_signed(directory: Path) -> tuple[Path, Path]:
    key, cert = directory / "key.pem", directory / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=toy", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=60)
    return key, cert


HTTPS_SERVER = """
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if open('/host/healthy').read().strip() == 'yes' else 500)
        self.end_headers()
s = http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain('/host/cert.pem', '/host/key.pem')
s.socket = c.wrap_socket(s.socket, server_side=True)
s.serve_forever()
"""


def test_https_liveness_probe_restarts_after_its_threshold(toy_pod: Make) -> None:
    unused_tcp_port = free_port()
    pod = toy_pod({"containers": [{
        "name": "web", "image": DECLARE_IMAGE,
        "command": ["/usr/bin/python3.11", "-c", HTTPS_SERVER, str(unused_tcp_port)],
        "ports": [{"name": "web", "containerPort": unused_tcp_port}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": "web", "scheme": "HTTPS"},
                          "periodSeconds": 1, "failureThreshold": 2, "timeoutSeconds": 2},
        "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
        "volumes": [host_volume()]})
    host = pod.host / "var/lib/toy"
    host.mkdir(parents=True)
    _self_signed(host)
    (host / "healthy").write_text("yes\n")
    pod.start()
    # Passing probes (the certificate is not verified) leave it running.
    wait_for(lambda: pod.runner.states["web"].next_probe > pod.runner.states["web"].started_mono
             + 2.5, timeout=30, what="three probes")
    assert pod.container("web")["restartCount"] == 0
    (host / "healthy").write_text("no\n")
    wait_for(lambda: bool(pod.container("web")["lastState"]), timeout=30,
             what="a restart after two failed probes")
    ended = pod.container("web")["lastState"]["terminated"]
    assert "Liveness probe failed: HTTP probe failed with statuscode: 500" in ended["message"]


def test_termination_kills_what_ignores_sigterm_after_the_grace(toy_pod: Make) -> None:
    pod = toy_pod({"terminationGracePeriodSeconds": 2, "containers": [{
        "name": "stubborn", "image": DECLARE_IMAGE,
        "command": sh("trap '' TERM; while :; do sleep 0.05; done")}]})
    pod.start()
    pid = pod.runner.pid("stubborn")
    assert pid is not None
    wait_for(lambda: _ignores_sigterm(pid), timeout=30, what="the trap is set")
    pod.runner.stop()
    state = pod.container("stubborn")["state"]["terminated"]
    assert state["exitCode"] == 128 + 9
    assert not Path(f"/proc/{pid}").exists()


def _ignores_sigterm(pid: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return bool(int(line.split()[1], 16) & (1 << 14))
    return False


def test_a_process_that_left_the_containers_session_goes_with_it(toy_pod: Make) -> None:
    pod = toy_pod({"terminationGracePeriodSeconds": 2, "containers": [{
        "name": "parent", "image": DECLARE_IMAGE,
        "command": sh("setsid sleep 300 & echo $! > /host/child; " + LOOP.format(name="p")),
        "volumeMounts": [{"name": "host", "mountPath": "/host"}]}],
        "volumes": [host_volume()]})
    pod.start()
    child_file = pod.host / "var/lib/toy/child"
    wait_for(lambda: child_file.exists() and child_file.read_text().strip().isdigit(),
             timeout=30, what="the child's pid")
    child = int(child_file.read_text())
    wait_for(lambda: child in pod.runner.states["parent"].processes, timeout=30,
             what="the runner saw the child")
    pod.runner.stop()
    wait_for(lambda: not Path(f"/proc/{child}").exists() or
             Path(f"/proc/{child}/stat").read_text().split(") ")[1][0] == "Z",
             timeout=10, what="the child gone with its container")
