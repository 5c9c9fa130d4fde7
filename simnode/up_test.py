"""up: what it checks before starting anything, with the message a user acts on."""

from __future__ import annotations

from pathlib import Path

import pytest

from simnode import up


def test_missing_tools_name_the_debian_packages(monkeypatch: pytest.MonkeyPatch,
                                                tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(up.UpError) as caught:
        up.check_tools()
    message = str(caught.value)
    assert "Xvfb, weston, weston-simple-shm, cc, pkg-config not found on PATH" in message
    assert "apt-get install gcc pkg-config weston xvfb" in message


def test_a_missing_pex_says_how_to_build_it(tmp_path: Path) -> None:
    with pytest.raises(up.UpError, match=r"declare\.pex is missing: .*`./pants package ::`"):
        up.pex(tmp_path, "declare")


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
    assert up.default_dist() == expected
