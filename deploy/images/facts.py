"""Facts a cluster owner reads about each image build.sh made: its size, its base (Debian suite
and the packages build.sh asks for, at the versions installed), how many Debian packages it
holds, and whether it holds a shell (the four pod images and their variants must not: `/bin/sh`
cannot run); then what a node pulls for the pod (the four images together), against the goal.

    python3 deploy/images/facts.py [--registry R] [--tag T] [--json]
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: the repo's packages by their names
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from deploy.images.podmanrun import IMAGES, SmokeError, podman

POD_IMAGES = ("display-declare", "display-weston", "display-operator", "display-capture")
# What overlays/pixman-renderer and overlays/capture-amd run in place of display-weston and
# display-capture.
VARIANT_IMAGES = {"display-weston-pixman": "display-weston",
                  "display-capture-amd": "display-capture"}
CLI_IMAGE = "display-operator-cli"
# The weight goals (issue 27): the pod's four images together, and the weston and capture
# images each.
POD_GOAL_MIB = 600.0
IMAGE_GOAL_MIB = {"display-weston": 250.0, "display-capture": 250.0}
_BASE = re.compile(r"^localhost/display-base-(?P<name>[a-z-]+):(?P<suite>[a-z]+)-[0-9a-f]{12}$")


@dataclass(frozen=True, slots=True)
class ImageFacts:
    image: str
    size_mib: float
    base: str
    suite: str
    base_packages: dict[str, str]
    """The packages build.sh names for the base, at the version installed."""
    package_count: int
    has_shell: bool


def base_plan() -> dict[str, str]:
    """Each image's runtime base, from build.sh's own plan (`--dry-run`)."""
    plan = subprocess.run(["bash", str(IMAGES / "build.sh"), "--dry-run"], capture_output=True,
                          text=True, timeout=60, check=True).stdout
    bases = {}
    for line in plan.splitlines():
        words = shlex.split(line)
        if words[:2] != ["podman", "build"]:
            continue
        tag = words[words.index("-t") + 1]
        args = dict(w.split("=", 1) for w in words if w.startswith("BASE_IMAGE="))
        bases[tag.rsplit("/", 1)[1].split(":")[0]] = args["BASE_IMAGE"]
    return bases


def requested_packages(base: str) -> list[str]:
    match = _BASE.match(base)
    if match is None:
        raise SmokeError(f"{base!r} is not a base build.sh makes")
    text = (IMAGES / "build.sh").read_text()
    entry = re.search(rf'^\s*\[{match["name"]}\]="([^"]*)"$', text, re.MULTILINE)
    if entry is None:
        raise SmokeError(f"build.sh has no package list for {base}")
    return entry.group(1).split(",")


def installed(image: str) -> dict[str, str]:
    """Package -> version, by the image's own dpkg-query (a binary: no shell needed)."""
    done = podman("run", "--rm", "--entrypoint", "/usr/bin/dpkg-query", image, "-W",
                  "-f", "${Package} ${Version}\\n")
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if line)


def has_shell(image: str) -> bool:
    done = podman("run", "--rm", "--entrypoint", "/bin/sh", image, "-c", "true", check=False)
    return done.returncode == 0


def facts(image: str, repository: str, base: str) -> ImageFacts:
    size = int(podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip())
    packages = installed(image)
    match = _BASE.match(base)
    return ImageFacts(
        image=image, size_mib=round(size / 2**20, 1), base=base,
        suite=match["suite"] if match else "?",
        base_packages={p: packages.get(p, "absent") for p in requested_packages(base)},
        package_count=len(packages), has_shell=has_shell(image))


def all_facts(registry: str, tag: str) -> list[ImageFacts]:
    bases = base_plan()
    return [facts(f"{registry}/{repo}:{tag}", repo, bases[repo])
            for repo in (*POD_IMAGES, *VARIANT_IMAGES, CLI_IMAGE)]


def repository(found: ImageFacts) -> str:
    return found.image.rsplit("/", 1)[1].split(":")[0]


def pod_weight(found: list[ImageFacts]) -> list[str]:
    """The pod's pull, the default and with each variant, against the goals."""
    size = {repository(f): f.size_mib for f in found}
    pod = sum(size[r] for r in POD_IMAGES)
    lines = [f"pod (declare + weston + operator + capture): {pod:.1f} MiB"
             f" (goal <= {POD_GOAL_MIB:g}: {'ok' if pod <= POD_GOAL_MIB else 'OVER'})"]
    for image, goal in IMAGE_GOAL_MIB.items():
        lines.append(f"{image}: {size[image]:g} MiB (goal <= {goal:g}: "
                     f"{'ok' if size[image] <= goal else 'OVER'})")
    for variant, replaces in VARIANT_IMAGES.items():
        lines.append(f"pod with {variant} for {replaces}: "
                     f"{pod - size[replaces] + size[variant]:.1f} MiB")
    return lines


def render(found: list[ImageFacts]) -> str:
    lines = []
    for f in found:
        shell = "has /bin/sh" if f.has_shell else "no shell"
        lines.append(f"{f.image}: {f.size_mib:g} MiB, {f.suite}, {f.package_count} Debian "
                     f"packages, {shell}")
        lines.append(f"  base {f.base}: " + ", ".join(f"{p} {v}"
                                                     for p, v in f.base_packages.items()))
    return "\n".join(lines)


def version() -> str:
    text = (IMAGES.parents[1] / "libdisplay" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "(.*)"$', text, re.MULTILINE)
    if found is None:
        raise SmokeError("no __version__ in libdisplay/__init__.py")
    return found.group(1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--registry", default="ghcr.io/liken-sh")
    parser.add_argument("--tag", default=None, help="default: the binaries' version")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        found = all_facts(args.registry, args.tag or version())
    except (SmokeError, subprocess.SubprocessError) as err:
        print(f"facts: {err}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([asdict(f) for f in found], indent=1))
    else:
        print(render(found), *pod_weight(found), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
