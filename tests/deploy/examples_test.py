"""The consumer examples: what each says it shows is what its objects do.

That they render and validate (built-in kinds with kubernetes_validate, the Display against
the CRD) is in render_test.py; here their DisplayConfig parameters go through the admission
rules' model, and each example's point is checked on its objects.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy import displayconfig
from tests.deploy.manifests import DEPLOY, Doc, find, render

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
    [("Deployment", "lobby-kiosk"), ("Pod", "video-wall"), ("Job", "transcode-lobby-loop")],
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
