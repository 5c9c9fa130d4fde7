"""Client for the layout module's two sockets: control (per-claim sockets) and capture (frames).

The module (`westonctl/layout/layout.c`, weston's shell) speaks a line protocol on both; its
header comment is the specification. Control: greeting `LAYOUT 1`, then `CREATE <claim>
<output> <socket-path>`, `REMOVE <claim>` and `LIST`, each answered by `OK ...` or
`ERR <code> <text>`; `CONFIGURE <output> [mode=..] [transform=..] [scale=..]
[modeset=1 | power=off]` (one output's mode, transform and scale changed live, or the output
powered off), `OUTPUTS` and `PROBE` (the DRM master's re-detection of the card's connectors),
answered by `OK ...` or `ERR <code> <field> <text>`, which `configure` and `probe` raise as
the `LayoutConfigureError` subclass of its code. Capture: greeting `LAYOUT-CAPTURE 1`, then
`FRAME <output> [<max-width>x<max-height>] [I420]` (the module box-filters the frame down by
the smallest integer factor that fits it in the bound; with `I420` it sends the 4:2:0 planar
frame clips are encoded from), answered by
`FRAME <width> <height> <stride> <format> <yflip> <nbytes>` and the pixels, or by `ERR`.

Arguments are checked here against the module's own rules before anything is sent, so a bad
claim uid, output name or path is a `LayoutUsageError` naming the field. Every call has a
deadline (the client's `timeout`, per call); the socket never blocks past it.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

# weston.ini's names for a transform, which the module speaks too (re-exported).
from libdisplay.compositor.weston import TRANSFORMS as TRANSFORMS  # noqa: PLC0414

CONTROL_GREETING: Final = "LAYOUT 1"
CAPTURE_GREETING: Final = "LAYOUT-CAPTURE 1"
LINE_MAX: Final = 1023
# Replies may be longer than requests: an output's mode list (OUTPUTS, bad-mode's offered).
REPLY_LINE_MAX: Final = 16384
MODE_SIDE_MAX: Final = 16384
SCALE_MAX: Final = 8
CLAIM_MAX: Final = 128
OUTPUT_MAX: Final = 63
SUN_PATH_MAX: Final = 107
# Larger than any mode weston can drive; a header beyond it is corrupt, not a big monitor.
FRAME_SIDE_MAX: Final = 16384
# The sides a frame request's bound may have, as the module checks them (a smaller bound
# would need a factor whose block sums could overflow there).
BOUND_MIN: Final = 16
BOUND_MAX: Final = 16384
DEFAULT_TIMEOUT_S: Final = 5.0

# Packed 32-bit pixels in little-endian DRM fourcc order, or I420: planes of Y (width x
# height), U and V ((width / 2) x (height / 2) each), BT.601 limited range, even sides.
PixelFormat = Literal["XRGB8888", "ARGB8888", "XBGR8888", "ABGR8888", "I420"]
_PIXEL_FORMATS: Final[dict[str, PixelFormat]] = {
    "XRGB8888": "XRGB8888",
    "ARGB8888": "ARGB8888",
    "XBGR8888": "XBGR8888",
    "ABGR8888": "ABGR8888",
    "I420": "I420",
}
_CLAIM_RE: Final = re.compile(r"[A-Za-z0-9._-]{1,%d}" % CLAIM_MAX)
_PRINTABLE_RE: Final = re.compile(r"[\x21-\x7e]+")
_RECV_SIZE: Final = 65536
_MODE_RE: Final = re.compile(
    r"([1-9][0-9]{0,4})x([1-9][0-9]{0,4})(?:@([1-9][0-9]{0,3}(?:\.[0-9]{1,3})?))?"
)
# A mode as the module reports it: refresh in mHz (OUTPUTS) or in Hz with decimals (offered).
_REPORTED_MODE_RE: Final = re.compile(r"([0-9]+)x([0-9]+)@([0-9]+)(?:\.([0-9]{3}))?")


class LayoutError(Exception):
    """Base of every error this module raises."""


class LayoutUsageError(LayoutError, ValueError):
    """An argument the module would refuse; the message names the field and the value."""


class LayoutConnectError(LayoutError):
    """connect() to the socket failed; `errno` says why (ENOENT, ECONNREFUSED, EACCES, ...)."""

    def __init__(self, path: Path, err: int) -> None:
        super().__init__(
            f"cannot connect to {path}: {errno.errorcode.get(err, err)} ({os.strerror(err)})"
        )
        self.path = path
        self.errno = err


class LayoutTimeoutError(LayoutError):
    """The module did not answer before the deadline."""


class LayoutClosedError(LayoutError):
    """The module closed the connection."""


class LayoutProtocolError(LayoutError):
    """The module sent something this client does not understand (greeting, reply, header)."""


class LayoutReplyError(LayoutError):
    """The module answered `ERR <code> <text>`."""

    def __init__(self, code: str, text: str) -> None:
        super().__init__(f"layout module: {code}: {text}")
        self.code = code
        self.text = text


class LayoutConfigureError(LayoutReplyError):
    """CONFIGURE or OUTPUTS answered `ERR <code> <field> <text>`; `field` names what was
    refused (request, output, mode, transform, scale, modeset, power, probe). Nothing was
    left changed."""

    def __init__(self, code: str, field: str, text: str) -> None:
        super().__init__(code, f"{field}: {text}")
        self.field = field
        self.detail = text


class LayoutBadRequest(LayoutConfigureError):  # noqa: N818 (the contract's names)
    """`bad-request`: the request itself is malformed."""


class LayoutOutputNotFound(LayoutConfigureError):  # noqa: N818 (the contract's names)
    """`not-found`: no enabled output of that name."""


class LayoutModeNotOffered(LayoutConfigureError):  # noqa: N818 (the contract's names)
    """`bad-mode`: malformed, or not in the output's mode list; `offered` lists what is."""

    def __init__(self, code: str, field: str, text: str) -> None:
        super().__init__(code, field, text)
        _, found, offered = text.rpartition("offered: ")
        self.offered: tuple[OutputMode, ...] = (
            tuple(parse_mode_list(offered, hz_decimals=True)) if found else ()
        )


class LayoutBadTransform(LayoutConfigureError):  # noqa: N818 (the contract's names)
    """`bad-transform`: not one of TRANSFORMS."""


class LayoutBadScale(LayoutConfigureError):  # noqa: N818 (the contract's names)
    """`bad-scale`: not an integer from 1 to SCALE_MAX."""


class LayoutUnsupported(LayoutConfigureError):  # noqa: N818 (the contract's names)
    """`unsupported`: the backend cannot apply `field` live (e.g. no mode switching): the
    caller's fallback is a compositor restart."""


class LayoutConfigureFailed(LayoutConfigureError):  # noqa: N818 (the contract's names)
    """`failed`: applying failed and the output was put back as it was."""


_CONFIGURE_ERRORS: Final[dict[str, type[LayoutConfigureError]]] = {
    "bad-request": LayoutBadRequest,
    "not-found": LayoutOutputNotFound,
    "bad-mode": LayoutModeNotOffered,
    "bad-transform": LayoutBadTransform,
    "bad-scale": LayoutBadScale,
    "unsupported": LayoutUnsupported,
    "failed": LayoutConfigureFailed,
}


@dataclass(frozen=True, slots=True)
class OutputMode:
    """One mode of an output's list: size in pixels and refresh in mHz."""

    width: int
    height: int
    refresh_mhz: int

    def __str__(self) -> str:
        hz = f"{self.refresh_mhz / 1000:.3f}".rstrip("0").rstrip(".")
        return f"{self.width}x{self.height}@{hz}"


@dataclass(frozen=True, slots=True)
class OutputState:
    """An output as weston reports it: its mode (pixels, mHz), transform, integer scale,
    position and size in global coordinates (`logical_*`: after transform and scale), and
    its mode list (empty in a CONFIGURE answer, which reports the state only)."""

    name: str
    width: int
    height: int
    refresh_mhz: int
    transform: str
    scale: int
    x: int
    y: int
    logical_width: int
    logical_height: int
    modes: tuple[OutputMode, ...] = ()
    powered: bool = True


@dataclass(frozen=True, slots=True)
class ConnectorProbe:
    """One connector as PROBE found it after the kernel re-detected it: weston's name for it
    (`Virtual-2`), `connected`, `disconnected` or `unknown`, and the first 16 hex characters of
    its EDID's SHA-256 ("" without an EDID), as the operator digests sysfs's `edid`."""

    connector: str
    status: str
    edid_digest: str

    @property
    def connected(self) -> bool:
        return self.status == "connected"


@dataclass(frozen=True, slots=True)
class ClaimSocket:
    """One per-claim socket the module listens on, and how many clients it has now."""

    claim_uid: str
    output: str
    path: Path
    clients: int


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """What precedes a frame's pixels: size, layout in memory, and whether rows are flipped."""

    width: int
    height: int
    stride: int
    pixel_format: PixelFormat
    y_flip: bool
    size: int


@dataclass(frozen=True, slots=True)
class Frame:
    """One captured output image, in the renderer's format (little-endian DRM fourcc order)
    or I420."""

    header: FrameHeader
    pixels: bytes | bytearray

    def rgb(self, x: int, y: int) -> tuple[int, int, int]:
        """The colour at (x, y), with y counted from the top whatever the renderer's y-flip;
        a packed frame's only (I420 holds no RGB to give back exactly)."""
        header = self.header
        if header.pixel_format == "I420":
            raise LayoutUsageError("an I420 frame has no RGB pixels to read")
        if not (0 <= x < header.width and 0 <= y < header.height):
            raise LayoutUsageError(
                f"pixel ({x}, {y}) is outside the {header.width}x{header.height} frame"
            )
        row = header.height - 1 - y if header.y_flip else y
        offset = row * header.stride + x * 4
        first, second, third = self.pixels[offset : offset + 3]
        if header.pixel_format in ("XRGB8888", "ARGB8888"):
            return third, second, first
        return first, second, third


# ---------- encoding and decoding (no I/O) ----------


def _check_claim(claim_uid: str) -> None:
    if not _CLAIM_RE.fullmatch(claim_uid):
        raise LayoutUsageError(
            f"claim_uid must be 1-{CLAIM_MAX} of [A-Za-z0-9._-], got {claim_uid!r}"
        )


def _check_output(output: str) -> None:
    if len(output) > OUTPUT_MAX or not _PRINTABLE_RE.fullmatch(output):
        raise LayoutUsageError(
            f"output must be 1-{OUTPUT_MAX} printable ASCII characters without spaces, "
            f"got {output!r}"
        )


def _check_path(path: Path) -> None:
    text = os.fspath(path)
    if (
        not path.is_absolute()
        or len(text.encode()) > SUN_PATH_MAX
        or not _PRINTABLE_RE.fullmatch(text)
    ):
        raise LayoutUsageError(
            f"path must be absolute, printable ASCII without spaces and at most "
            f"{SUN_PATH_MAX} bytes, got {text!r}"
        )


def encode_create(path: Path, output: str, claim_uid: str) -> bytes:
    _check_path(path)
    _check_output(output)
    _check_claim(claim_uid)
    return f"CREATE {claim_uid} {output} {os.fspath(path)}\n".encode()


def encode_remove(claim_uid: str) -> bytes:
    _check_claim(claim_uid)
    return f"REMOVE {claim_uid}\n".encode()


def encode_list() -> bytes:
    return b"LIST\n"


def _check_configure(
    mode: str | None, transform: str | None, scale: int | None, modeset: bool,
    power_off: bool = False,
) -> None:
    if mode is not None:
        found = _MODE_RE.fullmatch(mode) if isinstance(mode, str) else None
        if found is None or not all(1 <= int(side) <= MODE_SIDE_MAX for side in found.group(1, 2)):
            raise LayoutUsageError(
                f"mode must be <width>x<height>[@<Hz>] (sides 1-{MODE_SIDE_MAX}, Hz with at "
                f"most 3 decimals), got {mode!r}"
            )
    if transform is not None and transform not in TRANSFORMS:
        raise LayoutUsageError(
            f"transform must be one of {' '.join(TRANSFORMS)}, got {transform!r}"
        )
    if scale is not None and (
        not isinstance(scale, int) or isinstance(scale, bool) or not 1 <= scale <= SCALE_MAX
    ):
        raise LayoutUsageError(f"scale must be an int from 1 to {SCALE_MAX}, got {scale!r}")
    if not isinstance(modeset, bool):
        raise LayoutUsageError(f"modeset must be a bool, got {modeset!r}")
    if not isinstance(power_off, bool):
        raise LayoutUsageError(f"power_off must be a bool, got {power_off!r}")
    if modeset and power_off:
        raise LayoutUsageError("modeset powers the output on, power_off off: not both")


def encode_configure(
    output: str,
    *,
    mode: str | None = None,
    transform: str | None = None,
    scale: int | None = None,
    modeset: bool = False,
    power_off: bool = False,
) -> bytes:
    _check_output(output)
    _check_configure(mode, transform, scale, modeset, power_off)
    words = ["CONFIGURE", output]
    if mode is not None:
        words.append(f"mode={mode}")
    if transform is not None:
        words.append(f"transform={transform}")
    if scale is not None:
        words.append(f"scale={scale}")
    if modeset:
        words.append("modeset=1")
    if power_off:
        words.append("power=off")
    return (" ".join(words) + "\n").encode()


def encode_outputs() -> bytes:
    return b"OUTPUTS\n"


def encode_probe() -> bytes:
    return b"PROBE\n"


_PROBE_STATUSES: Final = ("connected", "disconnected", "unknown")
_DIGEST_RE: Final = re.compile(r"-|[0-9a-f]{16}")


def parse_probe_line(line: str) -> ConnectorProbe:
    """`<connector> status=<s> edid=<16 hex digits or ->`."""
    name, _, rest = line.partition(" ")
    fields = dict(word.partition("=")[::2] for word in rest.split(" ") if word)
    status, digest = fields.get("status", ""), fields.get("edid", "")
    if not _PRINTABLE_RE.fullmatch(name) or status not in _PROBE_STATUSES or \
            not _DIGEST_RE.fullmatch(digest):
        raise LayoutProtocolError(f"bad probe line {line[:200]!r}")
    return ConnectorProbe(name, status, "" if digest == "-" else digest)


def parse_mode_list(text: str, *, hz_decimals: bool = False) -> list[OutputMode]:
    """`WxH@mHz,...` (OUTPUTS), or `WxH@Hz.ddd,...` (bad-mode's offered) with `hz_decimals`."""
    modes = []
    for item in filter(None, text.split(",")):
        found = _REPORTED_MODE_RE.fullmatch(item)
        if found is None or (found.group(4) is not None) != hz_decimals:
            raise LayoutProtocolError(f"bad mode {item!r} in {text[:200]!r}")
        refresh = int(found.group(3))
        if hz_decimals:
            refresh = refresh * 1000 + int(found.group(4))
        modes.append(OutputMode(int(found.group(1)), int(found.group(2)), refresh))
    return modes


def parse_output_state(line: str) -> OutputState:
    """`<output> mode=WxH@mHz transform=<t> scale=<n> x= y= width= height= [modes=...]`."""
    name, _, rest = line.partition(" ")
    fields = dict(word.partition("=")[::2] for word in rest.split(" ") if word)
    try:
        mode = _REPORTED_MODE_RE.fullmatch(fields["mode"])
        if mode is None or mode.group(4) is not None or fields["transform"] not in TRANSFORMS:
            raise ValueError(fields["mode"])
        return OutputState(
            name=name,
            width=int(mode.group(1)),
            height=int(mode.group(2)),
            refresh_mhz=int(mode.group(3)),
            transform=fields["transform"],
            scale=int(fields["scale"]),
            x=int(fields["x"]),
            y=int(fields["y"]),
            logical_width=int(fields["width"]),
            logical_height=int(fields["height"]),
            modes=tuple(parse_mode_list(fields.get("modes", ""))),
            powered=fields.get("power", "on") != "off",
        )
    except (KeyError, ValueError) as exc:
        raise LayoutProtocolError(f"bad output line {line[:200]!r}") from exc


def parse_configure_error(line: str) -> LayoutConfigureError | None:
    """The error an `ERR <code> <field> <text>` line carries, or None for any other line."""
    if not line.startswith("ERR "):
        return None
    code, _, rest = line[4:].partition(" ")
    field, _, text = rest.partition(" ")
    return _CONFIGURE_ERRORS.get(code, LayoutConfigureError)(code, field, text)


def _check_bound(max_size: tuple[int, int]) -> None:
    if len(max_size) != 2 or not all(
        isinstance(side, int) and not isinstance(side, bool) and BOUND_MIN <= side <= BOUND_MAX
        for side in max_size
    ):
        raise LayoutUsageError(
            f"max_size must be (width, height), each an int from {BOUND_MIN} to {BOUND_MAX}, "
            f"got {max_size!r}"
        )


def encode_frame(output: str, max_size: tuple[int, int] | None = None, *,
                 i420: bool = False) -> bytes:
    _check_output(output)
    words = ["FRAME", output]
    if max_size is not None:
        _check_bound(max_size)
        words.append(f"{max_size[0]}x{max_size[1]}")
    if i420:
        words.append("I420")
    return (" ".join(words) + "\n").encode()


def parse_error(line: str) -> LayoutReplyError | None:
    """The error an `ERR <code> <text>` line carries, or None for any other line."""
    if line != "ERR" and not line.startswith("ERR "):
        return None
    _, _, rest = line.partition(" ")
    code, _, text = rest.partition(" ")
    return LayoutReplyError(code or "unknown", text)


def parse_claim_line(line: str) -> ClaimSocket:
    """One `<claim> <output> <socket-path> <clients>` line of a LIST reply."""
    words = line.split(" ")
    if len(words) != 4 or not words[3].isdigit():
        raise LayoutProtocolError(f"bad LIST line {line!r}")
    return ClaimSocket(
        claim_uid=words[0], output=words[1], path=Path(words[2]), clients=int(words[3])
    )


def _consistent(width: int, height: int, stride: int, pixel_format: PixelFormat,
                size: int) -> bool:
    if pixel_format == "I420":
        return (width % 2 == height % 2 == 0 and stride == width
                and size == width * height * 3 // 2)
    return stride >= width * 4 and size == stride * height


def parse_frame_header(line: str) -> FrameHeader:
    """`FRAME <width> <height> <stride> <format> <yflip> <nbytes>`, checked for consistency."""
    words = line.split(" ")
    if len(words) != 7 or words[0] != "FRAME":
        raise LayoutProtocolError(f"bad frame header {line!r}")
    numbers = (words[1], words[2], words[3], words[5], words[6])
    if not all(word.isdigit() for word in numbers):
        raise LayoutProtocolError(f"bad number in frame header {line!r}")
    width, height, stride, size = int(words[1]), int(words[2]), int(words[3]), int(words[6])
    pixel_format, y_flip = _PIXEL_FORMATS.get(words[4]), words[5]
    if pixel_format is None:
        raise LayoutProtocolError(f"unknown pixel format {words[4]!r} in {line!r}")
    if y_flip not in ("0", "1"):
        raise LayoutProtocolError(f"y-flip must be 0 or 1 in {line!r}")
    if not (0 < width <= FRAME_SIDE_MAX and 0 < height <= FRAME_SIDE_MAX):
        raise LayoutProtocolError(f"frame size {width}x{height} out of range in {line!r}")
    if not _consistent(width, height, stride, pixel_format, size):
        raise LayoutProtocolError(f"stride or byte count inconsistent in {line!r}")
    return FrameHeader(
        width=width,
        height=height,
        stride=stride,
        pixel_format=pixel_format,
        y_flip=y_flip == "1",
        size=size,
    )


# ---------- connections ----------


class _Channel:
    """A Unix stream socket with a read buffer; every read and write is bounded by a deadline."""

    def __init__(self, path: Path, *, greeting: str, timeout: float) -> None:
        if not timeout > 0:
            raise LayoutUsageError(f"timeout must be a positive number of seconds, got {timeout}")
        self.path = path
        self.timeout = timeout
        self._buffer = bytearray()
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        try:
            self._sock.settimeout(timeout)
            try:
                self._sock.connect(os.fspath(path))
            except TimeoutError as exc:
                raise LayoutTimeoutError(f"connect to {path} took over {timeout:g} s") from exc
            except OSError as exc:
                # Python refuses a path over AF_UNIX's 108 bytes itself, with no errno.
                raise LayoutConnectError(path, exc.errno or errno.ENAMETOOLONG) from exc
            line = self.read_line(self.deadline())
            if line != greeting:
                raise LayoutProtocolError(f"{path}: expected greeting {greeting!r}, got {line!r}")
        except BaseException:
            self._sock.close()
            raise

    def deadline(self) -> float:
        return time.monotonic() + self.timeout

    def close(self) -> None:
        self._sock.close()

    def _wait(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise LayoutTimeoutError(f"{self.path}: no answer within {self.timeout:g} s")
        self._sock.settimeout(remaining)

    def send(self, data: bytes, deadline: float) -> None:
        self._wait(deadline)
        try:
            self._sock.sendall(data)
        except TimeoutError as exc:
            raise LayoutTimeoutError(f"{self.path}: send took over {self.timeout:g} s") from exc
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise LayoutClosedError(f"{self.path}: the module closed the connection") from exc

    def _fill(self, deadline: float) -> None:
        self._wait(deadline)
        try:
            chunk = self._sock.recv(_RECV_SIZE)
        except TimeoutError as exc:
            raise LayoutTimeoutError(f"{self.path}: no answer within {self.timeout:g} s") from exc
        except ConnectionResetError as exc:
            raise LayoutClosedError(f"{self.path}: the module reset the connection") from exc
        if not chunk:
            raise LayoutClosedError(f"{self.path}: the module closed the connection")
        self._buffer += chunk

    def read_line(self, deadline: float, limit: int = LINE_MAX) -> str:
        while (end := self._buffer.find(b"\n")) < 0:
            if len(self._buffer) > limit:
                raise LayoutProtocolError(f"{self.path}: reply line longer than {limit} bytes")
            self._fill(deadline)
        raw = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        try:
            return raw.decode("ascii")
        except UnicodeDecodeError as exc:
            raise LayoutProtocolError(f"{self.path}: reply is not ASCII: {raw[:80]!r}") from exc

    def read_exact(self, size: int, deadline: float) -> bytearray:
        """`size` bytes, in the buffer they were received into: a frame is not copied again."""
        out = bytearray(size)
        view = memoryview(out)
        filled = min(size, len(self._buffer))
        view[:filled] = self._buffer[:filled]
        del self._buffer[:filled]
        while filled < size:
            self._wait(deadline)
            try:
                count = self._sock.recv_into(view[filled:])
            except TimeoutError as exc:
                raise LayoutTimeoutError(
                    f"{self.path}: frame incomplete after {self.timeout:g} s"
                ) from exc
            if count == 0:
                raise LayoutClosedError(f"{self.path}: the module closed the connection mid-frame")
            filled += count
        return out


def _reply(channel: _Channel, deadline: float) -> str:
    """The next reply line; an ERR line becomes its LayoutReplyError."""
    line = channel.read_line(deadline)
    error = parse_error(line)
    if error is not None:
        raise error
    return line


class LayoutControl:
    """A connection to the control socket: create, remove and list per-claim sockets."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = DEFAULT_TIMEOUT_S):
        self._channel = _Channel(Path(path), greeting=CONTROL_GREETING, timeout=timeout)

    def __enter__(self) -> LayoutControl:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def _ok(self, request: bytes) -> str:
        deadline = self._channel.deadline()
        self._channel.send(request, deadline)
        line = _reply(self._channel, deadline)
        if line != "OK" and not line.startswith("OK "):
            raise LayoutProtocolError(f"expected OK, got {line!r}")
        return line

    def create_claim_socket(
        self, path: str | os.PathLike[str], output: str, claim_uid: str
    ) -> None:
        """Make the module listen at `path` (mode 0666) for clients shown on `output`.

        Idempotent for the same (path, output, claim_uid); `LayoutReplyError` with code
        `exists` when the claim has another output or path, or the path is taken.
        """
        self._ok(encode_create(Path(path), output, claim_uid))

    def remove_claim_socket(self, claim_uid: str) -> bool:
        """Disconnect the claim's clients and unlink its socket; False when there was none."""
        try:
            self._ok(encode_remove(claim_uid))
        except LayoutReplyError as exc:
            if exc.code == "not-found":
                return False
            raise
        return True

    def list_claim_sockets(self) -> tuple[ClaimSocket, ...]:
        deadline = self._channel.deadline()
        self._channel.send(encode_list(), deadline)
        line = _reply(self._channel, deadline)
        count = line.removeprefix("OK ")
        if not line.startswith("OK ") or not count.isdigit():
            raise LayoutProtocolError(f"expected OK <count>, got {line!r}")
        return tuple(parse_claim_line(self._channel.read_line(deadline)) for _ in range(int(count)))

    def _configure_reply(self, request: bytes) -> tuple[str, float]:
        deadline = self._channel.deadline()
        self._channel.send(request, deadline)
        line = self._channel.read_line(deadline, REPLY_LINE_MAX)
        error = parse_configure_error(line)
        if error is not None:
            raise error
        if not line.startswith("OK "):
            raise LayoutProtocolError(f"expected OK ..., got {line!r}")
        return line[3:], deadline

    def configure(
        self,
        output: str,
        *,
        mode: str | None = None,
        transform: str | None = None,
        scale: int | None = None,
        modeset: bool = False,
        power_off: bool = False,
    ) -> OutputState:
        """Change `output` live: `mode` "WxH" or "WxH@Hz" (from its mode list), `transform`
        one of TRANSFORMS, `scale` 1..8, `modeset` a full modeset even when nothing changes
        (it also lights an output powered off), `power_off` the output off (a monitor gone).

        Returns what weston reports afterwards (without the mode list). Refusals raise the
        `LayoutConfigureError` subclass of the module's code, e.g. `LayoutModeNotOffered`
        (with `.offered`) or `LayoutUnsupported` (the backend cannot: restart instead); the
        output is then as it was.
        """
        rest, _ = self._configure_reply(
            encode_configure(output, mode=mode, transform=transform, scale=scale,
                             modeset=modeset, power_off=power_off)
        )
        return parse_output_state(rest)

    def probe(self) -> tuple[ConnectorProbe, ...]:
        """Make the kernel re-detect every connector of weston's card (weston's forced probe
        as DRM master) and say what it found. `LayoutUnsupported` (field `probe`) where
        weston drives no card (x11, headless): nothing can re-detect there."""
        count, deadline = self._configure_reply(encode_probe())
        if not count.isdigit():
            raise LayoutProtocolError(f"expected OK <count>, got {count!r}")
        return tuple(parse_probe_line(self._channel.read_line(deadline, REPLY_LINE_MAX))
                     for _ in range(int(count)))

    def outputs(self) -> list[OutputState]:
        """Every enabled output as weston reports it, with its mode list."""
        count, deadline = self._configure_reply(encode_outputs())
        if not count.isdigit():
            raise LayoutProtocolError(f"expected OK <count>, got {count!r}")
        return [
            parse_output_state(self._channel.read_line(deadline, REPLY_LINE_MAX))
            for _ in range(int(count))
        ]


class LayoutCapture:
    """A connection to the capture socket. `frame` asks for one frame and waits for it;
    `request` and `receive` pipeline (up to 16 outstanding requests, for one output, one
    `max_size` and one format at a time). With `max_size` the module sends the frame shrunk by
    the smallest integer factor f with ceil(width / f) and ceil(height / f) inside it (each
    pixel the mean of an f x f block): 3840x2160 in 1920x1080 comes as 1920x1080, 2560x1440 as
    1280x720; a frame that fits comes as it is. With `i420` it comes as I420 (`PixelFormat`),
    an odd last column or row dropped."""

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = DEFAULT_TIMEOUT_S):
        self._channel = _Channel(Path(path), greeting=CAPTURE_GREETING, timeout=timeout)

    def __enter__(self) -> LayoutCapture:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def request(self, output: str, max_size: tuple[int, int] | None = None, *,
                i420: bool = False) -> None:
        self._channel.send(encode_frame(output, max_size, i420=i420), self._channel.deadline())

    def receive(self) -> Frame:
        deadline = self._channel.deadline()
        header = parse_frame_header(_reply(self._channel, deadline))
        return Frame(header=header, pixels=self._channel.read_exact(header.size, deadline))

    def frame(self, output: str, max_size: tuple[int, int] | None = None, *,
              i420: bool = False) -> Frame:
        self.request(output, max_size, i420=i420)
        return self.receive()
