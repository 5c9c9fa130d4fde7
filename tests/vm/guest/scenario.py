"""The VM tier's scenario, run inside the guest (python3.13, stdlib only) from the 9p share.

`/share/run` starts it in a network namespace of its own (`unshare --net`): the pod's. There
the kernel's uevents arrive and udevd's rebroadcast (in the guest's initial namespace) does not,
as on a node with `hostUsers: true`. The fake API server runs in that namespace too, where a
pod would reach its cluster's API over the network (lightkube speaks TCP only): HTTPS with its
own CA and RBAC, loaded with the rendered base's objects (guest/pod.py).

The pod's four containers run as the host's plan states them (tests/vm/podplan.py: the
manifest's args, env and mounts, the images' entrypoints as the venvs the host made in
/share/venv; guest/pod.py): no flag of the scenario's own, the service account's token for the
API, as root without any capability (setpriv: empty bounding, inheritable and ambient sets,
no_new_privs), against the real /sys/class/drm and /dev/dri/card0, in the order the kubelet
uses: declare to completion, then westonctl (weston 14, drm backend, LIBSEAT_BACKEND=noop, the
layout shell), then the operator and the capture server. The scenario's own calls (claims,
slices) are the cluster owner's, with the admin token. Host-side steps (plugging heads, QMP
screendumps) go through the share's req/ and ack/ files (tests/vm/qemu.py RequestServer).

Every step's findings go into /share/out/results.json, rewritten after each step, so a
failure part-way still leaves what was seen; the host's tests assert on it. Every wait here
is bounded; whatever happens, the processes are stopped before the scenario returns.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.vm.guest import pixels, pod
else:  # the guest runs this file as a script, from beside pixels.py and pod.py
    import pixels  # pants: no-infer-dep
    import pod  # pants: no-infer-dep

SHARE = Path("/share")
OUT = SHARE / "out"
LOGS = OUT / "logs"
VENV = SHARE / "venv"
PLAN = pod.load()
ETC = Path("/etc/weston")
RUNTIME = Path("/var/run/display.liken.sh")
SOCKET = RUNTIME / "wayland-0"
CDI = Path("/var/run/cdi")
REGISTRATION = Path("/var/lib/kubelet/plugins_registry/display.liken.sh-reg.sock")
CLUSTER = Path("/run/cluster")
"""The admin's token and the API's CA, for the claim CLI."""
NODE = "vm"
SYS_DRM = Path("/sys/class/drm")
DEBUGFS_CLIENTS = Path("/sys/kernel/debug/dri/0/clients")
NO_CAPS = pod.NO_CAPS
# Heads 1 and 2 are plugged at these sizes; head 0 comes up at QEMU's 1920x1080 (preferred
# 75 Hz in its EDID, so weston picks that).
PLUGGED = {1: (1280, 800), 2: (1024, 768)}
HOTPLUG_HEAD = 2
HOTPLUG_DEVICE = "card0-virtual-3"
HOTPLUG_OUTPUT = "Virtual-3"
HOTPLUG_BOUND_S = 5.0
WAIT_S = 180.0
"""Bound of each start-up wait: TCG on a shared 2-core machine takes 20-50 s to start a PEX."""
POLL_S = 0.1
CLAIM_COLOUR = (230, 20, 160)
"""What the claim's app fills its surface with: far from the layout shell's black background."""
SHOWN_COVERAGE = 0.9
"""The claimed head counts as showing the app once this share of a sampled dump is its colour."""
CAPTURE = "https://127.0.0.1:9201"
VIEWER = ("default", "screen-viewer")
"""The ServiceAccount simnode's RBAC lets see every screen (simnode/cluster/rbac.yaml)."""

results: dict[str, Any] = {"steps": [], "errors": [], "cmdlines": {}, "environs": {}}
cluster: dict[str, Any] = {}
started = time.monotonic()


def now() -> float:
    return round(time.monotonic() - started, 3)


def save() -> None:
    tmp = OUT / ".results.json.tmp"
    tmp.write_text(json.dumps(results, indent=2, sort_keys=True))
    tmp.rename(OUT / "results.json")


def step(name: str) -> None:
    results["steps"].append({"name": name, "at": now()})
    print(f"scenario: {name} at {now()} s", flush=True)
    save()


def until(check: Callable[[], Any], *, timeout: float = WAIT_S, what: str) -> Any:
    """Poll `check` until it returns something truthy; TimeoutError naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g} s: {what}")
        time.sleep(POLL_S)


# -- the host's side ---------------------------------------------------------------------------

_requests = [0]


def ask_host(**request: Any) -> dict[str, Any]:
    """Write a request for the host and wait for its ack."""
    _requests[0] += 1
    name = f"{_requests[0]:03d}-{request['op']}.json"
    (SHARE / "req" / f".{name}").write_text(json.dumps(request))
    (SHARE / "req" / f".{name}").rename(SHARE / "req" / name)
    ack = SHARE / "ack" / name
    until(ack.exists, timeout=30, what=f"the host's ack of {name}")
    reply: dict[str, Any] = json.loads(ack.read_text())
    if not reply.get("ok"):
        raise RuntimeError(f"the host failed {request}: {reply.get('error')}")
    return reply


# -- processes ---------------------------------------------------------------------------------

_children: list[tuple[str, subprocess.Popen[bytes]]] = []


def start(name: str, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
    log = (LOGS / f"{name}.log").open("ab")
    child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                             env={**os.environ, **env}, start_new_session=True)
    _children.append((name, child))
    return child


def start_container(name: str) -> subprocess.Popen[bytes]:
    """The plan's container `name`; its argv and env as the kernel holds them once it runs."""
    spec = pod.container(PLAN, name)
    child = pod.launch(spec, (LOGS / f"{name}.log").open("ab"))
    _children.append((name, child))
    target = executable(spec["argv"][0], spec["env"])
    running = until(lambda: exec_done(child, target), timeout=WAIT_S,
                    what=f"{name} running {target}")
    if running is not True:
        results["cmdlines"].setdefault(name, running[0])
        results["environs"].setdefault(name, running[1])
    return child


def executable(program: str, env: dict[str, str]) -> str:
    """The file the kernel will show as /proc/PID/exe for `program`, symlinks resolved."""
    found = program if "/" in program else shutil.which(program, path=env.get("PATH"))
    if found is None:
        raise RuntimeError(f"{program} is not on the container's PATH {env.get('PATH')}")
    return os.path.realpath(found)


def exec_done(child: subprocess.Popen[bytes],
              target: str) -> tuple[list[str], dict[str, str]] | bool:
    """The child's cmdline and environ once it runs `target`; True if it exited first.

    Between fork and exec the child still carries the scenario's own cmdline, and then
    setpriv's until setpriv execs the container's program, so only /proc/PID/exe being that
    program says the exec happened. The exe and cmdline are read again after environ (mid-exec
    environ reads empty) and must not have moved."""
    try:
        exe = os.readlink(f"/proc/{child.pid}/exe")
        argv = pod.cmdline(child.pid)
        environ = Path(f"/proc/{child.pid}/environ").read_bytes()
        again = pod.cmdline(child.pid)
        exe_again = os.readlink(f"/proc/{child.pid}/exe")
    except OSError:
        return child.poll() is not None
    if exe == exe_again == target and argv == again:
        return argv, dict(e.split("=", 1) for e in environ.decode().split("\0") if "=" in e)
    return child.poll() is not None


def stop(name: str) -> int | None:
    """SIGTERM the child `name` started last, and reap it (SIGKILL past the bound)."""
    child = next(c for n, c in reversed(_children) if n == name)
    if child.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGTERM)
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
            child.wait(5)
    return child.returncode


def stop_all() -> None:
    for name, child in reversed(_children):
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child.pid, signal.SIGCONT)
                os.kill(child.pid, signal.SIGTERM)
            try:
                child.wait(8)
            except subprocess.TimeoutExpired:
                print(f"scenario: {name} outlived SIGTERM; killing", flush=True)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.pid, signal.SIGKILL)
                child.wait(5)


def venv_binary(name: str) -> list[str]:
    """A venv the host made: its `pex` script's shebang names the host's path, so it runs
    through the interpreter (the script re-execs its venv's python, found beside itself)."""
    return ["python3.11", os.fspath(VENV / name / "pex")]


def pod_binary(name: str) -> list[str]:
    return [*NO_CAPS, *venv_binary(name)]


def run(argv: list[str], *, timeout: float = 60) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:6]} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return done.stdout


# -- what is observed --------------------------------------------------------------------------

def sysfs_connectors() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(SYS_DRM.glob("card0-*")):
        edid = (path / "edid").read_bytes()
        found[path.name] = {"status": (path / "status").read_text().strip(), "edid_len": len(edid),
                            "edid_digest": hashlib.sha256(edid).hexdigest()[:16] if edid else ""}
    return found


def admin() -> pod.Api:
    api: pod.Api = cluster["admin"]
    return api


def api_get(path: str) -> Any:
    return admin().get(path)


def slice_devices() -> dict[str, Any]:
    """The node's published devices by name ({} before the first publish)."""
    slices = api_get("/apis/resource.k8s.io/v1/resourceslices")["items"]
    devices = {}
    for item in slices:
        if item["spec"].get("nodeName") == NODE or item["spec"].get("pool", {}).get("name") == NODE:
            for device in item["spec"].get("devices", []):
                devices[device["name"]] = device
    return devices


def wayland_outputs() -> dict[str, str] | None:
    """Output name → current mode ("1920x1080") from wayland-info; None if nothing answers."""
    try:
        text = subprocess.run(["wayland-info", "-i", "wl_output"], capture_output=True,
                              text=True, timeout=10, check=False,
                              env={**os.environ, "XDG_RUNTIME_DIR": os.fspath(RUNTIME),
                                   "WAYLAND_DISPLAY": "wayland-0"}).stdout
    except subprocess.TimeoutExpired:
        return None
    outputs: dict[str, str] = {}
    for block in text.split("interface: 'wl_output'")[1:]:
        # The block's first line ends in the global's number ("name: 16"); the output's
        # own name is on an indented line of its own.
        name = re.search(r"^\s+name: (\S+)", block, re.MULTILINE)
        current = re.search(r"width: (\d+) px, height: (\d+) px, refresh: [\d.]+ Hz,\s*"
                            r"flags: current", block)
        if name:
            outputs[name.group(1)] = f"{current.group(1)}x{current.group(2)}" if current else ""
    return outputs or None


def wayland_globals() -> list[str]:
    """The interfaces weston advertises (wayland-info), e.g. zwp_linux_dmabuf_v1 with GL."""
    text = subprocess.run(["wayland-info"], capture_output=True, text=True, timeout=30,
                          check=True, env={**os.environ, "XDG_RUNTIME_DIR": os.fspath(RUNTIME),
                                           "WAYLAND_DISPLAY": "wayland-0"}).stdout
    return sorted(set(re.findall(r"interface: '(\w+)'", text)))


def drm_clients() -> list[dict[str, str]]:
    """The card's open files from debugfs: command, pid, master flag."""
    rows = []
    lines = DEBUGFS_CLIENTS.read_text().splitlines()
    for line in lines[1:]:
        cols = line.split()
        if len(cols) >= 4:
            rows.append({"command": cols[0], "pid": cols[1], "master": cols[3]})
    return rows


def weston_pid() -> int | None:
    with contextlib.suppress(FileNotFoundError, ValueError):
        pid = int((ETC / "weston.pid").read_text().strip())
        if Path(f"/proc/{pid}").exists():
            return pid
    return None


def gone_or_zombie(pid: int) -> bool:
    """Killed: a zombie, or already reaped (also between the open and the read)."""
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True


def proc_status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return {k: fields.get(k, "") for k in ("Name", "CapEff", "CapPrm", "CapBnd", "NoNewPrivs")}


def netns(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


# -- the scenario ------------------------------------------------------------------------------

def plug_heads() -> None:
    step("plug heads 1 and 2")
    for head, (width, height) in PLUGGED.items():
        ask_host(op="plug", head=head, width=width, height=height)
    # Nothing is master yet, so the fbdev console's probe refreshes sysfs.
    until(lambda: all(c["status"] == "connected" for c in sysfs_connectors().values()),
          timeout=30, what="three connectors connected in sysfs")
    results["sysfs"] = sysfs_connectors()
    for path in sorted(SYS_DRM.glob("card0-*")):
        (OUT / f"edid-{path.name}.bin").write_bytes((path / "edid").read_bytes())


def start_api() -> None:
    """The cluster: the fake API (the rendered base's objects, RBAC), the Pod, its account's
    token projected where the binaries read it; the node's volumes and the weston image's
    layout shell."""
    step("fake API server")
    child = start("fakekube", [*venv_binary("fakekube"),
                               *pod.api_argv(PLAN, SHARE / "kube" / "objects.yaml")])

    def announced() -> tuple[str, Path, str] | None:
        if child.poll() is not None:
            raise RuntimeError(f"fakekube exited {child.returncode}: "
                               f"{(LOGS / 'fakekube.log').read_text()[-1500:]}")
        return pod.api_announcement((LOGS / "fakekube.log").read_text(errors="replace"))

    url, ca, token = until(announced, timeout=WAIT_S, what="the fake API announces itself")
    cluster["admin"] = pod.Api(url, ca, token)
    cluster["url"] = url
    pod.atomic_write(CLUSTER / "token", token.encode(), 0o600)
    pod.atomic_write(CLUSTER / "ca.crt", ca.read_bytes())
    created = pod.create_pod(admin(), PLAN)
    pod.project_account(pod.pod_token(admin(), PLAN, created), ca.read_bytes(),
                        PLAN["service_account"]["namespace"])
    pod.make_volumes(PLAN)
    pod.install_shell(SHARE / "layout-shell.so", PLAN)


def declare() -> None:
    step("declare")
    results["connectors"] = json.loads(run([*pod_binary("declare"), "connectors", "--json"]))
    child = start_container("declare")
    code = until(lambda: child.poll() is not None and [child.returncode], timeout=WAIT_S,
                 what="declare runs to completion")[0]
    if code != 0:
        raise RuntimeError(f"declare exited {code}: "
                           f"{(LOGS / 'declare.log').read_text(errors='replace')[-1500:]}")
    results["weston_ini"] = (ETC / "weston.ini").read_text()
    results["clients_before_weston"] = drm_clients()


def start_westonctl() -> subprocess.Popen[bytes]:
    return start_container("weston")


def compositor() -> None:
    step("westonctl")
    start_westonctl()
    outputs = until(lambda: (o := wayland_outputs()) and len(o) == 3 and o,
                    timeout=WAIT_S, what="weston answers with three outputs")
    results["weston_outputs"] = outputs
    pid = until(weston_pid, timeout=10, what="weston's pid file")
    results["weston"] = {"pid": pid, "status": proc_status(pid), "netns": netns(pid),
                         "renderer": json.loads((ETC / "renderer").read_text()),
                         "globals": wayland_globals()}
    results["clients_with_weston"] = drm_clients()


def operator() -> None:
    step("operator")
    child = start_container("operator")
    results["first_slice"] = until(lambda: len(slice_devices()) == 3 and slice_devices(),
                                   timeout=WAIT_S, what="a slice of three devices")
    results["operator"] = {"pid": child.pid, "status": proc_status(child.pid),
                           "netns": netns(child.pid), "own_netns": netns(os.getpid()),
                           "init_netns": netns(1)}
    results["clients_with_operator"] = drm_clients()


def capture_server() -> None:
    """The pod's fourth container, as its manifest runs it (the TLS Secret's volume is empty
    here, so it serves a self-signed leaf), and a viewer's token for its audience."""
    step("capture server")
    start_container("capture")
    cluster["viewer"] = pod.token_request(admin(), *VIEWER, audiences=["display-capture"])


def capture_get(path: str, *, authorized: bool = True) -> tuple[int, bytes]:
    """An HTTPS GET of the capture server (with the viewer's token when `authorized`): its
    status and body. The leaf is self-signed (no Secret is mounted), so it is not verified."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    headers = {"Authorization": f"Bearer {cluster['viewer']}"} if authorized else {}
    request = urllib.request.Request(CAPTURE + path, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60, context=context) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()


def capture_answers() -> bool:
    """Whether HTTPS answers at all; RuntimeError with its log's tail if the server exited."""
    child = next(c for n, c in reversed(_children) if n == "capture")
    try:
        capture_get("/healthz", authorized=False)
    except OSError:
        if child.poll() is not None:
            tail = (LOGS / "capture.log").read_text(errors="replace")[-1500:]
            raise RuntimeError(f"capture exited {child.returncode}: {tail}") from None
        return False
    return True


def screendumps(prefix: str) -> dict[str, Any]:
    return {str(head): ask_host(op="screendump", head=head, name=f"{prefix}-head{head}")
            for head in range(3)}


def lit() -> None:
    step("screendumps")
    results["screendumps"] = screendumps("lit")


def cluster_flags() -> list[str]:
    return [f"--api={cluster['url']}", f"--token-file={CLUSTER / 'token'}",
            f"--ca-file={CLUSTER / 'ca.crt'}"]


def claim(name: str, device: str, mode: str | None = None) -> dict[str, Any]:
    argv = [*venv_binary("claim"), "prepare", *cluster_flags(), f"--registration={REGISTRATION}",
            f"--node={NODE}", f"--device={device}", *([f"--mode={mode}"] if mode else []), name]
    answer: dict[str, Any] = json.loads(run(argv, timeout=WAIT_S))
    return answer


def release(name: str, uid: str) -> dict[str, Any]:
    argv = [*venv_binary("claim"), "unprepare", *cluster_flags(),
            f"--registration={REGISTRATION}", name, uid]
    answer: dict[str, Any] = json.loads(run(argv, timeout=WAIT_S))
    return answer


def claim_devices(name: str) -> Any:
    """The claim's `status.devices` once the operator has written them (its report follows the
    prepare), or the error that kept them out."""
    path = f"/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/{name}"
    try:
        return until(lambda: (api_get(path).get("status") or {}).get("devices"), timeout=WAIT_S,
                     what=f"the operator's status.devices on claim {name}")
    except TimeoutError as err:
        return {"error": str(err)}


def claim_socket(uid: str, device: str) -> Path:
    """Where the claim's CDI device puts WAYLAND_DISPLAY, read as a runtime applies its edits:
    the mount whose containerPath holds that path, mapped back to its hostPath."""
    spec = json.loads((CDI / f"k8s.display.liken.sh-display_{uid}.yaml").read_text())
    edits = next(d for d in spec["devices"] if d["name"] == f"{uid}-{device}")["containerEdits"]
    env = dict(e.split("=", 1) for e in edits["env"])
    inside = Path(env["WAYLAND_DISPLAY"])
    for mount in edits["mounts"]:
        if inside.is_relative_to(mount["containerPath"]):
            return Path(mount["hostPath"]) / inside.relative_to(mount["containerPath"])
    raise RuntimeError(f"no mount of claim {uid} holds WAYLAND_DISPLAY={inside}")


def accepts(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        try:
            sock.connect(os.fspath(path))
        except OSError:
            return False
    return True


def log_json(name: str, index: int = 0) -> dict[str, Any] | None:
    """The JSON line number `index` (from 0) a child printed to its log, once it has."""
    lines = [line for line in (LOGS / f"{name}.log").read_text(errors="replace").splitlines()
             if line.startswith("{")]
    if len(lines) <= index:
        return None
    parsed: dict[str, Any] = json.loads(lines[index])
    return parsed


def show_app(uid: str, device: str, name: str = "app",
             colour: tuple[int, int, int] = CLAIM_COLOUR) -> dict[str, Any]:
    """The claim's app on its socket, without capabilities; its answer once shown."""
    path = claim_socket(uid, device)
    until(lambda: accepts(path), timeout=WAIT_S, what=f"the claim's socket {path} accepts")
    child = start(name, [*NO_CAPS, *venv_binary("claim"), "show", f"--socket={path}",
                         "--colour=" + ",".join(map(str, colour))])
    answer: dict[str, Any] = until(lambda: log_json(name) or (
        child.poll() is not None and {"error": f"exited {child.returncode}"}),
        timeout=WAIT_S, what=f"the claim's app {name} shown")
    answer["socket"] = os.fspath(path)
    return answer


def dump_showing(head: int, name: str,
                 colour: tuple[int, int, int] = CLAIM_COLOUR) -> dict[str, Any]:
    """Dump `head` until the app's colour covers it (the frame after the commit may not have
    been scanned out yet); the last dump's reply and coverage."""
    deadline = time.monotonic() + 60
    attempt = 0
    while True:
        attempt += 1
        reply = ask_host(op="screendump", head=head, name=name)
        share = pixels.coverage(pixels.read_ppm(OUT / f"{name}.ppm"), colour, step=97)
        if share >= SHOWN_COVERAGE or time.monotonic() > deadline:
            return {**reply, "sampled_coverage": round(share, 4), "attempts": attempt}
        time.sleep(0.5)


def still_and_dump(output: str, head: int) -> dict[str, Any]:
    """A still of `output` through the capture server, then head `head`'s scanout at once."""
    status, body = capture_get(f"/api/v1/outputs/{output}/still.png")
    dump = ask_host(op="screendump", head=head, name=f"captured-head{head}")
    if status == 200:
        (OUT / f"capture-{output}.png").write_bytes(body)
    return {"status": status, "error": "" if status == 200 else body[:500].decode(errors="replace"),
            "dump": dump}


def captures() -> dict[str, Any]:
    until(capture_answers, timeout=WAIT_S, what="the capture server answers HTTPS")
    found: dict[str, Any] = {"no_token": capture_get("/api/v1/outputs/Virtual-2/still.png",
                                                     authorized=False)[0]}
    found["claimed"] = still_and_dump("Virtual-2", 1)
    found["unclaimed"] = still_and_dump("Virtual-1", 0)
    return found


def claims() -> None:
    """A claim stating a mode on head 1 restarts weston at it; its app's colour shows on that
    head alone, and a capture of it (and of an unclaimed head) is what the head scans out; its
    release restores the preferred mode."""
    step("claim a mode")
    found: dict[str, Any] = {}
    answer = claim("vm-mode", "card0-virtual-2", "1024x768@60")
    found["prepare"] = answer
    if not answer["error"]:
        until(lambda: (wayland_outputs() or {}).get("Virtual-2") == "1024x768", timeout=WAIT_S,
              what="Virtual-2 at the claimed 1024x768")
        found["claimed_outputs"] = wayland_outputs()
        found["status_devices"] = claim_devices("vm-mode")
        step("the claim's app")
        found["app"] = show_app(answer["uid"], "card0-virtual-2")
        results["claims"] = found
        if "error" not in found["app"]:
            found["claimed"] = dump_showing(1, "claimed-head1")
            found["others"] = {head: ask_host(op="screendump", head=head,
                                              name=f"claimed-head{head}") for head in (0, 2)}
            step("captures")
            found["captures"] = captures()
        stop("app")
        step("release")
        found["release"] = release("vm-mode", answer["uid"])
        until(lambda: (wayland_outputs() or {}).get("Virtual-2") == "1280x800", timeout=WAIT_S,
              what="Virtual-2 back at its preferred 1280x800")
        found["released"] = ask_host(op="screendump", head=1, name="released-head1")
    results["claims"] = found


# -- live reconfiguration: one head changes while the others' tenants keep running ---------

TENANTS = {0: ("vm-tenant-0", "card0-virtual-1", (20, 200, 60)),
           2: ("vm-tenant-2", "card0-virtual-3", (40, 90, 230))}
"""Head: the claim, its device and its app's colour, on the heads that do not change."""
LIVE_OUTPUT, LIVE_HEAD, LIVE_MODE = "Virtual-2", 1, (1024, 768)
DRM_STATE = Path("/sys/kernel/debug/dri/0/state")


def layout_request(line: str) -> list[str]:
    """One request on the layout module's control socket (weston.ini names it): the reply's
    lines (an `OK <n>` of OUTPUTS or LIST and its n lines)."""
    found = re.search(r"^control-socket=(.+)$", results["weston_ini"], re.MULTILINE)
    if found is None:
        raise RuntimeError("weston.ini names no control socket")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(60)
        sock.connect(found.group(1))
        reader = sock.makefile("r", encoding="ascii", newline="\n")
        if reader.readline().strip() != "LAYOUT 1":
            raise RuntimeError("the control socket's greeting is not LAYOUT 1")
        sock.sendall(line.encode() + b"\n")
        reply = [reader.readline().rstrip("\n")]
        count = reply[0].removeprefix("OK ")
        if line in ("OUTPUTS", "LIST", "PROBE") and count.isdigit():
            reply += [reader.readline().rstrip("\n") for _ in range(int(count))]
        return reply


def planes_sample() -> dict[str, bool]:
    """From the kernel's atomic state: for each connector on a CRTC, whether a plane with a
    framebuffer is on that CRTC (False: the head shows nothing)."""
    shown: dict[str, bool] = {}
    connector_crtc: dict[str, str] = {}
    block: dict[str, str] = {}
    for line in [*DRM_STATE.read_text(errors="replace").splitlines(), "end"]:
        if not line.startswith("\t"):
            crtc = block.get("crtc", "(null)")
            if block.get("kind") == "plane" and crtc != "(null)":
                shown[crtc] = shown.get(crtc, False) or block.get("fb", "0") != "0"
            elif block.get("kind") == "connector" and crtc != "(null)":
                connector_crtc[block["name"]] = crtc
            kind, _, name = line.partition("]: ")
            block = {"kind": kind.split("[")[0], "name": name.strip()}
        elif "=" in line and not line.startswith("\t\t"):
            key, _, value = line.strip().partition("=")
            block[key] = value.split(" ")[0]
    return {connector: shown.get(crtc, False) for connector, crtc in connector_crtc.items()}


class PlaneWatch:
    """Samples the atomic state as fast as it can read it while a change runs: which
    connectors' CRTCs ever lost their plane's framebuffer, among those that had one at the
    start, and in how many samples."""

    def __init__(self) -> None:
        import threading
        self.samples = 0
        self.blanked: dict[str, int] = {}
        self._stop = threading.Event()
        self._first = planes_sample() if DRM_STATE.exists() else {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self._first:
            sample = planes_sample()
            self.samples += 1
            for connector, had in self._first.items():
                if had and not sample.get(connector, False):
                    self.blanked[connector] = self.blanked.get(connector, 0) + 1
            time.sleep(0.002)

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(10)
        return {"connectors": sorted(self._first), "samples": self.samples,
                "blanked": self.blanked}


def tenant_roundtrip(name: str, index: int) -> dict[str, Any]:
    """Ask app `name` for a wl_display.sync on its connection; its answer (JSON line `index`)."""
    child = next(c for n, c in reversed(_children) if n == name)
    os.kill(child.pid, signal.SIGUSR1)
    answer: dict[str, Any] = until(lambda: log_json(name, index) or (
        child.poll() is not None and {"error": f"exited {child.returncode}"}), timeout=60,
        what=f"{name}'s round trip")
    return answer


def dumps_of(heads: Any, prefix: str) -> dict[int, str]:
    for head in heads:
        ask_host(op="screendump", head=head, name=f"{prefix}-head{head}")
    return {head: f"{prefix}-head{head}" for head in heads}


def scanout_at(size: tuple[int, int], name: str, head: int = LIVE_HEAD) -> dict[str, Any]:
    """Dump `head` until it scans out at `size`; the last reply and how many dumps."""
    attempts = 0
    while True:
        attempts += 1
        reply = ask_host(op="screendump", head=head, name=name)
        if (reply["width"], reply["height"]) == size or attempts >= 100:
            return {**reply, "attempts": attempts}


def reconfigure(line: str, size: tuple[int, int], name: str) -> dict[str, Any]:
    """One CONFIGURE of head LIVE_HEAD: its answer, the time to it and to the new scanout, and
    what the kernel's atomic state showed of the other heads meanwhile."""
    watch = PlaneWatch()
    t0 = time.monotonic()
    reply = layout_request(line)
    answered_s = time.monotonic() - t0
    scanout = scanout_at(size, name)
    return {"reply": reply[0], "answer_s": round(answered_s, 3),
            "scanout_s": round(time.monotonic() - t0, 3), "scanout": scanout,
            "planes": watch.stop()}


def live_reconfigure() -> None:
    """Tenants on heads 0 and 2 while head 1 changes mode through the layout module and is put
    back, then gets a full modeset: their connections, their wl_outputs and their scanouts."""
    step("live reconfigure")
    found: dict[str, Any] = {"tenants": {}}
    results["live"] = found
    apps = {}
    for head, (name, device, colour) in TENANTS.items():
        answer = claim(name, device)
        if answer["error"]:
            raise RuntimeError(f"claim {name} on {device}: {answer['error']}")
        apps[head] = f"tenant{head}"
        found["tenants"][head] = {"claim": answer, "shown": show_app(answer["uid"], device,
                                                                     apps[head], colour)}
        found["tenants"][head]["dump"] = dump_showing(head, f"live-before-head{head}", colour)
    found["weston_pid_before"] = weston_pid()
    found["outputs_before"] = layout_request("OUTPUTS")
    step("live: mode change")
    found["change"] = reconfigure(f"CONFIGURE {LIVE_OUTPUT} mode={LIVE_MODE[0]}x{LIVE_MODE[1]}",
                                  LIVE_MODE, "live-changed-head1")
    found["outputs_changed"] = layout_request("OUTPUTS")
    dumps_of(TENANTS, "live-changed")
    step("live: put back")
    found["back"] = reconfigure(f"CONFIGURE {LIVE_OUTPUT} mode={PLUGGED[LIVE_HEAD][0]}x"
                                f"{PLUGGED[LIVE_HEAD][1]}", PLUGGED[LIVE_HEAD], "live-back-head1")
    dumps_of(TENANTS, "live-back")
    step("live: modeset")
    found["modeset"] = reconfigure(f"CONFIGURE {LIVE_OUTPUT} modeset=1", PLUGGED[LIVE_HEAD],
                                   "live-modeset-head1")
    found["not_offered"] = layout_request(f"CONFIGURE {LIVE_OUTPUT} mode=4000x3000")
    dumps_of(TENANTS, "live-modeset")
    found["outputs_after"] = layout_request("OUTPUTS")
    found["claims_listed"] = layout_request("LIST")
    found["weston_pid_after"] = weston_pid()
    for head in TENANTS:
        found["tenants"][head]["roundtrip"] = tenant_roundtrip(apps[head], 1)
    display_power(apps)
    panel_cycle(apps)
    for head in TENANTS:
        stop(apps[head])
        found["tenants"][head]["release"] = release(TENANTS[head][0],
                                                    found["tenants"][head]["claim"]["uid"])


# -- a Display's power: head 1 off and on through spec.power, tenants on every head ---------

POWER_DEVICE, POWER_OUTPUT, POWER_HEAD = "card0-virtual-2", "Virtual-2", 1
POWER_COLOUR = (250, 170, 20)
DISPLAYS = "/apis/display.liken.sh/v1alpha1/displays"


def atomic_state() -> dict[str, dict[str, str]]:
    """The kernel's atomic state (debugfs), each object's top-level fields by `kind name`
    (`crtc crtc-1`, `connector Virtual-2`)."""
    found: dict[str, dict[str, str]] = {}
    block: dict[str, str] = {}
    for line in DRM_STATE.read_text(errors="replace").splitlines():
        if not line.startswith("\t"):
            kind, _, name = line.partition("]: ")
            block = found.setdefault(f"{kind.split('[')[0]} {name.strip()}", {})
        elif "=" in line and not line.startswith("\t\t"):
            key, _, value = line.strip().partition("=")
            block[key] = value.split(" ")[0]
    return found


def crtc_state(connector: str, crtc: str | None = None) -> dict[str, Any]:
    """The CRTC `connector` is on (or `crtc`, the one it was on) as the atomic state has it:
    its name, enable and active, and which CRTC the connector names now."""
    state = atomic_state()
    on = state.get(f"connector {connector}", {}).get("crtc", "(null)")
    name = crtc or on
    fields = state.get(f"crtc {name}", {})
    return {"connector_crtc": on, "crtc": name, "enable": fields.get("enable"),
            "active": fields.get("active")}


def set_power(state: str) -> None:
    admin().call("PATCH", f"{DISPLAYS}/{NODE}.{POWER_DEVICE}", {"spec": {"power": state}},
                 content_type="application/merge-patch+json")


def power_reported(state: str) -> dict[str, Any] | None:
    """The Display once the operator reported its generation with `state` applied."""
    found: dict[str, Any] = api_get(f"{DISPLAYS}/{NODE}.{POWER_DEVICE}")
    status = found.get("status") or {}
    if (status.get("observedGeneration") == found["metadata"]["generation"]
            and (status.get("power") or {}).get("state") == state):
        return {"power": status["power"], "conditions": status.get("conditions")}
    return None


def power_on_again(found: dict[str, Any]) -> None:
    """spec.power On on head 1: into `found`, the seconds until its output is on again
    (`on_s`) and the Display that reports it (`status_on`)."""
    t0 = time.monotonic()
    set_power("On")
    found["on_s"] = timed("head 1 lit again", lambda: output_power(POWER_OUTPUT) == "on", t0)
    found["status_on"] = until(lambda: power_reported("On"), timeout=WAIT_S,
                               what="the Display reports power On")


def display_power(apps: dict[int, str]) -> None:
    """spec.power Off on head 1 while tenants draw on heads 0, 1 and 2: head 1's CRTC goes
    inactive and its scanout dark, heads 0 and 2 keep theirs, every tenant keeps its
    connection; On brings head 1's tenant's picture back; weston is the same process."""
    step("power: a tenant on head 1")
    found: dict[str, Any] = {}
    results["power"] = found
    answer = claim("vm-tenant-1", POWER_DEVICE)
    if answer["error"]:
        raise RuntimeError(f"claim vm-tenant-1 on {POWER_DEVICE}: {answer['error']}")
    found["claim"] = answer
    found["shown"] = show_app(answer["uid"], POWER_DEVICE, "tenant1", POWER_COLOUR)
    found["before"] = dump_showing(POWER_HEAD, "power-before-head1", POWER_COLOUR)
    found["state_before"] = crtc_state(POWER_OUTPUT)
    found["weston_pid_before"] = weston_pid()
    step("power: Off")
    t0 = time.monotonic()
    set_power("Off")
    found["off_s"] = timed("head 1 powered off", lambda: output_power(POWER_OUTPUT) == "off",
                           t0)
    found["status_off"] = until(lambda: power_reported("Off"), timeout=WAIT_S,
                                what="the Display reports power Off")
    found["state_off"] = crtc_state(POWER_OUTPUT, found["state_before"]["crtc"])
    dump = ask_host(op="screendump", head=POWER_HEAD, name="power-off-head1")
    image = pixels.read_ppm(OUT / "power-off-head1.ppm")
    found["off_dump"] = {**dump, "black": round(pixels.coverage(image, (0, 0, 0), step=97), 4),
                         "tenant": round(pixels.coverage(image, POWER_COLOUR, step=97), 4)}
    found["others_off"] = {head: dump_showing(head, f"power-off-head{head}", TENANTS[head][2])
                           for head in TENANTS}
    found["roundtrips_off"] = {str(head): tenant_roundtrip(apps[head], 2) for head in TENANTS}
    found["roundtrips_off"]["1"] = tenant_roundtrip("tenant1", 1)
    step("power: On")
    power_on_again(found)
    found["on_dump"] = dump_showing(POWER_HEAD, "power-on-head1", POWER_COLOUR)
    found["state_on"] = crtc_state(POWER_OUTPUT)
    found["roundtrip_on"] = tenant_roundtrip("tenant1", 2)
    found["weston_pid_after"] = weston_pid()
    stop("tenant1")
    found["release"] = release("vm-tenant-1", answer["uid"])


# -- a panel power-cycled at its button: its monitor gone and the same one back, powered off --

CYCLE_MODE = (1024, 768)
"""The claim's mode on head 1: not the monitor's preferred 1280x800, so a re-plug that lost
the claim would light the preferred mode."""
CYCLE_COLOUR = (120, 60, 200)


def display_status() -> dict[str, Any]:
    found: dict[str, Any] = api_get(f"{DISPLAYS}/{NODE}.{POWER_DEVICE}").get("status") or {}
    return found


def output_line(output: str) -> str | None:
    """The layout module's OUTPUTS line of `output` (`Virtual-2 mode=1024x768@60 ...`)."""
    return next((line for line in layout_request("OUTPUTS")[1:]
                 if line.split(" ", 1)[0] == output), None)


def panel_cycle(apps: dict[int, str]) -> None:
    """A tenant's claim at a non-preferred mode on head 1 and head 1's Display at spec.power
    Off; its monitor removed and the same EDID attached again (a panel switched off and on at
    its button). After the re-plug: same weston, the claim's mode on that output, the output
    still off as the Display says; spec.power On then shows the tenant's picture at that mode;
    the tenants of heads 0 and 2 untouched throughout."""
    step("panel cycle: a claimed mode on head 1")
    found: dict[str, Any] = {}
    results["cycle"] = found
    answer = claim("vm-cycle", POWER_DEVICE, f"{CYCLE_MODE[0]}x{CYCLE_MODE[1]}@60")
    if answer["error"]:
        raise RuntimeError(f"claim vm-cycle on {POWER_DEVICE}: {answer['error']}")
    found["claim"] = answer
    until(lambda: (wayland_outputs() or {}).get(POWER_OUTPUT) == "x".join(map(str, CYCLE_MODE)),
          timeout=WAIT_S, what=f"{POWER_OUTPUT} at the claimed mode")
    found["shown"] = show_app(answer["uid"], POWER_DEVICE, "cycler", CYCLE_COLOUR)
    found["before"] = dump_showing(POWER_HEAD, "cycle-before-head1", CYCLE_COLOUR)
    found["weston_pid_before"] = weston_pid()
    found["sysfs_before"] = sysfs_connectors()[f"card0-{POWER_OUTPUT}"]
    step("panel cycle: power Off")
    set_power("Off")
    until(lambda: output_power(POWER_OUTPUT) == "off", timeout=60, what="head 1 powered off")
    until(lambda: power_reported("Off"), timeout=WAIT_S, what="the Display reports power Off")
    step("panel cycle: monitor removed")
    t0 = time.monotonic()
    ask_host(op="unplug", head=POWER_HEAD)
    found["unplug_slice_s"] = timed("the slice drops head 1's device",
                                    lambda: POWER_DEVICE not in slice_devices(), t0)
    until(lambda: display_status().get("connected") is False, timeout=WAIT_S,
          what="the Display reports its monitor gone")
    found["unplugged"] = {"sysfs": sysfs_connectors()[f"card0-{POWER_OUTPUT}"],
                          "output": output_line(POWER_OUTPUT)}
    step("panel cycle: the same monitor attached again")
    t0 = time.monotonic()
    ask_host(op="plug", head=POWER_HEAD, width=PLUGGED[POWER_HEAD][0],
             height=PLUGGED[POWER_HEAD][1])
    found["replug_slice_s"] = timed("the slice regains head 1's device",
                                    lambda: POWER_DEVICE in slice_devices(), t0)
    # The operator has followed the re-plug once the Display says connected again with the
    # monitor's EDID and the mode its output runs at.
    found["status_replugged"] = until(
        lambda: (st := display_status()).get("connected") is True and st.get("edid")
        and st.get("currentMode") and st,
        timeout=WAIT_S, what="the Display reports its monitor back with its output's mode")
    found["replugged"] = {"sysfs": sysfs_connectors()[f"card0-{POWER_OUTPUT}"],
                          "output": output_line(POWER_OUTPUT),
                          "power": output_power(POWER_OUTPUT),
                          "state": crtc_state(POWER_OUTPUT),
                          "weston_outputs": wayland_outputs()}
    dump = ask_host(op="screendump", head=POWER_HEAD, name="cycle-replugged-head1")
    image = pixels.read_ppm(OUT / "cycle-replugged-head1.ppm")
    found["replugged_dump"] = {**dump,
                               "tenant": round(pixels.coverage(image, CYCLE_COLOUR, step=97), 4)}
    found["others_replugged"] = {head: dump_showing(head, f"cycle-replugged-head{head}",
                                                    TENANTS[head][2]) for head in TENANTS}
    step("panel cycle: power On")
    power_on_again(found)
    found["on_scanout"] = scanout_at(CYCLE_MODE, "cycle-on-size-head1", POWER_HEAD)
    found["on_dump"] = dump_showing(POWER_HEAD, "cycle-on-head1", CYCLE_COLOUR)
    found["state_on"] = crtc_state(POWER_OUTPUT)
    found["output_on"] = output_line(POWER_OUTPUT)
    found["roundtrip"] = tenant_roundtrip("cycler", 1)
    found["neighbours"] = {str(head): tenant_roundtrip(apps[head], 3) for head in TENANTS}
    dumps_of(TENANTS, "cycle-on")
    found["weston_pid_after"] = weston_pid()
    stop("cycler")
    found["release"] = release("vm-cycle", answer["uid"])


def timed(what: str, check: Callable[[], bool], t0: float) -> float:
    until(check, timeout=60, what=what)
    return round(time.monotonic() - t0, 3)


def output_power(output: str) -> str | None:
    """`on` or `off` as the layout module's OUTPUTS reports `output`; None when absent."""
    for line in layout_request("OUTPUTS")[1:]:
        if line.split(" ", 1)[0] == output:
            found = re.search(r" power=(on|off)\b", line)
            return found.group(1) if found else None
    return None


def hotplug() -> None:
    """Head 2 unplugged and the same monitor plugged back, with the operator running: the
    operator's PROBE (weston, the master, re-detects) makes sysfs show each change; the
    output is powered off, then lit by a modeset; weston is never restarted."""
    step("unplug")
    found: dict[str, Any] = {"weston_pid_before": weston_pid(),
                             "probe_before": layout_request("PROBE"),
                             "sysfs_before": sysfs_connectors()}
    t0 = time.monotonic()
    ask_host(op="unplug", head=HOTPLUG_HEAD)
    found["unplug_slice_s"] = timed("the slice drops the device",
                                    lambda: HOTPLUG_DEVICE not in slice_devices(), t0)
    found["unplug_dark_s"] = timed("weston powers the output off",
                                   lambda: output_power(HOTPLUG_OUTPUT) == "off", t0)
    found["after_unplug"] = {"slice": sorted(slice_devices()), "outputs": wayland_outputs(),
                             "sysfs": sysfs_connectors(), "probe": layout_request("PROBE")}
    found["unplugged_claim"] = claim("vm-unplugged", HOTPLUG_DEVICE)
    step("replug")
    t0 = time.monotonic()
    ask_host(op="plug", head=HOTPLUG_HEAD, width=PLUGGED[HOTPLUG_HEAD][0],
             height=PLUGGED[HOTPLUG_HEAD][1])
    found["replug_slice_s"] = timed("the slice regains the device",
                                    lambda: HOTPLUG_DEVICE in slice_devices(), t0)
    found["replug_lit_s"] = timed("weston powers the output on",
                                  lambda: output_power(HOTPLUG_OUTPUT) == "on", t0)
    found["replug_scanout"] = scanout_at(PLUGGED[HOTPLUG_HEAD], "replugged-head2",
                                         HOTPLUG_HEAD)
    found["after_replug"] = {"slice": sorted(slice_devices()), "outputs": wayland_outputs(),
                             "sysfs": sysfs_connectors(),
                             "device": slice_devices().get(HOTPLUG_DEVICE)}
    found["screendumps"] = screendumps("replugged")
    found["weston_pid_after"] = weston_pid()
    results["hotplug"] = found


def tainted() -> bool:
    devices = slice_devices().values()
    return bool(devices) and all(d.get("taints") for d in devices)


def watchdog() -> None:
    step("SIGSTOP weston")
    found: dict[str, Any] = {}
    # The hotplug's restarts tainted the devices for a moment: start from none.
    until(lambda: slice_devices() and not any(d.get("taints") for d in slice_devices().values()),
          timeout=WAIT_S, what="no taints before the stop")
    pid = until(weston_pid, timeout=10, what="weston's pid")
    found["stopped_pid"] = pid
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    found["tainted_s"] = timed("every device tainted", tainted, t0)
    found["killed_s"] = timed("the stopped weston gone", lambda: gone_or_zombie(pid), t0)
    # An exit no order names ends the weston container; the kubelet starts it again.
    westonctl = next(child for name, child in reversed(_children) if name == "weston")
    found["westonctl_exit"] = until(lambda: westonctl.poll() is not None and
                                    [westonctl.returncode], timeout=30,
                                    what="westonctl exits after weston's SIGKILL")[0]
    start_westonctl()
    new = until(lambda: (p := weston_pid()) and p != pid and p, timeout=WAIT_S,
                what="a new weston pid")
    found["new_pid"] = new
    until(lambda: (o := wayland_outputs()) and len(o) == 3, timeout=WAIT_S,
          what="the new weston answers with three outputs")
    found["untainted_s"] = timed("the taints gone", lambda: not any(
        d.get("taints") for d in slice_devices().values()), t0)
    found["clients_after"] = drm_clients()
    found["operator_pid"] = next(c.pid for name, c in _children if name == "operator")
    results["watchdog"] = found


def main() -> int:
    LOGS.mkdir(parents=True, exist_ok=True)
    run(["busybox", "ip", "link", "set", "lo", "up"])
    try:
        for part in (plug_heads, start_api, declare, compositor, operator, capture_server, lit,
                     claims, live_reconfigure, hotplug, watchdog):
            part()
        step("done")
    except Exception as err:
        results["errors"].append(f"{type(err).__name__}: {err}")
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            results["final_clients"] = drm_clients()
        with contextlib.suppress(Exception):
            results["denials"] = pod.denials(admin())
        save()
        stop_all()
        results["exits"] = {name: child.returncode for name, child in _children}
        save()
    return 0 if not results["errors"] else 1


if __name__ == "__main__":
    sys.exit(main())
