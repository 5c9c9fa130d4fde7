"""Every kustomization renders, and every object it renders is valid for Kubernetes 1.34 and 1.37.

Built-in kinds are checked with kubernetes_validate's schemas (strict: unknown fields fail).
It knows no enums and no CEL, and reports only the first error of an object. A custom
resource (a Display) is checked against the CRD's openAPIV3Schema with jsonschema.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import kubernetes_validate  # type: ignore[import-untyped]
import pytest

from tests.deploy.manifests import (
    OPERATOR_RENDERINGS,
    RENDERINGS,
    Doc,
    all_containers,
    build_plan,
    find,
    pod_spec,
    release_version,
    render,
    split_image,
)

VERSIONS = ("1.34.0", "1.37.0")

# Kinds the apiserver serves without a namespace. A kind missing here and
# in NAMESPACED fails test_every_kind_has_a_known_scope.
CLUSTER_SCOPED = {
    "Namespace",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleBinding",
    "DeviceClass",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "Display",
}
NAMESPACED = {
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ResourceQuota",
    "ResourceClaimTemplate",
    "ResourceClaim",
    "DaemonSet",
    "Deployment",
    "Pod",
    "Job",
    "CronJob",
    "NetworkPolicy",
    "ConfigMap",
    "PodMonitor",
    "PrometheusRule",
}
# Custom resources: the Display against its CRD below; the Prometheus Operator's kinds (no
# schema in the repository) by promtool and their own tests (tests/deploy/monitoring_test.py).
CUSTOM = {"Display", "PodMonitor", "PrometheusRule"}


def _labelled(rendering: str) -> list[tuple[str, Doc]]:
    return [(f"{rendering}/{d['kind']}/{d['metadata']['name']}", d) for d in render(rendering)]


ALL_OBJECTS = [pair for rendering in RENDERINGS for pair in _labelled(rendering)]
BUILT_IN = [(label, doc) for label, doc in ALL_OBJECTS if doc["kind"] not in CUSTOM]
DISPLAYS = [(label, doc) for label, doc in ALL_OBJECTS if doc["kind"] == "Display"]


def _display_schema() -> dict[str, Any]:
    crd = find(render("base"), "CustomResourceDefinition", "displays.display.liken.sh")
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("rendering", RENDERINGS, ids=list(RENDERINGS))
def test_kustomization_renders_objects(rendering: str) -> None:
    assert render(rendering)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("label", "doc"), BUILT_IN, ids=[label for label, _ in BUILT_IN])
def test_built_in_object_is_valid(label: str, doc: Doc, version: str) -> None:
    # SchemaNotFoundError (a kind the version does not serve) fails the test too.
    kubernetes_validate.validate(doc, version, strict=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_strict_validation_rejects_a_misspelled_field(version: str) -> None:
    """The check above can fail: a field the schema lacks is an error, not a warning."""
    daemonset = copy.deepcopy(find(render("base"), "DaemonSet", "display-operator"))
    daemonset["spec"]["template"]["spec"]["hostUser"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(daemonset, version, strict=True)


@pytest.mark.parametrize(("label", "doc"), DISPLAYS, ids=[label for label, _ in DISPLAYS])
def test_display_object_matches_the_crd_schema(label: str, doc: Doc) -> None:
    jsonschema.validate(doc, _display_schema())


def test_examples_include_a_display() -> None:
    """The Display check above runs on something."""
    assert DISPLAYS


@pytest.mark.parametrize(("label", "doc"), ALL_OBJECTS, ids=[label for label, _ in ALL_OBJECTS])
def test_every_kind_has_a_known_scope(label: str, doc: Doc) -> None:
    assert doc["kind"] in CLUSTER_SCOPED | NAMESPACED


@pytest.mark.parametrize(
    ("label", "doc"),
    [(label, doc) for label, doc in ALL_OBJECTS if doc["kind"] in CLUSTER_SCOPED],
    ids=[label for label, doc in ALL_OBJECTS if doc["kind"] in CLUSTER_SCOPED],
)
def test_cluster_scoped_object_carries_no_namespace(label: str, doc: Doc) -> None:
    assert "namespace" not in doc["metadata"]


@pytest.mark.parametrize("rendering", OPERATOR_RENDERINGS)
def test_namespaced_objects_share_one_namespace(rendering: str) -> None:
    namespaces = {
        doc["metadata"].get("namespace") for doc in render(rendering) if doc["kind"] in NAMESPACED
    }
    namespace_objects = {
        doc["metadata"]["name"] for doc in render(rendering) if doc["kind"] == "Namespace"
    }
    assert namespaces == namespace_objects


@pytest.mark.parametrize("rendering", OPERATOR_RENDERINGS)
def test_service_account_subjects_name_the_operators_namespace(rendering: str) -> None:
    docs = render(rendering)
    (namespace,) = (doc["metadata"]["name"] for doc in docs if doc["kind"] == "Namespace")
    subjects = [
        subject
        for doc in docs
        if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for subject in doc["subjects"]
    ]
    assert {(s["kind"], s["name"], s.get("namespace")) for s in subjects} == {
        ("ServiceAccount", "display-operator", namespace)
    }


def test_release_sets_its_own_namespace() -> None:
    (namespace,) = (d["metadata"]["name"] for d in render("release") if d["kind"] == "Namespace")
    assert namespace == "display-system"


def test_release_tags_every_image_with_the_binaries_version() -> None:
    tags = {split_image(c["image"])[1] for c in all_containers("release")}
    assert tags == {release_version()}


def test_build_script_tags_every_image_with_the_binaries_version() -> None:
    assert {build.tag for build in build_plan().values()} == {release_version()}


def test_build_script_builds_every_image_the_operator_runs() -> None:
    repos = {split_image(c["image"])[0] for r in OPERATOR_RENDERINGS for c in all_containers(r)}
    assert set(build_plan()) == repos | {"ghcr.io/liken-sh/display-operator-cli"}


@pytest.mark.parametrize("rendering", OPERATOR_RENDERINGS)
def test_all_images_of_a_rendering_share_one_tag(rendering: str) -> None:
    """One tag for all, so the -cli image at the first container's tag is of the same build."""
    assert len({split_image(c["image"])[1] for c in all_containers(rendering)}) == 1


def _without_images(spec: Doc) -> Doc:
    stripped = copy.deepcopy(spec)
    for item in [*stripped.get("initContainers", []), *stripped["containers"]]:
        item["image"] = split_image(item["image"])[0]
    return stripped


def test_release_changes_only_namespace_and_image_tags() -> None:
    """So every test of the base's pod holds for the release's pod too."""
    assert _without_images(pod_spec("release")) == _without_images(pod_spec("base"))


def test_no_capture_differs_from_base_only_by_the_capture_container_and_its_volume() -> None:
    expected = copy.deepcopy(pod_spec("base"))
    expected["containers"] = [c for c in expected["containers"] if c["name"] != "capture"]
    expected["volumes"] = [v for v in expected["volumes"] if v["name"] != "capture-tls"]
    assert pod_spec("no-capture") == expected


def test_no_capture_drops_the_capture_servers_grants() -> None:
    kinds_and_names = {(d["kind"], d["metadata"]["name"]) for d in render("no-capture")}
    assert not kinds_and_names & {
        ("ClusterRole", "display-operator-capture"),
        ("ClusterRoleBinding", "display-operator-capture"),
    }
