"""The capture server's settings, read once from the environment and checked.

`CAPTURE_ADDR` (`:9201`) is where HTTPS listens. The frames come from the layout module's
capture socket beside weston.ini (`/etc/weston`), whose `[output]` sections name the outputs
this node has. Each output belongs to a Display `<NODE_NAME>.<device>`: the device is the DRA
device name of connector `<CAPTURE_CARD>-<output>` (`card0-hdmi-a-1`) unless
`CAPTURE_DEVICES` maps it (`X1=card0-hdmi-a-1,X2=card0-dp-1`, for a simulated node whose
outputs are x11 windows). `CAPTURE_KUBE_URL` points the reviews at a plain-HTTP apiserver
(the simulated node's fake), else `KUBECONFIG` names a kubeconfig (a simulated node published
into a real cluster); with neither, the in-cluster configuration is used.

Tokens are reviewed for the audience `CAPTURE_TOKEN_AUDIENCE` (`display-capture`). The
listener holds at most `CAPTURE_MAX_CONNECTIONS` (128) connections, `CAPTURE_MAX_CONNECTIONS_
PER_SOURCE` (16) from one address; a connection must start TLS within 5 s and complete each
request within `CAPTURE_IDLE_TIMEOUT_S` (15) of its start or of the last response. An address
may start `CAPTURE_UNAUTHENTICATED_BURST` (20) token reviews at once and 2 a second after.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

DEFAULT_ADDR: Final = ":9201"
DEFAULT_WESTON_INI: Final = Path("/etc/weston/weston.ini")
DEFAULT_TLS_DIR: Final = Path("/var/run/display-capture-tls")
# Every frame is at most 1080p (the layout module shrinks larger outputs), and ultrafast x264
# on 1080p peaks at 129 MiB (docs/capture.md §6; ~100 MiB in bench/capture): two of them
# beside this server (~60 MiB) and two frames in flight stay inside the 384Mi limit with margin.
DEFAULT_MAX_ENCODES: Final = 2
# A connection costs up to ~330 KiB (asyncio's 256 KiB TLS buffer, OpenSSL's, aiohttp's): 128
# of them are ~42 MiB, inside the margin the encode bound leaves.
DEFAULT_MAX_CONNECTIONS: Final = 128
# A browser opens six per site; a few viewers behind one NAT fit.
DEFAULT_MAX_CONNECTIONS_PER_SOURCE: Final = 16
DEFAULT_IDLE_TIMEOUT_S: Final = 15.0
DEFAULT_UNAUTHENTICATED_BURST: Final = 20
DEFAULT_CLIP_S: Final = 3.0
MAX_CLIP_S: Final = 30.0
MIN_CLIP_S: Final = 0.5


class SettingsError(ValueError):
    """An environment variable that cannot be used; the message names it and its value."""


@dataclass(frozen=True, slots=True)
class Settings:
    host: str
    port: int
    weston_ini: Path
    capture_socket: Path
    tls_dir: Path
    node_name: str
    card: str = "card0"
    devices: Mapping[str, str] = field(default_factory=dict)
    kube_url: str | None = None
    kubeconfig: Path | None = None
    render_node: Path | None = None
    max_encodes: int = DEFAULT_MAX_ENCODES
    clip_default_s: float = DEFAULT_CLIP_S
    clip_max_s: float = MAX_CLIP_S
    clip_fps: int = 30
    # A fragmented MP4 of ultrafast x264 at 1080p runs ~1-4 MiB/s; past this the encode is killed.
    clip_max_bytes: int = 256 * 1024 * 1024
    tls_poll_s: float = 2.0
    auth_cache_s: float = 10.0
    token_audience: str = "display-capture"
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    max_connections_per_source: int = DEFAULT_MAX_CONNECTIONS_PER_SOURCE
    handshake_timeout_s: float = 5.0
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    unauthenticated_burst: int = DEFAULT_UNAUTHENTICATED_BURST
    unauthenticated_per_s: float = 2.0


def parse_addr(text: str) -> tuple[str, int]:
    """`:9201` or `127.0.0.1:9201` -> (host, port); an empty host listens on every address."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdecimal() or not 0 <= int(port) <= 65535:
        raise SettingsError(f"CAPTURE_ADDR must be [HOST]:PORT, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def parse_devices(text: str) -> dict[str, str]:
    """`X1=card0-hdmi-a-1,X2=card0-dp-1` -> {output: device}."""
    devices: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        output, sep, device = item.partition("=")
        if not sep or not output or not device:
            raise SettingsError(f"CAPTURE_DEVICES entries must be OUTPUT=DEVICE, got {item!r}")
        devices[output] = device
    return devices


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    text = env.get(name)
    if text is None:
        return default
    if not text.isdecimal() or int(text) < 1:
        raise SettingsError(f"{name} must be a positive integer, got {text!r}")
    return int(text)


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name)
    if text is None:
        return default
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not 0 < value < float("inf"):
        raise SettingsError(f"{name} must be a positive number of seconds, got {text!r}")
    return value


def from_env(env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    host, port = parse_addr(env.get("CAPTURE_ADDR", DEFAULT_ADDR))
    node_name = env.get("NODE_NAME", "")
    if not node_name:
        raise SettingsError("NODE_NAME must name this node (the Displays are <node>.<device>)")
    weston_ini = Path(env.get("CAPTURE_WESTON_INI", os.fspath(DEFAULT_WESTON_INI)))
    render = env.get("CAPTURE_RENDER_NODE")
    return Settings(
        host=host,
        port=port,
        weston_ini=weston_ini,
        capture_socket=Path(
            env.get("CAPTURE_SOCKET", os.fspath(weston_ini.parent / "capture.sock"))
        ),
        tls_dir=Path(env.get("CAPTURE_TLS_DIR", os.fspath(DEFAULT_TLS_DIR))),
        node_name=node_name,
        card=env.get("CAPTURE_CARD", "card0"),
        devices=parse_devices(env.get("CAPTURE_DEVICES", "")),
        kube_url=env.get("CAPTURE_KUBE_URL") or None,
        kubeconfig=Path(env["KUBECONFIG"]) if env.get("KUBECONFIG") else None,
        render_node=Path(render) if render else None,
        max_encodes=_positive_int(env, "CAPTURE_MAX_ENCODES", DEFAULT_MAX_ENCODES),
        token_audience=env.get("CAPTURE_TOKEN_AUDIENCE") or "display-capture",
        max_connections=_positive_int(env, "CAPTURE_MAX_CONNECTIONS", DEFAULT_MAX_CONNECTIONS),
        max_connections_per_source=_positive_int(
            env, "CAPTURE_MAX_CONNECTIONS_PER_SOURCE", DEFAULT_MAX_CONNECTIONS_PER_SOURCE),
        idle_timeout_s=_positive_float(env, "CAPTURE_IDLE_TIMEOUT_S", DEFAULT_IDLE_TIMEOUT_S),
        unauthenticated_burst=_positive_int(
            env, "CAPTURE_UNAUTHENTICATED_BURST", DEFAULT_UNAUTHENTICATED_BURST),
    )
