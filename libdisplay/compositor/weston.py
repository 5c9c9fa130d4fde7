"""weston.ini as weston 14 reads it, and the restart orders that make the supervisor restart weston.

**weston.ini.** `WestonIni.parse(text).render() == text` for every file it accepts: comments,
blank lines, unknown sections and unknown keys are kept byte for byte, and only the keys set
through `with_core` / `with_output` are rewritten. The parser follows weston's own
(`shared/config-parser.c`): `#` starts a comment only at the start of a line, a header is exactly
`[name]`, a key is everything before the first `=` and the value is trimmed. Where weston would
silently ignore what a person meant (a key with a space in it, a second `[core]`, a second
`mode=` in a section, `1920x1080@59.94` which weston reads as 59 Hz), parsing fails with a
`WestonIniError` naming the section, key and value, because a compositor that quietly starts
at the wrong mode is worse than a config that is refused.

Typed views: `[core]` (`backend`, `shell`, `modules`, `idle-time`, `require-outputs`,
`require-input`) and each `[output]` (`name`, `mode`, `transform`, `scale`). The DRM backend
reads `require-outputs` (`all-found`, `any`, `none`): `none` lets weston start, and stay up, on a
card with no monitor. `require-input=false` keeps weston running on a node with no keyboard or
mouse, which a screen on a wall usually is. weston reads a boolean as exactly `true` or `false`
and takes its default for anything else, so anything else is refused here.

Mode values: `WxH` or `WxH@Hz` (whole hertz: weston reads the rate with `%d` and compares it
with the kernel's rounded `vrefresh`), `preferred`, `current`, `off`, and, kept verbatim, a
full modeline or `WxH@Hz A:B`.

**Restart orders.** weston parses weston.ini once, so a new mode takes effect by restarting it.
Before the operator ends weston it writes an order naming weston's pid, one file per order at
`<dir>/<pid>` (`/etc/weston/restarts/<pid>`), atomically; the supervisor, seeing that pid exit,
consumes the order and starts weston again. An order file that cannot be read is logged and
ignored: the reader never fails on it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, TypeVar

from libdisplay import fsutil
from libdisplay.hardware.modes import Mode, find_mode, parse_mode

log = logging.getLogger(__name__)

_Choice = TypeVar("_Choice", bound=str)

RESTARTS_DIR = Path("/etc/weston/restarts")

Transform = Literal[
    "normal", "rotate-90", "rotate-180", "rotate-270",
    "flipped", "flipped-rotate-90", "flipped-rotate-180", "flipped-rotate-270",
]  # fmt: skip
TRANSFORMS: tuple[Transform, ...] = (
    "normal", "rotate-90", "rotate-180", "rotate-270",
    "flipped", "flipped-rotate-90", "flipped-rotate-180", "flipped-rotate-270",
)  # fmt: skip
RequireOutputs = Literal["all-found", "any", "none"]
REQUIRE_OUTPUTS: tuple[RequireOutputs, ...] = ("all-found", "any", "none")
ModeKeyword = Literal["preferred", "current", "off"]
MODE_KEYWORDS: tuple[ModeKeyword, ...] = ("preferred", "current", "off")

# C isspace() minus the newline the lines were split on: what weston trims from values.
_C_SPACE = " \t\v\f\r"
_WHOLE_MODE_RE = re.compile(r"^[0-9]+x[0-9]+(@[0-9]+)?$")
_ASPECT_MODE_RE = re.compile(
    r"^[1-9][0-9]{0,4}x[1-9][0-9]{0,4}@[0-9]{1,3} (4:3|16:9|64:27|256:135)$"
)
_FLOAT_RE = re.compile(r"^[0-9]+(\.[0-9]+)?$")
_SYNC_RE = re.compile(r"^[+-](h|v)sync$", re.IGNORECASE)


class WestonError(Exception):
    """Base of every error this module raises."""


class WestonIniError(WestonError, ValueError):
    """weston.ini content weston would reject or misread; names the section, key and value."""

    def __init__(
        self,
        reason: str,
        *,
        section: str | None = None,
        key: str | None = None,
        value: str | None = None,
        line: int | None = None,
    ) -> None:
        where = "weston.ini"
        if line is not None:
            where += f" line {line}"
        if section is not None:
            where += f" [{section}]"
        if key is not None:
            where += f" {key}={value!r}" if value is not None else f" {key}"
        super().__init__(f"{where}: {reason}")
        self.section = section
        self.key = key
        self.value = value
        self.line = line


class RestartOrderError(WestonError):
    """A restart order that cannot be written as asked."""


# --- mode values ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Modeline:
    """A mode weston parses itself, kept verbatim: a full modeline or `WxH@Hz A:B`."""

    text: str

    def __post_init__(self) -> None:
        if not (_ASPECT_MODE_RE.match(self.text) or _is_modeline(self.text)):
            raise WestonIniError(
                "not a modeline (clock hdisp hss hse htot vdisp vss vse vtot ±hsync ±vsync) "
                "nor WxH@Hz A:B",
                section="output",
                key="mode",
                value=self.text,
            )


OutputMode = Mode | ModeKeyword | Modeline


def parse_output_mode(text: str, *, section: str = "output") -> OutputMode:
    """One `mode=` value; raises WestonIniError with the reason weston would not do what it says."""

    def bad(reason: str) -> WestonIniError:
        return WestonIniError(reason, section=section, key="mode", value=text)

    for keyword in MODE_KEYWORDS:
        if text == keyword:
            return keyword
    if _WHOLE_MODE_RE.match(text):
        try:
            return parse_mode(text)
        except ValueError as err:
            raise bad(str(err)) from err
    if _ASPECT_MODE_RE.match(text) or _is_modeline(text):
        return Modeline(text)
    if re.match(r"^[0-9]+x[0-9]+i", text):
        raise bad("weston cannot choose an interlaced mode by size; give a full modeline")
    if re.match(r"^[0-9]+x[0-9]+@[0-9]+\.", text):
        raise bad("weston reads the refresh as whole hertz (write e.g. @60 for 59.94)")
    raise bad(
        "not a weston mode (WxH, WxH@Hz, preferred, current, off, "
        "WxH@Hz A:B, or a modeline: clock hdisp hss hse htot vdisp vss vse vtot ±hsync ±vsync)"
    )


def _is_modeline(text: str) -> bool:
    fields = text.split()
    return (
        len(fields) == 11
        and _FLOAT_RE.match(fields[0]) is not None
        and all(f.isdecimal() for f in fields[1:9])
        and _SYNC_RE.match(fields[9]) is not None
        and fields[9][1].lower() == "h"
        and _SYNC_RE.match(fields[10]) is not None
        and fields[10][1].lower() == "v"
    )


def format_output_mode(mode: OutputMode) -> str:
    """The `mode=` text for `mode`; a rate is written in whole hertz, rounded as the kernel does."""
    if isinstance(mode, Modeline):
        return mode.text
    if isinstance(mode, Mode):
        _check_weston_can_select(mode)
        text = f"{mode.width}x{mode.height}"
        return f"{text}@{(mode.refresh_mhz + 500) // 1000}" if mode.refresh_mhz else text
    return mode


def check_output_mode(mode: OutputMode, offered: Iterable[Mode], *, output: str) -> Mode | None:
    """The offered mode a `WxH[@Hz]` value selects; raises when the monitor offers none.

    Keywords and verbatim modes select nothing here (None): weston resolves them itself. A mode
    offered with no refresh (sysfs `modes` has none) matches any rate asked at its size.
    """
    if not isinstance(mode, Mode):
        return None
    offered = tuple(offered)
    found = find_mode(mode, offered)
    if found is None:
        found = next((m for m in offered if m.refresh_mhz == 0 and _same_size(m, mode)), None)
    if found is None:
        listed = ", ".join(str(m) for m in offered[:12]) + (" ..." if len(offered) > 12 else "")
        raise WestonIniError(
            f"output {output} does not offer this mode (offered: {listed or 'none'})",
            section="output",
            key="mode",
            value=format_output_mode(mode),
        )
    return found


def _same_size(a: Mode, b: Mode) -> bool:
    return (a.width, a.height, a.interlaced) == (b.width, b.height, b.interlaced)


def _check_weston_can_select(mode: Mode) -> None:
    if mode.interlaced:
        raise WestonIniError(
            "weston cannot choose an interlaced mode by size; give a full modeline",
            section="output",
            key="mode",
            value=str(mode),
        )


# --- typed sections -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """The `[core]` keys this project sets; None (or no modules) leaves a key out."""

    backend: str | None = None
    shell: str | None = None
    modules: tuple[str, ...] = ()
    idle_time: int | None = None
    require_outputs: RequireOutputs | None = None
    require_input: bool | None = None

    def __post_init__(self) -> None:
        for key, value in (("backend", self.backend), ("shell", self.shell)):
            if value is not None:
                _check_word(value, section="core", key=key)
        for module in self.modules:
            _check_word(module, section="core", key="modules")
            if "," in module:
                raise WestonIniError(
                    "a module name cannot hold a comma", section="core", key="modules", value=module
                )
        if self.idle_time is not None and (
            isinstance(self.idle_time, bool)
            or not isinstance(self.idle_time, int)
            or self.idle_time < 0
        ):
            raise WestonIniError(
                "idle-time is whole seconds, 0 or more",
                section="core",
                key="idle-time",
                value=str(self.idle_time),
            )
        if self.require_outputs is not None and self.require_outputs not in REQUIRE_OUTPUTS:
            raise WestonIniError(
                f"require-outputs is one of {', '.join(REQUIRE_OUTPUTS)}",
                section="core",
                key="require-outputs",
                value=str(self.require_outputs),
            )

    def entries(self) -> Iterator[tuple[str, str | None]]:
        yield "backend", self.backend
        yield "shell", self.shell
        yield "modules", ",".join(self.modules) or None
        yield "idle-time", None if self.idle_time is None else str(self.idle_time)
        yield "require-outputs", self.require_outputs
        yield "require-input", None if self.require_input is None else _BOOLS[self.require_input]


@dataclass(frozen=True, slots=True)
class OutputConfig:
    """One `[output]` section's keys this project sets; None leaves a key out."""

    name: str
    mode: OutputMode | None = None
    transform: Transform | None = None
    scale: int | None = None

    def __post_init__(self) -> None:
        _check_word(self.name, section="output", key="name")
        if isinstance(self.mode, Mode):
            _check_weston_can_select(self.mode)
        elif isinstance(self.mode, str) and self.mode not in MODE_KEYWORDS:
            raise WestonIniError(
                f"mode keyword is one of {', '.join(MODE_KEYWORDS)}",
                section="output",
                key="mode",
                value=self.mode,
            )
        if self.transform is not None and self.transform not in TRANSFORMS:
            raise WestonIniError(
                f"transform is one of {', '.join(TRANSFORMS)}",
                section="output",
                key="transform",
                value=str(self.transform),
            )
        if self.scale is not None and (
            isinstance(self.scale, bool) or not isinstance(self.scale, int) or self.scale < 1
        ):
            raise WestonIniError(
                "scale is a whole number, 1 or more",
                section="output",
                key="scale",
                value=str(self.scale),
            )

    def entries(self) -> Iterator[tuple[str, str | None]]:
        yield "name", self.name
        yield "mode", None if self.mode is None else format_output_mode(self.mode)
        yield "transform", self.transform
        yield "scale", None if self.scale is None else str(self.scale)


def _check_word(value: str, *, section: str, key: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise WestonIniError(
            "must be a non-empty word without spaces", section=section, key=key, value=value
        )


# --- the file -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    """`key=value`; `raw` is the line as written, so an untouched entry renders unchanged."""

    key: str
    value: str
    raw: str


@dataclass(frozen=True, slots=True)
class Section:
    """A `[name]` header and the lines under it: entries, comments and blank lines."""

    name: str
    lines: tuple[Entry | str, ...] = ()

    def get(self, key: str) -> str | None:
        return next((e.value for e in self.entries() if e.key == key), None)

    def entries(self) -> Iterator[Entry]:
        return (line for line in self.lines if isinstance(line, Entry))

    def with_value(self, key: str, value: str | None) -> Section:
        """Set `key` in place (or after the last entry); None removes it."""
        if value is not None and (value != value.strip(_C_SPACE) or "\n" in value):
            raise WestonIniError(
                "a value cannot hold a newline or start or end with space",
                section=self.name,
                key=key,
                value=value,
            )
        found = next(
            ((i, ln) for i, ln in enumerate(self.lines) if isinstance(ln, Entry) and ln.key == key),
            None,
        )
        lines = list(self.lines)
        if found is not None and value is None:
            del lines[found[0]]
        elif found is not None and value is not None:
            if found[1].value != value:  # an unchanged value keeps its spelling
                lines[found[0]] = Entry(key, value, f"{key}={value}")
        elif value is not None:
            last = max((i for i, ln in enumerate(lines) if isinstance(ln, Entry)), default=-1)
            lines.insert(last + 1, Entry(key, value, f"{key}={value}"))
        return replace(self, lines=tuple(lines))


@dataclass(frozen=True, slots=True)
class WestonIni:
    """A whole weston.ini. Values are immutable: the `with_*` methods return a changed copy."""

    preamble: tuple[str, ...] = ()
    sections: tuple[Section, ...] = ()
    final_newline: bool = True

    @classmethod
    def parse(cls, text: str) -> WestonIni:
        raw_lines = text.split("\n")
        final_newline = raw_lines[-1] == ""
        if final_newline:
            raw_lines.pop()
        preamble: list[str] = []
        sections: list[tuple[str, list[Entry | str]]] = []
        for number, line in enumerate(raw_lines, start=1):
            parsed = _parse_line(line, number, sections[-1][0] if sections else None)
            if isinstance(parsed, Section):
                if number == len(raw_lines) and not final_newline:
                    raise WestonIniError(
                        "weston rejects a section header on the last line without a newline",
                        section=parsed.name,
                        line=number,
                    )
                sections.append((parsed.name, []))
            elif sections:
                sections[-1][1].append(parsed)
            elif isinstance(parsed, str):  # an entry before any section has raised already
                preamble.append(parsed)
        ini = cls(
            preamble=tuple(preamble),
            sections=tuple(Section(name, tuple(lines)) for name, lines in sections),
            final_newline=final_newline,
        )
        ini.check()
        return ini

    def check(self) -> None:
        """Raise WestonIniError for anything weston would ignore or misread."""
        for section in self.sections:
            seen: set[str] = set()
            for entry in section.entries():
                if entry.key in seen:
                    raise WestonIniError(
                        "the key appears twice; weston would use only the first",
                        section=section.name,
                        key=entry.key,
                        value=entry.value,
                    )
                seen.add(entry.key)
        if len(self._named("core")) > 1:
            raise WestonIniError(
                "two [core] sections; weston would read only the first", section="core"
            )
        _ = self.core  # building the typed view checks every [core] value
        names = [o.name for o in self.outputs]
        for name in names:
            if names.count(name) > 1:
                raise WestonIniError(
                    "two [output] sections name one output; weston would read only the first",
                    section="output",
                    key="name",
                    value=name,
                )

    def render(self) -> str:
        lines: list[str] = list(self.preamble)
        for section in self.sections:
            lines.append(f"[{section.name}]")
            lines.extend(ln.raw if isinstance(ln, Entry) else ln for ln in section.lines)
        text = "\n".join(lines)
        return text + "\n" if lines and self.final_newline else text

    @property
    def core(self) -> CoreConfig:
        found = self._named("core")
        if not found:
            return CoreConfig()
        section = found[0]
        modules = section.get("modules")
        return CoreConfig(
            backend=section.get("backend"),
            shell=section.get("shell"),
            modules=tuple(m for m in modules.split(",") if m) if modules else (),
            idle_time=_int_value(section, "idle-time", minimum=0),
            require_outputs=_choice(section, "require-outputs", REQUIRE_OUTPUTS),
            require_input=_bool_value(section, "require-input"),
        )

    @property
    def outputs(self) -> tuple[OutputConfig, ...]:
        return tuple(_output_config(s) for s in self._named("output"))

    def output(self, name: str) -> OutputConfig | None:
        return next((o for o in self.outputs if o.name == name), None)

    def with_core(self, core: CoreConfig) -> WestonIni:
        """Set the `[core]` keys `core` names (removing those it leaves None); others stay."""
        index = next((i for i, s in enumerate(self.sections) if s.name == "core"), None)
        section = self.sections[index] if index is not None else Section("core")
        for key, value in core.entries():
            section = section.with_value(key, value)
        if index is not None:
            return self._with_section(index, section)
        # A new [core] goes first, where a person looks for it.
        first = _spaced(section) if self.sections else section
        return replace(self, sections=(first, *self.sections), final_newline=True)

    def with_output(self, output: OutputConfig) -> WestonIni:
        """Set the `[output]` section named `output.name`, appending one if there is none."""
        index = next(
            (
                i
                for i, s in enumerate(self.sections)
                if s.name == "output" and s.get("name") == output.name
            ),
            None,
        )
        section = self.sections[index] if index is not None else Section("output")
        for key, value in output.entries():
            section = section.with_value(key, value)
        if index is not None:
            return self._with_section(index, section)
        sections = list(self.sections)
        if sections:
            sections[-1] = _spaced(sections[-1])
        elif self.preamble and self.preamble[-1] != "":
            return replace(
                self, preamble=(*self.preamble, ""), sections=(section,), final_newline=True
            )
        return replace(self, sections=(*sections, section), final_newline=True)

    def without_output(self, name: str) -> WestonIni:
        """Drop the `[output]` section named `name`, and the comments and blank lines in it."""
        kept = tuple(s for s in self.sections if not (s.name == "output" and s.get("name") == name))
        return replace(self, sections=kept)

    def _named(self, name: str) -> tuple[Section, ...]:
        return tuple(s for s in self.sections if s.name == name)

    def _with_section(self, index: int, section: Section) -> WestonIni:
        sections = list(self.sections)
        sections[index] = section
        return replace(self, sections=tuple(sections))


def _spaced(section: Section) -> Section:
    """`section` ending in a blank line, so the next header stands apart."""
    if section.lines and section.lines[-1] == "":
        return section
    return replace(section, lines=(*section.lines, ""))


def _parse_line(line: str, number: int, section: str | None) -> Section | Entry | str:
    hint = " (weston reads LF line ends only: CRLF breaks it)" if "\r" in line else ""
    if line == "" or line.startswith("#"):
        return line
    if line.startswith("["):
        name = line[1:-1]
        if not line.endswith("]") or "]" in name:
            raise WestonIniError(f"malformed section header {line!r}{hint}", line=number)
        if not name or any(c.isspace() for c in name):
            raise WestonIniError(
                f"section name {name!r} must be a word without spaces", line=number
            )
        return Section(name)
    key, eq, value = line.partition("=")
    if not eq or not key or section is None:
        reason = "a key=value line before any [section]" if eq and key else "malformed line"
        raise WestonIniError(f"{reason}: {line!r}{hint}", section=section, line=number)
    if any(c.isspace() for c in key):
        raise WestonIniError(
            "a key with spaces never matches anything weston looks up",
            section=section,
            key=key,
            value=value,
            line=number,
        )
    return Entry(key, value.strip(_C_SPACE), line)


def _output_config(section: Section) -> OutputConfig:
    name = section.get("name")
    if name is None:
        raise WestonIniError(
            "an [output] section without name= applies to no output", section="output"
        )
    mode = section.get("mode")
    return OutputConfig(
        name=name,
        mode=None if mode is None else parse_output_mode(mode, section=f"output {name}"),
        transform=_choice(section, "transform", TRANSFORMS),
        scale=_int_value(section, "scale", minimum=1),
    )


def _int_value(section: Section, key: str, *, minimum: int) -> int | None:
    value = section.get(key)
    if value is None:
        return None
    if not value.isascii() or not value.isdecimal() or int(value) < minimum:
        raise WestonIniError(
            f"must be a whole number, {minimum} or more", section=section.name, key=key, value=value
        )
    return int(value)


_BOOLS = {True: "true", False: "false"}


def _bool_value(section: Section, key: str) -> bool | None:
    value = _choice(section, key, ("true", "false"))
    return None if value is None else value == "true"


def _choice(section: Section, key: str, choices: tuple[_Choice, ...]) -> _Choice | None:
    value = section.get(key)
    if value is None:
        return None
    for choice in choices:
        if value == choice:
            return choice
    raise WestonIniError(
        f"must be one of {', '.join(choices)}", section=section.name, key=key, value=value
    )


# --- restart orders -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RestartOrder:
    """An order to restart the weston whose pid is `pid`, and why."""

    pid: int
    reason: str
    ordered_at: datetime

    def __post_init__(self) -> None:
        if isinstance(self.pid, bool) or not isinstance(self.pid, int) or self.pid < 1:
            raise RestartOrderError(f"restart order pid {self.pid!r} is not a process id")
        if not self.reason.strip():
            raise RestartOrderError(f"restart order for pid {self.pid} has an empty reason")
        if self.ordered_at.tzinfo is None:
            raise RestartOrderError(f"restart order for pid {self.pid}: ordered_at has no zone")

    def to_json(self) -> str:
        return (
            json.dumps(
                {
                    "pid": self.pid,
                    "reason": self.reason,
                    "ordered_at": self.ordered_at.isoformat(timespec="milliseconds"),
                }
            )
            + "\n"
        )


def order_restart(
    pid: int, *, reason: str, directory: Path = RESTARTS_DIR, now: datetime | None = None
) -> RestartOrder:
    """Write the order to restart `pid`; the caller ends that process after this returns."""
    order = RestartOrder(pid=pid, reason=reason, ordered_at=now or datetime.now(UTC))
    directory.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(directory / str(pid), order.to_json(), mode=0o644)
    log.info("ordered restart of weston pid %s: %s", pid, reason)
    return order


def read_restart_order(pid: int, *, directory: Path = RESTARTS_DIR) -> RestartOrder | None:
    """The order naming `pid`, or None when there is none or it cannot be read."""
    return _load_order(directory / str(pid))


def list_restart_orders(*, directory: Path = RESTARTS_DIR) -> tuple[RestartOrder, ...]:
    """Every readable order, by pid; other files (temporaries, strays) are skipped."""
    try:
        paths = sorted(directory.iterdir())
    except FileNotFoundError:
        return ()
    orders = []
    for path in paths:
        if path.name.startswith("."):  # fsutil's temporaries
            continue
        if not path.name.isdecimal():
            log.warning("ignoring %s: restart orders are named by pid", path)
            continue
        order = _load_order(path)
        if order is not None:
            orders.append(order)
    return tuple(sorted(orders, key=lambda o: o.pid))


def consume_restart_order(pid: int, *, directory: Path = RESTARTS_DIR) -> RestartOrder | None:
    """Take the order naming `pid` (its process has exited): return it and delete the file.

    An unreadable file naming that pid is deleted too: it can only mislead a later reader.
    """
    path = directory / str(pid)
    order = _load_order(path)
    try:
        removed = fsutil.remove(path)
    except OSError as err:
        log.warning("cannot remove restart order %s: %s", path, err)
        return order
    if removed and order is not None:
        log.info("consumed restart order for pid %s (%s)", pid, order.reason)
    return order


def _load_order(path: Path) -> RestartOrder | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        log.warning("ignoring unreadable restart order %s: %s", path, err)
        return None
    try:
        return _parse_order(text, path.name)
    except (ValueError, TypeError, KeyError, RestartOrderError) as err:
        log.warning("ignoring malformed restart order %s: %s", path, err)
        return None


def _parse_order(text: str, name: str) -> RestartOrder:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    pid, reason, at = data["pid"], data["reason"], data["ordered_at"]
    if not isinstance(pid, int) or str(pid) != name:
        raise ValueError(f"pid {pid!r} does not match the file name {name!r}")
    if not isinstance(reason, str) or not isinstance(at, str):
        raise TypeError("reason and ordered_at must be strings")
    return RestartOrder(pid=pid, reason=reason, ordered_at=datetime.fromisoformat(at))
