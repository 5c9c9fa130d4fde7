"""What a user reads: the node's devices, Displays and claims from the API, as short text.

Functions take the objects as JSON dicts, so `up` reads them from the in-process fake apiserver
and the subcommands from its HTTP API (`ApiReader`), the way kubectl would.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any, Final, TextIO

from libdisplay import display
from libdisplay.cdi import DRIVER
from simnode import card
from simnode.state import Layout, State

JsonObject = dict[str, Any]
Objects = Callable[[str, str], list[JsonObject]]
# `up` prints this once the node answers: the line scripts and tests wait for.
READY_LINE: Final = "simnode: ready"
SLICE_API: Final = "resource.k8s.io/v1"
_PLURALS: Final = {"ResourceSlice": "resourceslices", "ResourceClaim": "resourceclaims",
                   "Display": display.PLURAL}
_TIMEOUT_S: Final = 10.0
_DDC_VALUES: Final = ("brightness", "contrast", "input", "power")


class ReportError(Exception):
    """The fake apiserver did not answer a read."""


class ApiReader:
    """`objects(api_version, kind)` over the fake apiserver's HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def __call__(self, api_version: str, kind: str) -> list[JsonObject]:
        plural = _PLURALS[kind]
        prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        try:
            with urllib.request.urlopen(f"{self.url}{prefix}/{plural}",
                                        timeout=_TIMEOUT_S) as response:
                items: list[JsonObject] = json.load(response)["items"]
        except OSError as exc:
            raise ReportError(f"the fake apiserver at {self.url} did not answer: {exc}") from exc
        return items


def slice_devices(objects: Objects) -> dict[str, JsonObject]:
    """Device name -> device, from every ResourceSlice of the display driver."""
    devices: dict[str, JsonObject] = {}
    for obj in objects(SLICE_API, "ResourceSlice"):
        if obj["spec"].get("driver") == DRIVER:
            for device in obj["spec"].get("devices", []):
                devices[device["name"]] = device
    return devices


def _value(attribute: JsonObject) -> str:
    (value,) = attribute.values()
    return str(value)


def device_lines(devices: dict[str, JsonObject]) -> list[str]:
    lines = []
    for name, device in sorted(devices.items()):
        attributes = device.get("attributes", {})
        shown = ", ".join(f"{k}={_value(v)}" for k, v in sorted(attributes.items()))
        taints = ", ".join(t["key"] for t in device.get("taints", []))
        lines.append(f"  {name}: {shown}")
        if taints:
            lines.append(f"    tainted: {taints}")
    return lines or ["  (none)"]


def display_lines(objects: Objects) -> list[str]:
    lines = []
    for obj in objects(display.API_VERSION, display.KIND):
        status = obj.get("status", {})
        spec_mode = obj.get("spec", {}).get("mode", "-")
        lines.append(
            f"  {obj['metadata']['name']}: connected={status.get('connected')}"
            f" currentMode={status.get('currentMode', '-')} spec.mode={spec_mode}"
        )
        lines.append(f"    ddc: {_ddc_summary(status.get('ddc'))}")
    return lines or ["  (none)"]


def _ddc_summary(ddc: JsonObject | None) -> str:
    """What the operator's last DDC/CI probe of the monitor found."""
    if ddc is None:
        return "not probed"
    if not ddc.get("supported"):
        return "no answer"
    shown = [f"{k}={ddc[k]}" for k in _DDC_VALUES if k in ddc]
    return " ".join(shown) or "answers"


def claim_lines(objects: Objects) -> list[str]:
    lines = []
    for obj in objects(SLICE_API, "ResourceClaim"):
        results = obj.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
        devices = ", ".join(r["device"] for r in results) or "unallocated"
        lines.append(f"  {obj['metadata']['name']} (uid {obj['metadata']['uid']}): {devices}")
    return lines or ["  (none)"]


def paths_lines(layout: Layout, state: State) -> list[str]:
    monitors = card.monitors(state.monitors)
    return [
        f"  state dir:     {layout.root}",
        f"  api server:    {state.api_url}",
        f"  metrics:       {state.metrics_url}",
        f"  wayland:       WAYLAND_DISPLAY={layout.wayland_socket.name}"
        f" XDG_RUNTIME_DIR={layout.runtime_dir}",
        f"  weston.ini:    {layout.weston_ini} (pid file {layout.weston_pid})",
        f"  capture:       {layout.capture_socket}",
        f"  registration:  {layout.registration_socket}",
        f"  cdi specs:     {layout.cdi_dir}",
        f"  DDC/CI:        {' '.join(m.i2c_node(layout.root).name for m in monitors)} sockets in"
        f" {layout.root / 'dev'}",
        f"  logs:          {layout.logs}",
        f"  Xvfb:          DISPLAY={state.xvfb_display}",
    ]


def print_sections(out: TextIO, sections: Iterable[tuple[str, list[str]]]) -> None:
    for title, lines in sections:
        print(f"{title}:", file=out)
        for line in lines:
            print(line, file=out)
    out.flush()


def print_up(objects: Objects, layout: Layout, state: State, out: TextIO) -> None:
    print_sections(out, [
        (f"node {state.node_name} published", device_lines(slice_devices(objects))),
        ("where everything lives", paths_lines(layout, state)),
        ("pids", [f"  {name}: {pid}" for name, pid in state.pids.items()]),
    ])
