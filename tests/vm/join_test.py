"""The VM tier: a monitor plugged into a connector weston never drove joins without a restart.

One boot of guest/monitors.py (bench/vm-monitors' guest side) with three heads and a spare:
tenants draw on heads 0 and 2, a monitor is plugged into the spare head and unplugged again.
weston keeps its pid, heads 0 and 2 are never dark in the host's screendumps (taken at the
sampler's interval, tests/vm/sampler.py), both tenants' connections answer, and the new head
scans out at its monitor's preferred mode. The times are printed; bench/vm-monitors prints
them too, with the restart that stays.

It needs a guest whose weston has our DRM backend (build-support/weston-drm, built into the
guest with DISPLAY_OPERATOR_WESTON_DRM_PATCH=1): with Debian's the operator restarts weston
for that monitor, which is what this test would see. Like vm_test, it runs only with
DISPLAY_OPERATOR_VM=1, as root, with QEMU.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.vm import sampler, tier

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("DISPLAY_OPERATOR_VM") != "1"
        or shutil.which("qemu-system-x86_64") is None or os.geteuid() != 0,
        reason="the VM tier runs with DISPLAY_OPERATOR_VM=1, as root, with QEMU installed"),
    pytest.mark.skipif(
        os.environ.get("DISPLAY_OPERATOR_WESTON_DRM_PATCH") != "1",
        reason="the guest runs Debian's drm-backend.so, which cannot re-read a head: "
               "DISPLAY_OPERATOR_WESTON_DRM_PATCH=1 builds ours into it (build-support/vm)"),
]

HEADS = 3
TENANT_HEADS = (0, 2)


def _pex(name: str) -> Path:
    for path in (Path(name) / f"{name}.pex", Path("tests.vm") / f"{name}.pex"):
        if path.is_file():
            return path.resolve()
    pytest.fail(f"{name}.pex was not built: run under ./pants test, which packages it")


@pytest.fixture(scope="module")
def join(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workdir = tmp_path_factory.mktemp("vm-join")
    results = tier.run_boot(workdir, {name: _pex(name) for name in tier.BINARIES},
                            heads=HEADS + 1, memory_mb=2048, script="monitors.py",
                            args=("--heads", str(HEADS), "--spare-head"),
                            handlers=lambda vm: sampler.ScanoutSampler(vm).handlers())
    found: dict[str, Any] | None = results.get("join")
    print(json.dumps({k: v for k, v in (found or {}).items() if k != "samples"}, indent=1))
    if found is None or "weston_pid_after" not in found:
        for log in sorted((workdir / "share" / "out" / "logs").glob("*.log")):
            print(f"-- {log.name}:", *log.read_text(errors="replace").splitlines()[-15:],
                  sep="\n")
        pytest.fail(f"the guest did not finish the join stage: {results.get('errors')}")
    return found


def test_weston_keeps_its_pid_through_the_plug_and_the_unplug(join: dict[str, Any]) -> None:
    assert join["weston_pid_before"] == join["weston_pid_joined"] == join["weston_pid_after"]
    restarts = {k: v for k, v in join["counters_after"].items()
                if k.startswith("display_compositor_restarts_total")
                and v != join["counters_before"].get(k, 0)}
    assert restarts == {}


def test_the_new_head_scans_out_at_its_monitors_preferred_mode(join: dict[str, Any]) -> None:
    name = f"Virtual-{join['head'] + 1}"
    assert join["outputs_joined"][name] == "x".join(map(str, join["size"]))
    print(f"plug -> slice {join['slice_s']} s -> lit {join['lit_s']} s -> scanout "
          f"{join['scanout_s']} s; unplug -> slice {join['unplug_slice_s']} s -> powered off "
          f"{join['unplug_dark_s']} s")


@pytest.mark.parametrize("head", TENANT_HEADS)
def test_the_tenants_heads_are_never_dark(join: dict[str, Any], head: int) -> None:
    assert join["sample_errors"] in ([], None, {})
    dumps = [s for s in join["samples"] if s["head"] == head]
    assert len(dumps) >= 2, "the sampler must have seen the head through the stage"
    assert sampler.dark_spans(join["samples"], head) == []
    assert join["owners"]["not_weston"][f"Virtual-{head + 1}"] == []


@pytest.mark.parametrize("head", TENANT_HEADS)
def test_the_tenants_connections_answer(join: dict[str, Any], head: int) -> None:
    tenant = join["tenants"][str(head)]  # JSON's keys
    assert tenant["roundtrip"]["roundtrip"], tenant

