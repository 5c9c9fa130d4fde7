"""The simulated card as liken's DRA driver would deliver it: a CDI spec of its devices.

liken publishes the card node, its render node and its i2c buses as devices of its own, and the
kubelet hands a container that names the claim the CDI edits of each allocated device. The
simulated card's edits mount its simulated sysfs tree (`/sys/class/drm` and the device tree its
links point into), its device nodes and the DDC/CI sockets at `/dev/i2c-N`, and set what a
simulated node differs in: weston's x11 backend on the node's Xvfb (where the manifest's GL
renderer runs on Mesa's llvmpipe, as it would on a card with no GPU of its own), and
the x11 output names X1..Xn as aliases of the connectors (for weston and the operator) and as
the capture server's outputs. None of that is in the manifest: a
real node's card needs none of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from libdisplay import fsutil
from simnode.kubelet.assemble import CdiEdits
from simnode.kubelet.launcher import Bind
from simnode.node import card

LIKEN_DRIVER: Final = "liken.sh"
CDI_KIND: Final = "liken.sh/gpu"
SPEC_NAME: Final = "liken.sh-simnode.json"
CARD_DEVICE: Final = card.CARD
RENDER_NODE: Final = "renderD128"
# A device's name in a ResourceSlice is a DNS label: liken lowercases the node's name.
RENDER_DEVICE: Final = RENDER_NODE.lower()
I2C_DEVICE: Final = f"{card.CARD}-i2c"
# The claim template's requests and the device each is allocated (deploy/base's template).
ALLOCATION: Final = {"display": CARD_DEVICE, "render": RENDER_DEVICE, "wires": I2C_DEVICE}
_SYSFS: Final = ("class/drm", "class/i2c-dev", "devices", "bus")
X11_SOCKETS: Final = Path("/tmp/.X11-unix")


def edits(host_root: Path, monitors: Sequence[card.Monitor], *,
          display: str) -> dict[str, CdiEdits]:
    """Device name -> its containerEdits."""
    sys_dir, dev_dir = host_root / "sys", host_root / "dev"
    # How the x11 outputs are named, which every device of the simulated card carries: the
    # capture container names the render node alone.
    naming = {"WESTON_OUTPUT_ALIASES": " ".join(f"{m.connector}={m.output}" for m in monitors),
              "CAPTURE_DEVICES": ",".join(f"{m.output}={m.device}" for m in monitors)}
    return {
        CARD_DEVICE: CdiEdits(
            env={"DISPLAY": display, "WESTON_BACKEND": "x11-backend.so",
                 "WESTON_OUTPUT_COUNT": str(len(monitors)), **naming},
            mounts=(*(Bind(sys_dir / p, f"/sys/{p}") for p in _SYSFS),
                    Bind(dev_dir / "dri" / CARD_DEVICE, f"/dev/dri/{CARD_DEVICE}",
                         read_only=False),
                    Bind(X11_SOCKETS, str(X11_SOCKETS)))),
        RENDER_DEVICE: CdiEdits(env=naming, mounts=(Bind(dev_dir / "dri" / RENDER_NODE,
                                             f"/dev/dri/{RENDER_NODE}", read_only=False),)),
        I2C_DEVICE: CdiEdits(env=naming, mounts=tuple(
            Bind(m.i2c_node(host_root), f"/dev/i2c-{m.i2c_bus}", read_only=False)
            for m in monitors)),
    }


def write_spec(cdi_dir: Path, devices: Mapping[str, CdiEdits], *,
               sysfs_tmpfs: bool = False) -> Path:
    """The spec liken's driver would write beside the operator's in /var/run/cdi.

    `sysfs_tmpfs`: for a runtime that mounts its own read-only sysfs (runc), which on these
    machines has no /sys/class/drm to mount the simulated one on: a tmpfs at /sys first gives
    the mount points, as simnode's podman launcher does. The CDI library replaces the
    runtime's mount at the same path and orders parents before children.
    """
    spec = {"cdiVersion": "0.6.0", "kind": CDI_KIND, "devices": [
        {"name": name, "containerEdits": _container_edits(e, sysfs_tmpfs=sysfs_tmpfs)}
        for name, e in devices.items()]}
    path = cdi_dir / SPEC_NAME
    fsutil.atomic_write(path, json.dumps(spec, indent=2) + "\n")
    return path


def _container_edits(e: CdiEdits, *, sysfs_tmpfs: bool = False) -> dict[str, Any]:
    mounts = [{"hostPath": str(b.source), "containerPath": b.dest,
               "options": ["rbind", "ro" if b.read_only else "rw"]} for b in e.mounts]
    if sysfs_tmpfs and any(b.dest.startswith("/sys/") for b in e.mounts):
        mounts.insert(0, {"hostPath": "tmpfs", "containerPath": "/sys", "type": "tmpfs",
                          "options": ["nosuid", "nodev", "noexec", "mode=755"]})
    return {"env": [f"{k}={v}" for k, v in e.env.items()], "mounts": mounts}


def read_spec(path: Path) -> dict[str, CdiEdits]:
    """The devices of a spec `write_spec` wrote, as the runtime applies them."""
    spec = json.loads(path.read_text())
    found = {}
    for device in spec["devices"]:
        ce = device["containerEdits"]
        found[device["name"]] = CdiEdits(
            env=dict(v.split("=", 1) for v in ce.get("env", [])),
            mounts=tuple(Bind(Path(m["hostPath"]), m["containerPath"],
                              read_only="ro" in m.get("options", [])) for m in ce["mounts"]))
    return found


def claim_edits(claim_name: str, allocation: Mapping[str, str],
                devices: Mapping[str, CdiEdits]) -> dict[str, list[CdiEdits]]:
    """`claim/request` -> the edits a container naming that request gets; `claim/` -> all of
    the claim's (a container that names the claim without a request)."""
    out: dict[str, list[CdiEdits]] = {f"{claim_name}/": []}
    for request, device in allocation.items():
        out[f"{claim_name}/{request}"] = [devices[device]]
        out[f"{claim_name}/"].append(devices[device])
    return out
