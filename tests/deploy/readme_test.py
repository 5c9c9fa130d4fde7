"""The README's owner sections (install, put a pod on a screen, diagnose) held to deploy/:
what it tells a person to apply exists and renders, its first consumer is the shipped example,
and each `kubectl exec` line runs a binary the named container's image has on PATH. The
contributor material is CONTRIBUTING.md's, which the README links."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from deploy.images import smoke
from tests.deploy.manifests import DEPLOY, container, pod_spec, split_image

ROOT = DEPLOY.parent
README = (ROOT / "README.md").read_text()
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text()


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start:end if end != -1 else None]


OWNER = "".join(_section(t) for t in ("Prerequisites", "Install", "Put a pod on a screen",
                                      "Diagnose", "Upgrade and remove"))


def test_the_two_contributor_commands_are_in_the_contributor_guide() -> None:
    assert "./pants package :: && dist/simnode/simnode.pex up\n" in CONTRIBUTING
    assert "./pants lint check test ::\n" in CONTRIBUTING


def test_owner_sections_come_first_in_the_order_an_owner_needs_them() -> None:
    titles = re.findall(r"^## (.+)$", README, flags=re.MULTILINE)
    owner = ["Prerequisites", "Install", "Put a pod on a screen", "Diagnose"]
    assert titles[:4] == owner


CONTRIBUTOR_SECTIONS = ("The simulated node", "Tests", "Measure it", "The binaries",
                        "How it works", "Layout", "Design notes")


def test_the_contributor_material_is_in_the_contributor_guide_the_readme_links() -> None:
    titles = re.findall(r"^## (.+)$", CONTRIBUTING, flags=re.MULTILINE)
    assert [t for t in titles if t in CONTRIBUTOR_SECTIONS] == list(CONTRIBUTOR_SECTIONS)
    assert not set(re.findall(r"^## (.+)$", README, flags=re.MULTILINE)) & {
        *CONTRIBUTOR_SECTIONS, "The simulated node (contributors)"}
    assert "](CONTRIBUTING.md)" in README and "](README.md)" in CONTRIBUTING


def test_license_is_apache_2() -> None:
    license_text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    assert "Apache-2.0" in README


@pytest.mark.parametrize("path", sorted(set(re.findall(r"(?<![\w/])((?:deploy|docs)/[\w./-]+\w)",
                                                        README + CONTRIBUTING))))
def test_every_path_the_guides_name_exists(path: str) -> None:
    assert (ROOT / path).exists(), path


@pytest.mark.parametrize("target", sorted(set(re.findall(r"kubectl apply -k (deploy/\S+\w)",
                                                          OWNER))))
def test_every_kustomization_the_readme_applies_renders(target: str) -> None:
    subprocess.run(["kubectl", "kustomize", str(ROOT / target)], check=True,
                   capture_output=True, timeout=120)


def test_the_first_consumer_is_the_shipped_example() -> None:
    blocks = re.findall(r"```yaml\n(.*?)```", _section("Put a pod on a screen"), flags=re.DOTALL)
    shown = [d for d in yaml.safe_load_all(blocks[0]) if d]
    (applied,) = re.findall(r"kubectl apply -f (deploy/examples/\S+)", OWNER)
    assert shown == [d for d in yaml.safe_load_all((ROOT / applied).read_text()) if d]


EXEC_LINES = re.findall(r"exec \$POD -c (\w+) -- (\w+)", OWNER)


def test_the_diagnose_section_has_exec_lines() -> None:
    assert len(EXEC_LINES) >= 4


@pytest.mark.parametrize(("name", "binary"), EXEC_LINES, ids=[f"{c}-{b}" for c, b in EXEC_LINES])
def test_each_exec_line_runs_the_binary_its_container_has_on_path(name: str, binary: str) -> None:
    repository = split_image(container(name)["image"])[0].rsplit("/", 1)[1]
    assert smoke.BINARY_OF[repository] == binary


def test_the_opt_out_label_is_the_one_the_daemonset_honours() -> None:
    ((key, value),) = re.findall(r"kubectl label node NODE (\S+)=(\S+)", OWNER)
    affinity = pod_spec()["affinity"]["nodeAffinity"]
    terms = affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": key, "operator": "NotIn", "values": [value]}]}]


def test_the_capture_secret_is_the_one_the_daemonset_mounts() -> None:
    (name,) = set(re.findall(r"create secret tls (\S+)", OWNER))
    assert f"secretName: {name}" in (DEPLOY / "base" / "namespaced" / "daemonset.yaml").read_text()
