"""checkout: what `up` checks before starting anything, with the message a user acts on, and
where it finds weston 14 and the PEXes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simnode.node import checkout


def test_missing_tools_say_where_they_come_from(monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(checkout.UpError) as caught:
        checkout.check_tools()
    message = str(caught.value)
    assert message.startswith("not found on PATH: Xvfb (from the Debian package xvfb); weston")
    assert "run ./pants once to make the trixie root" in message


def test_the_checkouts_weston_14_goes_first_on_path(monkeypatch: pytest.MonkeyPatch,
                                                     tmp_path: Path) -> None:
    bin_dir = tmp_path / "build-support" / "trixie" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "weston").write_text("#!/bin/sh\n")
    monkeypatch.setenv("PATH", "/usr/bin")
    checkout.use_trixie_compositor(tmp_path / "dist")
    checkout.use_trixie_compositor(tmp_path / "dist")
    assert os.environ["PATH"] == f"{bin_dir}:/usr/bin"


def test_a_missing_pex_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(checkout.UpError, match=r"declare\.pex is missing: .*`./pants package ::`"):
        checkout.pex(tmp_path, "declare")


@pytest.mark.parametrize(
    ("pex", "expected"),
    [("/repo/dist/simnode/simnode.pex", Path("/repo/dist")), (None, Path("dist"))],
    ids=["beside-this-pex", "cwd"],
)
def test_default_dist(monkeypatch: pytest.MonkeyPatch, pex: str | None, expected: Path) -> None:
    if pex is None:
        monkeypatch.delenv("PEX", raising=False)
    else:
        monkeypatch.setenv("PEX", pex)
    assert checkout.default_dist() == expected
