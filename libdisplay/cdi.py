"""The per-claim CDI spec: how a consumer's container is handed the compositor's Wayland socket.

One transient spec per prepared claim, named as the CDI library names them
(`GenerateTransientSpecName`): `/var/run/cdi/k8s.display.liken.sh-display_<claimUID>.yaml`, kind
`k8s.display.liken.sh/display` (vendor `k8s.` + driver name, class `display`, as the reference
drivers do), one device per claimed monitor named `<claimUID>-<device>`, e.g.
`k8s.display.liken.sh/display=<uid>-card0-hdmi-a-1`. The claim UID keeps every CDI device ID
unique for the life of the cluster, so a runtime's spec cache never hands out a stale device.

Each device's edits bind-mount the *directory* that holds the socket, read-only (a client
`connect()`s through a read-only mount; writing is what it stops), never the socket file: a
file bind mount pins the inode, and after a compositor restart the container would still see the
dead socket. They set `XDG_RUNTIME_DIR` (the mount point), `WAYLAND_DISPLAY` (the socket's name
in it), `DISPLAY_OUTPUT_<DEVICE>` naming each claimed output (`DISPLAY_OUTPUT_CARD0_HDMI_A_1=
HDMI-A-1`), and, for a claim of one monitor, plain `DISPLAY_OUTPUT`.

`cdiVersion` is the lowest the spec needs, as the CDI library's `MinimumRequiredVersion`
computes it: the spec uses only 0.3.0 fields (env, mounts without `type`), and a device name
starting with a digit, as a claim UID may, needs 0.5.0 (docs/dra.md §4). The file is
JSON, which is YAML, so the `.yaml` name the CDI library itself writes holds it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from libdisplay import fsutil
from libdisplay.pod import CDI_DIR, DRIVER

VENDOR = f"k8s.{DRIVER}"
CLASS = "display"
KIND = f"{VENDOR}/{CLASS}"
SPEC_SUFFIX = ".yaml"
_SPEC_PREFIX = f"{VENDOR}-{CLASS}_"

# specs-go/version.go: vEarliest, and the version that first admits a name not led by a letter.
EARLIEST_VERSION = "0.3.0"
DIGIT_NAME_VERSION = "0.5.0"

MOUNT_OPTIONS = ("rbind", "ro", "nosuid", "nodev", "noexec")

# A claim UID is a UUID from the apiserver; anything safe in a file name and a CDI name passes.
_CLAIM_UID_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,126}[A-Za-z0-9])?$")
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
_WORD_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


class CdiError(Exception):
    """Base of every error this module raises."""


class CdiNameError(CdiError, ValueError):
    """A claim UID, device, output or path that cannot go into a valid spec."""


@dataclass(frozen=True, slots=True)
class ClaimedOutput:
    """One claimed monitor: its DRA device name and the compositor's name for its output."""

    device: str
    output: str

    def __post_init__(self) -> None:
        if not _DNS_LABEL_RE.match(self.device):
            raise CdiNameError(f"device {self.device!r} is not a DNS label like card0-hdmi-a-1")
        if not _WORD_RE.match(self.output):
            raise CdiNameError(f"output {self.output!r} is not an output name like HDMI-A-1")

    @property
    def env_name(self) -> str:
        """`DISPLAY_OUTPUT_CARD0_HDMI_A_1` for `card0-hdmi-a-1`."""
        return "DISPLAY_OUTPUT_" + self.device.upper().replace("-", "_")


@dataclass(frozen=True, slots=True)
class SocketDelivery:
    """Where the socket is: `host_dir` on the node, `container_dir` in the consumer."""

    host_dir: PurePosixPath
    container_dir: PurePosixPath
    socket_name: str

    def __post_init__(self) -> None:
        for field, path in (("host_dir", self.host_dir), ("container_dir", self.container_dir)):
            if not path.is_absolute() or path == PurePosixPath("/"):
                raise CdiNameError(f"{field} {str(path)!r} must be an absolute directory, not /")
        if not _WORD_RE.match(self.socket_name):
            raise CdiNameError(
                f"socket_name {self.socket_name!r} must be a file name in the directory "
                "(e.g. wayland-0)"
            )


def spec_path(claim_uid: str, *, cdi_dir: Path = CDI_DIR) -> Path:
    """`<cdi_dir>/k8s.display.liken.sh-display_<claimUID>.yaml`."""
    _check_claim_uid(claim_uid)
    return cdi_dir / f"{_SPEC_PREFIX}{claim_uid}{SPEC_SUFFIX}"


def device_ids(claim_uid: str, outputs: Sequence[ClaimedOutput]) -> tuple[str, ...]:
    """The fully qualified CDI IDs the kubelet passes to the runtime, one per output."""
    _check_claim_uid(claim_uid)
    return tuple(f"{KIND}={_device_name(claim_uid, o)}" for o in outputs)


def build_spec(
    claim_uid: str, outputs: Sequence[ClaimedOutput], delivery: SocketDelivery
) -> dict[str, object]:
    """The spec as a JSON object; raises CdiNameError for anything CDI would refuse."""
    _check_claim_uid(claim_uid)
    if not outputs:
        raise CdiNameError(f"claim {claim_uid}: a CDI spec needs at least one device")
    devices = [o.device for o in outputs]
    if len(set(devices)) != len(devices):
        raise CdiNameError(f"claim {claim_uid}: a device is listed twice: {devices}")
    names = [_device_name(claim_uid, o) for o in outputs]
    return {
        "cdiVersion": minimum_version(names),
        "kind": KIND,
        "devices": [
            {"name": name, "containerEdits": _edits(o, delivery, only=len(outputs) == 1)}
            for name, o in zip(names, outputs, strict=True)
        ],
    }


def render_spec(spec: dict[str, object]) -> str:
    return json.dumps(spec, indent=2) + "\n"


def write_spec(
    claim_uid: str,
    outputs: Sequence[ClaimedOutput],
    delivery: SocketDelivery,
    *,
    cdi_dir: Path = CDI_DIR,
) -> tuple[str, ...]:
    """Write the claim's spec atomically and return its CDI device IDs."""
    text = render_spec(build_spec(claim_uid, outputs, delivery))
    cdi_dir.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(spec_path(claim_uid, cdi_dir=cdi_dir), text, mode=0o644)
    return device_ids(claim_uid, outputs)


def remove_spec(claim_uid: str, *, cdi_dir: Path = CDI_DIR) -> bool:
    """Delete the claim's spec; True if there was one."""
    return fsutil.remove(spec_path(claim_uid, cdi_dir=cdi_dir))


def list_specs(*, cdi_dir: Path = CDI_DIR) -> tuple[str, ...]:
    """Claim UIDs of this driver's specs in `cdi_dir`; other drivers' files are not ours."""
    try:
        names = [p.name for p in cdi_dir.iterdir() if p.is_file()]
    except FileNotFoundError:
        return ()
    uids = (
        n.removeprefix(_SPEC_PREFIX).removesuffix(SPEC_SUFFIX)
        for n in names
        if n.startswith(_SPEC_PREFIX) and n.endswith(SPEC_SUFFIX)
    )
    return tuple(sorted(uid for uid in uids if _CLAIM_UID_RE.match(uid)))


def minimum_version(device_names: Sequence[str]) -> str:
    """The lowest cdiVersion that admits these device names in a spec of 0.3.0 fields."""
    if any(not name[:1].isascii() or not name[:1].isalpha() for name in device_names):
        return DIGIT_NAME_VERSION
    return EARLIEST_VERSION


def _edits(output: ClaimedOutput, delivery: SocketDelivery, *, only: bool) -> dict[str, object]:
    env = [
        f"XDG_RUNTIME_DIR={delivery.container_dir}",
        f"WAYLAND_DISPLAY={delivery.socket_name}",
        f"{output.env_name}={output.output}",
    ]
    if only:
        env.append(f"DISPLAY_OUTPUT={output.output}")
    mount = {
        "hostPath": str(delivery.host_dir),
        "containerPath": str(delivery.container_dir),
        "options": list(MOUNT_OPTIONS),
    }
    return {"env": env, "mounts": [mount]}


def _device_name(claim_uid: str, output: ClaimedOutput) -> str:
    # A UID and a DNS label both start and end with a letter or digit and hold nothing CDI's
    # ValidateDeviceName refuses (`_ - . :` between), so the joined name is valid too.
    return f"{claim_uid}-{output.device}"


def _check_claim_uid(claim_uid: str) -> None:
    if not _CLAIM_UID_RE.match(claim_uid):
        raise CdiNameError(
            f"claim UID {claim_uid!r} is not a UID (letters, digits, '-', '_', '.'; "
            "letter or digit at both ends)"
        )
