"""The consumer examples: what each says it shows is what its objects do.

That they render and validate (built-in kinds with kubernetes_validate, the Display against
the CRD) is in render_test.py; here their DisplayConfig parameters go through the admission
rules' model, and each example's point is checked on its objects.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from tests.deploy import displayconfig
from tests.deploy.manifests import (
    DEPLOY,
    OPERATOR_RENDERINGS,
    Doc,
    all_containers,
    find,
    render,
    split_image,
)

EXAMPLES = sorted(
    p.name for p in (DEPLOY / "examples").glob("*.yaml") if p.name != "kustomization.yaml"
)


def _claim_specs() -> list[tuple[str, Doc]]:
    specs = []
    for doc in render("examples"):
        if doc["kind"] == "ResourceClaim":
            specs.append((doc["metadata"]["name"], doc["spec"]))
        elif doc["kind"] == "ResourceClaimTemplate":
            specs.append((doc["metadata"]["name"], doc["spec"]["spec"]))
    return specs


def _display_configs() -> list[tuple[str, Any]]:
    return [
        (f"{name}/{','.join(config.get('requests', ['all']))}", config["opaque"]["parameters"])
        for name, spec in _claim_specs()
        for config in spec["devices"].get("config", [])
        if config["opaque"]["driver"] == "display.liken.sh"
    ]


def _pod_spec(kind: str, name: str) -> Doc:
    doc = find(render("examples"), kind, name)
    spec: Doc = doc["spec"] if kind == "Pod" else doc["spec"]["template"]["spec"]
    return spec


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_file_is_in_the_kustomization(example: str) -> None:
    assert example in (DEPLOY / "examples" / "kustomization.yaml").read_text()


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_says_what_it_shows(example: str) -> None:
    assert "What it shows" in (DEPLOY / "examples" / example).read_text()


def test_examples_state_display_configs() -> None:
    """The parameter check below runs on something: kiosk plus the wall's two."""
    assert len(_display_configs()) == 3


@pytest.mark.parametrize(
    ("where", "params"), _display_configs(), ids=[w for w, _ in _display_configs()]
)
def test_example_display_config_passes_the_admission_rules(where: str, params: Any) -> None:
    assert displayconfig.violations(params) == []


def test_kiosk_states_a_mode_and_a_brightness() -> None:
    params = find(render("examples"), "ResourceClaim", "lobby-screen")["spec"]["devices"]["config"]
    assert {"mode", "brightness"} <= set(params[0]["opaque"]["parameters"])


def test_kiosk_deployment_recreates_so_the_new_pod_never_waits_on_the_old() -> None:
    assert find(render("examples"), "Deployment", "lobby-kiosk")["spec"]["strategy"] == {
        "type": "Recreate"
    }


def test_video_wall_takes_two_monitors_of_one_card() -> None:
    spec = find(render("examples"), "ResourceClaimTemplate", "video-wall")["spec"]["spec"]
    assert spec["devices"]["constraints"] == [
        {"requests": ["left", "right"], "matchAttribute": "liken.sh/address"}
    ]


def test_video_wall_gives_each_player_one_monitor() -> None:
    containers = _pod_spec("Pod", "video-wall")["containers"]
    assert [c["resources"]["claims"] for c in containers] == [
        [{"name": "screens", "request": "left"}],
        [{"name": "screens", "request": "right"}],
    ]


def test_transcoder_claims_the_render_node_through_display_render() -> None:
    spec = find(render("examples"), "ResourceClaimTemplate", "transcode-gpu")["spec"]["spec"]
    assert [r["exactly"]["deviceClassName"] for r in spec["devices"]["requests"]] == [
        "display-render"
    ]


def test_transcoder_mounts_no_host_path() -> None:
    assert not [v for v in _pod_spec("Job", "transcode-lobby-loop")["volumes"] if "hostPath" in v]


def test_transcoder_encodes_on_the_gpu_or_fails() -> None:
    (ffmpeg,) = _pod_spec("Job", "transcode-lobby-loop")["containers"]
    script = " ".join(ffmpeg["args"])
    assert ("-c:v h264_vaapi" in script, "libx264" in script) == (True, False)


@pytest.mark.parametrize(
    ("kind", "name"),
    [("Deployment", "lobby-kiosk"), ("Pod", "video-wall"), ("Job", "transcode-lobby-loop"),
     ("Pod", "hello-screen")],
)
def test_consumers_need_no_privilege(kind: str, name: str) -> None:
    contexts = [c["securityContext"] for c in _pod_spec(kind, name)["containers"]]
    assert all(
        s == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        for s in contexts
    )


def test_consumers_reach_monitors_only_through_the_operators_class() -> None:
    classes = {
        request["exactly"]["deviceClassName"]
        for name, spec in _claim_specs()
        if name != "transcode-gpu"
        for request in spec["devices"]["requests"]
    }
    assert classes == {"display.liken.sh"}


# --- Runnable as shipped ---------------------------------------------------------------------

POD_KINDS = {"Pod", "Deployment", "Job", "DaemonSet", "StatefulSet", "CronJob"}


def _template_spec(doc: Doc) -> Doc:
    if doc["kind"] == "Pod":
        return dict(doc["spec"])
    if doc["kind"] == "CronJob":
        return dict(doc["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return dict(doc["spec"]["template"]["spec"])


def _pod_specs() -> list[tuple[str, Doc]]:
    return [(f"{d['kind']}/{d['metadata']['name']}", _template_spec(d))
            for d in render("examples") if d["kind"] in POD_KINDS]


@pytest.mark.parametrize("example", EXAMPLES)
def test_every_example_parses_on_its_own(example: str) -> None:
    """Each file is applied alone (`kubectl apply -f FILE`): YAML objects with a kind."""
    docs = [d for d in yaml.safe_load_all((DEPLOY / "examples" / example).read_text()) if d]
    assert docs and all({"apiVersion", "kind", "metadata"} <= set(d) for d in docs)


def test_examples_run_only_images_the_project_ships() -> None:
    """No `registry.example.com`: each image is one the base or an overlay runs."""
    shipped = {split_image(c["image"])[0] for r in OPERATOR_RENDERINGS for c in all_containers(r)}
    used = {(where, split_image(c["image"])[0]) for where, spec in _pod_specs()
            for c in [*spec.get("initContainers", []), *spec["containers"]]}
    assert {(where, image) for where, image in used if image not in shipped} == set()


# --- The power schedule --------------------------------------------------------------------

SCHEDULE = "display-power-schedule.yaml"


def _schedule() -> list[Doc]:
    return [d for d in yaml.safe_load_all((DEPLOY / "examples" / SCHEDULE).read_text()) if d]


def test_power_schedule_rbac_is_the_two_verbs_the_job_uses_on_displays() -> None:
    """Minimal: one ClusterRole (Displays are cluster-scoped, so no Role could grant them)
    with list and patch on displays alone, bound to the jobs' ServiceAccount alone; no Role,
    no other binding. tests/schedule_test.py shows each verb is needed."""
    docs = _schedule()
    rbac = [d for d in docs if d["apiVersion"].startswith("rbac.authorization.k8s.io/")]
    assert sorted(d["kind"] for d in rbac) == ["ClusterRole", "ClusterRoleBinding"]
    (role,) = (d for d in rbac if d["kind"] == "ClusterRole")
    assert role["rules"] == [{"apiGroups": ["display.liken.sh"], "resources": ["displays"],
                              "verbs": ["list", "patch"]}]
    (binding,) = (d for d in rbac if d["kind"] == "ClusterRoleBinding")
    (account,) = (d for d in docs if d["kind"] == "ServiceAccount")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io",
                                  "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert [(s["kind"], s["name"]) for s in binding["subjects"]] == [
        ("ServiceAccount", account["metadata"]["name"])]
    jobs = [d for d in docs if d["kind"] == "CronJob"]
    assert {_template_spec(j)["serviceAccountName"] for j in jobs} == {
        account["metadata"]["name"]}


def test_power_schedule_switches_off_at_night_and_on_in_the_morning_by_one_selector() -> None:
    """The two jobs' commands are the operator's `power` subcommand with a selector it
    parses, Off in the evening and On in the morning."""
    from draplugin import schedule
    from draplugin.main import cli

    found = {}
    for job in (d for d in _schedule() if d["kind"] == "CronJob"):
        (container,) = _template_spec(job)["containers"]
        args = container["args"]
        assert args[0] == "power"
        sub = cli.commands["power"].make_context("power", list(args[1:]))
        schedule.parse_selector(sub.params["selector"])
        hour = int(job["spec"]["schedule"].split()[1])
        found[sub.params["state"]] = (hour, sub.params["selector"])
    assert set(found) == {"Off", "On"}
    assert found["Off"][0] > found["On"][0] and found["Off"][1] == found["On"][1]


def test_every_claim_and_volume_claim_an_example_names_is_defined() -> None:
    docs = render("examples")
    defined = {(d["kind"], d["metadata"]["name"]) for d in docs}
    missing = []
    for where, spec in _pod_specs():
        for claim in spec.get("resourceClaims", []):
            if "resourceClaimTemplateName" in claim:
                wanted = ("ResourceClaimTemplate", claim["resourceClaimTemplateName"])
            else:
                wanted = ("ResourceClaim", claim["resourceClaimName"])
            if wanted not in defined:
                missing.append((where, *wanted))
        for volume in spec.get("volumes", []):
            if "persistentVolumeClaim" in volume:
                wanted = ("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"])
                if wanted not in defined:
                    missing.append((where, *wanted))
        for container in spec["containers"]:
            names = {c["name"] for c in spec.get("resourceClaims", [])}
            for claim in container.get("resources", {}).get("claims", []):
                if claim["name"] not in names:
                    missing.append((where, "pod resourceClaims entry", claim["name"]))
    assert missing == []


_ATTRIBUTE_READ = re.compile(r'device\.attributes\["([^"]+)"\]\.([A-Za-z_][A-Za-z0-9_]*)')


def _selectors() -> list[tuple[str, str]]:
    return [(f"{name}/{request['name']}", selector["cel"]["expression"])
            for name, spec in _claim_specs() for request in spec["devices"]["requests"]
            for selector in request["exactly"].get("selectors", [])]


def test_examples_have_selectors_to_check() -> None:
    assert _selectors()


@pytest.mark.parametrize(("where", "expression"), _selectors(), ids=[w for w, _ in _selectors()])
def test_example_selectors_test_an_attribute_before_reading_it(where: str,
                                                               expression: str) -> None:
    """A missing attribute is a CEL error that fails the allocation (docs/guide/attributes.md):
    each `device.attributes[D].NAME` is preceded by `"NAME" in device.attributes[D]`."""
    for found in _ATTRIBUTE_READ.finditer(expression):
        domain, name = found.groups()
        guard = f'"{name}" in device.attributes["{domain}"]'
        assert guard in expression[: found.start()], f"{where}: {name} read unguarded"
