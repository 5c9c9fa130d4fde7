"""The VM tier's pod plan (podplan.py) from the rendered base, and the guest's side of it
(guest/pod.py) against the fake API as the guest starts it: HTTPS, RBAC, the base's objects.
No VM: these run with the unit tests."""

from __future__ import annotations

import contextlib
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
import yaml

from simnode.node.checkout import render
from tests.vm import podplan
from tests.vm.guest import pod

REPO = Path(__file__).resolve().parents[2]
START_S = 60.0
STOP_S = 10.0


@pytest.fixture(scope="module")
def rendered() -> str:
    return render(REPO)


@pytest.fixture(scope="module")
def plan(rendered: str) -> dict[str, Any]:
    return podplan.plan(REPO, rendered)


def _with_daemonset(rendered: str, change: Any) -> str:
    docs = [d for d in yaml.safe_load_all(rendered) if d]
    for doc in docs:
        if doc["kind"] == "DaemonSet":
            change(doc["spec"]["template"]["spec"])
    return yaml.safe_dump_all(docs)


def test_each_container_runs_its_images_entrypoint_and_the_manifests_args_in_kubelet_order(
        plan: dict[str, Any]) -> None:
    order = [(c["name"], c["role"]) for c in plan["containers"]]
    assert order == [("declare", "init"), ("weston", "sidecar"), ("operator", "main"),
                     ("capture", "main")]
    argv = {c["name"]: c["argv"] for c in plan["containers"]}
    for name, pex, mode in (("declare", "declare", "declare"), ("weston", "westonctl", "weston"),
                            ("operator", "draplugin", "operator"),
                            ("capture", "capture", "capture")):
        assert argv[name] == [f"/share/venv/{pex}/bin/python3.11", "-sE",
                              f"/share/venv/{pex}/pex", mode]
    assert all(c["drop_all_capabilities"] for c in plan["containers"])


def test_the_env_is_the_manifests_with_the_downward_api_resolved_for_the_node(
        plan: dict[str, Any]) -> None:
    env = {c["name"]: c["env"] for c in plan["containers"]}
    assert env["operator"]["NODE_NAME"] == env["declare"]["NODE_NAME"] == "vm"
    assert env["operator"]["POD_NAME"] == plan["pod"]["metadata"]["name"] == "display-operator-vm"
    assert env["operator"]["POD_NAMESPACE"] == "display-operator"
    assert env["operator"]["METRICS_ADDR"] == ":9200"
    assert env["capture"]["CAPTURE_ADDR"] == ":9201"
    for found in env.values():
        assert (found["KUBERNETES_SERVICE_HOST"], found["KUBERNETES_SERVICE_PORT"]) == (
            "127.0.0.1", "6443")
    # weston runs the renderer the manifest names (GL), with nothing of the tier's own.
    assert env["weston"]["WESTON_RENDERER"] == "gl"
    assert "WESTON_RENDERER" not in env["capture"]
    assert plan["pod"]["spec"]["nodeName"] == "vm"
    assert plan["service_account"] == {"namespace": "display-operator",
                                       "name": "display-operator"}


def test_the_mounts_are_the_manifests_paths(plan: dict[str, Any]) -> None:
    mounts = {c["name"]: {m["path"]: m["volume"] for m in c["mounts"]}
              for c in plan["containers"]}
    assert mounts["weston"] == {"/etc/weston": "weston-config",
                                "/var/run/display.liken.sh": "socket"}
    assert mounts["operator"]["/var/run/cdi"] == "cdi"
    assert mounts["operator"]["/var/lib/kubelet/plugins/display.liken.sh"] == "kubelet-plugin"
    assert mounts["capture"]["/var/run/display-capture-tls"] == "capture-tls"
    assert plan["layout_shell"] == "/usr/lib/x86_64-linux-gnu/weston/layout-shell.so"


@pytest.mark.parametrize(("change", "message"), [
    (lambda s: s["containers"][0].update(command=["/bin/true"]),
     "container operator: command ['/bin/true']"),
    (lambda s: s["volumes"][2]["hostPath"].update(path="/run/elsewhere"),
     "volumeMount cdi at /var/run/cdi is hostPath /run/elsewhere"),
    (lambda s: s["volumes"][5]["secret"].update(optional=False),
     "volume capture-tls is the required Secret display-capture-server"),
    (lambda s: s["containers"][0]["volumeMounts"][4].update(mountPath="/etc/elsewhere"),
     "volume weston-config: container operator mounts it at /etc/elsewhere"),
])
def test_a_manifest_the_guest_cannot_run_as_stated_is_refused_by_name(
        rendered: str, change: Any, message: str) -> None:
    with pytest.raises(podplan.PlanError, match=message.replace("[", r"\[").replace("]", r"\]")):
        podplan.plan(REPO, _with_daemonset(rendered, change))


def test_write_puts_the_plan_and_the_fakes_objects_in_the_share(tmp_path: Path) -> None:
    (tmp_path / "pod").mkdir()
    (tmp_path / "kube").mkdir()
    written = podplan.write(tmp_path, REPO)
    assert json.loads((tmp_path / "pod" / "plan.json").read_text()) == written
    kinds = {(d["kind"], d["metadata"]["name"])
             for d in yaml.safe_load_all((tmp_path / "kube" / "objects.yaml").read_text())}
    for wanted in (("ServiceAccount", "display-operator"), ("ClusterRole", "display-operator"),
                   ("ClusterRoleBinding", "display-operator-capture"),
                   ("RoleBinding", "display-operator"), ("ServiceAccount", "screen-viewer"),
                   ("CustomResourceDefinition", "displays.display.liken.sh"), ("Node", "vm")):
        assert wanted in kinds


def test_make_volumes_keeps_hostpaths_and_makes_the_pods_own_fresh(tmp_path: Path) -> None:
    host, empty = tmp_path / "host", tmp_path / "etc-weston"
    plan: dict[str, Any] = {
        "volumes": [{"name": "h", "kind": "hostPath", "path": str(host),
                     "type": "DirectoryOrCreate"},
                    {"name": "e", "kind": "emptyDir", "path": "", "type": ""}],
        "containers": [{"name": "c", "mounts": [
            {"volume": "h", "path": str(host)}, {"volume": "e", "path": str(empty)}]}]}
    pod.make_volumes(plan)
    (host / "kept").write_text("x")
    (empty / "old").write_text("x")
    assert pod.make_volumes(plan) == {"h": host, "e": empty}
    assert (host / "kept").exists() and not (empty / "old").exists()
    plan["volumes"][0]["type"] = "Directory"
    plan["volumes"][0]["path"] = str(tmp_path / "missing")
    plan["containers"][0]["mounts"][0]["path"] = str(tmp_path / "missing")
    with pytest.raises(pod.PodError, match="hostPath .*missing is not a directory"):
        pod.make_volumes(plan)


@pytest.fixture
def fake_api(tmp_path: Path, rendered: str,
             plan: dict[str, Any]) -> Iterator[tuple[str, Path, str]]:
    """The fake API as the guest starts it, on a free port instead of the plan's."""
    objects = tmp_path / "objects.yaml"
    objects.write_text(podplan.objects(rendered))
    flags = pod.api_argv({**plan, "api": {"host": "127.0.0.1", "port": 0}}, objects)
    log_path = tmp_path / "fakekube.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "fakekube", *flags], stdout=log,
                                stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + START_S
        while (found := pod.api_announcement(log_path.read_text())) is None:
            assert proc.poll() is None, f"fakekube exited {proc.returncode}: {log_path.read_text()}"
            assert time.monotonic() < deadline, "fakekube did not announce itself"
            time.sleep(0.05)
        yield found
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(STOP_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(STOP_S)


def test_the_pods_account_reads_what_its_rbac_grants_and_a_denial_is_recorded(
        fake_api: tuple[str, Path, str], plan: dict[str, Any], tmp_path: Path) -> None:
    url, ca, admin_token = fake_api
    admin = pod.Api(url, ca, admin_token)
    created = pod.create_pod(admin, plan)
    token = pod.pod_token(admin, plan, created)
    account = pod.project_account(token, ca.read_bytes(), "display-operator",
                                  directory=tmp_path / "serviceaccount")
    assert (account / "namespace").read_text() == "display-operator"
    operator = pod.Api(url, account / "ca.crt", (account / "token").read_text())
    assert operator.get("/api/v1/nodes/vm")["metadata"]["name"] == podplan.NODE
    assert operator.get("/api/v1/namespaces/display-operator/pods/display-operator-vm")[
        "spec"]["nodeName"] == "vm"
    assert pod.denials(admin) == []
    with pytest.raises(pod.ApiError) as refused:
        operator.get("/api/v1/namespaces/display-operator/secrets")
    assert refused.value.code == 403
    denied = pod.denials(admin)
    assert [(d["user"], d["verb"], d["resource"]) for d in denied] == [
        ("system:serviceaccount:display-operator:display-operator", "list", "secrets")]
    # The viewer simnode's RBAC grants every screen exists for the scenario's capture calls.
    viewer = pod.token_request(admin, "default", "screen-viewer", audiences=["display-capture"])
    assert viewer and viewer != token
