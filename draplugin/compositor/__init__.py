"""The compositor as the operator sees it, owned in one place.

`Compositor` is the operator's one handle on weston, and the one owner of every change to
the running compositor: the driver's reconfigures, the hotplug follow-up's power-offs, probes
and restarts (`draplugin.node.reprobe`) and the watchdog's kill all go through it, and it
runs them one at a time (a lock held through each change, a restart's wait included). A change
decided on an earlier view carries the `ticket` taken before that view was read, and is
dropped when its output changed since: a claim's reconfigure that came between a hotplug's
sysfs read and its power-off wins, and the next hotplug pass decides again from a fresh read.
The kill alone does not wait for the lock: a change blocked on a hung compositor holds it, and
only the kill ends that.

It gives its checked pid (`pid`, through `draplugin.compositor.pid`, which checks `/proc`
before anyone signals it), whether it answers on its socket, what its outputs run at, a live
change of one output's mode, transform or scale through the layout module's control socket
(`CONFIGURE`, see `westonctl/layout/layout.c`), and the restart that stays as the fallback.

Every output change goes through `apply`: it asks the module what each output runs at
(`OUTPUTS`), changes live only what differs, and restarts the compositor (at most once per
call) only where the live path cannot do it:

- the module answers `unsupported` (the backend cannot switch modes), or no layout module
  answers at all (a stock shell has no control socket): reason `unsupported`;
- an output that should be driven is not among the compositor's outputs (a monitor on a
  connector weston has never driven, see `draplugin.node.reprobe`): reason `new-connector`.

weston reads weston.ini again when it starts, which the caller wrote before, so a restart
applies every output at once. Each change is counted (`output_reconfigured`: live, fallback,
failed), each restart by reason (`compositor_restarted`), and each output's state as weston
reports it (`set_output_state`).

A restart is a restart order naming weston's pid, SIGTERM, and a bounded wait (the operator's
`--restart-timeout`) until a new weston answers on the socket; westonctl starts it at once
and the crash count stays put. A restart whose new weston has not answered within that wait
is not ordered again: the next `apply` waits for it (the module's control socket appears only
once weston runs, and asked before, a starting weston would look like a stock shell).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, Protocol

from draplugin.compositor.pid import PROC, WestonPidError, read_weston_pid
from libdisplay.compositor import layout
from libdisplay.compositor.layout import ConnectorProbe, LayoutControl, LayoutError, OutputState
from libdisplay.compositor.wayland import Liveness, ProbeResult, WaylandError, probe
from libdisplay.compositor.weston import order_restart
from libdisplay.hardware.modes import Mode

log = logging.getLogger(__name__)

RestartReason = Literal["unsupported", "new-connector", "start"]
OutputPower = Literal["on", "off"]
"""What the compositor's output should be: lit, or powered off (KMS: DPMS off, its CRTC
disabled; weston and its clients keep running, the client's frame callbacks pause)."""
Result = Literal["live", "fallback", "failed"]
Followed = Literal["changed", "unchanged", "failed"]
"""What the driver's following of the connectors did (`Driver.follow_connectors`): some output
changed (or the compositor restarted, or a change failed), nothing on the compositor changed,
or the settings could not be applied and are tried again after a backoff."""
POLL_S: Final = 0.02
CONTROL_TIMEOUT_S: Final = 30.0
"""How long the operator waits on one answer of the layout module. A busy compositor answers
late (weston on a software GL rasterizer: 5 s in the VM tier with the host idle), and a hung
one is the watchdog's to kill (within 10 s), which closes the socket and ends this wait: so
the wait decides no hang itself, and stays within the kubelet's 45 s for a prepare."""
_REFRESH_TOLERANCE_MHZ: Final = 500
DEFAULT_TRANSFORM: Final = "normal"
DEFAULT_SCALE: Final = 1


class CompositorError(Exception):
    """Base of this module's errors."""


class CompositorTimeoutError(CompositorError):
    """The compositor did not answer on its socket in time after a restart."""


class Recorder(Protocol):
    """Where the compositor's changes are counted (`draplugin.node.metrics.Metrics`)."""

    def compositor_restarted(self, reason: RestartReason) -> None: ...

    def output_reconfigured(self, output: str, result: Result) -> None: ...

    def set_output_state(self, output: str, *, connected: bool, mode: str, transform: str,
                         scale: int) -> None: ...


class _NoRecorder:
    def compositor_restarted(self, reason: RestartReason) -> None:
        pass

    def output_reconfigured(self, output: str, result: Result) -> None:
        pass

    def set_output_state(self, output: str, *, connected: bool, mode: str, transform: str,
                         scale: int) -> None:
        pass


@dataclass(frozen=True, slots=True)
class Wanted:
    """What one output of the compositor (its name there: `HDMI-A-1`, `X1`) should run at.
    `mode` None leaves the mode as it is (a monitor whose preferred mode is unknown);
    `modeset` forces a full modeset of that output (a monitor re-plugged on it) unless it is
    to be off; `power` off powers the output off (a Display's `spec.power`)."""

    output: str
    mode: Mode | None = None
    transform: str = DEFAULT_TRANSFORM
    scale: int = DEFAULT_SCALE
    modeset: bool = False
    power: OutputPower = "on"


@dataclass(frozen=True, slots=True)
class Outcome:
    """What `apply` did: each output's state as weston reports it afterwards, the restart it
    ordered (None when everything was live or nothing changed), the outputs it changed, and
    the outputs whose change failed, with the module's error. The power of an output is
    applied apart from its other fields, so a power change that failed or that the backend
    cannot make (`power_failed`, `power_unsupported`) leaves the rest applied and restarts
    nothing: a restart lights every output, it powers none off."""

    states: dict[str, OutputState] = field(default_factory=dict)
    restarted: RestartReason | None = None
    changed: tuple[str, ...] = ()
    failed: dict[str, LayoutError] = field(default_factory=dict)
    power_failed: dict[str, LayoutError] = field(default_factory=dict)
    power_unsupported: dict[str, str] = field(default_factory=dict)


def mode_text(state: OutputState) -> str:
    """`1280x720@60` for a state weston reports (refresh rounded to what people write)."""
    hz = f"{state.refresh_mhz / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{state.width}x{state.height}@{hz}" if state.refresh_mhz else \
        f"{state.width}x{state.height}"


def differs(wanted: Wanted, state: OutputState) -> tuple[str, ...]:
    """The fields of `wanted` that `state` does not run at."""
    fields = []
    if wanted.mode is not None and (
        (wanted.mode.width, wanted.mode.height) != (state.width, state.height)
        or (wanted.mode.refresh_mhz and state.refresh_mhz
            and abs(wanted.mode.refresh_mhz - state.refresh_mhz) > _REFRESH_TOLERANCE_MHZ)
    ):
        fields.append("mode")
    if wanted.transform != state.transform:
        fields.append("transform")
    if wanted.scale != state.scale:
        fields.append("scale")
    return tuple(fields)


class Compositor:
    """See the module docstring. Blocking calls: run them off an event loop."""

    def __init__(
        self,
        *,
        socket: Path,
        pid_file: Path,
        restarts_dir: Path,
        control: Path | None,
        restart_timeout: float,
        probe_timeout: float = 1.0,
        control_timeout: float = CONTROL_TIMEOUT_S,
        proc: Path = PROC,
        recorder: Recorder | None = None,
    ) -> None:
        self.socket = socket
        self.pid_file = pid_file
        self.restarts_dir = restarts_dir
        self.control = control
        self.restart_timeout = restart_timeout
        self.probe_timeout = probe_timeout
        self.control_timeout = control_timeout
        self._proc = proc
        self.recorder: Recorder = recorder or _NoRecorder()
        self._unanswered_restart: int | None = None
        """The pid of the weston a restart replaced while no new weston has answered yet."""
        self._changing = threading.RLock()
        self._book = threading.Lock()
        self._serial = 0
        self._changed_at: dict[str, int] = {}
        self._restarted_at = 0

    # --- the owner's bookkeeping ---------------------------------------------------------

    def ticket(self) -> int:
        """The change count now: take it before reading what a later change is decided on."""
        with self._book:
            return self._serial

    def changed_since(self, output: str, ticket: int) -> bool:
        """Whether `output` changed (or the compositor restarted) after `ticket`."""
        with self._book:
            return max(self._changed_at.get(output, 0), self._restarted_at) > ticket

    def _note(self, output: str | None = None) -> None:
        """Count a change of `output`, or of every output (a restart, a kill)."""
        with self._book:
            self._serial += 1
            if output is None:
                self._restarted_at = self._serial
            else:
                self._changed_at[output] = self._serial

    # --- who and whether -----------------------------------------------------------------

    def read_pid(self) -> int:
        """weston's pid, checked to be a live weston of this pid namespace (WestonPidError)."""
        return read_weston_pid(self.pid_file, proc=self._proc)

    def pid(self) -> int | None:
        """`read_pid`, or None when there is no weston to signal."""
        try:
            return self.read_pid()
        except WestonPidError:
            return None

    def probe(self, timeout: float | None = None) -> ProbeResult:
        """One Wayland round trip on the socket (`libdisplay.compositor.wayland.probe`)."""
        return probe(self.socket, timeout=timeout or self.probe_timeout)

    def answers(self) -> bool:
        try:
            return self.probe().state is Liveness.ANSWERING
        except WaylandError:
            return False

    # --- outputs -------------------------------------------------------------------------

    def outputs(self) -> tuple[OutputState, ...]:
        """What each output runs at, as the layout module reports it (LayoutError when it
        does not answer)."""
        if self.control is None:
            raise layout.LayoutConnectError(Path("(no control socket)"), 2)
        with LayoutControl(self.control, timeout=self.control_timeout) as control:
            return tuple(control.outputs())

    def probe_connectors(self) -> tuple[ConnectorProbe, ...] | None:
        """The layout module's PROBE: weston, the DRM master, makes the kernel re-detect
        every connector of its card (which refreshes sysfs) and says what it found. None
        where weston drives no card (x11, headless: the module answers `unsupported`);
        LayoutError when the module does not answer."""
        if self.control is None:
            raise layout.LayoutConnectError(Path("(no control socket)"), 2)
        try:
            with self._changing, LayoutControl(self.control,
                                               timeout=self.control_timeout) as control:
                return control.probe()
        except layout.LayoutUnsupported as err:
            log.info("the compositor cannot re-probe its connectors: %s", err)
            return None

    def power_off(self, output: str, *, decided_at: int | None = None) -> OutputState | None:
        """Turn `output` off (its monitor is gone) without a restart: it keeps its place,
        claims and mode list until a modeset lights it again (LayoutError on failure). None,
        and nothing done, when it changed after `decided_at` (a `ticket`)."""
        if self.control is None:
            raise layout.LayoutConnectError(Path("(no control socket)"), 2)
        with self._changing:
            if decided_at is not None and self.changed_since(output, decided_at):
                log.info("output %s changed since its power-off was decided: left on", output)
                return None
            with LayoutControl(self.control, timeout=self.control_timeout) as control:
                state = control.configure(output, power_off=True)
            self._note(output)
        self.recorder.output_reconfigured(output, "live")
        return state

    def kill(self, pid: int, sig: int = signal.SIGKILL) -> None:
        """Signal the hung weston `pid` (the watchdog's; ProcessLookupError when it is gone).
        It does not wait for a change under way: that change is waiting on the hung
        compositor, and only this ends it."""
        os.kill(pid, sig)
        self._note()

    def apply(self, wanted: Sequence[Wanted], *, why: str, connected: Iterable[str] = (),
              config_changed: bool = True,
              restart_reason: RestartReason | None = None) -> Outcome:
        """`_apply`, one change at a time with every other change to the compositor."""
        with self._changing:
            return self._apply(wanted, why=why, connected=connected,
                               config_changed=config_changed, restart_reason=restart_reason)

    def _apply(self, wanted: Sequence[Wanted], *, why: str, connected: Iterable[str],
               config_changed: bool, restart_reason: RestartReason | None) -> Outcome:
        """Bring each wanted output to its settings, live where the module can; see the
        module docstring. `connected` names the outputs that have a monitor (for the
        metrics). A compositor that is not running is left alone: it reads weston.ini when
        it starts. Without a layout module to ask, a restart follows only when
        `config_changed` (weston.ini says something the running compositor was not told).
        `restart_reason`, when given, is the reason a fallback restart is counted under."""
        if self.pid() is None and not self.answers():
            log.info("the compositor is not running: it reads weston.ini when it starts (%s)",
                     why)
            return Outcome()
        if self._unanswered_restart is not None:
            self._await_restarted(self._unanswered_restart)
        try:
            states = {s.name: s for s in self.outputs()}
        except LayoutError as err:
            # A stock shell has no control socket: no module, no live change, and no way to
            # ask what runs; weston.ini is the only record of what it was told.
            if not config_changed:
                return Outcome()
            return self._fallback(wanted, why=why, reason=restart_reason or "unsupported",
                                  detail=f"the layout module does not answer ({err})",
                                  connected=connected)
        missing = [w.output for w in wanted if w.output not in states]
        if missing:
            return self._fallback(
                wanted, why=why, reason=restart_reason or "new-connector", connected=connected,
                detail=f"the compositor drives no output {', '.join(missing)}")
        changed, failed = [], {}
        for want in wanted:
            fields = differs(want, states[want.output])
            # An output to be off gets no modeset (it would light it); one to be lit again
            # is lit by `_apply_power`.
            modeset = want.modeset and want.power == "on" and states[want.output].powered
            if not fields and not modeset:
                continue
            try:
                states[want.output] = self._configure(want, fields, why=why, modeset=modeset)
            except layout.LayoutUnsupported as err:
                if not fields:
                    # Only the re-plug's modeset was asked, which a backend without DPMS
                    # cannot do; the output keeps running as it was, so no restart for it.
                    log.info("output %s: no modeset after the re-plug: %s", want.output, err)
                    continue
                return self._fallback(wanted, why=why, reason=restart_reason or "unsupported",
                                      detail=str(err), connected=connected)
            except LayoutError as err:
                log.error("output %s: cannot apply %s live (%s): %s", want.output,
                          ", ".join(fields) or "a modeset", why, err)
                self.recorder.output_reconfigured(want.output, "failed")
                failed[want.output] = err
                continue
            changed.append(want.output)
            self.recorder.output_reconfigured(want.output, "live")
        outcome = self._apply_power(wanted, states, why=why,
                                    skip=failed.keys(), changed=changed)
        self._record_states(states.values(), connected)
        return Outcome(states=states, changed=tuple(changed), failed=failed,
                       power_failed=outcome.power_failed,
                       power_unsupported=outcome.power_unsupported)

    def apply_power(self, wanted: Sequence[Wanted], *, why: str) -> Outcome:
        """Only the wanted outputs' power, nothing else (a weston that started again runs
        weston.ini's modes and lit every output); nothing when no compositor answers."""
        with self._changing:
            if self.pid() is None and not self.answers():
                return Outcome()
            try:
                states = {s.name: s for s in self.outputs()}
            except LayoutError as err:
                log.info("no output's power applied (%s): %s", why, err)
                return Outcome()
            changed: list[str] = []
            power = self._apply_power(wanted, states, why=why, changed=changed)
            return Outcome(states=states, changed=tuple(changed),
                           power_failed=power.power_failed,
                           power_unsupported=power.power_unsupported)

    def _apply_power(self, wanted: Sequence[Wanted], states: dict[str, OutputState], *,
                     why: str, skip: Iterable[str] = (), changed: list[str]) -> Outcome:
        """Power each wanted output off or on where it is not so yet, one CONFIGURE of its
        own (`states` and `changed` updated in place). An output whose other fields failed
        is left as it is (`skip`): nothing more is done to an output the module just put
        back. Lighting is the module's modeset=1 (weston_output_power_on), which repaints."""
        failed: dict[str, LayoutError] = {}
        unsupported: dict[str, str] = {}
        skipped = set(skip)
        for want in wanted:
            state = states.get(want.output)
            if state is None or want.output in skipped or state.powered == (want.power == "on"):
                continue
            assert self.control is not None  # outputs() answered through it
            try:
                with LayoutControl(self.control, timeout=self.control_timeout) as control:
                    states[want.output] = control.configure(
                        want.output, power_off=want.power == "off", modeset=want.power == "on")
            except layout.LayoutUnsupported as err:
                log.warning("output %s: cannot be powered %s (%s): %s", want.output,
                            want.power, why, err)
                unsupported[want.output] = err.detail
                continue
            except LayoutError as err:
                log.error("output %s: powering it %s failed (%s): %s", want.output, want.power,
                          why, err)
                self.recorder.output_reconfigured(want.output, "failed")
                failed[want.output] = err
                continue
            self._note(want.output)
            log.info("output %s powered %s (%s)", want.output, want.power, why)
            if want.output not in changed:
                changed.append(want.output)
            self.recorder.output_reconfigured(want.output, "live")
        return Outcome(power_failed=failed, power_unsupported=unsupported)

    def _configure(self, want: Wanted, fields: Sequence[str], *, why: str,
                   modeset: bool) -> OutputState:
        assert self.control is not None  # outputs() answered through it
        started = time.monotonic()
        with LayoutControl(self.control, timeout=self.control_timeout) as control:
            state = control.configure(
                want.output,
                mode=str(want.mode) if "mode" in fields and want.mode is not None else None,
                transform=want.transform if "transform" in fields else None,
                scale=want.scale if "scale" in fields else None,
                modeset=modeset)
        self._note(want.output)
        log.info("output %s now %s %s scale %d, live in %.0f ms (%s)", want.output,
                 mode_text(state), state.transform, state.scale,
                 (time.monotonic() - started) * 1000, why)
        return state

    def _fallback(self, wanted: Sequence[Wanted], *, why: str, reason: RestartReason,
                  detail: str, connected: Iterable[str]) -> Outcome:
        """The restart that applies what cannot be applied live: weston reads the weston.ini
        the caller wrote. Only when something differs: an output that runs as wanted needs
        no restart whatever the backend can do."""
        try:
            states = {s.name: s for s in self.outputs()}
        except LayoutError:
            states = {}
        pending = [w.output for w in wanted
                   if w.output not in states or differs(w, states[w.output]) or w.modeset]
        if states and not pending:
            changed: list[str] = []
            power = self._apply_power(wanted, states, why=why, changed=changed)
            return Outcome(states=states, changed=tuple(changed),
                           power_failed=power.power_failed,
                           power_unsupported=power.power_unsupported)
        log.warning("restarting the compositor (%s): %s; %s", reason, detail, why)
        self.restart(reason, f"{why}: {detail}")
        for output in pending:
            self.recorder.output_reconfigured(output, "fallback")
        try:
            after = {s.name: s for s in self.outputs()}
        except LayoutError:
            after = {}
        # The new weston lit every output: those to be off are powered off again.
        changed = list(pending)
        power = self._apply_power(wanted, after, why=why, changed=changed) if after \
            else Outcome()
        self._record_states(after.values(), connected)
        return Outcome(states=after, restarted=reason, changed=tuple(changed),
                       power_failed=power.power_failed,
                       power_unsupported=power.power_unsupported)

    def _record_states(self, states: Iterable[OutputState], connected: Iterable[str]) -> None:
        plugged = set(connected)
        for state in states:
            try:
                self.recorder.set_output_state(
                    state.name, connected=state.name in plugged or not plugged,
                    mode=mode_text(state), transform=state.transform, scale=state.scale)
            except ValueError as err:  # a label the metric refuses is no reason to fail a claim
                log.warning("output %s: state not recorded: %s", state.name, err)

    # --- restart -------------------------------------------------------------------------

    def restart(self, reason: RestartReason, detail: str, *,
                moved: Callable[[], bool] | None = None,
                on_signalled: Callable[[], None] | None = None) -> bool:
        """Order weston's restart, SIGTERM it and wait until a new weston answers, or until
        `moved()` holds (the caller's sign the restart did its work, e.g. sysfs refreshed).
        False when there was no weston to restart: it reads weston.ini when it starts.
        `on_signalled` is called once weston was told (or there is none), before the wait.
        CompositorTimeoutError when nothing answers within `restart_timeout`."""
        with self._changing:
            return self._restart(reason, detail, moved=moved, on_signalled=on_signalled)

    def _restart(self, reason: RestartReason, detail: str, *,
                 moved: Callable[[], bool] | None,
                 on_signalled: Callable[[], None] | None) -> bool:
        try:
            pid = self.read_pid()
        except WestonPidError as err:
            log.info("no compositor to restart (%s): %s", reason, err)
            if on_signalled is not None:
                on_signalled()
            return False
        order_restart(pid, reason=f"{reason}: {detail}", directory=self.restarts_dir)
        self._note()
        self.recorder.compositor_restarted(reason)
        with contextlib.suppress(ProcessLookupError):  # ended by itself: the order still holds
            os.kill(pid, signal.SIGTERM)
        if on_signalled is not None:
            on_signalled()
        log.info("sent SIGTERM to weston pid %s (%s: %s); waiting for the socket to answer",
                 pid, reason, detail)
        started = time.monotonic()
        if self._wait_for_new(pid, moved):
            log.info("compositor back %.3f s after the restart of pid %s",
                     time.monotonic() - started, pid)
            return True
        raise CompositorTimeoutError(
            f"the compositor did not answer on {self.socket} within "
            f"{self.restart_timeout:g} s after the restart of pid {pid} ({reason})")

    def _await_restarted(self, old: int) -> None:
        """Until a weston other than `old` answers; CompositorTimeoutError after
        `restart_timeout` (the caller tries again later; a hung one is the watchdog's)."""
        if not self._wait_for_new(old):
            raise CompositorTimeoutError(
                f"the compositor restarted from pid {old} does not answer on {self.socket} "
                f"yet; it is not restarted again")
        log.info("the compositor restarted from pid %s answers", old)

    def _wait_for_new(self, old: int, moved: Callable[[], bool] | None = None) -> bool:
        """Whether a weston other than `old` answers, or `moved()` holds, within
        `restart_timeout`. Until a new weston has answered, `old` is remembered, so the next
        `apply` waits for the one starting instead of restarting it (done by the caller's
        sign alone, the new weston may still be starting)."""
        deadline = time.monotonic() + self.restart_timeout
        while True:
            answered = self._new_answers(old)
            if answered or (moved is not None and moved()):
                self._unanswered_restart = None if answered else old
                return True
            if time.monotonic() >= deadline:
                self._unanswered_restart = old
                return False
            time.sleep(POLL_S)

    def _new_answers(self, old: int) -> bool:
        pid = self.pid()
        return pid is not None and pid != old and self.answers()
