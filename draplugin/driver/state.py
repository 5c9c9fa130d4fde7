"""Prepared claims: serialized prepare and unprepare, with the checkpoint, sockets, CDI specs
and modes.

Every step that writes is followed by a named fault point, so a test can kill the plugin
(SIGKILL) right there, restart it, and check that repeating the call — or start-up recovery —
ends with no leaked CDI spec or claim socket, no lost claim, and a compositor config that
matches the checkpoint. The order:

prepare: a plan without side effects for the whole claim (`plan_claim`: claim, allocation,
devices now in sysfs, every device's config against its monitor, DDC/CI settings against its
bus) -> checkpoint `started`, holding the claim's config -> DDC/CI settings -> weston.ini from
the checkpoint and the Displays, applied to the running compositor (`draplugin.driver.modes`: live
through the layout module, a restart only where it cannot) -> the claim's sockets
(`draplugin.driver.delivery`) -> CDI spec -> checkpoint `prepared`. A claim whose plan fails has
nothing written. The CDI spec comes after every step that can fail for the compositor's sake
(restart, socket), so a claim that fails there has no spec and stays `started` until the
kubelet repeats or unprepares it.
unprepare: checkpoint `unpreparing` (its mode no longer applies) -> CDI spec removed ->
sockets removed -> weston.ini, applied -> checkpoint entry removed.
The checkpoint is the one record of what a claim asked for; Display specs are a person's and
are never written here (`draplugin.driver.modes` says where each fact lives).

At start, after recovering each claim, weston.ini is derived again from the checkpoint and
the Displays, and applied: a pod that replaced the last one started weston from the Displays
alone, so an output a claim still holds gets its settings back, live. A person's edit of a
Display's `spec` (`follow_displays`) and a connector change (`follow_connectors`) take the
same path.

The layout module forgets every claim's socket when the compositor restarts; the checkpoint
does not. `restore_sockets` recreates the prepared claims' sockets: at start, after each
restart the compositor's fallback orders, and when the node publisher's watchdog sees the
compositor come back (it calls from its own thread; the driver's lock serializes it with
the kubelet's calls).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final, Literal, Protocol, get_args

# Re-exported: the kubelet-facing side names the claims it hands the driver by it.
from draplugin.claims import ClaimRef as ClaimRef  # noqa: PLC0414
from draplugin.compositor import Compositor, CompositorError, Followed, RestartReason
from draplugin.driver import checkpoint, delivery, modes
from draplugin.driver.allocation import AllocatedDevice, AllocationError, allocated_devices
from draplugin.driver.checkpoint import Checkpoint, ClaimEntry, PreparedDevice
from draplugin.driver.claimconfig import ClaimConfigError, DdcPlan, DisplayConfig
from draplugin.driver.power import DdcPower, NoPower
from draplugin.kube import Kube, KubeError
from draplugin.monitors import read_monitor
from draplugin.settings import Settings
from libdisplay import cdi, display
from libdisplay.cdi import ClaimedOutput
from libdisplay.compositor.layout import LayoutError, OutputState
from libdisplay.compositor.outputs import Monitor
from libdisplay.compositor.weston import WestonIniError, check_output_mode
from libdisplay.display import DisplayPower, DisplaySpecError, parse_spec
from libdisplay.hardware import drm
from libdisplay.hardware.modes import Mode

log = logging.getLogger(__name__)

FaultPoint = Literal[
    "prepare-started",
    "prepare-ini-written",
    "prepare-applied",
    "prepare-socket-created",
    "prepare-cdi-written",
    "prepare-completed",
    "unprepare-started",
    "unprepare-cdi-removed",
    "unprepare-socket-removed",
    "unprepare-ini-written",
    "unprepare-applied",
    "unprepare-completed",
]
FAULT_POINTS: Final = get_args(FaultPoint)

# What fails a claim without being the claim's fault: the API, the compositor, the disk.
_FAILURES: Final = (
    KubeError, modes.ModesError, CompositorError, drm.DrmError, cdi.CdiError,
    checkpoint.CheckpointError, delivery.DeliveryError, OSError,
)


PrepareErrorReason = Literal["claim", "failure", "internal", "refused"]
"""Why a claim's prepare failed: the claim itself (bad config, gone, not here), what the
claim needs (API, compositor, disk), a bug, or a compositor that does not answer."""


class Recorder(Protocol):
    """Where the driver's metrics go (`draplugin.node.metrics.Metrics`)."""

    def prepare_done(self, seconds: float, *, error: PrepareErrorReason | None) -> None: ...


class NodePublisher(Protocol):
    """What the node publisher (`draplugin.publisher.Publisher`) is to the driver: the judge
    of whether prepares may go on, and the listener of which claim holds what and of what each
    derivation did to the Displays' specs. Its calls come from the driver's threads."""

    def refusal(self) -> str | None:
        """Why new prepares must fail now (the compositor does not answer), or None."""

    def claims_changed(self, checkpoint: Checkpoint) -> None:
        """The checkpoint after every batch."""

    def specs_applied(self, applied: modes.Applied, checkpoint: Checkpoint) -> None:
        """A derivation and what the compositor did with it, with the checkpoint it came from."""


class ClaimReporter(Protocol):
    """Where the claims' status goes: each prepared claim's outputs as the compositor runs
    them (None where it cannot say), and each released claim."""

    def applied(self, entry: ClaimEntry, states: Mapping[str, OutputState | None]) -> None: ...

    def released(self, entry: ClaimEntry) -> None: ...


class _NoRecorder:
    def prepare_done(self, seconds: float, *, error: PrepareErrorReason | None) -> None:
        pass


class PrepareError(Exception):
    """One claim cannot be prepared; the message is the claim's `error` for the kubelet."""


class DdcNotSupportedError(PrepareError):
    """The claim asks for DDC/CI settings, which this version cannot apply yet."""


class DdcHook(Protocol):
    """A claim's DDC/CI settings: `plan` checks them without touching the bus
    (ClaimConfigError when they cannot apply), `apply` sets them once the claim is
    checkpointed."""

    def plan(self, connector: drm.Connector, config: DisplayConfig) -> DdcPlan | None: ...

    def apply(self, plan: DdcPlan) -> None: ...

    def set_power(self, device: str, state: DisplayPower) -> DdcPower: ...


class NoDdc:
    """Refuses every DDC/CI setting: without its node publisher (`--no-publish`) the operator
    knows no monitor's i2c bus."""

    def plan(self, connector: drm.Connector, config: DisplayConfig) -> DdcPlan | None:
        if config.ddc_settings:
            raise DdcNotSupportedError(
                f"DDC/CI settings ({', '.join(config.ddc_settings)}) for {connector.name} "
                "need the node publisher, which maps monitors to their i2c buses (--publish)"
            )
        return None

    def apply(self, plan: DdcPlan) -> None:
        raise DdcNotSupportedError(f"DDC/CI settings for {plan.connector} are not supported")

    def set_power(self, device: str, state: DisplayPower) -> DdcPower:
        return NoPower().set_power(device, state)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A claim's answer: its devices, or the error that failed it."""

    devices: tuple[PreparedDevice, ...] = ()
    error: str = ""


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    """A checked claim, ready to write: its checkpoint entry (state `started`), the outputs
    its sockets and CDI spec name, whether it states a mode, and its DDC/CI settings."""

    entry: ClaimEntry
    outputs: tuple[ClaimedOutput, ...]
    states_output: bool
    ddc: tuple[DdcPlan, ...]


def plan_claim(settings: Settings, kube: Kube, ref: ClaimRef, *, ddc: DdcHook) -> ClaimPlan:
    """Prepare's first step, which writes nothing: the claim as the API has it now, its
    allocation in this node's pool, each device's monitor connected in sysfs, its config
    checked against the monitor's modes and `ddc`'s plan. PrepareError, AllocationError or
    ClaimConfigError when the claim cannot be prepared; KubeError when the API fails."""
    claim = kube.get_claim(ref.namespace, ref.name)
    if claim is None:
        raise PrepareError(f"ResourceClaim {ref.namespace}/{ref.name} not found")
    uid = (claim.get("metadata") or {}).get("uid")
    if uid != ref.uid:
        raise PrepareError(
            f"ResourceClaim {ref.namespace}/{ref.name} has uid {uid}, not {ref.uid}: "
            "it was replaced"
        )
    allocated = allocated_devices(claim, pool=settings.node.name)
    connectors = _connectors(settings)
    prepared, outputs, configs, ddc_plans = [], [], {}, []
    for device in allocated:
        connector = connectors.get(device.device)
        if connector is None or not connector.connected:
            raise PrepareError(
                f"device {device.device} has no connected monitor on this node now"
            )
        config = _check_config(device, read_monitor(connector))
        if (ddc_plan := ddc.plan(connector, _under_display_power(
                kube, settings.node.name, device.device, config))) is not None:
            ddc_plans.append(ddc_plan)
        output = settings.node.aliases.get(connector.output_name, connector.output_name)
        claimed = ClaimedOutput(device=device.device, output=output)
        outputs.append(claimed)
        prepared.append(
            PreparedDevice(
                request=device.request_name,
                pool=device.pool,
                device=device.device,
                output=output,
                cdi_ids=cdi.device_ids(ref.uid, (claimed,)),
            )
        )
        configs[device.device] = config
    entry = ClaimEntry(
        uid=ref.uid,
        name=ref.name,
        namespace=ref.namespace,
        state="started",
        devices=tuple(prepared),
        config={d: c.to_json() for d, c in configs.items()},
    )
    return ClaimPlan(entry=entry, outputs=tuple(outputs),
                     states_output=any(c.states_output for c in configs.values()),
                     ddc=tuple(ddc_plans))


def _under_display_power(kube: Kube, node: str, device: str,
                         config: DisplayConfig) -> DisplayConfig:
    """`config` without its `power` where the device's Display states one: the Display's
    `spec.power` wins over a claim's (`draplugin.driver.power`), so the claim's is not sent to
    the monitor. The config the checkpoint keeps is the claim's own, unchanged."""
    if config.power is None:
        return config
    found = kube.get_display(display.display_name(node, device))
    try:
        stated = parse_spec((found or {}).get("spec") or {}).power
    except DisplaySpecError:
        stated = None  # a spec no compositor can take states no power either
    if stated is None:
        return config
    log.info("device %s: the claim's power %s is not applied: its Display states power %s, "
             "which wins", device, config.power, stated)
    return replace(config, power=None)


def _connectors(settings: Settings) -> dict[str, drm.Connector]:
    node = settings.node
    cards = drm.enumerate_cards(sysfs_root=node.sysfs_root, dev_root=node.dev_root)
    return {c.device_name: c for card in cards for c in card.connectors}


def _check_config(device: AllocatedDevice, monitor: Monitor) -> DisplayConfig:
    """The device's config, with `mode` checked against what the monitor offers."""
    config = device.config
    if config.mode == "preferred" or not isinstance(config.mode, Mode):
        return config
    try:
        check_output_mode(config.mode, monitor.offered, output=monitor.connector.output_name)
    except WestonIniError as err:
        offered = ", ".join(str(m) for m in monitor.offered) or "none"
        raise ClaimConfigError(
            f"field 'mode' value '{config.mode}': monitor {monitor.label} of device "
            f"{device.device} does not offer it (offers {offered})"
        ) from err
    return config


class Driver:
    """The claims of this node. One prepare or unprepare batch runs at a time."""

    def __init__(
        self,
        settings: Settings,
        kube: Kube,
        *,
        publisher: NodePublisher | None = None,
        claim_status: ClaimReporter | None = None,
        ddc: DdcHook | None = None,
        metrics: Recorder | None = None,
        compositor: Compositor | None = None,
    ) -> None:
        self._settings = settings
        self._kube = kube
        self.compositor = compositor or settings.compositor()
        # None without a node publisher (`--no-publish`): nothing refuses, nobody listens.
        self._publisher = publisher
        self._claim_status = claim_status
        self._ddc = ddc or NoDdc()
        self._metrics = metrics or _NoRecorder()
        self._lock = threading.Lock()
        self._checkpoint_path = checkpoint.path_in(settings.plugin_dir)
        self._delivery = delivery.from_settings(settings)

    # --- the kubelet's calls ---------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[str, Prepared]:
        with self._lock:
            reason = self._publisher.refusal() if self._publisher is not None else None
            if reason is not None:
                log.warning("refusing to prepare %d claim(s): %s", len(claims), reason)
                for _ in claims:
                    self._metrics.prepare_done(0.0, error="refused")
                return {c.uid: Prepared(error=reason) for c in claims}
            answers = {c.uid: self._prepare_one(c) for c in claims}
            self._changed()
            return answers

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[str, str]:
        with self._lock:
            answers = {c.uid: self._unprepare_one(c) for c in claims}
            self._changed()
            return answers

    def _changed(self) -> None:
        if self._publisher is None:
            return
        try:
            self._publisher.claims_changed(checkpoint.load(self._checkpoint_path))
        except Exception:  # the kubelet's answer must not depend on the publisher
            log.exception("could not tell the publisher about the prepared claims")

    def _prepare_one(self, ref: ClaimRef) -> Prepared:
        """One claim's answer, timed and counted once whatever it is."""
        began = time.monotonic()
        answer, reason = self._answer(ref)
        self._metrics.prepare_done(time.monotonic() - began, error=reason)
        return answer

    def _answer(self, ref: ClaimRef) -> tuple[Prepared, PrepareErrorReason | None]:
        """Whatever fails the claim is its error, and the batch goes on."""
        try:
            devices = self._prepare(ref)
        except (PrepareError, AllocationError, ClaimConfigError) as err:
            log.warning("claim %s/%s (%s) not prepared: %s", ref.namespace, ref.name, ref.uid,
                        err)
            return Prepared(error=f"claim {ref.uid}: {err}"), "claim"
        except _FAILURES as err:
            log.error("claim %s/%s (%s) failed: %s", ref.namespace, ref.name, ref.uid, err)
            return Prepared(error=f"claim {ref.uid}: prepare failed: {err}"), "failure"
        except Exception as err:
            log.exception("claim %s/%s (%s) failed", ref.namespace, ref.name, ref.uid)
            return (Prepared(error=f"claim {ref.uid}: prepare failed: {type(err).__name__}: "
                                   f"{err}"), "internal")
        return Prepared(devices=devices), None

    def _unprepare_one(self, ref: ClaimRef) -> str:
        try:
            self._unprepare(ref.uid)
        except _FAILURES as err:
            log.error("claim %s/%s (%s) not unprepared: %s", ref.namespace, ref.name, ref.uid,
                      err)
            return f"claim {ref.uid}: unprepare failed: {err}"
        except Exception as err:
            log.exception("claim %s/%s (%s) not unprepared", ref.namespace, ref.name, ref.uid)
            return f"claim {ref.uid}: unprepare failed: {type(err).__name__}: {err}"
        return ""

    # --- prepare ---------------------------------------------------------------------------

    def _prepare(self, ref: ClaimRef) -> tuple[PreparedDevice, ...]:
        current = self._load()
        known = current.claims.get(ref.uid)
        if known is not None and known.state == "prepared":
            self._ensure_cdi(known)
            log.info("claim %s/%s (%s) was prepared already", ref.namespace, ref.name, ref.uid)
            return known.devices
        plan = plan_claim(self._settings, self._kube, ref, ddc=self._ddc)
        self._save(current.with_claim(plan.entry))
        self._fault("prepare-started")
        for ddc in plan.ddc:
            self._ddc.apply(ddc)
        applied = None
        if plan.states_output:
            applied = self._apply_modes(
                why=f"claim {ref.namespace}/{ref.name} states output settings",
                fault="prepare-ini-written")
        self._fault("prepare-applied")
        self._delivery.create_sockets(ref.uid, plan.outputs)
        self._fault("prepare-socket-created")
        self._delivery.write_spec(ref.uid, plan.outputs)
        self._fault("prepare-cdi-written")
        self._save(self._load().with_claim(plan.entry.with_state("prepared")))
        self._fault("prepare-completed")
        self._claim_applied(plan.entry, applied)
        log.info("prepared claim %s/%s (%s): %s", ref.namespace, ref.name, ref.uid,
                 ", ".join(f"{d.device} ({d.output})" for d in plan.entry.devices))
        return plan.entry.devices

    def _apply_modes(self, *, why: str, fault: FaultPoint | None = None,
                     modeset: Sequence[str] = (),
                     restart_reason: RestartReason | None = None,
                     cards: Sequence[drm.Card] | None = None) -> modes.Applied:
        """weston.ini from the checkpoint as it is now, applied to the running compositor
        (live where it can; `modeset` names devices whose monitor was re-plugged). `cards`:
        the inventory to derive from, else sysfs is read now."""
        applied = modes.apply(
            self._settings, self._kube, self._load(), self.compositor, why=why,
            modeset=modeset, restart_reason=restart_reason, cards=cards, power_hook=self._ddc,
            on_written=None if fault is None else lambda: self._fault(fault))
        if applied.restarted:
            # The new compositor's module holds no claim's socket.
            self._restore_sockets()
        if self._publisher is not None:
            try:
                self._publisher.specs_applied(applied, self._load())
            except Exception:  # the kubelet's answer must not depend on the status writer
                log.exception("could not report what the compositor applied")
        return applied

    def _claim_applied(self, entry: ClaimEntry, applied: modes.Applied | None) -> None:
        """Tell the claim's status what its outputs run at now (None where the compositor
        cannot say: not running, or no layout module to ask)."""
        if self._claim_status is None:
            return
        if applied is not None and applied.outcome.states:
            states = applied.outcome.states
        else:
            try:
                states = {s.name: s for s in self.compositor.outputs()}
            except LayoutError:
                states = {}
        try:
            self._claim_status.applied(entry,
                                       {d.device: states.get(d.output) for d in entry.devices})
        except Exception:  # the kubelet's answer must not depend on the status writer
            log.exception("could not report what claim %s got", entry.uid)

    def follow_connectors(self, *, plugged: Sequence[str] = (),
                          cards: Sequence[drm.Card] | None = None) -> Followed:
        """Apply every output's settings again (after a connector change or a person's edit
        of a Display's `spec`): a monitor plugged in after start gets its claim's or
        Display's settings, an output no claim holds takes its edited spec at once, and the
        `plugged` devices (a monitor plugged on a connector the compositor drives) get a full
        modeset. `cards` is the inventory the publisher read (the outputs follow what the
        slice shows, and sysfs is not read a second time); None reads sysfs. "changed" when
        the compositor changed an output (or restarted, or failed to change one), "unchanged"
        when it was left as it ran, "failed" when the settings could not be applied (logged);
        the caller retries."""
        with self._lock:
            try:
                applied = self._apply_modes(
                    why="the card's connectors or a Display's spec changed"
                    if not plugged else f"monitor plugged on {', '.join(plugged)}",
                    modeset=plugged, cards=cards)
            except _FAILURES as err:
                log.error("cannot apply the outputs' settings yet: %s", err)
                return "failed"
            outcome = applied.outcome
            changed = outcome.changed or outcome.restarted or outcome.failed
            return "changed" if changed else "unchanged"

    def follow_power(self) -> Followed:
        """Apply the Displays' power again, nothing else (a compositor that came back lit
        every output); never raises: the next derivation tries again."""
        with self._lock:
            try:
                applied = modes.apply_power(
                    self._settings, self._kube, self._load(), self.compositor,
                    why="the compositor answers again", power_hook=self._ddc)
            except _FAILURES as err:
                log.error("cannot apply the outputs' power yet: %s", err)
                return "failed"
            except Exception:  # a listener's thread: logged, never lost
                log.exception("applying the outputs' power failed")
                return "failed"
            if self._publisher is not None and applied.power:
                try:
                    self._publisher.specs_applied(applied, self._load())
                except Exception:
                    log.exception("could not report what the compositor applied")
            return "changed" if applied.outcome.changed else "unchanged"

    # --- unprepare -------------------------------------------------------------------------

    def _unprepare(self, uid: str) -> None:
        current = self._load()
        entry = current.claims.get(uid)
        if entry is None:
            if self._clean_orphan(uid):
                log.info("cleaned what a crash left of claim %s", uid)
            else:
                log.info("unprepare of claim %s, which is not prepared here: nothing to do", uid)
            return
        self._save(current.with_claim(entry.with_state("unpreparing")))
        self._fault("unprepare-started")
        self._finish_unprepare(entry)
        log.info("unprepared claim %s/%s (%s)", entry.namespace, entry.name, uid)

    def _finish_unprepare(self, entry: ClaimEntry) -> None:
        if entry.state != "unpreparing":  # a started prepare being undone
            self._save(self._load().with_claim(entry.with_state("unpreparing")))
        cdi.remove_spec(entry.uid, cdi_dir=self._settings.cdi_dir)
        self._fault("unprepare-cdi-removed")
        self._delivery.remove_sockets(entry.uid)
        self._fault("unprepare-socket-removed")
        if modes.states_output(entry):
            self._apply_modes(
                why=f"claim {entry.namespace}/{entry.name} released its output settings",
                fault="unprepare-ini-written")
        self._fault("unprepare-applied")
        self._save(self._load().without_claim(entry.uid))
        self._fault("unprepare-completed")
        if self._claim_status is not None:
            try:
                self._claim_status.released(entry)
            except Exception:  # the kubelet's answer must not depend on the status writer
                log.exception("could not withdraw what claim %s got", entry.uid)

    def _clean_orphan(self, uid: str) -> bool:
        removed = cdi.remove_spec(uid, cdi_dir=self._settings.cdi_dir)
        return self._delivery.remove_sockets(uid) or removed

    # --- start-up ----------------------------------------------------------------------------

    def recover(self) -> None:
        """Bring the node in line with the checkpoint after a start (or a crash).

        Prepared claims get back a CDI spec `/var/run/cdi` lost (tmpfs) and their sockets;
        an unprepare that began is finished; a started prepare whose claim is gone or was
        replaced is undone; CDI specs and sockets of claims the checkpoint does not hold are
        removed; weston.ini is derived again and applied to the compositor.
        """
        with self._lock:
            for entry in self._load().claims.values():
                try:
                    self._recover_entry(entry)
                except _FAILURES as err:
                    # The kubelet's next call for this claim repeats the work.
                    log.error("cannot recover claim %s yet: %s", entry.uid, err)
                except Exception:  # one claim's state never keeps the plugin from starting
                    log.exception("cannot recover claim %s", entry.uid)
            held = set(self._load().claims)
            stray = (set(cdi.list_specs(cdi_dir=self._settings.cdi_dir))
                     | self._socket_holders()) - held
            for uid in sorted(stray):
                log.info("removing what claim %s left behind: it is not in the checkpoint", uid)
                try:
                    self._clean_orphan(uid)
                except _FAILURES as err:
                    log.error("cannot remove what claim %s left behind yet: %s", uid, err)
                except Exception:
                    log.exception("cannot remove what claim %s left behind", uid)
            self._recover_modes()
            self._restore_sockets()

    def _recover_modes(self) -> None:
        try:
            self._apply_modes(why="the operator started: the claims' settings over the Displays",
                              restart_reason="start")
        except _FAILURES as err:
            # weston keeps what declare wrote; the next prepare or unprepare derives it again.
            log.error("cannot apply the prepared claims' modes yet: %s", err)
        except Exception:  # the plugin starts whatever the compositor's config
            log.exception("cannot apply the prepared claims' modes")

    def restore_sockets(self) -> int:
        """Recreate every prepared claim's sockets (after a compositor restart); how many
        claims have theirs now. Safe from any thread."""
        with self._lock:
            return self._restore_sockets()

    def _restore_sockets(self) -> int:
        prepared = [
            (e.uid, tuple(ClaimedOutput(device=d.device, output=d.output) for d in e.devices))
            for e in self._load().claims.values()
            if e.state == "prepared"
        ]
        try:
            restored = self._delivery.restore(prepared)
        except delivery.DeliveryError as err:
            # The watchdog's next "available" or the next start tries again.
            log.error("cannot restore the sockets of %d prepared claim(s): %s", len(prepared),
                      err)
            return 0
        if restored:
            log.info("restored the sockets of %d of %d prepared claim(s)", restored,
                     len(prepared))
        return restored

    def _socket_holders(self) -> set[str]:
        try:
            return set(self._delivery.held())
        except delivery.DeliveryError as err:
            log.error("cannot list the claims' sockets: %s", err)
            return set()

    def _recover_entry(self, entry: ClaimEntry) -> None:
        if entry.state == "prepared":
            self._ensure_cdi(entry)
        elif entry.state == "unpreparing":
            log.info("finishing the unprepare of claim %s that a stop interrupted", entry.uid)
            self._finish_unprepare(entry)
        elif self._claim_gone(entry):
            log.info("undoing the prepare of claim %s/%s (%s): the claim is gone",
                     entry.namespace, entry.name, entry.uid)
            self._finish_unprepare(entry)

    def _claim_gone(self, entry: ClaimEntry) -> bool:
        try:
            claim = self._kube.get_claim(entry.namespace, entry.name)
        except KubeError as err:
            log.warning("cannot check claim %s (%s): keeping its started prepare", entry.uid, err)
            return False
        return claim is None or (claim.get("metadata") or {}).get("uid") != entry.uid

    def _ensure_cdi(self, entry: ClaimEntry) -> None:
        path = cdi.spec_path(entry.uid, cdi_dir=self._settings.cdi_dir)
        if path.exists():
            return
        outputs = tuple(ClaimedOutput(device=d.device, output=d.output) for d in entry.devices)
        self._delivery.write_spec(entry.uid, outputs)
        log.info("rewrote the missing CDI spec of prepared claim %s", entry.uid)

    # --- helpers -----------------------------------------------------------------------------

    def _load(self) -> Checkpoint:
        return checkpoint.load(self._checkpoint_path)

    def _save(self, value: Checkpoint) -> None:
        checkpoint.save(self._checkpoint_path, value)

    def _fault(self, point: FaultPoint) -> None:
        if self._settings.fault_point == point:
            log.warning("fault point %s reached: killing this process", point)
            os.kill(os.getpid(), signal.SIGKILL)
