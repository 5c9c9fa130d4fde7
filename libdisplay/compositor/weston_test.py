from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from libdisplay.compositor import weston
from libdisplay.compositor.weston import (
    CoreConfig,
    Modeline,
    OutputConfig,
    RestartOrder,
    WestonIni,
    WestonIniError,
)
from libdisplay.hardware.modes import Mode

SAMPLE = """\
# weston.ini for this node
# written by declare; comments stay

[core]
backend=drm-backend.so
shell=desktop-shell.so
modules=systemd-notify.so,xwayland.so
idle-time=0
require-outputs=none
require-input=false
repaint-window=7

[shell]
background-color=0xff002244
panel-position=none

[output]
name=HDMI-A-1
mode=1920x1080@60
transform=rotate-90
scale=1
app-ids=org.example.kiosk
# the second monitor
[output]
name=DP-1
mode= preferred \t
icc_profile=/etc/color/dp1.icc#not-a-comment

[keyboard]
keymap_layout=de
"""

MODELINE = "148.50 1920 2008 2052 2200 1080 1084 1089 1125 +hsync +vsync"


# --- round trip -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        SAMPLE,
        SAMPLE.rstrip("\n"),
        "",
        "# only a comment\n",
        "\n\n# leading blank lines\n[core]\n",
        "[core]\nidle-time=0",
        "[launcher]\nicon=/a.png\npath=/usr/bin/weston-terminal --x=[y]\n\n"
        "[launcher]\nicon=/b.png\n",
        "[output]\nname=X1\nmode=" + MODELINE + "\n",
        "[output]\nname=X1\nmode=1920x1080@60 16:9\n",
    ],
    ids=["sample", "no-final-newline", "empty", "comment-only", "leading-blanks",
         "entry-last-no-newline", "repeated-unknown-sections", "modeline", "aspect-mode"],
)  # fmt: skip
def test_round_trip_is_exact(text: str) -> None:
    assert WestonIni.parse(text).render() == text


_KEY = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_-.0123456789", min_size=1, max_size=12)
_VALUE = st.text(
    alphabet=st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\n\r"),
    max_size=30,
)
_COMMENT = st.one_of(st.just(""), _VALUE.map(lambda v: "#" + v))


@st.composite
def _ini_text(draw: st.DrawFn) -> str:
    lines = draw(st.lists(_COMMENT, max_size=3))
    for _ in range(draw(st.integers(0, 4))):
        name = draw(_KEY.filter(lambda k: k not in ("core", "output")))
        lines.append(f"[{name}]")
        keys = draw(st.lists(_KEY, max_size=5, unique=True))
        for key in keys:
            lines.append(f"{key}={draw(_VALUE)}")
            lines.extend(draw(st.lists(_COMMENT, max_size=2)))
    return "\n".join(lines) + draw(st.sampled_from(["\n", ""])) if lines else ""


@given(_ini_text())
def test_round_trip_of_generated_files(text: str) -> None:
    if text.endswith("]"):  # weston's own rule: a header needs its newline
        text += "\n"
    assert WestonIni.parse(text).render() == text


# --- typed views ------------------------------------------------------------------------------


def test_typed_views_of_the_sample() -> None:
    ini = WestonIni.parse(SAMPLE)
    assert ini.core == CoreConfig(
        backend="drm-backend.so",
        shell="desktop-shell.so",
        modules=("systemd-notify.so", "xwayland.so"),
        idle_time=0,
        require_outputs="none",
        require_input=False,
    )
    assert ini.outputs == (
        OutputConfig("HDMI-A-1", Mode(1920, 1080, 60000), "rotate-90", 1),
        OutputConfig("DP-1", "preferred"),
    )
    assert ini.output("DP-1") == OutputConfig("DP-1", "preferred")
    assert ini.output("eDP-1") is None
    shell = next(s for s in ini.sections if s.name == "shell")
    assert shell.get("background-color") == "0xff002244"
    dp = next(s for s in ini.sections if s.get("name") == "DP-1")
    assert dp.get("icc_profile") == "/etc/color/dp1.icc#not-a-comment"


def test_changing_an_output_rewrites_only_its_lines() -> None:
    ini = WestonIni.parse(SAMPLE)
    hdmi = ini.output("HDMI-A-1")
    assert hdmi is not None
    changed = ini.with_output(replace(hdmi, mode=Mode(3840, 2160, 29970), transform=None))
    assert changed.render() == SAMPLE.replace("mode=1920x1080@60\ntransform=rotate-90\n",
                                              "mode=3840x2160@30\n")  # fmt: skip


def test_setting_an_unchanged_value_keeps_its_spelling() -> None:
    ini = WestonIni.parse(SAMPLE)
    assert ini.with_output(OutputConfig("DP-1", "preferred")).render() == SAMPLE
    assert ini.with_core(ini.core).render() == SAMPLE


def test_adding_and_removing_outputs() -> None:
    ini = WestonIni.parse(SAMPLE)
    added = ini.with_output(OutputConfig("HDMI-A-2", Mode(1280, 720), "flipped", 2))
    assert added.render() == SAMPLE + "\n[output]\nname=HDMI-A-2\nmode=1280x720\n" \
        "transform=flipped\nscale=2\n"  # fmt: skip
    removed = ini.without_output("DP-1")
    # The comment above the DP-1 header is a line of the HDMI-A-1 section, so it stays.
    assert removed.render() == SAMPLE.replace(
        "[output]\nname=DP-1\nmode= preferred \t\nicc_profile=/etc/color/dp1.icc#not-a-comment\n\n",
        "",
    )
    assert [o.name for o in removed.outputs] == ["HDMI-A-1"]


def test_a_file_written_from_nothing() -> None:
    ini = (
        WestonIni()
        .with_output(OutputConfig("HDMI-A-1", Mode(1920, 1080, 59940), "normal"))
        .with_output(OutputConfig("DP-1", "off"))
        .with_core(CoreConfig(shell="kiosk-shell.so", idle_time=0, require_outputs="none"))
    )
    assert ini.render() == (
        "[core]\nshell=kiosk-shell.so\nidle-time=0\nrequire-outputs=none\n\n"
        "[output]\nname=HDMI-A-1\nmode=1920x1080@60\ntransform=normal\n\n"
        "[output]\nname=DP-1\nmode=off\n"
    )
    assert WestonIni().with_core(CoreConfig(idle_time=5)).render() == "[core]\nidle-time=5\n"


def test_removing_core_keys_with_none() -> None:
    ini = WestonIni.parse(SAMPLE).with_core(CoreConfig(backend="headless-backend.so"))
    core = next(s for s in ini.sections if s.name == "core")
    assert [e.key for e in core.entries()] == ["backend", "repaint-window"]


def test_new_output_after_a_preamble_gets_a_blank_line() -> None:
    ini = WestonIni.parse("# generated").with_output(OutputConfig("X1"))
    assert ini.render() == "# generated\n\n[output]\nname=X1\n"


# --- bad input --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "section", "key", "value", "message"),
    [
        ("[core]\nidle-time = 0\n", "core", "idle-time ", " 0", "key with spaces"),
        ("[core\n", None, None, None, "malformed section header"),
        ("[core]x\n", None, None, None, "malformed section header"),
        ("[ core ]\n", None, None, None, "must be a word"),
        ("idle-time=0\n[core]\n", None, None, None, "before any \\[section\\]"),
        ("[core]\njust words\n", "core", None, None, "malformed line"),
        ("[core]\n   \n", "core", None, None, "malformed line"),
        ("[core]\r\nidle-time=0\r\n", None, None, None, "CRLF"),
        ("[core]\nshell=a.so\nshell=b.so\n", "core", "shell", "b.so", "appears twice"),
        ("[core]\n[core]\n", "core", None, None, "two \\[core\\] sections"),
        ("[output]\nname=A\n[output]\nname=A\n", "output", "name", "A", "name one output"),
        ("[output]\nmode=preferred\n", "output", None, None, "without name="),
        ("[output]\nname=HDMI A\n", "output", "name", "HDMI A", "without spaces"),
        ("[output]\nname=A\ntransform=rotate90\n", "output", "transform", "rotate90",
         "must be one of normal"),
        ("[output]\nname=A\ntransform=90\n", "output", "transform", "90", "must be one of"),
        ("[output]\nname=A\nscale=0\n", "output", "scale", "0", "1 or more"),
        ("[output]\nname=A\nscale=1.5\n", "output", "scale", "1.5", "whole number"),
        ("[core]\nidle-time=-1\n", "core", "idle-time", "-1", "0 or more"),
        ("[core]\nrequire-outputs=some\n", "core", "require-outputs", "some",
         "all-found, any, none"),
        ("[core]\nrequire-input=no\n", "core", "require-input", "no", "true, false"),
        ("[core]\nmodules=a.so, b.so\n", "core", "modules", " b.so", "without spaces"),
        ("[output]\nname=A\nmode=1920x1080@59.94\n", "output A", "mode", "1920x1080@59.94",
         "whole hertz"),
        ("[output]\nname=A\nmode=1920x1080i\n", "output A", "mode", "1920x1080i", "interlaced"),
        ("[output]\nname=A\nmode=0x1080\n", "output A", "mode", "0x1080", "not a mode"),
        ("[output]\nname=A\nmode=big\n", "output A", "mode", "big", "not a weston mode"),
        ("[core]", "core", None, None, "last line without a newline"),
    ],
    ids=["key-with-space", "unclosed-header", "text-after-header", "header-with-spaces",
         "key-before-section", "no-equals", "whitespace-line", "crlf", "duplicate-key",
         "two-cores", "two-outputs-one-name", "output-without-name", "name-with-space",
         "transform-rotate90", "transform-legacy-90", "scale-zero", "scale-fraction",
         "idle-negative", "require-outputs", "require-input-not-bool", "module-with-space",
         "fractional-refresh", "interlaced", "zero-width", "garbage-mode", "header-at-eof"],
)  # fmt: skip
def test_bad_files_name_what_is_wrong(
    text: str, section: str | None, key: str | None, value: str | None, message: str
) -> None:
    with pytest.raises(WestonIniError, match=message) as caught:
        WestonIni.parse(text)
    assert (caught.value.section, caught.value.key, caught.value.value) == (section, key, value)
    for part in (section, key):
        if part is not None:
            assert part in str(caught.value)


@pytest.mark.parametrize(
    ("make", "key"),
    [
        (lambda: CoreConfig(shell=""), "shell"),
        (lambda: CoreConfig(modules=("a.so,b.so",)), "modules"),
        (lambda: CoreConfig(idle_time=-5), "idle-time"),
        (lambda: CoreConfig(require_outputs="never"), "require-outputs"),  # type: ignore[arg-type]
        (lambda: OutputConfig("A", Mode(1920, 1080, 60000, interlaced=True)), "mode"),
        (lambda: OutputConfig("A", "auto"), "mode"),  # type: ignore[arg-type]
        (lambda: OutputConfig("A", Modeline("1920x1080")), "mode"),
        (lambda: OutputConfig("A", transform="rotate-45"), "transform"),  # type: ignore[arg-type]
        (lambda: OutputConfig("A", scale=0), "scale"),
        (lambda: OutputConfig("A", scale=True), "scale"),
        (lambda: OutputConfig(""), "name"),
    ],
    ids=["empty-shell", "comma-in-module", "negative-idle", "require-outputs", "interlaced",
         "unknown-keyword", "modeline-not-a-modeline", "transform", "scale-zero", "scale-bool",
         "empty-name"],
)  # fmt: skip
def test_typed_values_are_checked_when_built(make: object, key: str) -> None:
    with pytest.raises(WestonIniError) as caught:
        make()  # type: ignore[operator]
    assert caught.value.key == key


def test_values_cannot_inject_lines() -> None:
    section = WestonIni.parse("[shell]\n").sections[0]
    with pytest.raises(WestonIniError, match="newline"):
        section.with_value("panel-position", "none\n[core]")
    with pytest.raises(WestonIniError, match="start or end with space"):
        section.with_value("panel-position", " none")


# --- mode values ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("preferred", "preferred"),
        ("current", "current"),
        ("off", "off"),
        ("1920x1080", Mode(1920, 1080)),
        ("1920x1080@60", Mode(1920, 1080, 60000)),
        ("1920x1080@60 16:9", Modeline("1920x1080@60 16:9")),
        ("4096x2160@24 256:135", Modeline("4096x2160@24 256:135")),
        (MODELINE, Modeline(MODELINE)),
        ("173 1920 2048 2248 2576 1080 1083 1088 1120 -HSync +VSync",
         Modeline("173 1920 2048 2248 2576 1080 1083 1088 1120 -HSync +VSync")),
    ],
    ids=["preferred", "current", "off", "size", "size-rate", "aspect", "aspect-256-135",
         "modeline", "modeline-integer-clock-mixed-case"],
)  # fmt: skip
def test_mode_values(text: str, parsed: weston.OutputMode) -> None:
    assert weston.parse_output_mode(text) == parsed
    assert weston.format_output_mode(parsed) == text


@pytest.mark.parametrize(
    "text",
    [
        'Modeline "1920x1080_60.00" 173.00 1920 2048 2248 2576 1080 1083 1088 1120 -hsync +vsync',
        "148.50 1920 2008 2052 2200 1080 1084 1089 1125 +hsync",
        "148.50 1920 2008 2052 2200 1080 1084 1089 1125 +vsync +hsync",
        "1920x1080@60 5:4",
        "1920x1080 @60",
        "Preferred",
    ],
    ids=["xorg-modeline-prefix", "ten-fields", "syncs-swapped", "odd-aspect", "space", "case"],
)
def test_bad_mode_values(text: str) -> None:
    with pytest.raises(WestonIniError, match="not a weston mode"):
        weston.parse_output_mode(text)


@pytest.mark.parametrize(
    ("mode", "text"),
    [
        (Mode(1920, 1080, 59940), "1920x1080@60"),
        (Mode(3840, 2160, 29970), "3840x2160@30"),
        (Mode(1920, 1080, 23976), "1920x1080@24"),
        (Mode(1280, 720, 60500), "1280x720@61"),
        (Mode(2560, 1440, 59951), "2560x1440@60"),
        (Mode(1024, 768), "1024x768"),
    ],
    ids=["ntsc-60", "ntsc-30", "film", "half-rounds-up", "edid-dtd-rate", "no-rate"],
)
def test_rates_are_written_as_the_kernel_rounds_vrefresh(mode: Mode, text: str) -> None:
    assert weston.format_output_mode(mode) == text


OFFERED_BY_EDID = (Mode(1920, 1080, 60000), Mode(1920, 1080, 59940), Mode(1280, 720, 60000))
OFFERED_BY_SYSFS = (Mode(3840, 2160), Mode(1920, 1080))


@pytest.mark.parametrize(
    ("wanted", "offered", "selected"),
    [
        (Mode(1920, 1080, 60000), OFFERED_BY_EDID, Mode(1920, 1080, 60000)),
        (Mode(1920, 1080), OFFERED_BY_EDID, Mode(1920, 1080, 60000)),
        (Mode(1920, 1080, 59940), OFFERED_BY_EDID, Mode(1920, 1080, 59940)),
        (Mode(3840, 2160, 30000), OFFERED_BY_SYSFS, Mode(3840, 2160)),
        ("preferred", (), None),
        (Modeline(MODELINE), (), None),
    ],
    ids=["exact", "any-rate", "ntsc", "sysfs-has-no-rate", "keyword", "modeline"],
)
def test_check_output_mode_selects(
    wanted: weston.OutputMode, offered: tuple[Mode, ...], selected: Mode | None
) -> None:
    assert weston.check_output_mode(wanted, offered, output="HDMI-A-1") == selected


def test_check_output_mode_refuses_what_is_not_offered() -> None:
    with pytest.raises(WestonIniError, match="HDMI-A-1 does not offer") as caught:
        weston.check_output_mode(Mode(2560, 1440, 60000), OFFERED_BY_EDID, output="HDMI-A-1")
    assert caught.value.value == "2560x1440@60"
    assert "1280x720@60" in str(caught.value)


# --- the real weston 14 -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WestonRun:
    exit_code: int | None  # None: it came up and answered
    info: str
    log: str


def _connects(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


@contextmanager
def _weston(config: str) -> Iterator[WestonRun]:
    """weston headless on `config`; what wayland-info saw, or how it exited. Always reaped."""
    # A short runtime dir: socket paths are limited to 108 bytes.
    runtime = Path(tempfile.mkdtemp(prefix="wst-", dir="/tmp"))
    runtime.chmod(0o700)
    (runtime / "weston.ini").write_text(config)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "XDG_RUNTIME_DIR": str(runtime)}
    proc = subprocess.Popen(
        ["weston", "--backend=headless", f"--config={runtime / 'weston.ini'}",
         "--socket=wl-test", f"--log={runtime / 'weston.log'}"],
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while proc.poll() is None and not _connects(runtime / "wl-test"):
            if time.monotonic() > deadline:
                pytest.fail("weston did not answer on its socket within 30 s")
            time.sleep(0.02)
        info = ""
        if proc.poll() is None:
            info = subprocess.run(
                ["wayland-info"], env={**env, "WAYLAND_DISPLAY": "wl-test"},
                capture_output=True, text=True, timeout=30, check=True,
            ).stdout  # fmt: skip
        log = (runtime / "weston.log").read_text(errors="replace")
        yield WestonRun(proc.poll(), info, log)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(runtime, ignore_errors=True)


needs_weston = pytest.mark.skipif(
    shutil.which("weston") is None or shutil.which("wayland-info") is None,
    reason="weston and wayland-info are not installed",
)

# How wayland-info prints each wl_output transform.
_SHOWN = {
    "normal": "normal", "rotate-90": "90°", "rotate-180": "180°", "rotate-270": "270°",
    "flipped": "flipped", "flipped-rotate-90": "flipped 90°",
    "flipped-rotate-180": "flipped 180°", "flipped-rotate-270": "flipped 270°",
}  # fmt: skip


@needs_weston
@pytest.mark.parametrize("transform", weston.TRANSFORMS)
def test_weston_10_reads_what_this_module_writes(transform: weston.Transform) -> None:
    ini = (
        WestonIni.parse("# test\n")
        .with_core(CoreConfig(shell="desktop-shell.so", idle_time=0, require_outputs="none"))
        .with_output(OutputConfig("headless", Mode(1280, 720, 60000), transform, 1))
    )
    with _weston(ini.render()) as run:
        assert run.exit_code is None, run.log
    swapped = transform.endswith(("90", "270"))
    width, height = (720, 1280) if swapped else (1280, 720)
    assert f"logical_width: {width}, logical_height: {height}" in run.info
    assert f"output_transform: {_SHOWN[transform]}," in run.info
    assert "width: 1280 px, height: 720 px, refresh: 60.000 Hz" in run.info


@needs_weston
@pytest.mark.parametrize(
    ("text", "seen", "logged"),
    [
        ("[output]\nname=headless\nmode=1280x720\ntransform=rotate90\n", None,
         'Invalid transform "rotate90"'),
        ("[output]\nname=headless\nmode=640x480\n[core]", None,
         "error opening or reading config file"),
        ("[output]\nname=headless\nmode = 640x480\n", "width: 1024 px, height: 640 px", ""),
        ("[output]\nname=headless\nmode=640x480\nmode=800x600\n",
         "width: 640 px, height: 480 px", ""),
    ],
    ids=["bad-transform-is-fatal", "header-at-eof-is-fatal", "spaced-key-silently-ignored",
         "first-duplicate-wins"],
)  # fmt: skip
def test_what_this_module_refuses_weston_10_refuses_or_misreads(
    text: str, seen: str | None, logged: str
) -> None:
    with pytest.raises(WestonIniError):
        WestonIni.parse(text)
    with _weston(text) as run:
        if seen is None:
            assert run.exit_code not in (None, 0)
        else:
            assert run.exit_code is None, run.log
            assert seen in run.info
    assert logged in run.log


# --- restart orders ---------------------------------------------------------------------------

AT = datetime(2026, 11, 30, 5, 4, 15, 123000, tzinfo=UTC)


def test_order_write_read_consume(tmp_path: Path) -> None:
    directory = tmp_path / "restarts"
    order = weston.order_restart(4242, reason="claim abc: mode 1920x1080@60", directory=directory,
                                 now=AT)  # fmt: skip
    assert order == RestartOrder(4242, "claim abc: mode 1920x1080@60", AT)
    assert json.loads((directory / "4242").read_text()) == {
        "pid": 4242, "reason": "claim abc: mode 1920x1080@60",
        "ordered_at": "2026-11-30T05:04:15.123+00:00",
    }  # fmt: skip
    assert weston.read_restart_order(4242, directory=directory) == order
    assert weston.read_restart_order(17, directory=directory) is None
    assert weston.consume_restart_order(4242, directory=directory) == order
    assert list(directory.iterdir()) == []
    assert weston.consume_restart_order(4242, directory=directory) is None


def test_orders_are_listed_by_pid(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    for pid in (300, 12, 7000):
        weston.order_restart(pid, reason=f"r{pid}", directory=tmp_path, now=AT)
    (tmp_path / ".300.999.tmp").write_text("half an order")
    (tmp_path / "README").write_text("not an order")
    with caplog.at_level(logging.WARNING, logger="libdisplay.compositor.weston"):
        orders = weston.list_restart_orders(directory=tmp_path)
    assert [o.pid for o in orders] == [12, 300, 7000]
    assert "README" in caplog.text and ".300.999.tmp" not in caplog.text
    assert weston.list_restart_orders(directory=tmp_path / "missing") == ()


def test_default_order_time_is_now_in_utc(tmp_path: Path) -> None:
    order = weston.order_restart(5, reason="mode", directory=tmp_path)
    assert abs(datetime.now(UTC) - order.ordered_at) < timedelta(minutes=5)
    read = weston.read_restart_order(5, directory=tmp_path)
    assert read is not None and read.ordered_at.tzinfo is not None
    assert abs(read.ordered_at - order.ordered_at) < timedelta(milliseconds=1)


@pytest.mark.parametrize(
    "content",
    [
        b"not json",
        b"[4242]",
        b'{"pid": 4242, "reason": "x"}',
        b'{"pid": 4243, "reason": "x", "ordered_at": "2026-11-30T05:04:15+00:00"}',
        b'{"pid": "4242", "reason": "x", "ordered_at": "2026-11-30T05:04:15+00:00"}',
        b'{"pid": 4242, "reason": " ", "ordered_at": "2026-11-30T05:04:15+00:00"}',
        b'{"pid": 4242, "reason": "x", "ordered_at": "2026-11-30T05:04:15"}',
        b'{"pid": 4242, "reason": "x", "ordered_at": "yesterday"}',
        b'{"pid": 4242, "reason": 5, "ordered_at": "2026-11-30T05:04:15+00:00"}',
        b"\xff\xfe\x00garbage",
        b"",
    ],
    ids=["not-json", "not-object", "missing-key", "pid-mismatch", "pid-string", "empty-reason",
         "naive-time", "bad-time", "reason-not-string", "not-utf8", "empty"],
)  # fmt: skip
def test_malformed_orders_are_reported_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: bytes
) -> None:
    weston.order_restart(12, reason="good", directory=tmp_path, now=AT)
    (tmp_path / "4242").write_bytes(content)
    with caplog.at_level(logging.WARNING, logger="libdisplay.compositor.weston"):
        assert weston.read_restart_order(4242, directory=tmp_path) is None
        assert [o.pid for o in weston.list_restart_orders(directory=tmp_path)] == [12]
        assert weston.consume_restart_order(4242, directory=tmp_path) is None
    assert "4242" in caplog.text and "ignoring" in caplog.text
    assert not (tmp_path / "4242").exists()  # consumed: it can only mislead a later reader


def test_an_order_path_that_is_a_directory(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "4242").mkdir()
    with caplog.at_level(logging.WARNING, logger="libdisplay.compositor.weston"):
        assert weston.list_restart_orders(directory=tmp_path) == ()
        assert weston.consume_restart_order(4242, directory=tmp_path) is None
    assert "cannot remove" in caplog.text


@pytest.mark.parametrize(
    ("pid", "reason", "at", "message"),
    [
        (0, "x", AT, "not a process id"),
        (-3, "x", AT, "not a process id"),
        (True, "x", AT, "not a process id"),
        ("12", "x", AT, "not a process id"),
        (12, "  ", AT, "empty reason"),
        (12, "x", AT.replace(tzinfo=None), "no zone"),
    ],
    ids=["zero", "negative", "bool", "string", "blank-reason", "naive-time"],
)
def test_bad_orders_are_refused(pid: object, reason: str, at: datetime, message: str) -> None:
    with pytest.raises(weston.RestartOrderError, match=message):
        RestartOrder(pid, reason, at)  # type: ignore[arg-type]
