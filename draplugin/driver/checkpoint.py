"""The plugin's checkpoint: every claim it prepared or is preparing, in the plugin dir.

A versioned JSON file written atomically (`fsutil`): each claim's uid, name, namespace,
devices (with the output and CDI IDs each was given), decoded config and state. `started`
means a prepare began and may have left part of its writes; `prepared` means every write is
done and the kubelet got the answer; `unpreparing` means an unprepare began. A file of an
unknown version or that does not parse raises `CheckpointError`: resetting it would lose
prepared claims the kubelet never asks about again (docs/dra.md §6, item 1).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, Literal, get_args

from draplugin.claims import ClaimRef
from libdisplay import fsutil

VERSION: Final = 1
FILE_NAME: Final = "checkpoint.json"

State = Literal["started", "prepared", "unpreparing"]
STATES: Final = get_args(State)


class CheckpointError(Exception):
    """The checkpoint cannot be read; the message names the file and the problem."""


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of a claim as it was handed out."""

    request: str
    pool: str
    device: str
    output: str
    cdi_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ClaimEntry:
    uid: str
    name: str
    namespace: str
    state: State
    devices: tuple[PreparedDevice, ...]
    config: Mapping[str, Mapping[str, object]]
    """Per device name, the decoded config in the claim's own form (`DisplayConfig.to_json`)."""

    def with_state(self, state: State) -> ClaimEntry:
        return replace(self, state=state)

    @property
    def ref(self) -> ClaimRef:
        return ClaimRef(namespace=self.namespace, name=self.name, uid=self.uid)


@dataclass(frozen=True, slots=True)
class Checkpoint:
    claims: Mapping[str, ClaimEntry]

    def with_claim(self, entry: ClaimEntry) -> Checkpoint:
        return Checkpoint(claims={**self.claims, entry.uid: entry})

    def without_claim(self, uid: str) -> Checkpoint:
        return Checkpoint(claims={k: v for k, v in self.claims.items() if k != uid})


EMPTY: Final = Checkpoint(claims={})


def path_in(plugin_dir: Path) -> Path:
    return plugin_dir / FILE_NAME


def load(path: Path) -> Checkpoint:
    """The checkpoint at `path`; a missing file is an empty checkpoint."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return EMPTY
    except (OSError, UnicodeDecodeError) as err:
        raise CheckpointError(f"cannot read checkpoint {path}: {err}") from err
    try:
        return _parse(json.loads(text))
    except (ValueError, TypeError, KeyError) as err:
        raise CheckpointError(f"checkpoint {path} is not valid: {err}") from err


def save(path: Path, checkpoint: Checkpoint) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(path, render(checkpoint), mode=0o600)


def render(checkpoint: Checkpoint) -> str:
    claims = {
        uid: {
            "uid": e.uid,
            "name": e.name,
            "namespace": e.namespace,
            "state": e.state,
            "devices": [
                {
                    "request": d.request,
                    "pool": d.pool,
                    "device": d.device,
                    "output": d.output,
                    "cdiIds": list(d.cdi_ids),
                }
                for d in e.devices
            ],
            "config": {k: dict(v) for k, v in e.config.items()},
        }
        for uid, e in sorted(checkpoint.claims.items())
    }
    return json.dumps({"version": VERSION, "claims": claims}, indent=2, sort_keys=True) + "\n"


def _parse(data: Any) -> Checkpoint:
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("version") != VERSION:
        raise ValueError(f"version {data.get('version')!r} is not {VERSION}")
    claims = {}
    for uid, raw in data["claims"].items():
        state = raw["state"]
        if state not in STATES:
            raise ValueError(f"claim {uid}: state {state!r} is not one of {', '.join(STATES)}")
        devices = tuple(
            PreparedDevice(
                request=str(d["request"]),
                pool=str(d["pool"]),
                device=str(d["device"]),
                output=str(d["output"]),
                cdi_ids=tuple(str(i) for i in d["cdiIds"]),
            )
            for d in raw["devices"]
        )
        config = {str(k): dict(v) for k, v in raw["config"].items()}
        claims[uid] = ClaimEntry(
            uid=str(raw["uid"]),
            name=str(raw["name"]),
            namespace=str(raw["namespace"]),
            state=state,
            devices=devices,
            config=config,
        )
    return Checkpoint(claims=claims)
