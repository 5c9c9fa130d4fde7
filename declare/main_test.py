"""declare's read-only `edid` command: what it prints and when it fails."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from declare.main import cli
from libdisplay.hardware.modes import Mode
from libdisplay.sim.edid import EdidParams, build_edid

GOOD = build_edid(EdidParams(name="Kiosk A", serial_number=1, preferred=Mode(1920, 1080, 60000)))


def _damaged() -> bytes:
    data = bytearray(GOOD)
    data[127] ^= 0xFF  # block 0's checksum byte
    return bytes(data)


def test_edid_prints_a_good_file_and_exits_0(tmp_path: Path) -> None:
    (tmp_path / "good.bin").write_bytes(GOOD)
    shown = CliRunner().invoke(cli, ["edid", str(tmp_path / "good.bin")])
    assert shown.exit_code == 0
    assert "Monitor: Kiosk A" in shown.stdout and shown.stderr == ""


def test_edid_with_a_bad_checksum_exits_1_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "bad.bin").write_bytes(_damaged())
    shown = CliRunner().invoke(cli, ["edid", str(tmp_path / "bad.bin")])
    assert shown.exit_code == 1
    assert shown.stderr == f"{tmp_path / 'bad.bin'}: bad checksum in block(s) 0\n"


def test_edid_json_is_one_record_per_file_in_order(tmp_path: Path) -> None:
    (tmp_path / "good.bin").write_bytes(GOOD)
    (tmp_path / "bad.bin").write_bytes(_damaged())
    (tmp_path / "short.bin").write_bytes(GOOD[:10])
    names = ["good.bin", "bad.bin", "short.bin"]
    shown = CliRunner().invoke(cli, ["edid", "--json", *(str(tmp_path / n) for n in names)])
    assert shown.exit_code == 1
    records = json.loads(shown.stdout)
    assert [r["path"] for r in records] == [str(tmp_path / n) for n in names]
    assert (records[0]["monitor_name"], records[0]["checksum_valid"], "error" in records[0]) == (
        "Kiosk A", True, False)
    assert (records[1]["checksum_valid"], records[1]["error"]) == (
        False, "bad checksum in block(s) 0")
    assert set(records[2]) == {"path", "error"}
