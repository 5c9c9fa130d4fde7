"""How a prepared claim's consumer reaches the compositor: its CDI spec and, with the layout
module, its own Wayland sockets.

Two ways, chosen by the operator's `--delivery` (env `SOCKET_DELIVERY`):

`layout` (production): the layout module (weston's shell) listens on one socket per claimed
device, in a directory of the claim's own, `<socket-dir>/claims/<claimUID>/`. The sockets are
named `wayland-<n>` by the device's place in the claim (a claim of one monitor has
`wayland-0`, the name every Wayland client tries by default); the module knows each one as
`<claimUID>.<device>` (what its LIST shows) and shows its clients on that device's output
only. The claim's CDI spec mounts only that directory, read-only, at
`<container-socket-dir>/claims/<claimUID>`; every device sets `XDG_RUNTIME_DIR` to the mount,
`WAYLAND_DISPLAY` to the absolute path of its own socket in it, and
`WAYLAND_DISPLAY_<DEVICE>` likewise, so a container handed several devices of a claim can
still tell the sockets apart (with several, `WAYLAND_DISPLAY` is the last device's, as CDI
applies edits in order). The claim UID in the container path keeps two claims of one
container from hiding each other's mount. A consumer sees its claim's sockets and no
other's: a socket of another claim is neither in its mount nor reachable by a path it can
name.

`shared` (tests with a stock shell): every claim mounts the whole socket directory and uses
the compositor's public socket, as before the layout module existed.

The module keeps no state across compositor restarts; `restore` recreates the sockets of the
claims given (the driver passes the checkpoint's prepared ones). Removing a claim's sockets
when the module does not answer (ENOENT, ECONNREFUSED: no compositor, so no sockets) only
removes the directory; a module that answers wrongly or late fails the call.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final, Protocol

from draplugin import compositor
from draplugin.settings import Settings
from libdisplay import cdi, fsutil
from libdisplay.cdi import ClaimedOutput, SocketDelivery
from libdisplay.compositor.layout import ClaimSocket, LayoutConnectError, LayoutControl, LayoutError
from libdisplay.compositor.outputs import CLAIMS_DIR

log = logging.getLogger(__name__)

CLAIM_DIR_MODE: Final = 0o755
CONTROL_TIMEOUT_S: Final = compositor.CONTROL_TIMEOUT_S
# The module is absent, not misbehaving: nothing listens, so it holds no socket to remove.
_ABSENT_ERRNOS: Final = frozenset({errno.ENOENT, errno.ECONNREFUSED})


class DeliveryError(Exception):
    """A claim's sockets or spec cannot be made or removed; the message names the reason."""


class Delivery(Protocol):
    """What prepare and unprepare ask of a way of delivering the socket."""

    def create_sockets(self, claim_uid: str, outputs: Sequence[ClaimedOutput]) -> None: ...

    def write_spec(self, claim_uid: str, outputs: Sequence[ClaimedOutput]) -> None: ...

    def remove_sockets(self, claim_uid: str) -> bool: ...

    def restore(self, claims: Iterable[tuple[str, Sequence[ClaimedOutput]]]) -> int: ...

    def held(self) -> frozenset[str]: ...


def _write(claim_uid: str, spec: dict[str, object], *, cdi_dir: Path) -> None:
    cdi_dir.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(cdi.spec_path(claim_uid, cdi_dir=cdi_dir), cdi.render_spec(spec),
                        mode=0o644)


@dataclass(frozen=True, slots=True)
class SharedDelivery:
    """Every claim gets the compositor's public socket and its whole directory."""

    socket: SocketDelivery
    cdi_dir: Path

    def create_sockets(self, claim_uid: str, outputs: Sequence[ClaimedOutput]) -> None:
        """Nothing to create: the compositor's own socket serves every claim."""

    def write_spec(self, claim_uid: str, outputs: Sequence[ClaimedOutput]) -> None:
        _write(claim_uid, cdi.build_spec(claim_uid, outputs, self.socket), cdi_dir=self.cdi_dir)

    def remove_sockets(self, claim_uid: str) -> bool:
        return False

    def restore(self, claims: Iterable[tuple[str, Sequence[ClaimedOutput]]]) -> int:
        return 0

    def held(self) -> frozenset[str]:
        return frozenset()


def socket_name(index: int) -> str:
    """The file name of a claim's `index`th device's socket: `wayland-0`, `wayland-1`, ..."""
    return f"wayland-{index}"


def socket_env_name(output: ClaimedOutput) -> str:
    """`WAYLAND_DISPLAY_CARD0_HDMI_A_1` for device `card0-hdmi-a-1`."""
    return "WAYLAND_DISPLAY_" + output.env_name.removeprefix("DISPLAY_OUTPUT_")


def module_claim(claim_uid: str, device: str) -> str:
    """What the module calls one device's socket: `<claimUID>.<device>`."""
    return f"{claim_uid}.{device}"


@dataclass(frozen=True, slots=True)
class LayoutDelivery:
    """Per-claim sockets from the layout module, each claim's directory mounted alone."""

    control: Path
    """The module's control socket (beside weston.ini)."""
    host_dir: Path
    """The compositor's socket dir on the node; claims' directories go under `claims/`."""
    container_dir: PurePosixPath
    cdi_dir: Path
    timeout: float = CONTROL_TIMEOUT_S

    def claim_dir(self, claim_uid: str) -> Path:
        return self.host_dir / CLAIMS_DIR / claim_uid

    def container_claim_dir(self, claim_uid: str) -> PurePosixPath:
        return self.container_dir / CLAIMS_DIR / claim_uid

    def create_sockets(self, claim_uid: str, outputs: Sequence[ClaimedOutput]) -> None:
        with self._connect(f"claim {claim_uid}") as control:
            self._create(control, claim_uid, outputs)

    def write_spec(self, claim_uid: str, outputs: Sequence[ClaimedOutput]) -> None:
        _write(claim_uid, self.build_spec(claim_uid, outputs), cdi_dir=self.cdi_dir)

    def build_spec(self, claim_uid: str, outputs: Sequence[ClaimedOutput]) -> dict[str, object]:
        """cdi's spec for the claim's directory, each device pointed at its own socket."""
        inside = self.container_claim_dir(claim_uid)
        spec = cdi.build_spec(
            claim_uid,
            outputs,
            SocketDelivery(host_dir=PurePosixPath(self.claim_dir(claim_uid)),
                           container_dir=inside, socket_name=socket_name(0)),
        )
        devices = spec["devices"]
        assert isinstance(devices, list)  # cdi.build_spec's shape
        for index, (device, output) in enumerate(zip(devices, outputs, strict=True)):
            path = inside / socket_name(index)
            edits = device["containerEdits"]
            edits["env"] = [
                *(e for e in edits["env"] if not e.startswith("WAYLAND_DISPLAY=")),
                f"WAYLAND_DISPLAY={path}",
                f"{socket_env_name(output)}={path}",
            ]
        return spec

    def remove_sockets(self, claim_uid: str) -> bool:
        """REMOVE every module socket of the claim, then its directory; True if any was there."""
        removed = False
        try:
            with self._connect(f"claim {claim_uid}") as control:
                for listed in control.list_claim_sockets():
                    if listed.claim_uid.startswith(f"{claim_uid}."):
                        removed = control.remove_claim_socket(listed.claim_uid) or removed
        except DeliveryError as err:
            if not _absent(err):
                raise
            log.info("layout module not running: claim %s has no socket there", claim_uid)
        return self._remove_dir(claim_uid) or removed

    def restore(self, claims: Iterable[tuple[str, Sequence[ClaimedOutput]]]) -> int:
        """Recreate the sockets of `claims`; how many claims have theirs now."""
        wanted = list(claims)
        if not wanted:
            return 0
        restored = 0
        with self._connect(f"{len(wanted)} prepared claim(s)") as control:
            # A restore may follow one already done (the plugin's own restart order, then
            # the watchdog seeing the new pid): sockets the module still has are kept.
            present = {c.claim_uid for c in control.list_claim_sockets()}
            for claim_uid, outputs in wanted:
                if all(module_claim(claim_uid, o.device) in present for o in outputs):
                    restored += 1
                    continue
                try:
                    self._create(control, claim_uid, outputs)
                except DeliveryError as err:
                    log.error("cannot restore the sockets of claim %s: %s", claim_uid, err)
                    continue
                restored += 1
        return restored

    def held(self) -> frozenset[str]:
        """Claims with a directory here or a socket in the module."""
        try:
            dirs = {p.name for p in (self.host_dir / CLAIMS_DIR).iterdir() if p.is_dir()}
        except FileNotFoundError:
            dirs = set()
        try:
            with self._connect("the list of claims") as control:
                listed = {c.claim_uid.rpartition(".")[0] for c in control.list_claim_sockets()}
                listed.discard("")
        except DeliveryError as err:
            if not _absent(err):
                raise
            listed = set()
        return frozenset(dirs | listed)

    # --- helpers -------------------------------------------------------------------------

    def _connect(self, purpose: str) -> _Control:
        return _Control(self.control, timeout=self.timeout, purpose=purpose)

    def _create(
        self, control: _Control, claim_uid: str, outputs: Sequence[ClaimedOutput]
    ) -> None:
        directory = self.claim_dir(claim_uid)
        directory.parent.mkdir(mode=CLAIM_DIR_MODE, parents=True, exist_ok=True)
        directory.mkdir(mode=CLAIM_DIR_MODE, exist_ok=True)
        # The umask must not keep a non-root consumer from reaching its socket.
        os.chmod(directory, CLAIM_DIR_MODE)
        for index, output in enumerate(outputs):
            control.create(directory / socket_name(index), output.output,
                           module_claim(claim_uid, output.device))

    def _remove_dir(self, claim_uid: str) -> bool:
        directory = self.claim_dir(claim_uid)
        try:
            entries = list(directory.iterdir())
        except FileNotFoundError:
            return False
        for entry in entries:
            # Only sockets the module made live here; SIGKILL leaves their files behind.
            fsutil.remove(entry)
        directory.rmdir()
        return True


def _absent(err: DeliveryError) -> bool:
    cause = err.__cause__
    return isinstance(cause, LayoutConnectError) and cause.errno in _ABSENT_ERRNOS


class _Control:
    """A control connection whose every failure is a DeliveryError naming what it was for."""

    def __init__(self, path: Path, *, timeout: float, purpose: str) -> None:
        self._purpose = purpose
        try:
            self._control = LayoutControl(path, timeout=timeout)
        except LayoutError as err:
            raise DeliveryError(f"layout module, for {purpose}: {err}") from err

    def __enter__(self) -> _Control:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._control.close()

    def create(self, path: Path, output: str, claim: str) -> None:
        try:
            self._control.create_claim_socket(path, output, claim)
        except LayoutError as err:
            raise DeliveryError(
                f"layout module refused socket {path} on output {output}: {err}"
            ) from err

    def list_claim_sockets(self) -> tuple[ClaimSocket, ...]:
        try:
            return self._control.list_claim_sockets()
        except LayoutError as err:
            raise DeliveryError(f"layout module, for {self._purpose}: {err}") from err

    def remove_claim_socket(self, claim: str) -> bool:
        try:
            return self._control.remove_claim_socket(claim)
        except LayoutError as err:
            raise DeliveryError(f"layout module cannot remove {claim}: {err}") from err


def from_settings(settings: Settings) -> Delivery:
    """The delivery the operator's settings choose."""
    if settings.delivery == "shared":
        return SharedDelivery(
            socket=SocketDelivery(
                host_dir=PurePosixPath(settings.socket_dir),
                container_dir=PurePosixPath(settings.container_socket_dir),
                socket_name=settings.socket_name,
            ),
            cdi_dir=settings.cdi_dir,
        )
    return LayoutDelivery(
        control=settings.layout_control,
        host_dir=settings.socket_dir,
        container_dir=PurePosixPath(settings.container_socket_dir),
        cdi_dir=settings.cdi_dir,
    )
