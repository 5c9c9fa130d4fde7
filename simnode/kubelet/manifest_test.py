"""The pod template from the rendered base, the images' entrypoints, and refused manifests."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from simnode.kubelet import images, manifest
from simnode.kubelet.volumes import current, project

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def base() -> manifest.PodTemplate:
    rendered = subprocess.run(["kubectl", "kustomize", str(REPO / "deploy" / "base")],
                              check=True, capture_output=True, text=True, timeout=120).stdout
    return manifest.from_text(rendered)


def test_the_base_pod_in_the_kubelets_order(base: manifest.PodTemplate) -> None:
    assert [c.name for c in base.init_containers] == ["declare", "weston"]
    assert [c.sidecar for c in base.init_containers] == [False, True]
    assert [c.name for c in base.containers] == ["operator", "capture"]
    assert base.grace_s == 5 and base.share_process_namespace
    assert base.claim_templates == {"gpu": "display-gpu"}
    capture = base.containers[1]
    assert capture.memory_limit == 384 << 20
    assert capture.claims == (manifest.ClaimUse("gpu", "render"),)
    assert capture.liveness is not None and capture.liveness.scheme == "HTTPS"
    assert all(c.drop_all_capabilities for c in base.all_containers())


def test_each_container_runs_its_images_pex_with_the_manifests_args(
        base: manifest.PodTemplate) -> None:
    builds = images.load(REPO / "deploy" / "images")
    argv = {c.name: images.find(builds, c.image).argv(command=c.command, args=c.args)
            for c in base.all_containers()}
    assert argv == {"declare": ["/opt/display/declare.pex", "declare"],
                    "weston": ["/opt/display/build/westonctl.pex", "weston"],
                    # No args: the image's CMD.
                    "operator": ["/opt/display/draplugin.pex", "operator"],
                    "capture": ["/opt/display/capture.pex", "capture"]}
    assert images.find(builds, "ghcr.io/liken-sh/display-weston:v1").suite == "trixie"
    assert images.find(builds, "ghcr.io/liken-sh/display-declare").suite == "bookworm"


def test_an_image_build_sh_does_not_build_is_named() -> None:
    builds = images.load(REPO / "deploy" / "images")
    with pytest.raises(images.ImageError, match="builds no ghcr.io/liken-sh/display-nope"):
        images.find(builds, "ghcr.io/liken-sh/display-nope:latest")


def _ds(container: dict[str, object], **spec: object) -> str:
    return yaml.safe_dump({"kind": "DaemonSet", "metadata": {"name": "x"}, "spec": {
        "template": {"spec": {"containers": [container], **spec}}}})


@pytest.mark.parametrize(("container", "spec", "message"), [
    ({"name": "a", "image": "i", "resources": {"limits": {"memory": "lots"}}}, {},
     r"containers\[0\] \(a\).resources.limits.memory: 'lots'"),
    ({"name": "a", "image": "i", "volumeMounts": [{"name": "v", "mountPath": "/v"}]}, {},
     "volumeMount 'v' names no volume"),
    ({"name": "a", "image": "i"}, {"volumes": [{"name": "v", "nfs": {}}]},
     r"volumes\[0\] \(v\): volume source \['nfs'\] is not supported"),
    ({"name": "a", "image": "i", "livenessProbe": {"exec": {"command": ["true"]}}}, {},
     "only httpGet probes"),
    ({"name": "a", "image": "i", "restartPolicy": "Always"}, {}, "restartPolicy: 'Always'"),
    ({"name": "a"}, {}, r"\(a\).image: missing"),
])
def test_bad_manifests_are_refused_naming_the_field(container: dict[str, object],
                                                    spec: dict[str, object],
                                                    message: str) -> None:
    with pytest.raises(manifest.ManifestError, match=message):
        manifest.from_text(_ds(container, **spec))


def test_projection_swaps_data_atomically(tmp_path: Path) -> None:
    assert project(tmp_path, {"tls.crt": b"one", "tls.key": b"k1"})
    assert (tmp_path / "tls.crt").read_bytes() == b"one"
    assert (tmp_path / "tls.crt").is_symlink() and (tmp_path / "..data").is_symlink()
    first = (tmp_path / "..data").resolve()
    assert not project(tmp_path, {"tls.crt": b"one", "tls.key": b"k1"})
    assert project(tmp_path, {"tls.crt": b"two"})
    assert current(tmp_path) == {"tls.crt": b"two"}
    assert not first.exists() and not (tmp_path / "tls.key").exists()
