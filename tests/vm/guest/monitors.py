"""Many monitors on one real KMS card, and a re-plug beside two tenants: the guest's side of
`bench/vm-monitors` (python3.13, stdlib only, run from the 9p share like guest/scenario.py,
whose pod, cluster and helpers it uses).

    monitors.py --heads N [--spare-head]

With N heads plugged (head 0 at QEMU's 1920x1080, the others at SIZES in turn, the last at
1280x800) and, with --spare-head, head N of the card left unplugged until the join stage, it
runs the pod's containers as the scenario does and records, in /share/out/results.json:

- `weston`: how long weston took to answer with N outputs, what it runs each at (wayland-info),
  each head's scanout size (QMP screendump) and whose framebuffer each CRTC scans out (the
  kernel's atomic state), and weston's VmRSS/VmHWM;
- `alone`: a re-plug of head 1 with weston alone (no operator): what sysfs and weston show after
  the unplug and the plug, whether the head scans out weston's frame again, and after a
  CONFIGURE modeset=1 of that output through the layout module;
- `operator`: the time to a slice of N devices, the slice's size, the operator's RSS;
- `claim`: one claim with a mode on the last head: prepare time, time to that head's new
  scanout, weston's pid before and after (the same pid: applied live);
- `replug`: tenants (claims with a client drawing a colour) on heads 0 and 2, then head 1
  unplugged and plugged with the operator running: unplug → slice and → the output powered
  off, plug → slice, → the output lit and → scanout times, the operator's uevent and restart
  counters, whether weston was restarted, whether each tenant's connection still answers,
  the host's samples of heads 0 and 2 (`sample_start`/`sample_stop`, tests/vm/sampler.py)
  and the guest's samples of which process's framebuffer their CRTCs showed;
- `join` (with --spare-head): a monitor plugged into the spare head (a connector weston never
  drove) beside the same tenants, which weston joins without a restart: plug → slice, → the
  output lit, → scanout at the monitor's preferred mode, then unplug → slice, → the output
  powered off; weston's pid, the counters, the tenants' connections, the host's samples;
- `restart`: the restart that stays, beside the same tenants: a different monitor (another
  EDID) on head 1. Plug → a new weston pid, → it answers, → the slice; the tenants' clients'
  exits (they die with the compositor), → their claims' sockets accept again (the operator
  restores them), → a new client on each shown; the host's samples of heads 0 and 2.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.vm.guest import scenario as sc
else:  # run as a script from beside scenario.py
    import scenario as sc  # pants: no-infer-dep

SIZES = ((1280, 800), (1024, 768), (1920, 1080))
HEAD0 = (1920, 1080)
LAST = (1280, 800)
CLAIM_MODE = (1024, 768)
REPLUG_HEAD = 1
TENANTS = {0: ("mon-tenant-0", (20, 200, 60)), 2: ("mon-tenant-2", (40, 90, 230))}
WESTON_COMM = "weston"
SETTLE_S = 3.0
"""How long a state is watched after a plug with nobody to re-probe: long enough for the
kernel's hotplug work and the EDID fetch, which take milliseconds."""
WAIT_S = 300.0
"""Bound of a start-up with many heads on TCG (weston's first frame on every output)."""

results = sc.results


def size_of(head: int, heads: int) -> tuple[int, int]:
    if head == 0:
        return HEAD0
    if head == heads - 1:
        return LAST
    return SIZES[(head - 1) % len(SIZES)]


def output(head: int) -> str:
    return f"Virtual-{head + 1}"


def device(head: int) -> str:
    return f"card0-virtual-{head + 1}"


def memory(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of `pid` in KiB."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0])
    return found


def fb_owners() -> dict[str, str]:
    """Connector name (`Virtual-1`) → the command that allocated the framebuffer its CRTC's
    planes scan out ("" for a CRTC with no framebuffer), for the connectors on a CRTC; from
    the kernel's atomic state (debugfs)."""
    crtc_fb: dict[str, str] = {}
    connector_crtc: dict[str, str] = {}
    block: dict[str, str] = {}
    for line in [*sc.DRM_STATE.read_text(errors="replace").splitlines(), "end"]:
        if not line.startswith("\t"):
            crtc = block.get("crtc", "(null)")
            if block.get("kind") == "plane" and crtc != "(null)":
                crtc_fb[crtc] = crtc_fb.get(crtc) or block.get("allocated by", "")
            elif block.get("kind") == "connector" and crtc != "(null)":
                connector_crtc[block["name"]] = crtc
            kind, _, name = line.partition("]: ")
            block = {"kind": kind.split("[")[0], "name": name.strip()}
        elif "=" in line:
            key, _, value = line.strip().partition("=")
            block[key.strip()] = value.strip() if key.strip() == "allocated by" else \
                value.strip().split(" ")[0]
    return {connector: crtc_fb.get(crtc, "") for connector, crtc in connector_crtc.items()}


class OwnerWatch:
    """Samples `fb_owners` on a thread: for each connector, the spans (seconds from `t0`) in
    which its CRTC showed no framebuffer of weston's."""

    def __init__(self, connectors: list[str], t0: float) -> None:
        self._connectors = connectors
        self._t0 = t0
        self.samples = 0
        self.spans: dict[str, list[list[float | None]]] = {c: [] for c in connectors}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            owners = fb_owners()
            at = round(time.monotonic() - self._t0, 3)
            self.samples += 1
            for connector in self._connectors:
                spans = self.spans[connector]
                open_span = bool(spans) and spans[-1][1] is None
                if owners.get(connector) != WESTON_COMM and not open_span:
                    spans.append([at, None])
                elif owners.get(connector) == WESTON_COMM and open_span:
                    spans[-1][1] = at
            time.sleep(0.05)  # each read parses the whole state on an emulated CPU

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(10)
        return {"samples": self.samples, "not_weston": self.spans}


# -- steps -------------------------------------------------------------------------------------

def plug_all(heads: int, spare: bool) -> None:
    sc.step(f"plug {heads} heads")
    t0 = time.monotonic()
    for head in range(1, heads):
        width, height = size_of(head, heads)
        sc.ask_host(op="plug", head=head, width=width, height=height)

    def plugged() -> bool:
        found = sc.sysfs_connectors()
        status = [found.get(f"card0-{output(h)}", {}).get("status") for h in range(heads)]
        return len(found) == heads + spare and status == ["connected"] * heads

    # Nothing is master yet, so the fbdev console's probe refreshes sysfs.
    sc.until(plugged, timeout=120, what=f"{heads} connectors connected in sysfs")
    if spare:
        results["spare"] = sc.sysfs_connectors()[f"card0-{output(heads)}"]
    results["plugged_s"] = round(time.monotonic() - t0, 3)


def start_weston(heads: int) -> None:
    sc.step("westonctl")
    t0 = time.monotonic()
    sc.start_westonctl()
    outputs = sc.until(lambda: (o := sc.wayland_outputs()) and len(o) == heads and o,
                       timeout=WAIT_S, what=f"weston answers with {heads} outputs")
    found: dict[str, Any] = {"answer_s": round(time.monotonic() - t0, 3), "outputs": outputs}
    results["weston"] = found
    pid = sc.until(sc.weston_pid, timeout=10, what="weston's pid file")
    found["pid"] = pid
    # Every head scanning out weston's framebuffer, at the mode weston reports.
    found["owners"] = sc.until(
        lambda: (o := fb_owners()) and all(o.get(output(h)) == WESTON_COMM
                                           for h in range(heads)) and o,
        timeout=WAIT_S, what="every CRTC scanning out weston's framebuffer")
    found["lit_s"] = round(time.monotonic() - t0, 3)
    found["scanouts"] = {
        str(h): [(r := sc.ask_host(op="screendump", head=h, name=f"lit-head{h}"))["width"],
                 r["height"]] for h in range(heads)}
    found["memory"] = memory(pid)


def replug_alone() -> None:
    """Head 1 unplugged and plugged with weston alone: nobody re-probes, as in a pod where
    weston hears no udev (the operator's PROBE is what re-detects, reprobe.py)."""
    sc.step("re-plug, weston alone")
    head, name = REPLUG_HEAD, output(REPLUG_HEAD)
    sysfs_name = f"card0-{name}"
    found: dict[str, Any] = {"before": sc.sysfs_connectors()[sysfs_name]}
    results["alone"] = found

    def observe(prefix: str) -> dict[str, Any]:
        time.sleep(SETTLE_S)  # nothing to wait for: the point is that nothing changes
        seen: dict[str, Any] = {"sysfs": sc.sysfs_connectors()[sysfs_name],
                                "weston_outputs": sorted(sc.wayland_outputs() or {}),
                                "owner": fb_owners().get(name, "")}
        try:
            reply = sc.ask_host(op="screendump", head=head, name=f"{prefix}-head{head}")
            seen["scanout"] = [reply["width"], reply["height"]]
        except RuntimeError as err:
            seen["scanout"] = str(err)
        return seen

    sc.ask_host(op="unplug", head=head)
    found["unplugged"] = observe("alone-unplugged")
    width, height = SIZES[0]
    sc.ask_host(op="plug", head=head, width=width, height=height)
    found["replugged"] = observe("alone-replugged")
    t0 = time.monotonic()
    found["modeset_reply"] = sc.layout_request(f"CONFIGURE {name} modeset=1")[0]
    found["modeset_s"] = round(time.monotonic() - t0, 3)
    found["modeset"] = observe("alone-modeset")
    found["weston_pid"] = sc.weston_pid()


def start_operator(heads: int) -> None:
    sc.step("operator")
    t0 = time.monotonic()
    child = sc.start_container("operator")
    sc.until(lambda: len(sc.slice_devices()) == heads, timeout=WAIT_S,
             what=f"a slice of {heads} devices")
    slices = [item for item in sc.api_get("/apis/resource.k8s.io/v1/resourceslices")["items"]
              if item["spec"].get("nodeName") == sc.NODE]
    results["operator"] = {
        "slice_s": round(time.monotonic() - t0, 3), "devices": sorted(sc.slice_devices()),
        "slices": len(slices),
        "slice_bytes": sum(len(json.dumps(item, separators=(",", ":"))) for item in slices),
        "memory": memory(child.pid)}


def timed(what: str, check: Callable[[], Any], t0: float) -> float:
    """Seconds from `t0` until `check()` holds (bounded by WAIT_S: a restart of weston with
    every head takes tens of seconds on TCG)."""
    sc.until(check, timeout=WAIT_S, what=what)
    return round(time.monotonic() - t0, 3)


def scanout_at(head: int, size: tuple[int, int], name: str, bound_s: float = 120) -> float:
    """Dump `head` until it scans out at `size`; seconds it took (TimeoutError past bound)."""
    t0 = time.monotonic()

    def at_size() -> bool:
        reply = sc.ask_host(op="screendump", head=head, name=name)
        return (reply["width"], reply["height"]) == size

    sc.until(at_size, timeout=bound_s, what=f"head {head} scanning out {size[0]}x{size[1]}")
    return round(time.monotonic() - t0, 3)


def claim_last(heads: int) -> None:
    sc.step("claim a mode on the last head")
    head = heads - 1
    found: dict[str, Any] = {"device": device(head), "weston_pid_before": sc.weston_pid()}
    results["claim"] = found
    t0 = time.monotonic()
    answer = sc.claim("mon-last", device(head), f"{CLAIM_MODE[0]}x{CLAIM_MODE[1]}@60")
    found["prepare"] = answer
    found["prepare_s"] = round(time.monotonic() - t0, 3)
    if answer["error"]:
        raise RuntimeError(f"claim on {device(head)}: {answer['error']}")
    found["scanout_s"] = round(found["prepare_s"] + scanout_at(head, CLAIM_MODE, "claimed-last"),
                               3)
    found["outputs"] = sc.wayland_outputs()
    found["weston_pid_after"] = sc.weston_pid()
    t0 = time.monotonic()
    found["release"] = sc.release("mon-last", answer["uid"])
    found["release_scanout_s"] = round(time.monotonic() - t0 + scanout_at(
        head, LAST, "released-last"), 3)
    found["weston_memory"] = memory(found["weston_pid_after"])


def start_tenants() -> dict[int, dict[str, Any]]:
    tenants = {}
    for head, (name, colour) in TENANTS.items():
        answer = sc.claim(name, device(head))
        if answer["error"]:
            raise RuntimeError(f"claim {name} on {device(head)}: {answer['error']}")
        shown = sc.show_app(answer["uid"], device(head), f"tenant{head}", colour)
        dump = sc.dump_showing(head, f"replug-before-head{head}", colour)
        tenants[head] = {"claim": answer, "shown": shown, "dump": dump}
    return tenants


COUNTERS = ("display_hotplug_events_total", "display_compositor_restarts_total")
METRICS_URL = "http://127.0.0.1:9200/metrics"
"""The operator's metrics (deploy/base: --metrics-addr :9200, the host's network)."""


def operator_counters() -> dict[str, float]:
    """The operator's uevent and restart counters: whether the kernel's uevent reached it,
    and whether it restarted weston (by reason)."""
    with urllib.request.urlopen(METRICS_URL, timeout=10) as reply:
        text = reply.read().decode()
    found = {}
    for line in text.splitlines():
        if line.startswith(COUNTERS):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


def replug_with_operator() -> None:
    sc.step("re-plug beside two tenants")
    head, name = REPLUG_HEAD, output(REPLUG_HEAD)
    found: dict[str, Any] = {"tenants": start_tenants(), "weston_pid_before": sc.weston_pid(),
                             "counters_before": operator_counters()}
    results["replug"] = found
    sc.ask_host(op="sample_start", colours={str(h): list(c) for h, (_, c) in TENANTS.items()})
    t0 = time.monotonic()
    watch = OwnerWatch([output(h) for h in TENANTS], t0)
    try:
        found["unplug_host_t"] = sc.ask_host(op="unplug", head=head)["host_t"]
        try:
            found["unplug_slice_s"] = timed("the slice drops the device",
                                            lambda: device(head) not in sc.slice_devices(), t0)
        finally:  # what the operator heard, also when the slice never followed
            found["counters_unplugged"] = operator_counters()
            found["sysfs_unplugged"] = sc.sysfs_connectors()[f"card0-{name}"]
        found["unplug_dark_s"] = timed("weston powers the output off",
                                       lambda: sc.output_power(name) == "off", t0)
        t1 = time.monotonic()
        found["plug_host_t"] = sc.ask_host(op="plug", head=head, width=SIZES[0][0],
                                           height=SIZES[0][1])["host_t"]
        found["plug_at_s"] = round(t1 - t0, 3)
        found["replug_slice_s"] = timed("the slice regains the device",
                                           lambda: device(head) in sc.slice_devices(), t1)
        found["replug_output_s"] = timed(
            "weston drives the output again", lambda: sc.output_power(name) == "on", t1)
        found["replug_scanout_s"] = round(time.monotonic() - t1 + scanout_at(
            head, SIZES[0], "replugged-head1"), 3)
        sc.until(lambda: all(fb_owners().get(output(h)) == WESTON_COMM for h in TENANTS),
                 timeout=60, what="heads 0 and 2 scanning out weston's framebuffer")
        time.sleep(1.0)  # a second of samples after: does a tenant's picture come back?
    finally:
        _stop_watching(found, watch)
    _after(found)


def _stop_watching(found: dict[str, Any], watch: OwnerWatch) -> None:
    """The scanout owners and the host's samples of the tenants' heads, into `found`."""
    found["owners"] = watch.stop()
    stopped = sc.ask_host(op="sample_stop")
    found["samples"], found["sample_errors"] = stopped["samples"], stopped["errors"]


def _after(found: dict[str, Any]) -> None:
    """weston's pid, the operator's counters and each tenant's round trip after a stage."""
    found["weston_pid_after"] = sc.weston_pid()
    found["counters_after"] = operator_counters()
    for h in TENANTS:
        found["tenants"].setdefault(h, {})["roundtrip"] = roundtrip(f"tenant{h}")


def join_spare(heads: int) -> None:
    """A monitor plugged into the spare head (a connector weston never drove) beside the
    tenants of the re-plug stage: the operator's PROBE has weston's DRM backend re-read the
    head and weston enables its output (draplugin/node/reprobe.py), without a restart.
    Plug → slice, → the output lit, → scanout at the monitor's preferred mode; then its
    unplug → slice, → the output powered off; weston's pid, the operator's counters, the
    tenants' connections and the host's samples of heads 0 and 2 throughout."""
    head, name, size = heads, output(heads), SIZES[0]
    sc.step(f"join: a monitor on the spare head {head}")
    found: dict[str, Any] = {"head": head, "size": list(size),
                             "weston_pid_before": sc.weston_pid(),
                             "counters_before": operator_counters(), "tenants": {}}
    results["join"] = found
    sc.ask_host(op="sample_start", colours={str(h): list(c) for h, (_, c) in TENANTS.items()})
    watch = OwnerWatch([output(h) for h in TENANTS], time.monotonic())
    try:
        t0 = time.monotonic()
        found["plug_host_t"] = sc.ask_host(op="plug", head=head, width=size[0],
                                           height=size[1])["host_t"]
        found["slice_s"] = timed("the slice gains the spare head's device",
                                 lambda: device(head) in sc.slice_devices(), t0)
        found["lit_s"] = timed("weston drives the spare head's output",
                               lambda: sc.output_power(name) == "on", t0)
        found["scanout_s"] = round(time.monotonic() - t0 + scanout_at(
            head, size, "joined-spare"), 3)
        found["weston_pid_joined"] = sc.weston_pid()
        found["outputs_joined"] = sc.wayland_outputs()
        t1 = time.monotonic()
        found["unplug_host_t"] = sc.ask_host(op="unplug", head=head)["host_t"]
        found["unplug_at_s"] = round(t1 - t0, 3)
        found["unplug_slice_s"] = timed("the slice drops the spare head's device",
                                        lambda: device(head) not in sc.slice_devices(), t1)
        found["unplug_dark_s"] = timed("weston powers the spare head's output off",
                                       lambda: sc.output_power(name) == "off", t1)
        time.sleep(1.0)  # a second of samples after: does a tenant's picture stay?
    finally:
        _stop_watching(found, watch)
    _after(found)


OTHER_MONITOR = (1024, 768)
"""Without a spare head, head 1 gets a monitor preferring this size: another EDID than the
SIZES[0] monitor weston drives it for."""


def restart_stays(heads: int) -> None:
    """A monitor weston cannot take live (reprobe.py says why: a different monitor on a
    connector it drives, whose output keeps the first one's modes): the operator restarts
    weston. The tenants of the re-plug stage are still drawing on heads 0 and 2; their clients
    die with the compositor, so each is started again on its claim's socket once that socket
    accepts (as a kubelet restarts a tenant's exited container, without its back-off)."""
    head, size = REPLUG_HEAD, OTHER_MONITOR
    sc.step(f"restart: a monitor on head {head}")
    tenants = results["replug"]["tenants"]
    old = sc.weston_pid()
    found: dict[str, Any] = {
        "head": head, "cause": "different monitor",
        "weston_pid_before": old, "counters_before": operator_counters(), "tenants": {}}
    results["restart"] = found
    sc.ask_host(op="sample_start", colours={str(h): list(c) for h, (_, c) in TENANTS.items()})
    try:
        t0 = time.monotonic()
        found["plug_host_t"] = sc.ask_host(op="plug", head=head, width=size[0],
                                           height=size[1])["host_t"]
        found["new_pid_s"] = timed("a new weston pid",
                                   lambda: (p := sc.weston_pid()) is not None and p != old, t0)
        found["answer_s"] = timed(f"the new weston answers with {heads} outputs",
                                  lambda: len(sc.wayland_outputs() or {}) == heads, t0)
        found["slice_s"] = timed(f"a slice of {heads} devices",
                                 lambda: len(sc.slice_devices()) == heads
                                 and device(head) in sc.slice_devices(), t0)
        for h in TENANTS:
            found["tenants"][h] = {"client_exit": client_exit(f"tenant{h}", t0)}
        for h in TENANTS:
            path = Path(tenants[h]["shown"]["socket"])
            found["tenants"][h]["socket_s"] = timed(f"claim socket {path} accepts",
                                                    functools.partial(sc.accepts, path), t0)
        # Both at once: one tenant's start-up must not count in the other's dark time.
        with ThreadPoolExecutor(max_workers=len(TENANTS)) as pool:
            shown = {h: pool.submit(relaunch, h, tenants[h]["claim"]["uid"], colour, t0)
                     for h, (_, colour) in TENANTS.items()}
            for h, job in shown.items():
                found["tenants"][h].update(job.result())
        for h, (_, colour) in TENANTS.items():
            found["tenants"][h]["dump"] = sc.dump_showing(h, f"restarted-head{h}", colour)
        found["scanout_s"] = round(time.monotonic() - t0 + scanout_at(
            head, size, f"restarted-head{head}"), 3)
        time.sleep(1.0)  # a second of samples after the tenants are back
    finally:
        stopped = sc.ask_host(op="sample_stop")
        found["samples"], found["sample_errors"] = stopped["samples"], stopped["errors"]
    found["weston_pid_after"] = sc.weston_pid()
    found["counters_after"] = operator_counters()
    for h in TENANTS:
        found["tenants"][h]["roundtrip"] = roundtrip(f"tenant{h}-again")


def relaunch(head: int, uid: str, colour: tuple[int, int, int], t0: float) -> dict[str, Any]:
    """A new client of the tenant on `head` on its claim's socket; when it was shown."""
    answer = sc.show_app(uid, device(head), f"tenant{head}-again", colour)
    return {"shown": answer, "shown_s": round(time.monotonic() - t0, 3)}


def client_exit(name: str, t0: float) -> dict[str, Any]:
    """When (seconds from `t0`, as first seen) and how client `name` exited; its connection
    ends with the compositor, and it exits then (claim show)."""
    child = next(c for n, c in reversed(sc._children) if n == name)
    try:
        sc.until(lambda: child.poll() is not None, timeout=60, what=f"{name} exits")
    except TimeoutError:
        return {"exited": False}
    return {"exited": True, "code": child.returncode, "seen_s": round(time.monotonic() - t0, 3)}


def roundtrip(name: str) -> dict[str, Any]:
    """The tenant's wl_display.sync on its first connection, or why there is none (a weston
    restart ends the connection, and a client of it exits)."""
    child = next(c for n, c in reversed(sc._children) if n == name)
    if child.poll() is not None:
        return {"roundtrip": False, "error": f"the client exited {child.returncode}"}
    return sc.tenant_roundtrip(name, 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--spare-head", action="store_true",
                        help="head N is left unplugged until the join stage")
    args = parser.parse_args()
    heads, spare = args.heads, args.spare_head
    results["heads"] = heads
    results["sizes"] = {str(h): list(size_of(h, heads)) for h in range(heads)}
    sc.LOGS.mkdir(parents=True, exist_ok=True)
    sc.run(["busybox", "ip", "link", "set", "lo", "up"])
    try:
        plug_all(heads, spare)
        sc.start_api()
        sc.declare()
        start_weston(heads)
        replug_alone()
        start_operator(heads)
        claim_last(heads)
        replug_with_operator()
        if spare:
            join_spare(heads)
        restart_stays(heads)
        sc.step("done")
    except Exception as err:  # every finding so far is saved; the host reports the error
        results["errors"].append(f"{type(err).__name__}: {err}")
        import traceback
        traceback.print_exc()
    finally:
        sc.save()
        sc.stop_all()
        results["exits"] = {name: child.returncode for name, child in sc._children}
        sc.save()
    return 0 if not results["errors"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
