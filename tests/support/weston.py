"""Real weston 14 for tests: headless with its one output, or the x11 backend on Xvfb for several.

`weston` is the one on PATH: under ./pants, build-support/trixie/bin's dispatcher, which
runs Debian trixie's weston 14 from the trixie root (build-support/trixie-root) in the
process the test spawned, so its pid, signals and exit status are weston's.
`logged_version` reads the version a compositor reported, which tests assert is 14.0.x.

Each compositor gets its own private XDG_RUNTIME_DIR (a fresh 0700 temp dir, short enough for
AF_UNIX paths) and a clean environment, so that weston never picks a backend from an inherited
WAYLAND_DISPLAY or DISPLAY and parallel test files never share a socket. It is ready when its
socket answers a registry + sync round trip (`libdisplay.compositor.wayland.probe`).

The headless backend makes exactly one output, `headless`, and rejects `--output-count`, so
several outputs come from `x11`: weston's x11 backend on an Xvfb whose display number Xvfb
itself picks (`-displayfd`), which is free by construction even with tests running in parallel.
Its outputs are named `X1`, `X2`, ... from the `[output]` sections written for them.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from libdisplay import fsutil
from libdisplay.compositor.wayland import Liveness, probe
from libdisplay.processes import Process, running, unix_socket_accepts

Renderer = Literal["noop", "pixman", "gl"]

SOCKET_NAME = "wl-test"
READY_TIMEOUT_S = 30.0
_PROBE_TIMEOUT_S = 1.0
# Weston 14's headless backend defaults to noop (it draws nothing), so a renderer is
# always named.
_RENDERER_ARGS: dict[Renderer, tuple[str, ...]] = {
    "noop": ("--renderer=noop",),
    "pixman": ("--renderer=pixman",),
    "gl": ("--renderer=gl",),
}
# "weston 14.0.2" as `--version` prints it, or after the timestamp of a log line.
_VERSION_RE = re.compile(r"^(?:\[[\d:.]+\] )?weston (\d+\.\d+\.\d+)$", re.MULTILINE)
_X11_SOCKET_DIR = Path("/tmp/.X11-unix")


class WestonError(Exception):
    """Base of every error this module raises."""


class WestonConfigError(WestonError, ValueError):
    """A size or output list weston cannot be started with; the message names the value."""


@dataclass(frozen=True, slots=True)
class Weston:
    """A running compositor: its process, its runtime dir and the socket clients connect to."""

    process: Process
    runtime_dir: Path
    socket: Path

    def client_env(self) -> dict[str, str]:
        """The variables a Wayland client needs to reach this compositor."""
        return {"XDG_RUNTIME_DIR": os.fspath(self.runtime_dir), "WAYLAND_DISPLAY": self.socket.name}

    def logged_version(self) -> str:
        """The version this compositor wrote at the top of its log, e.g. "14.0.2"."""
        return logged_version(self.process.log_text())


def logged_version(log: str) -> str:
    """The version in a weston log (its last `weston X.Y.Z` line); WestonError when none."""
    found = _VERSION_RE.findall(log)
    if not found:
        raise WestonError(f"no `weston X.Y.Z` line in the log: {log[:500]!r}")
    return str(found[-1])


def installed_version() -> str:
    """What `weston --version` on PATH reports, e.g. "14.0.2"."""
    out = subprocess.run(
        ["weston", "--version"], check=True, capture_output=True, text=True, timeout=30
    ).stdout
    found = _VERSION_RE.search(out)
    if found is None:
        raise WestonError(f"weston --version printed {out!r}")
    return found.group(1)


@dataclass(frozen=True, slots=True)
class Xvfb:
    """A running Xvfb: its process, its display (":N") and its Unix socket."""

    process: Process
    display: str
    socket: Path


def _check_size(field: str, width: int, height: int) -> None:
    if width <= 0 or height <= 0:
        raise WestonConfigError(f"{field} must be positive WIDTHxHEIGHT, got {width}x{height}")


def _answers(socket_path: Path) -> Callable[[Process], bool]:
    return lambda _process: probe(socket_path, timeout=_PROBE_TIMEOUT_S).state is Liveness.ANSWERING


@contextlib.contextmanager
def _weston(
    backend_args: Sequence[str],
    *,
    renderer: Renderer,
    config: str | None,
    extra_env: dict[str, str],
    args: Sequence[str],
    log_dir: Path | None,
    ready_timeout: float,
) -> Iterator[Weston]:
    with tempfile.TemporaryDirectory(prefix="weston-") as tmp:
        runtime_dir = Path(tmp)
        if config is None:
            config_args = ["--no-config"]
        else:
            ini = runtime_dir / "weston.ini"
            fsutil.atomic_write(ini, config)
            config_args = [f"--config={ini}"]
        argv = [
            "weston",
            *backend_args,
            f"--socket={SOCKET_NAME}",
            *config_args,
            *_RENDERER_ARGS[renderer],
            *args,
        ]
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "XDG_RUNTIME_DIR": tmp,
            **extra_env,
        }
        socket_path = runtime_dir / SOCKET_NAME
        with running(
            argv,
            log_path=(log_dir or runtime_dir) / "weston.log",
            env=env,
            ready=_answers(socket_path),
            ready_timeout=ready_timeout,
            what=f"{socket_path} answers a Wayland round trip",
        ) as process:
            yield Weston(process=process, runtime_dir=runtime_dir, socket=socket_path)


@contextlib.contextmanager
def headless(
    *,
    size: tuple[int, int] | None = None,
    renderer: Renderer = "pixman",
    config: str | None = None,
    args: Sequence[str] = (),
    log_dir: Path | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
) -> Iterator[Weston]:
    """Weston on the headless backend: its one output, `headless`.

    `size` becomes `--width/--height`, which win over a weston.ini `mode=`; None leaves the
    size to the ini or to weston's default 1024x640. `config` is the text of a weston.ini
    (e.g. an `[output] name=headless` section with `mode=`, `scale=`, `transform=`); without
    it weston runs with `--no-config`. The default renderer is pixman, which captures
    need; "noop" is the backend's own no-rendering default.
    """
    backend = ["--backend=headless"]
    if size is not None:
        _check_size("headless output size", *size)
        backend += [f"--width={size[0]}", f"--height={size[1]}"]
    with _weston(
        backend,
        renderer=renderer,
        config=config,
        extra_env={},
        args=args,
        log_dir=log_dir,
        ready_timeout=ready_timeout,
    ) as weston:
        yield weston


def _read_display_number(path: Path) -> int | None:
    """The number Xvfb wrote to its -displayfd once it listens; None until the line is whole."""
    text = path.read_text()
    return int(text) if text.endswith("\n") else None


@contextlib.contextmanager
def xvfb(
    *,
    screen: tuple[int, int] = (1920, 1080),
    log_dir: Path | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
) -> Iterator[Xvfb]:
    """An Xvfb on a display number it picks itself; ready when its Unix socket accepts."""
    _check_size("Xvfb screen", *screen)
    with tempfile.TemporaryDirectory(prefix="xvfb-") as tmp:
        number_file = Path(tmp) / "display"

        def listening(_process: Process) -> bool:
            number = _read_display_number(number_file)
            return number is not None and unix_socket_accepts(_X11_SOCKET_DIR / f"X{number}")

        with number_file.open("wb") as number_out:
            argv = [
                "Xvfb",
                "-displayfd",
                str(number_out.fileno()),
                "-screen",
                "0",
                f"{screen[0]}x{screen[1]}x24",
                "-nolisten",
                "tcp",
                "-noreset",
            ]
            with running(
                argv,
                log_path=(log_dir or Path(tmp)) / "xvfb.log",
                env={"PATH": os.environ.get("PATH", os.defpath)},
                pass_fds=(number_out.fileno(),),
                ready=listening,
                ready_timeout=ready_timeout,
                what="Xvfb reports its display and its socket accepts",
            ) as process:
                number = _read_display_number(number_file)
                assert number is not None  # readiness above saw it
                yield Xvfb(
                    process=process, display=f":{number}", socket=_X11_SOCKET_DIR / f"X{number}"
                )


def x11_outputs_ini(sizes: Sequence[tuple[int, int]]) -> str:
    """weston.ini sections that give the x11 backend's outputs X1..Xn these sizes, in order."""
    sections = [
        f"[output]\nname=X{index}\nmode={width}x{height}\n"
        for index, (width, height) in enumerate(sizes, 1)
    ]
    return "\n".join(sections)


@contextlib.contextmanager
def x11(
    sizes: Sequence[tuple[int, int]],
    *,
    renderer: Renderer = "pixman",
    config: str = "",
    args: Sequence[str] = (),
    log_dir: Path | None = None,
    ready_timeout: float = READY_TIMEOUT_S,
) -> Iterator[Weston]:
    """Weston's x11 backend on a fresh Xvfb with one output per size, named X1..Xn.

    Unlike headless it has a `wl_seat` (pointer, keyboard). `config` is appended to the
    generated `[output]` sections (e.g. a `[core]` or `[shell]` section).
    """
    if not sizes:
        raise WestonConfigError("x11 outputs: need at least one output size, got none")
    for index, (width, height) in enumerate(sizes, 1):
        _check_size(f"x11 output X{index}", width, height)
    with xvfb(log_dir=log_dir, ready_timeout=ready_timeout) as server:
        backend = ["--backend=x11", f"--output-count={len(sizes)}"]
        with _weston(
            backend,
            renderer=renderer,
            config=x11_outputs_ini(sizes) + config,
            extra_env={"DISPLAY": server.display},
            args=args,
            log_dir=log_dir,
            ready_timeout=ready_timeout,
        ) as weston:
            yield weston
