"""The corpus in testdata/ is whole: every file the README counts is there, and each has its
oracle entry, so the parametrized EDID, MCCS and DDC tests run every file."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def test_every_real_edid_has_its_oracle_entry(testdata: Path) -> None:
    edids = sorted(p.name for p in (testdata / "edid").glob("*.bin"))
    oracle = json.loads((testdata / "edid" / "oracle.json").read_text())["files"]
    assert len(edids) == 430
    assert sorted(entry["file"] for entry in oracle) == edids


def test_every_broken_edid_has_its_verdict(testdata: Path) -> None:
    broken = sorted(f"broken/{p.name}" for p in (testdata / "edid" / "broken").glob("*.bin"))
    verdicts = json.loads((testdata / "edid" / "broken" / "verdicts.json").read_text())
    assert len(broken) == 25
    assert sorted(v["file"] for v in verdicts["variants"]) == broken


def test_edid_names_carry_their_digest(testdata: Path) -> None:
    for path in (testdata / "edid").glob("*.bin"):
        sha8 = path.stem.rsplit("-", 1)[1]
        assert hashlib.sha256(path.read_bytes()).hexdigest()[:8] == sha8, path.name


def test_every_capabilities_string_is_indexed(testdata: Path) -> None:
    caps = testdata / "ddc-caps"
    files = sorted(p.relative_to(caps).as_posix() for p in caps.rglob("*.txt"))
    index = json.loads((caps / "index.json").read_text())["strings"]
    assert len(files) == 42
    assert sorted(entry["file"] for entry in index) == files
