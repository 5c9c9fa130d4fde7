"""What each image of the pod runs, read from `deploy/images`: no second table.

`build.sh` says which Dockerfile builds which image (`-f "$images/NAME/Dockerfile"` ... `-t
"$registry/IMAGE:$tag"`) and on which Debian suite its base stands. Each Dockerfile's final
stage gives the ENTRYPOINT and CMD and the PEX it copies in from `dist/`. On the simulated node
an image is that base's filesystem (the host's bookworm /usr, or the trixie root over it) with
the PEX at the path the Dockerfile copies it to, and the PEX stands for the entrypoint installed
from it (the image installs it as a venv at build time; here the PEX runs itself).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

_BUILD: Final = re.compile(
    r'podman build -f "\$images/(?P<dir>[\w-]+)/Dockerfile"(?P<args>.*?)'
    r'-t "\$registry/(?P<image>[\w.-]+):\$tag"', re.S)
_BASE_ARG: Final = re.compile(r'BASE_IMAGE="\$(?P<var>\w+)"')
_REGISTRY: Final = re.compile(r"^registry=(?P<registry>\S+)$", re.M)
_SUITE: Final = re.compile(r"\[(?P<name>[\w-]+)\]=(?P<suite>bookworm|trixie)")


class ImageError(Exception):
    """An image the pod names that deploy/images does not build, or a Dockerfile the runner
    cannot read; the message names the image or file."""


@dataclass(frozen=True, slots=True)
class Image:
    ref: str
    """`ghcr.io/liken-sh/display-declare`, without the tag."""
    dockerfile: Path
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    pex: PurePosixPath
    """The PEX the Dockerfile copies in, relative to the repo (`dist/declare/declare.pex`)."""
    pex_in_image: PurePosixPath
    """Where the Dockerfile copies it (`/opt/display/declare.pex`)."""
    suite: str
    """The Debian suite of the image's base (`bookworm`, or `trixie` for weston 14)."""

    def argv(self, *, command: tuple[str, ...] | None, args: tuple[str, ...] | None,
             ) -> list[str]:
        """The process as the runtime starts it: `command` replaces the entrypoint, `args` the
        CMD; the entrypoint is the PEX it was installed from."""
        head = list(command) if command is not None else [str(self.pex_in_image)]
        if command is not None:
            return [*head, *(args or ())]
        return [*head, *(args if args is not None else self.cmd)]


@dataclass(frozen=True, slots=True)
class Build:
    """One image build.sh builds: its Dockerfile and its base's suite."""

    ref: str
    dockerfile: Path
    suite: str


def load(images_dir: Path) -> dict[str, Build]:
    """Image ref -> how build.sh builds it, for every image it builds."""
    build = images_dir / "build.sh"
    try:
        script = build.read_text()
    except OSError as exc:
        raise ImageError(f"cannot read {build}: {exc}") from exc
    registry = _REGISTRY.search(script)
    if registry is None:
        raise ImageError(f"{build}: no registry= default")
    suites = {m["name"]: m["suite"] for m in _SUITE.finditer(script)}
    bases = dict(re.findall(r"^(\w+)=\$\(base ([\w-]+)\)$", script, re.M))
    found = {}
    for match in _BUILD.finditer(script.replace("\\\n", " ")):
        base = _BASE_ARG.search(match["args"])
        if base is None or bases.get(base["var"]) not in suites:
            raise ImageError(f"{build}: the build of {match['image']} names no known base")
        ref = f"{registry['registry']}/{match['image']}"
        found[ref] = Build(ref, images_dir / match["dir"] / "Dockerfile",
                           suites[bases[base["var"]]])
    if not found:
        raise ImageError(f"{build}: no `podman build -f ... -t ...` found")
    return found


def find(images: dict[str, Build], image: str) -> Image:
    """The Image of a container's `image` (`ref:tag`, the tag ignored: one build, one tag),
    read from its Dockerfile."""
    ref = image.rsplit(":", 1)[0] if ":" in image.rsplit("/", 1)[-1] else image
    if ref not in images:
        raise ImageError(f"image {image!r}: deploy/images/build.sh builds no {ref}"
                         f" (it builds {', '.join(sorted(images))})")
    build = images[ref]
    return _image(ref, build.dockerfile, build.suite)


def _image(ref: str, dockerfile: Path, suite: str) -> Image:
    try:
        lines = _instructions(dockerfile.read_text())
    except OSError as exc:
        raise ImageError(f"cannot read {dockerfile}: {exc}") from exc
    final = [i for i, (op, _) in enumerate(lines) if op == "FROM"]
    stage = lines[final[-1]:] if final else lines
    entrypoint = cmd = None
    pex = None
    for op, rest in stage:
        if op == "ENTRYPOINT":
            entrypoint = _exec_form(rest, dockerfile, op)
        elif op == "CMD":
            cmd = _exec_form(rest, dockerfile, op)
        elif op == "COPY" and not rest.startswith("--from"):
            *sources, dest = rest.split()
            for source in sources:
                if re.fullmatch(r"dist/[\w-]+/[\w-]+\.pex", source):
                    name = PurePosixPath(source).name
                    pex = (PurePosixPath(source), PurePosixPath(dest) / name
                           if dest.endswith("/") else PurePosixPath(dest))
    if entrypoint is None or pex is None:
        raise ImageError(f"{dockerfile}: needs an ENTRYPOINT and a COPY of a dist/ PEX")
    return Image(ref=ref, dockerfile=dockerfile, entrypoint=entrypoint, cmd=cmd or (),
                 pex=pex[0], pex_in_image=pex[1], suite=suite)


def _instructions(text: str) -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _exec_form(rest: str, dockerfile: Path, op: str) -> tuple[str, ...]:
    try:
        value = json.loads(rest)
    except ValueError as exc:
        raise ImageError(f"{dockerfile}: {op} {rest!r} is not the JSON exec form") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ImageError(f"{dockerfile}: {op} {rest!r} is not a list of strings")
    return tuple(value)
