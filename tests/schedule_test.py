"""The power schedule of deploy/examples/display-power-schedule.yaml, on the simulated API.

The CronJobs' container runs `draplugin power STATE --selector SELECTOR` in the operator's
image; no CronJob runs here (no registry, no controller), so this runs the same command, with
the jobs' own arguments, against the embedded fake API server simnode's nodes live in
(`simnode.cluster.embedded.Embedded`: HTTPS, tokens, RBAC, the base applied by its owner), as
the example's ServiceAccount with a token of its own and the example's RBAC applied. Three
Displays, two labelled for the schedule: the night's job switches those two Off and leaves the
third, the morning's switches them On; a second run writes nothing. Then each verb of the
example's ClusterRole is taken away in turn, and the job fails with the API's 403: the role
holds nothing the job does not use.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from draplugin.main import cli
from libdisplay import display
from simnode.cluster.api import Resource
from simnode.cluster.embedded import Embedded
from tests.deploy.manifests import DEPLOY, render

EXAMPLE = DEPLOY / "examples" / "display-power-schedule.yaml"
DISPLAYS = Resource(display.API_VERSION, display.PLURAL)
CLUSTER_ROLES = Resource("rbac.authorization.k8s.io/v1", "clusterroles")
NODE = "lobby"
SCHEDULED = ("card0-hdmi-a-1", "card0-dp-1")
OTHER = "card0-dp-2"

JsonObject = dict[str, Any]


def _example() -> list[JsonObject]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def _job_args(state: str) -> list[str]:
    """The container arguments of the example's CronJob that switches to `state`."""
    for doc in _example():
        if doc["kind"] == "CronJob":
            (container,) = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
            if container["args"][1] == state:
                return list(container["args"])
    raise AssertionError(f"no CronJob switches {state}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[Embedded, list[str]]]:
    """The simulated node's API with the base, three Displays, the example's RBAC, and the
    API options a job's pod would discover: its server, its CA and its token."""
    embedded = Embedded(tmp_path / "identities", node=NODE)
    embedded.start(list(render("base")))
    try:
        admin = embedded.control.admin
        label = _selector_label()
        for device in (*SCHEDULED, OTHER):
            labels = display.labels(NODE, device)
            if device in SCHEDULED:
                labels[label[0]] = label[1]
            admin.create(DISPLAYS, {
                "apiVersion": display.API_VERSION, "kind": display.KIND,
                "metadata": {"name": display.display_name(NODE, device), "labels": labels},
                "spec": {"mode": "1920x1080@60"}})
        rbac = [d for d in _example() if d["kind"] != "CronJob"]
        # `kubectl apply -f` puts the namespaced ServiceAccount in the current namespace,
        # the one the binding names.
        for doc in rbac:
            if doc["kind"] == "ServiceAccount":
                doc["metadata"]["namespace"] = "default"
        embedded.control.apply(rbac)
        (account,) = (d for d in rbac if d["kind"] == "ServiceAccount")
        token = tmp_path / "token"
        token.write_text(embedded.kube.service_account_token("default",
                                                             account["metadata"]["name"]))
        ca = tmp_path / "ca.crt"
        ca.write_bytes(embedded.ca_pem)
        yield embedded, [f"--api-server={embedded.url}", f"--api-token-file={token}",
                         f"--api-ca-file={ca}"]
    finally:
        embedded.stop()


def _selector_label() -> tuple[str, str]:
    selector = _job_args("Off")[3]
    key, _, value = selector.partition("=")
    return key, value


def _run(args: list[str], api: list[str]) -> tuple[int, str]:
    done = CliRunner().invoke(cli, [*args, *api], catch_exceptions=False)
    return done.exit_code, done.output


def _powers(embedded: Embedded) -> dict[str, str | None]:
    return {d.removeprefix(f"{NODE}."): (obj.get("spec") or {}).get("power")
            for obj in embedded.control.admin.items(DISPLAYS)
            if (d := obj["metadata"]["name"])}


def _patches(embedded: Embedded) -> int:
    return len([r for r in embedded.kube.request_log()
                if r.method == "PATCH" and "/displays/" in r.path])


def test_the_night_job_switches_the_labelled_displays_off_and_the_morning_job_on(
        cluster: tuple[Embedded, list[str]]) -> None:
    embedded, api = cluster
    code, output = _run(_job_args("Off"), api)
    assert code == 0, output
    assert _powers(embedded) == {**dict.fromkeys(SCHEDULED, "Off"), OTHER: None}
    assert "lobby.card0-dp-1: switched (spec.power unset -> Off)" in output
    mode = embedded.control.admin.get(DISPLAYS, display.display_name(NODE, OTHER))
    assert mode is not None and mode["spec"] == {"mode": "1920x1080@60"}

    before = _patches(embedded)
    code, output = _run(_job_args("Off"), api)
    assert code == 0 and output.count(": unchanged") == 2, output
    assert _patches(embedded) == before, "a Display already Off is not written"

    code, output = _run(_job_args("On"), api)
    assert code == 0, output
    assert _powers(embedded) == {**dict.fromkeys(SCHEDULED, "On"), OTHER: None}
    assert embedded.denials() == []


def test_a_selector_that_picks_nothing_fails_the_job(cluster: tuple[Embedded, list[str]]
                                                     ) -> None:
    _, api = cluster
    code, output = _run(["power", "Off", "--selector", "display.liken.sh/schedule=typo"], api)
    assert code == 1 and "no Display has the labels 'display.liken.sh/schedule=typo'" in output


@pytest.mark.parametrize("verb", ["list", "patch"])
def test_each_verb_of_the_role_is_needed(cluster: tuple[Embedded, list[str]], verb: str) -> None:
    """Minimal RBAC: without any one of the role's verbs the job fails with a 403."""
    embedded, api = cluster
    (role,) = (d for d in _example() if d["kind"] == "ClusterRole")
    (rule,) = role["rules"]
    less = {**rule, "verbs": [v for v in rule["verbs"] if v != verb]}
    embedded.control.admin.patch(CLUSTER_ROLES, role["metadata"]["name"], {"rules": [less]})
    code, output = _run(_job_args("Off"), api)
    assert code == 1 and "403" in output, output
    assert _powers(embedded)[SCHEDULED[0]] is None
    assert any(verb in line for line in embedded.denials())


@pytest.mark.parametrize(
    ("args", "names"),
    [(["power", "off", "--selector", "a=b"], "STATE must be one of On, Off, Standby, not 'off'"),
     (["power", "Off", "--selector", "a in (b)"], "--selector: 'a in (b)' is not a label")],
    ids=["claim-word", "set-based-selector"],
)
def test_bad_arguments_are_refused_naming_them_before_any_call(
        cluster: tuple[Embedded, list[str]], args: list[str], names: str) -> None:
    embedded, api = cluster
    before = len(embedded.kube.request_log())
    code, output = _run(args, api)
    assert code == 2 and names in output, output
    assert len(embedded.kube.request_log()) == before
