"""What a user reads: the node's devices, Displays and claims from the API, as short text.

Functions take the objects as JSON dicts from an `Objects` callable
(`simnode.cluster.api.Api.objects`, or a fake's own `objects` in tests), and show this node's
alone: in a real cluster the lists hold every node's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Final, TextIO

from libdisplay import display
from libdisplay.pod import DRIVER
from simnode.cli.state import Layout, State
from simnode.kubelet.node_object import SIMULATED_LABEL
from simnode.node import card

JsonObject = dict[str, Any]
Objects = Callable[[str, str], list[JsonObject]]
# `up` prints this once the node answers: the line scripts and tests wait for.
READY_LINE: Final = "simnode: ready"
SLICE_API: Final = "resource.k8s.io/v1"
_DDC_VALUES: Final = ("brightness", "contrast", "input", "power")
SPEC_APPLIED: Final = "SpecApplied"


def slice_devices(objects: Objects, node: str) -> dict[str, JsonObject]:
    """Device name -> device, from the display driver's ResourceSlices of `node`."""
    devices: dict[str, JsonObject] = {}
    for obj in objects(SLICE_API, "ResourceSlice"):
        if obj["spec"].get("driver") == DRIVER and obj["spec"].get("nodeName") == node:
            for device in obj["spec"].get("devices", []):
                devices[device["name"]] = device
    return devices


def _value(attribute: JsonObject) -> str:
    (value,) = attribute.values()
    return str(value)


def device_facts(devices: dict[str, JsonObject]) -> list[JsonObject]:
    """Each device: its name, its attributes' values and the keys of its taints."""
    return [{"name": name,
             "attributes": {k: _value(v) for k, v in sorted(device.get("attributes", {}).items())},
             "taints": [t["key"] for t in device.get("taints", [])]}
            for name, device in sorted(devices.items())]


def device_lines(devices: dict[str, JsonObject]) -> list[str]:
    lines = []
    for fact in device_facts(devices):
        shown = ", ".join(f"{k}={v}" for k, v in fact["attributes"].items())
        lines.append(f"  {fact['name']}: {shown}")
        if fact["taints"]:
            lines.append(f"    tainted: {', '.join(fact['taints'])}")
    return lines or ["  (none)"]


def display_facts(objects: Objects, node: str) -> list[JsonObject]:
    """The Displays the operator labelled as `node`'s: what their status says, and whether
    their spec, DDC/CI and power took effect."""
    label = display.labels(node, "")[display.NODE_LABEL]
    facts = []
    for obj in objects(display.API_VERSION, display.KIND):
        if (obj["metadata"].get("labels") or {}).get(display.NODE_LABEL) != label:
            continue
        status = obj.get("status", {})
        facts.append({
            "name": obj["metadata"]["name"], "connected": status.get("connected"),
            "currentMode": status.get("currentMode", "-"),
            "transform": status.get("currentTransform", "-"),
            "scale": status.get("currentScale", "-"),
            "specMode": obj.get("spec", {}).get("mode", "-"),
            "spec": _spec_summary(obj), "ddc": _ddc_summary(status.get("ddc")),
            "power": (_power_summary(status["power"]) if isinstance(status.get("power"), dict)
                      else None),
        })
    return facts


def display_lines(objects: Objects, node: str) -> list[str]:
    lines = []
    for fact in display_facts(objects, node):
        lines.append(
            f"  {fact['name']}: connected={fact['connected']}"
            f" currentMode={fact['currentMode']} transform={fact['transform']}"
            f" scale={fact['scale']} spec.mode={fact['specMode']}"
        )
        lines.append(f"    spec: {fact['spec']}")
        lines.append(f"    ddc: {fact['ddc']}")
        if fact["power"] is not None:
            lines.append(f"    power: {fact['power']}")
    return lines or ["  (none)"]


def _power_summary(power: JsonObject) -> str:
    """`Off by KMS, DDC/CI (kms=Applied ddc=Applied)`: how the operator applied spec.power."""
    by = ", ".join(power.get("appliedBy") or ()) or "nothing"
    return f"{power.get('state')} by {by} (kms={power.get('kms')} ddc={power.get('ddc')})"


def _spec_summary(obj: JsonObject) -> str:
    """Whether the operator applied the Display's spec, from its SpecApplied condition."""
    status = obj.get("status", {})
    condition = next((c for c in status.get("conditions") or ()
                      if c.get("type") == SPEC_APPLIED), None)
    if condition is None:
        return "not acted on yet"
    generation = obj["metadata"].get("generation")
    observed = status.get("observedGeneration")
    behind = (f" (of generation {observed}; the Display is at {generation})"
              if generation is not None and observed != generation else "")
    shown = "applied" if condition.get("status") == "True" else "not applied"
    return f"{shown}, {condition.get('reason')}: {condition.get('message')}{behind}"


def _ddc_summary(ddc: JsonObject | None) -> str:
    """What the operator's last DDC/CI probe of the monitor found."""
    if ddc is None:
        return "not probed"
    if not ddc.get("supported"):
        return "no answer"
    shown = [f"{k}={ddc[k]}" for k in _DDC_VALUES if k in ddc]
    return " ".join(shown) or "answers"


def claim_facts(objects: Objects, node: str) -> list[JsonObject]:
    """The claims allocated a device of `node` (its pool), with those devices."""
    facts = []
    for obj in objects(SLICE_API, "ResourceClaim"):
        results = obj.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
        ours = [r["device"] for r in results if r.get("driver") == DRIVER and r.get("pool") == node]
        if ours:
            meta = obj["metadata"]
            facts.append({"namespace": meta.get("namespace", ""), "name": meta["name"],
                          "uid": meta["uid"], "devices": ours})
    return facts


def claim_lines(objects: Objects, node: str) -> list[str]:
    return [f"  {c['namespace']}/{c['name']} (uid {c['uid']}): {', '.join(c['devices'])}"
            for c in claim_facts(objects, node)] or ["  (none)"]


def cluster_lines(state: State) -> list[str]:
    """Where the node is published, and what a pod needs to land on it."""
    where = (f"the real cluster at {state.api_url}" if state.kubeconfig and not state.host_root
             else f"the embedded fake apiserver at {state.api_url}")
    return [
        f"  Node {state.node_name} in {where}",
        f"  labelled {SIMULATED_LABEL}=true, tainted {SIMULATED_LABEL}=true:NoSchedule: only"
        " pods that tolerate the taint land on it",
    ]


def paths_lines(layout: Layout, state: State) -> list[str]:
    monitors = card.monitors(state.monitors)
    return [
        f"  state dir:     {layout.root}",
        f"  api server:    {state.api_url}",
        *([f"  kubeconfig:    {state.kubeconfig} (context {state.context or 'current'})"]
          if state.kubeconfig else []),
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


def path_facts(layout: Layout, state: State) -> JsonObject:
    """Where the node's files, sockets and servers are (paths_lines' facts)."""
    return {
        "state dir": str(layout.root), "api server": state.api_url,
        "kubeconfig": state.kubeconfig, "context": state.context,
        "metrics": state.metrics_url,
        "wayland": {"WAYLAND_DISPLAY": layout.wayland_socket.name,
                    "XDG_RUNTIME_DIR": str(layout.runtime_dir)},
        "weston.ini": str(layout.weston_ini), "weston pid file": str(layout.weston_pid),
        "capture": str(layout.capture_socket), "registration": str(layout.registration_socket),
        "cdi specs": str(layout.cdi_dir),
        "DDC/CI": [str(m.i2c_node(layout.root)) for m in card.monitors(state.monitors)],
        "logs": str(layout.logs), "Xvfb DISPLAY": state.xvfb_display,
    }


def print_sections(out: TextIO, sections: Iterable[tuple[str, list[str]]]) -> None:
    for title, lines in sections:
        print(f"{title}:", file=out)
        for line in lines:
            print(line, file=out)
    out.flush()


def print_json(out: TextIO, facts: JsonObject) -> None:
    """`status --json`: the sections' facts as one JSON object."""
    json.dump(facts, out, indent=2, sort_keys=False, default=str)
    out.write("\n")
    out.flush()


def print_up(objects: Objects, layout: Layout, state: State, out: TextIO) -> None:
    print_sections(out, [
        (f"node {state.node_name} published",
         device_lines(slice_devices(objects, state.node_name))),
        ("cluster", cluster_lines(state)),
        ("where everything lives", paths_lines(layout, state)),
        ("pids", [f"  {name}: {pid}" for name, pid in state.pids.items()]),
    ])
