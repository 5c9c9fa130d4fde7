"""One boot of the VM tier: make the share, boot the guest, serve its requests, read its results.

The share holds what the guest runs: the PEXes as venvs of /usr/bin/python3.11 (made here:
the guest holds the same bookworm python3.11 at the same path, build-support/vm/guest-image),
the layout shell compiled in the host's trixie root (the guest's weston is the same 14.0.x),
the pod's plan and the objects the fake API starts with (tests/vm/podplan.py: the rendered
base's DaemonSet as each container runs, its RBAC, CRD and the Node), and the guest's scenario
(tests/vm/guest/scenario.py). The guest writes `out/results.json`, its logs and EDID blobs;
the host writes the screendumps it asks for into `out/`.

`python3.11 -m tests.vm.tier WORKDIR [PEX_DIR]` runs a boot by hand from the checkout, with
the PEXes from PEX_DIR or dist/ (`./pants package declare:declare westonctl:westonctl
draplugin:draplugin capture:capture tests/vm:fakekube tests/vm:claim`), and keeps WORKDIR.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tests.vm import podplan, qemu

CHECKOUT = Path(__file__).resolve().parents[2]
GUEST_DIR = Path(__file__).resolve().parent / "guest"
LAYOUT_BUILD = CHECKOUT / "westonctl" / "layout" / "build.sh"
BINARIES = ("declare", "westonctl", "draplugin", "capture", "fakekube", "claim")
PYTHON = "/usr/bin/python3.11"
VENV_TIMEOUT_S = 300.0
RUN_TIMEOUT_S = 900.0
"""Boot to power-off of the whole scenario (measured about 90 s on TCG with nothing else)."""


def venv(pex: Path, dest: Path) -> None:
    """The PEX as a venv of /usr/bin/python3.11 with its bytecode compiled (as the images do):
    no unpacking or compiling in the guest, where every CPU cycle is emulated. A PEX_ROOT of
    its own, so venvs can be made side by side."""
    subprocess.run([PYTHON, os.fspath(pex), "venv", "--compile", "--rm", "pex", os.fspath(dest)],
                   check=True, capture_output=True, timeout=VENV_TIMEOUT_S,
                   env={**os.environ, "PEX_TOOLS": "1",
                        "PEX_ROOT": os.fspath(dest.parent / f".pex-{dest.name}")})


def build_layout(out: Path) -> None:
    subprocess.run(["sh", os.fspath(LAYOUT_BUILD), os.fspath(out)], check=True, timeout=300)


def make_share(share: Path, pexes: dict[str, Path], *, script: str = "scenario.py",
               args: Sequence[str] = ()) -> None:
    """The share's files; its `run` starts guest/`script` with `args`."""
    for sub in ("req", "ack", "out", "kube", "pod", "venv"):
        (share / sub).mkdir(parents=True, exist_ok=True)
    # Two at a time: the machine has two cores, and each venv is mostly one busy process.
    with ThreadPoolExecutor(max_workers=2) as pool:
        jobs = [pool.submit(venv, pexes[name], share / "venv" / name) for name in BINARIES]
        jobs.append(pool.submit(build_layout, share / "layout-shell.so"))
        for job in jobs:
            job.result()
    for name in BINARIES:
        shutil.rmtree(share / "venv" / f".pex-{name}", ignore_errors=True)
    podplan.write(share, CHECKOUT)
    shutil.copytree(GUEST_DIR, share / "guest", ignore=shutil.ignore_patterns("__pycache__"))
    run = share / "run"
    argv = " ".join(shlex.quote(a) for a in (f"/share/guest/{script}", *args))
    run.write_text("#!/bin/sh\n# The pod's network namespace: kernel uevents reach it, udevd's "
                   f"do not.\nexec unshare --net -- python3 {argv}\n")
    run.chmod(0o755)


Handlers = Callable[[qemu.Vm], dict[str, qemu.Handler]]


def run_boot(workdir: Path, pexes: dict[str, Path], *, heads: int = qemu.HEADS,
             memory_mb: int = 1024, script: str = "scenario.py", args: Sequence[str] = (),
             handlers: Handlers | None = None,
             boot_timeout: float = qemu.BOOT_TIMEOUT_S) -> dict[str, Any]:
    """Make the share in `workdir`, boot once with `heads` heads running guest/`script`,
    return results.json plus the host's view. `handlers(vm)` adds request ops."""
    share = workdir / "share"
    began = time.monotonic()
    make_share(share, pexes, script=script, args=args)
    image = qemu.guest_image()
    prepared = time.monotonic() - began
    started = time.monotonic()
    with qemu.Vm(image, share=share, workdir=workdir, heads=heads, memory_mb=memory_mb,
                 boot_timeout=boot_timeout) as vm, \
            qemu.RequestServer(vm, handlers(vm) if handlers else None) as server:
        booted = time.monotonic() - started
        status = vm.wait_poweroff(timeout=RUN_TIMEOUT_S)
        handled = server.handled
    path = share / "out" / "results.json"
    if not path.is_file():
        raise qemu.VmError(f"the guest wrote no results (QEMU exit {status}):\n"
                           f"{(workdir / 'serial.log').read_text(errors='replace')[-4000:]}")
    results: dict[str, Any] = json.loads(path.read_text())
    results["host"] = {"share_s": round(prepared, 1), "boot_s": round(booted, 1),
                       "vm_s": round(time.monotonic() - started, 1),
                       "wall_s": round(time.monotonic() - began, 1),
                       "qemu_exit": status, "requests": handled}
    return results


def main() -> int:
    workdir = Path(sys.argv[1]).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    # A directory of NAME.pex files (dist/ is rewritten by every `pants package`).
    pex_dir = Path(sys.argv[2]) if len(sys.argv) > 2 else CHECKOUT / "dist"
    pexes = {name: next(p for p in (pex_dir / f"{name}.pex", pex_dir / name / f"{name}.pex",
                                    pex_dir / "tests.vm" / f"{name}.pex") if p.exists())
             for name in BINARIES}
    results = run_boot(workdir, pexes)
    print(json.dumps(results, indent=2, sort_keys=True))
    return 0 if not results.get("errors") else 1


if __name__ == "__main__":
    sys.exit(main())
