"""Renders deploy/ the way a cluster owner does (`kubectl kustomize`) and finds objects in it.

Every rendering is made once per test session. deploy/ is found from this file, so the tests
run the same from the repo and from a Pants sandbox (where `deploy:manifests` puts the files).
"""

from __future__ import annotations

import functools
import itertools
import json
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

import libdisplay

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
IMAGES = DEPLOY / "images"

# Every kustomization a person applies, by a short name.
RENDERINGS: dict[str, str] = {
    "base": "base",
    "release": "overlays/release",
    "no-capture": "overlays/no-capture",
    "examples": "examples",
    "monitoring": "overlays/monitoring",
    "pixman-renderer": "overlays/pixman-renderer",
    "capture-amd": "overlays/capture-amd",
    "simulated-node": "overlays/simulated-node",
}
OPERATOR_RENDERINGS = ("base", "release", "no-capture", "pixman-renderer", "capture-amd",
                       "simulated-node")

Doc = dict[str, Any]


def release_version() -> str:
    """The binaries' version: the tag of a release's images."""
    return libdisplay.__version__


class ManifestError(Exception):
    """deploy/ did not render, or lacks an object a test looks for."""


@functools.cache
def render(name: str) -> tuple[Doc, ...]:
    """The objects `kubectl kustomize deploy/<RENDERINGS[name]>` prints."""
    directory = DEPLOY / RENDERINGS[name]
    try:
        result = subprocess.run(
            ["kubectl", "kustomize", str(directory)],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    except subprocess.CalledProcessError as exc:
        raise ManifestError(f"kubectl kustomize {directory} failed: {exc.stderr}") from exc
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def objects(docs: tuple[Doc, ...], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def find(docs: tuple[Doc, ...], kind: str, name: str) -> Doc:
    for doc in objects(docs, kind):
        if doc["metadata"]["name"] == name:
            return doc
    raise ManifestError(f"no {kind} named {name!r}")


def daemonset(name: str = "base") -> Doc:
    return find(render(name), "DaemonSet", "display-operator")


def pod_spec(name: str = "base") -> Doc:
    spec: Doc = daemonset(name)["spec"]["template"]["spec"]
    return spec


def container(name: str, rendering: str = "base") -> Doc:
    """A container of the operator's pod, init containers included."""
    spec = pod_spec(rendering)
    for candidate in [*spec.get("initContainers", []), *spec["containers"]]:
        if candidate["name"] == name:
            found: Doc = candidate
            return found
    raise ManifestError(f"no container named {name!r} in the {rendering} DaemonSet")


def all_containers(rendering: str = "base") -> list[Doc]:
    spec = pod_spec(rendering)
    return [*spec.get("initContainers", []), *spec["containers"]]


def env(container_doc: Doc) -> dict[str, Doc]:
    return {item["name"]: item for item in container_doc.get("env", [])}


def mounts(container_doc: Doc) -> dict[str, str]:
    """Volume name -> mount path."""
    return {m["name"]: m["mountPath"] for m in container_doc.get("volumeMounts", [])}


def volume(name: str, rendering: str = "base") -> Doc:
    for candidate in pod_spec(rendering)["volumes"]:
        if candidate["name"] == name:
            found: Doc = candidate
            return found
    raise ManifestError(f"no volume named {name!r}")


def split_image(image: str) -> tuple[str, str]:
    """`repo:tag` -> (repo, tag); a digest or a registry port never hides the tag."""
    repo, _, tag = image.rpartition(":")
    if not repo or "/" in tag:
        raise ManifestError(f"image {image!r} has no tag")
    return repo, tag


def dockerfile(image: str) -> list[tuple[str, str]]:
    """deploy/images/<image>/Dockerfile as (INSTRUCTION, arguments), continuations joined."""
    text = (IMAGES / image / "Dockerfile").read_text()
    joined = re.sub(r"\\\n", " ", text)
    instructions = []
    for line in joined.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        keyword, _, rest = stripped.partition(" ")
        instructions.append((keyword.upper(), rest.strip()))
    return instructions


def json_list(text: str) -> list[str]:
    """An instruction's exec form, `["a", "b"]`."""
    value = json.loads(text)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ManifestError(f"not an exec-form list: {text}")
    return value


def exec_form(image: str, keyword: str) -> list[str]:
    """The exec form of the last ENTRYPOINT or CMD of an image's Dockerfile."""
    found = [args for key, args in dockerfile(image) if key == keyword]
    if not found:
        raise ManifestError(f"deploy/images/{image}/Dockerfile has no {keyword}")
    return json_list(found[-1])


@dataclass(frozen=True, slots=True)
class ImageBuild:
    """One `podman build` that deploy/images/build.sh runs."""

    repo: str
    tag: str
    dockerfile: str
    build_args: dict[str, str]


@functools.cache
def build_plan() -> dict[str, ImageBuild]:
    """The image builds of `build.sh --dry-run`, by repository (without tag)."""
    result = subprocess.run(
        ["bash", str(IMAGES / "build.sh"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    builds = {}
    for line in result.stdout.splitlines():
        words = shlex.split(line)
        if words[:2] != ["podman", "build"]:
            continue
        options = dict(zip(words[2:-1:2], words[3::2], strict=False))
        build_args = dict(
            arg.split("=", 1) for flag, arg in itertools.pairwise(words) if flag == "--build-arg"
        )
        repo, tag = split_image(options["-t"])
        builds[repo] = ImageBuild(repo, tag, options["-f"], build_args)
    return builds


def base_packages(base_image: str) -> set[str]:
    """The Debian packages build.sh puts in a base image (localhost/display-base-NAME:TAG)."""
    match = re.fullmatch(r"localhost/display-base-([a-z-]+):[a-z]+-[0-9a-f]{12}", base_image)
    if match is None:
        raise ManifestError(f"{base_image!r} is not a base build.sh makes")
    text = (IMAGES / "build.sh").read_text()
    entry = re.search(rf'^\s*\[{match.group(1)}\]="([^"]*)"$', text, re.MULTILINE)
    if entry is None:
        raise ManifestError(f"build.sh has no package list for {base_image!r}")
    return set(entry.group(1).split(","))
