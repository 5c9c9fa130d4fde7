"""Removes from a base's root filesystem what its programs never load, then proves they still load.

Runs inside the rootfs (`chroot ROOT python3.N prune.py ...`, a customize hook of build.sh's
mmdebstrap), on that rootfs's own interpreter and `ldd`, so standard library only and Python
3.11+. Debian's dependencies are per package, not per file: weston's package pulls the VNC,
RDP and PipeWire backends and their codec stack, ffmpeg's pulls every decoder's library. So:

1. `--drop` globs: files nothing here runs (those backends, demo clients), deleted;
2. the shared libraries every `--keep` file loads (`ldd`, transitively) are the needed set; a
   `--keep` glob also names what is only ever dlopen()ed (Mesa's drivers, Python's extension
   modules), so it counts as loaded;
3. a package whose shared objects are all outside that set, and any `--purge` package, is
   purged (`dpkg --purge --force-depends`), unless `--protect`ed, or essential, required or
   protected or a dependency of one (the base system dpkg and the image build steps stand
   on); dpkg's database stays true to
   the files, so `dpkg-query` still lists what an image holds;
4. `ldd` of every kept file again: a library "not found" that was found before fails the
   build, naming file and library.

    python3 prune.py --keep GLOB... [--drop GLOB...] [--purge PKG...] [--protect PKG...]
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
from pathlib import Path

DPKG_INFO = Path("/var/lib/dpkg/info")
ELF_MAGIC = b"\x7fELF"


class PruneError(Exception):
    """A kept file would not load, or a glob matched nothing; the message names it."""


def expand(patterns: list[str], *, what: str) -> list[Path]:
    found = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern))
        if not matches:
            raise PruneError(f"{what} glob {pattern!r} matches nothing in this rootfs")
        found += [Path(m) for m in matches]
    return found


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            return f.read(4) == ELF_MAGIC
    except OSError:
        return False


def loads(path: Path) -> tuple[set[str], list[str]]:
    """The real paths of the libraries `path` loads, and the names ldd could not find."""
    done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, check=False)
    found, missing = set(), []
    for line in done.stdout.splitlines():
        name, arrow, rest = line.strip().partition(" => ")
        if arrow and rest.startswith("not found"):
            missing.append(name)
        elif arrow and rest.startswith("/"):
            found.add(os.path.realpath(rest.split(" (")[0]))
    return found, missing


def base_system() -> set[str]:
    """Essential, required and protected packages and what they depend on: the system dpkg
    and the image builds stand on (coreutils' libacl1, dpkg's compressors, libgcc-s1)."""
    done = subprocess.run(
        ["dpkg-query", "-W", "-f",
         "${Package}\t${Essential} ${Priority} ${Protected}\t${Pre-Depends}, ${Depends}\n"],
        capture_output=True, text=True, check=True)
    depends, base = {}, set()
    for line in done.stdout.splitlines():
        package, marks, relations = line.split("\t")
        # Every alternative of every relation, without versions or architectures.
        depends[package] = {re.split(r"[\s(:]", alt.strip(), maxsplit=1)[0]
                            for alt in re.split(r"[,|]", relations) if alt.strip()}
        if {"yes", "required"} & set(marks.split()):
            base.add(package)
    todo = list(base)
    while todo:
        for dependency in depends.get(todo.pop(), ()):
            if dependency in depends and dependency not in base:
                base.add(dependency)
                todo.append(dependency)
    return base


def package_files() -> dict[str, list[str]]:
    """Package -> the paths dpkg says it installed."""
    owned = {}
    for listing in DPKG_INFO.glob("*.list"):
        package = listing.name[: -len(".list")].split(":")[0]
        owned[package] = listing.read_text().splitlines()
    return owned


def shared_objects(paths: list[str]) -> set[str]:
    return {os.path.realpath(p) for p in paths
            if ".so" in Path(p).name and os.path.isfile(p) and not os.path.islink(p)}


def unneeded(owned: dict[str, list[str]], needed: set[str], protect: set[str]) -> list[str]:
    """Packages that ship shared objects, none of which (nor any other file of theirs)
    anything kept is or loads."""
    return sorted(
        package for package, paths in owned.items()
        if package not in protect and shared_objects(paths)
        and not {os.path.realpath(p) for p in paths} & needed
    )


def closure(keep: list[Path]) -> tuple[set[str], dict[Path, list[str]]]:
    needed = {os.path.realpath(p) for p in keep}
    broken = {}
    for path in keep:
        if is_elf(path):
            found, missing = loads(path)
            needed |= found
            if missing:
                broken[path] = missing
    return needed, broken


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--keep", nargs="+", required=True, metavar="GLOB")
    parser.add_argument("--drop", nargs="*", default=[], metavar="GLOB")
    parser.add_argument("--purge", nargs="*", default=[], metavar="PKG")
    parser.add_argument("--protect", nargs="*", default=[], metavar="PKG")
    args = parser.parse_args(argv)
    try:
        for path in expand(args.drop, what="--drop"):
            path.unlink()
        keep = expand(args.keep, what="--keep")
        # A module that weston or python dlopen()s may name a library that only its loader's
        # RUNPATH finds (fullscreen-shell.so: libexec_weston.so.0): missing before is no news.
        needed, before = closure(keep)
        owned = package_files()
        absent = [p for p in args.purge if p not in owned]
        if absent:
            raise PruneError(f"--purge names packages not installed: {absent}")
        protect = set(args.protect) | base_system()
        purge = sorted(set(unneeded(owned, needed, protect)) | set(args.purge))
        if purge:
            print(f"prune: purging {len(purge)} packages: {' '.join(purge)}", flush=True)
            subprocess.run(["dpkg", "--purge", "--force-depends", "--force-remove-essential",
                            *purge], check=True, stdout=subprocess.DEVNULL)
        _, after = closure(expand(args.keep, what="--keep"))
        broken = {str(p): sorted(set(m) - set(before.get(p, ()))) for p, m in after.items()}
        broken = {p: m for p, m in broken.items() if m}
        if broken:
            raise PruneError(f"after pruning, these no longer load: {broken}")
    except (PruneError, subprocess.CalledProcessError) as err:
        print(f"prune: {err}", file=sys.stderr)
        return 1
    print(f"prune: {len(keep)} kept files load; {len(purge)} packages purged")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
