"""weston's CPU a frame for a full-screen 1080p client, shm on pixman against dmabuf on GL: the
guest's side of `bench/vm-dmabuf` (python3.13, stdlib only, run from the 9p share like
guest/scenario.py, whose pod, cluster and helpers it uses).

    dmabuf.py [--warmup S] [--window S] [--windows N]

One head (QEMU's 1920x1080). The pod's containers run as the scenario runs them; weston's
container is started once per renderer with WESTON_RENDERER set (pixman as the pixman-renderer
overlay states it, gl as the base does) and nothing else changed. For each renderer a claim on
card0-virtual-1 is prepared through the operator, and the tenant's client
(guest/dmabuf_client.py, without capabilities) connects to the socket the claim's CDI edits
name, as a tenant's container would. Recorded in /share/out/results.json:

- `probe`: the guest's DRM nodes, /dev/udmabuf, the dma-buf heaps;
- `renderers`: per renderer, the renderer file westonctl writes (asked for, running), and
  whether weston advertises zwp_linux_dmabuf_v1 (wayland-info);
- `cases`: `shm-pixman`, `dumb-pixman` (refused: no dmabuf global), `shm-gl`, `dumb-gl`,
  `udmabuf-gl`: the client's answer when shown (its buffers' size, the dmabuf requests and
  weston's created/failed answers), a screendump of the head with the share of it in the
  client's colour, and the measurement windows (frames, seconds, weston's CPU ticks);
- `weston_clients`: weston-simple-dmabuf-egl on the claim's socket with WAYLAND_DEBUG=1, per
  DRM node: how many dmabuf params it created, weston's answers, its frame callbacks;
- `placement`: with weston's drm-backend log scope (a separate GL weston: the scope writes
  lines every repaint, so it is never on while CPU is measured), the dmabuf client with its
  buffers stated LINEAR, then implicit: the scope's lines on where its view went (a plane of
  its own, i.e. scanned out directly, or the renderer), each distinct line with its count.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.vm.guest import pixels, pod
    from tests.vm.guest import scenario as sc
else:  # run as a script from beside scenario.py
    import pixels  # pants: no-infer-dep
    import pod  # pants: no-infer-dep
    import scenario as sc  # pants: no-infer-dep

DEVICE, OUTPUT, HEAD = "card0-virtual-1", "Virtual-1", 0
SIZE = (1920, 1080)
CLIENT = "/share/guest/dmabuf_client.py"
COLOURS = {"shm": (200, 60, 20), "dumb": (30, 170, 90), "udmabuf": (60, 80, 210)}
WAIT_S = 300.0
"""Bound of a weston start with GL (llvmpipe under TCG: 41 s seen with the host loaded)."""
EGL_CLIENT_S = 60.0
"""How long weston-simple-dmabuf-egl gets to show frames."""

results = sc.results


def probe() -> None:
    sc.step("probe")
    found: dict[str, Any] = {
        "dri": sorted(p.name for p in Path("/dev/dri").iterdir()),
        "udmabuf": Path("/dev/udmabuf").exists(),
        "dma_heaps": sorted(p.name for p in Path("/dev/dma_heap").iterdir())
        if Path("/dev/dma_heap").is_dir() else [],
        "kernel": os.uname().release}
    results["probe"] = found


def start_weston(renderer: str, *, scopes: str = "") -> dict[str, Any]:
    """The weston container with WESTON_RENDERER=`renderer` (and WESTON_LOG_SCOPES=`scopes`),
    its env otherwise the plan's; once it answers: its pid, renderer file and globals."""
    label = f"weston-{renderer}{'-scoped' if scopes else ''}"
    sc.step(label)
    old = sc.weston_pid()
    spec = pod.container(sc.PLAN, "weston")
    spec["env"] = {**spec["env"], "WESTON_RENDERER": renderer,
                   **({"WESTON_LOG_SCOPES": scopes} if scopes else {})}
    t0 = time.monotonic()
    child = pod.launch(spec, (sc.LOGS / f"{label}.log").open("ab"))
    sc._children.append(("weston", child))
    outputs = sc.until(lambda: (o := sc.wayland_outputs()) and (p := sc.weston_pid())
                       and p != old and o, timeout=WAIT_S, what=f"{label} answers")
    globals_ = sc.wayland_globals()
    found = {"pid": sc.weston_pid(), "answer_s": round(time.monotonic() - t0, 3),
             "outputs": outputs, "log": f"{label}.log",
             "renderer": json.loads((sc.ETC / "renderer").read_text()),
             "dmabuf_global": "zwp_linux_dmabuf_v1" in globals_,
             "env": {k: v for k, v in spec["env"].items() if k.startswith("WESTON_")}}
    results.setdefault("renderers", {})[label.removeprefix("weston-")] = found
    return found


def stop_weston() -> None:
    pid = sc.weston_pid()
    sc.stop("weston")
    if pid is not None:
        sc.until(lambda: sc.gone_or_zombie(pid), timeout=60, what="weston gone")


def usable() -> bool:
    device = sc.slice_devices().get(DEVICE)
    return device is not None and not device.get("taints")


def claim(name: str) -> tuple[str, Path]:
    """A claim on the head's device prepared by the operator; its uid and the host path of
    the socket its CDI edits give the tenant."""
    sc.until(usable, timeout=WAIT_S, what=f"{DEVICE} published without taints")
    answer = sc.claim(name, DEVICE)
    if answer["error"]:
        raise RuntimeError(f"claim {name} on {DEVICE}: {answer['error']}")
    path = sc.claim_socket(answer["uid"], DEVICE)
    sc.until(lambda: sc.accepts(path), timeout=WAIT_S, what=f"the claim's socket {path}")
    return answer["uid"], path


def run_client(case: str, buffers: str, socket: Path, *, measure: dict[str, float] | None,
               weston: int, modifier: str = "auto") -> dict[str, Any]:
    """The tenant's client on the claim's socket, without capabilities: what it answered when
    shown, the head's screendump, and its measurement windows when `measure` is given."""
    sc.step(f"client {case}")
    argv = [*sc.NO_CAPS, "python3", CLIENT, f"--socket={socket}", f"--buffers={buffers}",
            "--colour=" + ",".join(map(str, COLOURS[buffers])), f"--modifier={modifier}"]
    if measure:
        argv += [f"--weston-pid={weston}", *(f"--{k}={v}" for k, v in measure.items())]
    child = sc.start(case, argv)
    found: dict[str, Any] = {"buffers": buffers}
    results.setdefault("cases", {})[case] = found
    try:
        found["shown"] = sc.until(lambda: sc.log_json(case, 0) or (
            child.poll() is not None and {"error": f"exited {child.returncode}"}),
            timeout=WAIT_S, what=f"{case} shown")
        if "error" in found["shown"]:
            return found
        dump = sc.ask_host(op="screendump", head=HEAD, name=f"{case}-head{HEAD}")
        image = pixels.read_ppm(sc.OUT / f"{case}-head{HEAD}.ppm")
        found["dump"] = {**dump, "coverage": round(
            pixels.coverage(image, COLOURS[buffers], step=97), 4)}
        if measure:
            bound = measure["warmup"] + measure["window"] * measure["windows"] * 20 + 120
            found["measured"] = sc.until(lambda: sc.log_json(case, 1) or (
                child.poll() is not None and {"error": f"exited {child.returncode}"}),
                timeout=bound, what=f"{case} measured")
    finally:
        sc.stop(case)
        found["exit"] = child.returncode
    return found


def egl_client(node: str, socket: Path) -> dict[str, Any]:
    """weston-simple-dmabuf-egl rendering with EGL on `node` into dmabufs it gives weston,
    traced by libwayland (WAYLAND_DEBUG=1): what it asked and what weston answered."""
    name = f"simple-dmabuf-egl-{Path(node).name}"
    sc.step(name)
    env = {"PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": os.fspath(socket.parent),
           "WAYLAND_DISPLAY": socket.name, "WAYLAND_DEBUG": "1"}
    log = sc.LOGS / f"{name}.log"
    with log.open("ab") as out:
        child = subprocess.Popen([*sc.NO_CAPS, "weston-simple-dmabuf-egl", "-d", node, "-e", "0"],
                                 stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                 env=env, start_new_session=True)
    sc._children.append((name, child))

    def frames() -> int:
        return len(re.findall(r"wl_callback[@#]\d+\.done\(", log.read_text(errors="replace")))

    with contextlib.suppress(TimeoutError):
        sc.until(lambda: child.poll() is not None or frames() >= 10, timeout=EGL_CLIENT_S,
                 what=f"{name}: ten frames")
    exited = child.poll()
    sc.stop(name)
    text = log.read_text(errors="replace")
    return {"node": node, "exited_by_itself": exited is not None, "exit": child.returncode,
            "params_created": len(re.findall(
                r"-> zwp_linux_buffer_params_v1[@#]\d+\.create(_immed)?\(", text)),
            "created_events": len(re.findall(r"zwp_linux_buffer_params_v1[@#]\d+\.created\(",
                                             text)),
            "failed_events": len(re.findall(r"zwp_linux_buffer_params_v1[@#]\d+\.failed\(",
                                            text)),
            "frames": frames(),
            "messages": [line for line in text.splitlines()
                         if not re.match(r"^\[\s*\d", line)][-12:]}


PLACEMENT = re.compile(r"\[view\]|\[primary\]|\[plane\]|couldn't get FB|renderer composition"
                       r"|provisionally placing|scanout")


def placement(socket: Path, weston: int, log: Path) -> dict[str, Any]:
    """The dmabuf client for a few frames on a weston logging its drm-backend scope, with
    its buffers' modifier stated LINEAR and left implicit: per modifier, the scope's lines on
    where weston put views (a plane of their own, i.e. scanned out directly, or the renderer),
    each distinct line once with its count."""
    found: dict[str, Any] = {}
    for modifier in ("linear", "implicit"):
        before = log.stat().st_size
        case = f"dumb-gl-{modifier}-scoped"
        found[modifier] = {"client": run_client(
            case, "dumb", socket, weston=weston, modifier=modifier,
            measure={"warmup": 1.0, "window": 4.0, "windows": 1})}
        with log.open("rb") as raw:
            raw.seek(before)
            text = raw.read().decode(errors="replace")
        lines: dict[str, int] = {}
        for line in text.splitlines():
            if PLACEMENT.search(line):
                key = re.sub(r"0x[0-9a-f]{8,}", "VIEW", re.sub(r"FB ID \d+", "FB ID N",
                                                               line.strip()))
                lines[key] = lines.get(key, 0) + 1
        found[modifier]["lines"] = lines
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--warmup", type=float, default=5.0)
    parser.add_argument("--window", type=float, default=10.0)
    parser.add_argument("--windows", type=int, default=3)
    args = parser.parse_args()
    measure = {"warmup": args.warmup, "window": args.window, "windows": args.windows}
    results["measure"] = measure
    sc.LOGS.mkdir(parents=True, exist_ok=True)
    sc.run(["busybox", "ip", "link", "set", "lo", "up"])
    try:
        probe()
        sc.start_api()
        sc.declare()
        weston = start_weston("pixman")
        sc.step("operator")
        sc.start_container("operator")
        uid, socket = claim("dmabuf-pixman")
        run_client("shm-pixman", "shm", socket, measure=measure, weston=weston["pid"])
        run_client("dumb-pixman", "dumb", socket, measure=None, weston=weston["pid"])
        sc.release("dmabuf-pixman", uid)
        stop_weston()
        weston = start_weston("gl")
        uid, socket = claim("dmabuf-gl")
        for case, buffers in (("shm-gl", "shm"), ("dumb-gl", "dumb"), ("udmabuf-gl", "udmabuf")):
            run_client(case, buffers, socket, measure=measure, weston=weston["pid"])
        results["weston_clients"] = [
            egl_client(f"/dev/dri/{node}", socket) for node in results["probe"]["dri"]
            if node.startswith(("card", "renderD"))]
        sc.release("dmabuf-gl", uid)
        stop_weston()
        sc.step("placement")
        weston = start_weston("gl", scopes="drm-backend")
        uid, socket = claim("dmabuf-scoped")
        results["placement"] = placement(socket, weston["pid"], sc.LOGS / weston["log"])
        sc.release("dmabuf-scoped", uid)
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
