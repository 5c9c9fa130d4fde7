"""The VM tier's driver: boot the guest image in QEMU with a three-head virtio-gpu card, plug
and unplug heads, dump each head's scanout, and serve the guest's requests for those.

QEMU runs on TCG (software emulation); `-accel kvm` only where `kvm_works()` shows a KVM that
boots (these machines' /dev/kvm is a nested hypervisor that stalls stock kernels). Heads are
plugged through `-display dbus` on a private dbus-daemon (org.qemu.Display1.Console.SetUIInfo:
a size plugs a monitor whose EDID prefers it, 0x0 unplugs), and each head's real scanout comes
from QMP `screendump` (device gpu0, head N) as a PPM. QEMU and the bus are children started by
libdisplay.processes (they die with the test's thread) and stopped and reaped by pid in
`close()`, whatever happened.

The guest's side runs from the 9p share (`run` is its entry, see build-support/vm/guest-image);
it asks the host for plugs and screendumps by writing `req/<name>.json` and waits for
`ack/<name>.json`, which `RequestServer` writes once the host has done it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from libdisplay import fsutil, processes

GUEST_IMAGE = Path(__file__).resolve().parents[2] / "build-support" / "vm" / "guest-image"
IMAGE_BUILD_TIMEOUT_S = 900.0
BOOT_TIMEOUT_S = 600.0
"""QEMU start to the guest's "vm-init: ready": 17-20 s on TCG with an idle host, but 201 s for
a four-head boot with the host's load at 8, and over 180 s for the VM tier's three heads with
it at 14 (other jobs on both cores; TCG's QEMU then gets a fraction of a CPU)."""
BUS_TIMEOUT_S = 30.0
QMP_TIMEOUT_S = 30.0
GDBUS_TIMEOUT_S = 30.0
READY_LINE = "vm-init: ready"
# A TCG guest's kernel can oops in its own start-up, before init runs: Debian's 6.12 on QEMU
# 7.2's multi-threaded TCG once hit an int3 that text patching on the other vCPU had left
# ("Oops: int3" in sched_clock_cpu, then "Kernel panic"). Nothing of a run has started then
# (vm-init prints READY_LINE before it runs the share's script), so that boot is made again,
# once, and the panicked boot's serial log is kept beside the new one.
BOOT_ATTEMPTS = 2
EARLY_PANIC = "Kernel panic"
POLL_S = 0.1
HEADS = 3
MAX_HEADS = 16
"""virtio-gpu's own bound (VIRTIO_GPU_MAX_SCANOUTS in QEMU and in the kernel's driver)."""


class VmError(Exception):
    """The VM could not be built, booted or driven; the message says which step."""


@dataclass(frozen=True, slots=True)
class GuestImage:
    kernel: Path
    initrd: Path
    rootfs: Path


def guest_image() -> GuestImage:
    """The cached guest (built on first use, about a minute and a half)."""
    try:
        done = subprocess.run([os.fspath(GUEST_IMAGE)], check=True, capture_output=True,
                              text=True, timeout=IMAGE_BUILD_TIMEOUT_S)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as err:
        raise VmError(f"guest-image failed: {err}; {getattr(err, 'stderr', '')}") from err
    directory = Path(done.stdout.strip().splitlines()[-1])
    image = GuestImage(directory / "vmlinuz", directory / "initrd.img", directory / "rootfs.ext4")
    for path in (image.kernel, image.initrd, image.rootfs):
        if not path.is_file():
            raise VmError(f"guest-image printed {directory}, which has no {path.name}")
    return image


def kvm_works() -> bool:
    """Whether to use KVM: only when DISPLAY_OPERATOR_VM_KVM=1 states a machine's KVM boots
    stock kernels. Opening /dev/kvm proves nothing here: the nested one opens, then stalls."""
    return os.environ.get("DISPLAY_OPERATOR_VM_KVM") == "1" and os.access("/dev/kvm", os.W_OK)


def ppm_size(path: Path) -> tuple[int, int]:
    """Width and height from a binary PPM's header (what QMP screendump writes)."""
    with path.open("rb") as f:
        tokens: list[bytes] = []
        while len(tokens) < 3:
            line = f.readline()
            if not line:
                raise VmError(f"{path}: not a PPM")
            tokens += line.split(b"#", 1)[0].split()
    if tokens[0] != b"P6":
        raise VmError(f"{path}: magic {tokens[0]!r}, not P6")
    return int(tokens[1]), int(tokens[2])


class Qmp:
    """A QMP connection: one command at a time, events skipped."""

    def __init__(self, path: Path, *, timeout: float = QMP_TIMEOUT_S) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(os.fspath(path))
        except OSError:
            self._sock.close()
            raise
        self._file = self._sock.makefile("rwb")
        self._read()  # the greeting
        self.execute("qmp_capabilities")

    def _read(self) -> dict[str, Any]:
        line = self._file.readline()
        if not line:
            raise VmError("QMP closed the connection")
        message: dict[str, Any] = json.loads(line)
        return message

    def execute(self, command: str, **arguments: Any) -> Any:
        request: dict[str, Any] = {"execute": command}
        if arguments:
            request["arguments"] = arguments
        self._file.write(json.dumps(request).encode() + b"\n")
        self._file.flush()
        while True:
            reply = self._read()
            if "return" in reply:
                return reply["return"]
            if "error" in reply:
                raise VmError(f"QMP {command}: {reply['error'].get('desc')}")

    def close(self) -> None:
        self._file.close()
        self._sock.close()


class Vm:
    """One boot of the guest with `share` as its 9p share and a virtio-gpu card of `heads`
    heads; use as a context manager."""

    def __init__(self, image: GuestImage, *, share: Path, workdir: Path, memory_mb: int = 1024,
                 boot_timeout: float = BOOT_TIMEOUT_S, heads: int = HEADS) -> None:
        if not 1 <= heads <= MAX_HEADS:
            raise VmError(f"heads: {heads} is not within 1..{MAX_HEADS} (virtio-gpu's scanouts)")
        self.heads = heads
        self.image = image
        self.share = share
        self.workdir = workdir
        self.serial_log = workdir / "serial.log"
        self._bus_socket = workdir / "bus.sock"
        self._qmp_socket = workdir / "qmp.sock"
        self._memory_mb = memory_mb
        self._boot_timeout = boot_timeout
        self._bus: processes.Process | None = None
        self.qemu: processes.Process | None = None
        self._qmp: Qmp | None = None
        self._qmp_lock = threading.Lock()

    def __enter__(self) -> Vm:
        try:
            self.boot()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def boot(self) -> None:
        """Start the bus and QEMU; return once the guest's init says it is ready (booting again
        once if the kernel panicked before init ran)."""
        for attempt in range(1, BOOT_ATTEMPTS + 1):
            try:
                self._boot_once()
                return
            except VmError:
                serial = self.serial()
                if attempt == BOOT_ATTEMPTS or EARLY_PANIC not in serial or READY_LINE in serial:
                    raise
                kept = self.serial_log.with_name(f"serial-panic-{attempt}.log")
                self.serial_log.rename(kept)
                print(f"qemu: the guest's kernel panicked before init ({kept}); booting again",
                      file=sys.stderr, flush=True)
                self.close()
                for path in (self._bus_socket, self._qmp_socket):
                    path.unlink(missing_ok=True)

    def _boot_once(self) -> None:
        self.serial_log.touch()
        self._bus = processes.start(
            ["dbus-daemon", "--session", "--nofork", f"--address=unix:path={self._bus_socket}"],
            log_path=self.workdir / "dbus.log")
        self._bus.wait_until(lambda: processes.unix_socket_accepts(self._bus_socket),
                             timeout=BUS_TIMEOUT_S, what="the private bus accepts")
        self.qemu = processes.start(self._qemu_argv(), log_path=self.workdir / "qemu.log")
        # The socket's file appears at bind(), a moment before QEMU listens on it.
        self.qemu.wait_until(self._qmp_connects, timeout=QMP_TIMEOUT_S,
                             what="QMP accepts a connection")
        self.wait_serial(READY_LINE, timeout=self._boot_timeout)

    def _qmp_connects(self) -> bool:
        try:
            self._qmp = Qmp(self._qmp_socket)
        except (FileNotFoundError, ConnectionRefusedError):
            return False
        return True

    def _qemu_argv(self) -> list[str]:
        accel = ["-accel", "kvm", "-cpu", "host"] if kvm_works() else \
            ["-accel", "tcg,tb-size=256", "-cpu", "max"]
        return [
            "qemu-system-x86_64", "-machine", "q35", *accel, "-smp", "2",
            "-m", str(self._memory_mb),
            "-kernel", os.fspath(self.image.kernel), "-initrd", os.fspath(self.image.initrd),
            "-append", "root=/dev/vda rw console=ttyS0 quiet panic=1 init=/sbin/vm-init",
            "-drive", f"file={self.image.rootfs},if=virtio,format=raw,snapshot=on",
            "-virtfs", f"local,path={self.share},mount_tag=hostshare,security_model=none",
            "-device",
            f"virtio-gpu-pci,id=gpu0,max_outputs={self.heads},edid=on,xres=1920,yres=1080",
            "-vga", "none",
            "-display", f"dbus,addr=unix:path={self._bus_socket},gl=off",
            "-serial", f"file:{self.serial_log}",
            "-qmp", f"unix:{self._qmp_socket},server=on,wait=off",
            "-nic", "none", "-no-reboot",
        ]

    def serial(self) -> str:
        return self.serial_log.read_text(errors="replace")

    def wait_serial(self, text: str, *, timeout: float) -> None:
        """Until the serial log holds `text`; VmError with its tail if QEMU exits or time runs
        out first."""
        deadline = time.monotonic() + timeout
        while text not in self.serial():
            if self.qemu is not None and self.qemu.exited():
                raise VmError(f"QEMU exited before {text!r}:\n{self._tail()}")
            if time.monotonic() > deadline:
                raise VmError(f"no {text!r} on the serial console within {timeout:g} s:\n"
                              f"{self._tail()}")
            time.sleep(POLL_S)

    def _tail(self) -> str:
        qemu_log = self.qemu.log_tail() if self.qemu is not None else ""
        return "\n".join(self.serial().splitlines()[-40:]) + f"\n-- qemu log:\n{qemu_log}"

    def wait_poweroff(self, *, timeout: float) -> int:
        """Until the guest powers off (QEMU exits with -no-reboot); QEMU's exit status."""
        assert self.qemu is not None
        try:
            return self.qemu.wait(timeout=timeout)
        except Exception as err:
            raise VmError(f"the guest did not power off within {timeout:g} s:\n"
                          f"{self._tail()}") from err

    # -- heads -----------------------------------------------------------------------------

    def set_head(self, head: int, width: int, height: int) -> None:
        """Plug a monitor preferring `width`x`height` into `head` (0x0 unplugs it)."""
        argv = ["gdbus", "call", "--address", f"unix:path={self._bus_socket}",
                "--dest", "org.qemu", "--object-path", f"/org/qemu/Display1/Console_{head}",
                "--method", "org.qemu.Display1.Console.SetUIInfo",
                "300", "200", "0", "0", str(width), str(height)]
        try:
            subprocess.run(argv, check=True, capture_output=True, text=True,
                           timeout=GDBUS_TIMEOUT_S)
        except subprocess.CalledProcessError as err:
            raise VmError(f"SetUIInfo on head {head}: {err.stderr.strip()}") from err

    def plug(self, head: int, width: int, height: int) -> None:
        self.set_head(head, width, height)

    def unplug(self, head: int) -> None:
        self.set_head(head, 0, 0)

    def screendump(self, head: int, path: Path) -> tuple[int, int]:
        """Head `head`'s scanout as a PPM at `path`; its size."""
        with self._qmp_lock:
            if self._qmp is None:
                raise VmError(f"screendump of head {head}: QEMU's QMP connection is closed")
            self._qmp.execute("screendump", filename=os.fspath(path), device="gpu0", head=head)
        return ppm_size(path)

    def close(self) -> None:
        """Stop QEMU and the bus and reap them (idempotent)."""
        if self._qmp is not None:
            self._qmp.close()
            self._qmp = None
        for process in (self.qemu, self._bus):
            if process is not None and not process.exited():
                process.stop(grace=2.0)
        self.qemu = self._bus = None


Handler = Callable[[dict[str, Any]], dict[str, Any]]


class RequestServer:
    """Answers the guest's `req/<name>.json` files with `ack/<name>.json`, on a thread.

    A request is `{"op": "plug", "head": 1, "width": 1280, "height": 800}`, `{"op": "unplug",
    "head": 1}` or `{"op": "screendump", "head": 0, "name": "head0"}` (written to
    `out/<name>.ppm`), or an op of `handlers` (op -> its answer to the request); the ack holds
    `{"ok": true, ...}` or `{"ok": false, "error": ...}`, and `host_t`, the host's monotonic
    clock when it was done (to line the guest's requests up with host-side samples).
    """

    def __init__(self, vm: Vm, handlers: dict[str, Handler] | None = None) -> None:
        self._vm = vm
        self._handlers = dict(handlers or {})
        self._req = vm.share / "req"
        self._ack = vm.share / "ack"
        self._out = vm.share / "out"
        for d in (self._req, self._ack, self._out):
            d.mkdir(parents=True, exist_ok=True)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="vm-requests", daemon=True)
        self.handled: list[dict[str, Any]] = []

    def __enter__(self) -> RequestServer:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(5.0)

    def _serve(self) -> None:
        while not self._stop.wait(POLL_S):
            for path in sorted(self._req.glob("*.json")):
                # A dot name is the guest's file still being written (pathlib globs them).
                if path.name.startswith(".") or (self._ack / path.name).exists():
                    continue
                self._answer(path)

    def _answer(self, path: Path) -> None:
        try:
            request = json.loads(path.read_text())
            reply = self._do(request)
        except (VmError, ValueError, KeyError, OSError) as err:
            request, reply = {"file": path.name}, {"ok": False, "error": str(err)}
        reply["host_t"] = time.monotonic()
        self.handled.append({**request, "at": reply["host_t"], "reply": reply})
        fsutil.atomic_write(self._ack / path.name, json.dumps(reply))

    def _do(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request["op"]
        if op in self._handlers:
            return self._handlers[op](request)
        head = int(request["head"])
        if op == "plug":
            self._vm.plug(head, int(request["width"]), int(request["height"]))
            return {"ok": True}
        if op == "unplug":
            self._vm.unplug(head)
            return {"ok": True}
        if op == "screendump":
            name = str(request["name"])
            if "/" in name or name.startswith("."):
                raise VmError(f"screendump name {name!r} is not a plain file name")
            width, height = self._vm.screendump(head, self._out / f"{name}.ppm")
            return {"ok": True, "width": width, "height": height}
        raise VmError(f"unknown request op {op!r}")
