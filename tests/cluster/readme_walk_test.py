"""The README's "Install", "Put a pod on a screen" and "Diagnose" sections followed literally on
the real-cluster tier: every command of their shell blocks, read from README.md at test time,
run by bash in the checkout with the tier's kubectl on PATH and its kubeconfig in KUBECONFIG
(an owner's shell), its placeholders NODE and NAME replaced by the cluster's real names. A
wrong step in the README fails here; each outcome the README promises is then checked.

What it runs against, and why: the tier's node has no graphics card and reaches no
registry, so `up` deploys deploy/overlays/simulated-node (the base, with the pull policy
Never and hostIPC for Xvfb's screens). The README's `kubectl apply -k deploy/base` is run over
that deployment: a client-side apply, which leaves the fields the base does not set, so it
must succeed and leave the running pod as it is (a literal base would pull from ghcr.io and
could not draw on Xvfb). The pods the README's commands create themselves (hello-screen,
`kubectl debug`'s) pull their `:latest` images as written, from a stand-in for ghcr.io
serving containerd's copy of the images built from this checkout (tests/cluster/registry.py).

Two blocks are not run, each named in SKIPPED with the reason; a block of these sections
that is neither run nor named fails the test.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from libdisplay import __version__
from libdisplay.processes import ReadinessError
from simnode.cluster.local import cluster, images
from simnode.cluster.local.components import Paths
from tests.cluster import registry
from tests.cluster.cluster_node import colours, printed
from tests.support.simnode_up import REPO, Sim

pytestmark = pytest.mark.skipif(os.environ.get("DISPLAY_OPERATOR_CLUSTER") != "1",
                                reason="the real-cluster tier: DISPLAY_OPERATOR_CLUSTER=1")

README: Final = REPO / "README.md"
NODE: Final = "sim-node-1"
CLI_IMAGE: Final = "ghcr.io/liken-sh/display-operator-cli"
# The blocks not run here, by their first line.
SKIPPED: Final = {
    "kubectl -n display-operator create secret tls display-capture-server --cert=tls.crt "
    "--key=tls.key": "optional, and needs the owner's certificate",
    "kubectl label node NODE display.liken.sh/display=none":
        "for a node without a card; this node has one (the label would evict the operator)",
}
COMMAND_S: Final = 180.0  # a `kubectl debug` pulls and starts a pod


def _blocks(section: str) -> list[list[str]]:
    """The shell blocks (fences without a language) of the README's `## section`: their
    command lines."""
    text = README.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    blocks: list[list[str]] = []
    fence: str | None = None  # the open fence's language, "" for a shell block
    for line in text[start:end if end >= 0 else None].splitlines():
        if line.startswith("```"):
            if fence is None:
                fence = line[3:].strip()
                if not fence:
                    blocks.append([])
            else:
                fence = None
        elif fence == "" and line.strip():
            blocks[-1].append(line)
    return blocks


def _to_run(section: str) -> list[list[str]]:
    found = _blocks(section)
    return [block for block in found if block[0] not in SKIPPED]


def _env(sim: Sim) -> dict[str, str]:
    return {**os.environ, "PATH": f"{printed(sim, 'bin')}:{os.environ['PATH']}",
            "KUBECONFIG": str(printed(sim, "kubeconfig"))}


def _shell(sim: Sim, block: list[str], names: dict[str, str]) -> list[tuple[str, str]]:
    """Each command of `block` run by bash after the block's assignments before it, with
    `names`' placeholders replaced; (command, stdout) of each, failing on the first that
    exits non-zero."""
    out = []
    assignments: list[str] = []
    for written in block:
        line = written
        for placeholder, name in names.items():
            line = re.sub(rf"\b{placeholder}\b", name, line)
        done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c",
                               "\n".join([*assignments, line])], cwd=REPO, env=_env(sim),
                              stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              timeout=COMMAND_S, check=False)
        assert done.returncode == 0, f"README: {line!r} exited {done.returncode}: {done.stderr}"
        if re.match(r"^[A-Za-z_]\w*=", line):
            assignments.append(line)
        out.append((line, done.stdout + done.stderr))
    return out


def _kubectl(sim: Sim, *args: str) -> Any:
    done = subprocess.run(["kubectl", *args, "-o", "json"], env=_env(sim), capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _kubectl_ok(sim: Sim, *args: str) -> str:
    done = subprocess.run(["kubectl", *args], env=_env(sim), capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _phase(sim: Sim, pod: str) -> str:
    phase: str = _kubectl(sim, "get", "pod", pod)["status"]["phase"]
    return phase


def _output(ran: list[tuple[str, str]], start: str) -> str:
    [found] = [out for line, out in ran if line.startswith(start)]
    return found


@pytest.fixture(scope="module")
def pulls(node: Sim) -> Iterator[list[str]]:
    """The stand-in registry serving; the -cli image in containerd beside the pod's (the tier
    imports only the pod's), at the base's tag. Its requests; on the way out the README's
    pods deleted and their claims awaited gone, so the next module starts from the base."""
    paths = Paths(state=node.layout.root / "cluster", cache=cluster.DEFAULT_CACHE / "kube",
                  bin=printed(node, "bin"))
    images.load(paths, REPO, {f"{CLI_IMAGE}:latest": f"{CLI_IMAGE}:{__version__}"})
    with registry.serving(paths) as served:
        try:
            yield served
        finally:
            debuggers = [p["metadata"]["name"] for p in _kubectl(node, "get", "pods")["items"]
                         if p["metadata"]["name"].startswith(f"node-debugger-{NODE}-")]
            _kubectl_ok(node, "delete", "pod", "--ignore-not-found", "--wait=false",
                        "--grace-period=1", "hello-screen", *debuggers)
            node.wait(lambda: not _kubectl(node, "get", "resourceclaims")["items"]
                      and not _kubectl(node, "get", "pods")["items"], timeout=180,
                      what="the README's pods and claims gone")


def test_the_skipped_blocks_are_still_the_readme_s() -> None:
    found = {block[0] for block in _blocks("Install")}
    assert set(SKIPPED) <= found, set(SKIPPED) - found


def test_install_and_check_it_runs(node: Sim, pulls: list[str]) -> None:
    pod_before = _kubectl(node, "get", "pods", "-n", "display-operator")["items"]
    install, check = _to_run("Install")
    ran = _shell(node, install, {"NODE": NODE})
    assert "configured" in ran[0][1] or "unchanged" in ran[0][1], ran
    # The apply left the running pod as it was (no rollout).
    pod_after = _kubectl(node, "get", "pods", "-n", "display-operator")["items"]
    assert [p["metadata"]["uid"] for p in pod_after] == [p["metadata"]["uid"]
                                                         for p in pod_before]
    ran = _shell(node, check, {"NODE": NODE})
    # One pod on the node, its containers all ready; one slice of the node's monitors; one
    # Display per connector.
    [pod_line] = _output(ran, "kubectl -n display-operator get pods").splitlines()[1:]
    assert re.search(rf"\s3/3\s+Running\s.*\s{NODE}\s", pod_line), pod_line
    [slice_line] = _output(ran, "kubectl get resourceslices").splitlines()[1:]
    assert NODE in slice_line and "display.liken.sh" in slice_line, slice_line
    [display_slice] = [s for s in _kubectl(node, "get", "resourceslices")["items"]
                       if s["spec"]["driver"] == "display.liken.sh"]
    assert len(display_slice["spec"]["devices"]) == 3
    displays = _output(ran, "kubectl get displays").splitlines()[1:]
    assert sorted(line.split()[0] for line in displays) == [
        f"{NODE}.card0-dp-1", f"{NODE}.card0-dp-2", f"{NODE}.card0-hdmi-a-1"]


def test_put_a_pod_on_a_screen(node: Sim, pulls: list[str], tmp_path: Path) -> None:
    apply, received = _to_run("Put a pod on a screen")
    ran = _shell(node, apply, {})
    assert "pod/hello-screen created" in ran[0][1], ran

    def running() -> bool:
        pod = _kubectl(node, "get", "pod", "hello-screen")
        return any("running" in s["state"] for s in pod["status"].get("containerStatuses", []))

    try:
        node.wait(running, timeout=180, what="hello-screen Running")
    except ReadinessError as exc:
        raise AssertionError(_kubectl_ok(node, "describe", "pod", "hello-screen")) from exc
    # Pulled as written (`:latest`, so always pulled), from the stand-in.
    assert any("/liken-sh/display-weston/manifests/latest" in r for r in pulls), pulls
    [claim] = _kubectl(node, "get", "resourceclaims")["items"]
    name = claim["metadata"]["name"]
    node.wait(lambda: "devices" in _kubectl(node, "get", "resourceclaim", name)["status"],
              timeout=60, what="the claim's status.devices written by the operator")
    ran = _shell(node, received, {"NAME": name})

    [claim_line] = _output(ran, "kubectl get resourceclaims").splitlines()[1:]
    assert claim_line.startswith("hello-screen-screen-") and "allocated,reserved" in claim_line
    [device] = json.loads(_output(ran, f"kubectl get resourceclaim {name}"))
    assert {"output", "mode", "transform", "scale"} <= set(device["data"]), device
    env = dict(line.split("=", 1) for line in
               _output(ran, "kubectl exec hello-screen").splitlines() if "=" in line)
    uid = claim["metadata"]["uid"]
    assert env["WAYLAND_DISPLAY"] == f"/var/run/display.liken.sh/claims/{uid}/wayland-0"
    assert env["DISPLAY_OUTPUT"] == device["data"]["output"]
    assert "XDG_RUNTIME_DIR" in env
    [held] = [line for line in _output(ran, "kubectl get displays").splitlines()
              if name in line]
    assert held.startswith(f"{NODE}.{device['device']} "), held

    # "A moving pattern appears on one of the node's monitors": the client's pattern
    # (thousands of colours) in a capture of that monitor.
    shot = tmp_path / "hello.png"

    def drawn() -> bool:
        node.run("shoot", device["device"], str(shot))
        return colours(shot)[1] > 1000

    node.wait(drawn, timeout=60, what="hello-screen's pattern on its monitor")


def test_diagnose(node: Sim, pulls: list[str]) -> None:
    [claim] = _kubectl(node, "get", "resourceclaims")["items"]
    uid = claim["metadata"]["uid"]
    execs, debugs = _to_run("Diagnose")
    ran = _shell(node, execs, {"NODE": NODE})
    assert uid in _output(ran, "kubectl -n display-operator exec $POD -c operator -- "
                               "draplugin checkpoint")
    assert uid in _output(ran, "kubectl -n display-operator exec $POD -c operator -- "
                               "draplugin cdi")
    assert "answering" in _output(ran, "kubectl -n display-operator exec $POD -c weston -- "
                                       "westonctl ping")
    for listing in ("westonctl outputs", "capture outputs"):
        out = next(out for line, out in ran if f"-- {listing}" in line)
        assert all(o in out for o in ("X1", "X2", "X3")), (listing, out)
    assert _output(ran, "kubectl -n display-operator logs $POD -c declare").strip()

    # kubectl debug: a node's debugging pod with the -cli image, pulled as written; its
    # output read from its log (the attach may start after a short command ended).
    ran = _shell(node, debugs, {"NODE": NODE})
    logs = []
    for _line, out in ran:
        [pod] = re.findall(rf"Creating debugging pod (node-debugger-{NODE}-\w+) ", out)
        node.wait(lambda: _phase(node, pod) in ("Succeeded", "Failed"), timeout=60,  # noqa: B023
                  what=f"{pod} finished")
        assert _phase(node, pod) == "Succeeded", _kubectl_ok(node, "logs", pod)
        logs.append(_kubectl_ok(node, "logs", pod))
    assert any(f"{CLI_IMAGE.split('/', 1)[1]}/manifests/latest" in r for r in pulls), pulls
    outputs, checkpoint = logs
    assert all(o in outputs for o in ("X1", "X2", "X3")), outputs
    assert uid in checkpoint, checkpoint
