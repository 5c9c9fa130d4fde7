"""The demo Wayland clients `simnode claim` starts: a claim's CDI edits applied to a process.

A container would see the CDI spec's env and mounts; here the client runs on the host, so each
mount's container path in the env is mapped back to its host path. One record per claim in
the state dir's `clients/` says which claim, device and client pid, for `release` and `up`.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

from libdisplay import cdi, fsutil
from simnode.cli.state import Layout, alive

DEMO_CLIENT: Final = "weston-simple-shm"


class ClientError(Exception):
    """A CDI spec that cannot be applied, or a claim `simnode claim` did not make."""


@dataclass(frozen=True, slots=True)
class Record:
    uid: str
    name: str
    device: str
    client_pid: int


def cdi_env(spec: dict[str, Any], *, host_root: Path | None = None) -> dict[str, str]:
    """The env of every device's edits, with container paths mapped to their host paths (under
    `host_root`, a simulated host's root, when given)."""
    edits = [spec.get("containerEdits", {}), *(d["containerEdits"] for d in spec["devices"])]
    mounts = [(m["containerPath"], _on_host(m["hostPath"], host_root))
              for e in edits for m in e.get("mounts", [])]
    env: dict[str, str] = {}
    for entry in (item for e in edits for item in e.get("env", [])):
        name, sep, value = entry.partition("=")
        if not sep:
            raise ClientError(f"CDI env entry {entry!r} is not NAME=VALUE")
        env[name] = _host_path(value, mounts)
    return env


def _on_host(path: str, host_root: Path | None) -> str:
    return path if host_root is None else str(host_root / path.lstrip("/"))


def _host_path(value: str, mounts: Iterable[tuple[str, str]]) -> str:
    for container, host in mounts:
        if value == container or value.startswith(container.rstrip("/") + "/"):
            return host + value[len(container):]
    return value


def start_client(layout: Layout, uid: str, *, host_root: Path | None = None) -> int:
    """Start the demo client with the claim's CDI env, in its own session; its pid."""
    spec = json.loads(cdi.spec_path(uid, cdi_dir=layout.cdi_dir).read_text())
    env = {"PATH": os.environ.get("PATH", os.defpath), **cdi_env(spec, host_root=host_root)}
    with (layout.logs / f"client-{uid}.log").open("ab") as log:
        popen = subprocess.Popen([DEMO_CLIENT], env=env, stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=subprocess.STDOUT, start_new_session=True)
    return popen.pid


def save(layout: Layout, record: Record) -> None:
    fsutil.atomic_write(layout.clients / f"{record.name}.json", json.dumps(asdict(record)))


def records(layout: Layout) -> list[Record]:
    if not layout.clients.is_dir():
        return []
    return [Record(**json.loads(p.read_text())) for p in sorted(layout.clients.glob("*.json"))]


def find(layout: Layout, claim: str) -> Record:
    """The record of the claim named `claim`, or whose uid is `claim`."""
    for record in records(layout):
        if claim in (record.name, record.uid):
            return record
    made = ", ".join(r.name for r in records(layout)) or "none"
    raise ClientError(f"no claim {claim!r} made by `simnode claim` here (claims: {made})")


def forget(layout: Layout, record: Record) -> None:
    fsutil.remove(layout.clients / f"{record.name}.json")


def stop_client(record: Record) -> None:
    """SIGTERM the client's session; it is not our child, so it is signalled, not reaped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if alive(record.client_pid) and os.getsid(record.client_pid) == record.client_pid:
            os.killpg(record.client_pid, signal.SIGTERM)


def client_running(record: Record) -> bool:
    return alive(record.client_pid)
