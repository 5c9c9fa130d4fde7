"""In CI a skip fails, but for a tier not asked for: the rule, and pytest run with it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import ci

VM = "the VM tier runs with DISPLAY_OPERATOR_VM=1, as root, with QEMU installed"
RUN_TIMEOUT_S = 120.0  # one pytest of three trivial tests; a loaded 2-core machine needs ~5 s


@pytest.mark.parametrize(("reason", "env", "allowed"), [
    (VM, {}, True),  # the tier not asked for
    (VM, {"DISPLAY_OPERATOR_VM": "0"}, True),
    (VM, {"DISPLAY_OPERATOR_VM": "1"}, False),  # asked for, and its tool is missing
    ("needs bwrap (build-support/install-debs) and root", {}, False),
    ("edid-decode not installed", {}, False),
    ("fake only: the real server answers otherwise", {}, True),
    ("edid-decode itself fails on this structure", {}, True),
])
def test_which_skips_stand_in_ci(reason: str, env: dict[str, str], allowed: bool) -> None:
    assert ci.skip_allowed(reason, env) is allowed


@pytest.mark.parametrize(("value", "ci_run"), [
    ("true", True), ("1", True), ("yes", True), ("", False), ("false", False), ("0", False)])
def test_what_says_ci(value: str, ci_run: bool) -> None:
    assert ci.in_ci({"CI": value}) is ci_run
    assert not ci.in_ci({})


TESTS = f'''
import pytest

def test_needs_a_tool():
    pytest.skip("needs bwrap (build-support/install-debs) and root")

@pytest.mark.skipif(True, reason="{VM}")
def test_of_the_vm_tier():
    pass

@pytest.mark.xfail(reason="known")
def test_known_to_fail():
    assert False
'''


def _pytest(tmp_path: Path, **env: str) -> tuple[int, str]:
    """pytest's exit code and its report of each test (-rA)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "skips_test.py").write_text(TESTS)
    base = {k: v for k, v in os.environ.items() if k != "CI" and not k.startswith("DISPLAY_")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.support.ci", "-p", "no:cacheprovider",
         "-q", "-rA", "skips_test.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
        env={**base, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), **env})
    return done.returncode, done.stdout


def test_pytest_fails_a_skip_in_ci_and_keeps_an_unasked_tier_s(tmp_path: Path) -> None:
    rc, out = _pytest(tmp_path)
    assert rc == 0 and "2 skipped, 1 xfailed" in out, out
    # A skip in the call fails the test; a skipif mark, in its setup, is an error: both fail.
    rc, out = _pytest(tmp_path, CI="true")
    assert rc == 1, out
    assert "FAILED skips_test.py::test_needs_a_tool - skipped in CI (needs bwrap" in out, out
    assert "SKIPPED [1] skips_test.py" in out and "XFAIL" in out, out
    rc, out = _pytest(tmp_path, CI="true", DISPLAY_OPERATOR_VM="1")
    assert rc == 1, out
    assert ("ERROR skips_test.py::test_of_the_vm_tier - skipped in CI (the VM tier runs with "
            "DISPLAY_OPERATOR_VM=1") in out, out
    assert "SKIPPED" not in out, out
