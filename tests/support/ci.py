"""In CI a skipped test fails: CI is never silently thin.

A test skips where its tool or root filesystem is missing (bwrap, weston, edid-decode, QEMU,
podman, TRIXIE_ROOT, ...), which on a person's machine is a convenience; in CI (`CI` set, as CI
services set it and `CI=true bash .ci/run` does) it would make a green run that tested less.
So there a skip is a failure, except two kinds that are no loss:

- a tier not asked for: its reason names the tier's switch (`DISPLAY_OPERATOR_VM=1`), and the
  switch is not set to 1 in this run (.ci/run runs each tier in a phase of its own with it set;
  with it set, the same skip fails);
- a skip for the test's own input, by its reason's start (`ALLOWED_REASONS`).

The root conftest.py installs the hook.
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator, Mapping
from typing import Final

import pytest

SWITCH: Final = re.compile(r"\b(DISPLAY_OPERATOR_[A-Z_]+)=1\b")
ALLOWED_REASONS: Final = (
    # realapi.py: a test of the fake alone, when the run holds the fake to the real server.
    "fake only:",
    # edid_test.py: the oracle has no answer for this random structure, so there is nothing
    # to compare.
    "edid-decode itself fails",
)


def in_ci(env: Mapping[str, str]) -> bool:
    return env.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_allowed(reason: str, env: Mapping[str, str]) -> bool:
    """Whether a skip for `reason` may stand in CI."""
    if reason.startswith(ALLOWED_REASONS):
        return True
    switches = SWITCH.findall(reason)
    return bool(switches) and all(env.get(s) != "1" for s in switches)


def skip_reason(longrepr: object) -> str:
    """The reason of a skip's report (pytest's `(path, line, "Skipped: reason")`)."""
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return str(text).removeprefix("Skipped: ")


def failed_in_ci(reason: str) -> str:
    return (f"skipped in CI ({reason}): a CI run must not test less than it says; install what "
            "the test needs (./pants installs the Debian packages and the trixie root), or "
            "leave its tier's switch unset")


_Wrapped = Generator[None, pytest.TestReport, pytest.TestReport]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> _Wrapped:
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and in_ci(os.environ):
        reason = skip_reason(report.longrepr)
        if not skip_allowed(reason, os.environ):
            report.outcome = "failed"
            report.longrepr = failed_in_ci(reason)
    return report
