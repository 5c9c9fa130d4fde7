"""Installs a pure-Python PEX as a venv of the interpreter that runs this script.

    python3.13 pex_to_venv.py BINARY.pex DEST

The PEXes come from Pants 2.17, whose pex (2.1.137) writes a bootstrap that Python 3.12 and
later cannot import (`pkgutil.ImpLoader` is gone), so `PEX_TOOLS=1 python3.13 X.pex venv`
fails on trixie. The PEX still carries exactly the locked sources, so this takes them out of
its zip: the project's packages and each `.deps/<wheel>/` tree go into DEST's site-packages,
compiled, and DEST/bin/BINARY runs the PEX's entry point. Only wheels built for any Python
(`py3-none-any`) are accepted: a compiled wheel was built for the PEX's own interpreter and is
refused with its name, rather than installed where it cannot load.
"""

from __future__ import annotations

import compileall
import json
import shutil
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path, PurePosixPath

PURE_TAGS = ("-py3-none-any.whl", "-py2.py3-none-any.whl")
SKIPPED = (".bootstrap", "__pex__", "__main__.py", "PEX-INFO")


class PexToVenvError(Exception):
    """The PEX cannot be installed this way; the message names the file or wheel."""


def _entry_point(pex: zipfile.ZipFile) -> str:
    info = json.loads(pex.read("PEX-INFO"))
    entry = info.get("entry_point")
    if not isinstance(entry, str) or not entry:
        raise PexToVenvError("PEX-INFO names no entry_point")
    return entry


def _destination(name: str) -> PurePosixPath | None:
    """Where a member of the PEX goes, relative to site-packages; None to leave it out."""
    path = PurePosixPath(name)
    if path.parts[0] in SKIPPED:
        return None
    if path.parts[0] == ".deps":
        if len(path.parts) < 3:
            return None
        wheel = path.parts[1]
        if not wheel.endswith(PURE_TAGS):
            raise PexToVenvError(
                f"{wheel} is not a pure-Python wheel; build this PEX for the image's Python"
            )
        if path.name == ".layout.json":
            return None
        return PurePosixPath(*path.parts[2:])
    return path


def install(pex_path: Path, dest: Path) -> Path:
    """Install the PEX at `pex_path` into a new venv at `dest`; returns its launcher."""
    if dest.exists():
        raise PexToVenvError(f"{dest} exists")
    with zipfile.ZipFile(pex_path) as pex:
        entry = _entry_point(pex)
        members = [(m, _destination(m.filename)) for m in pex.infolist() if not m.is_dir()]
        venv.EnvBuilder(with_pip=False, symlinks=True).create(dest)
        site = Path(sysconfig.get_path("purelib", vars={"base": str(dest)}))
        for member, relative in members:
            if relative is None:
                continue
            target = site / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            with pex.open(member) as source, target.open("wb") as out:
                shutil.copyfileobj(source, out)
    compileall.compile_dir(site, quiet=1)
    module, _, function = entry.partition(":")
    if function:
        imports, call = f"import {module}", f"{module}.{function}()"
    else:
        imports, call = "import runpy", f"runpy.run_module({module!r}, run_name='__main__')"
    launcher = dest / "bin" / pex_path.stem
    launcher.write_text(f"#!{dest / 'bin' / 'python3'}\n{imports}\n{call}\n")
    launcher.chmod(0o755)
    return launcher


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.split("\n\n")[0].strip(), file=sys.stderr)
        return 2
    try:
        launcher = install(Path(argv[1]), Path(argv[2]))
    except (PexToVenvError, OSError, zipfile.BadZipFile, ValueError) as err:
        print(f"pex_to_venv: {argv[1]}: {err}", file=sys.stderr)
        return 1
    print(f"installed {argv[1]} as {launcher}", file=sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
