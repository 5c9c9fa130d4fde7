"""The node publisher as one asyncio task: slice, Displays, hotplug, watchdog, DDC/CI, metrics.

`NodeRuntime.run()` is what the operator's main loop starts beside its gRPC servers. It reads
the cards, publishes the slice and the Displays, then keeps them current from uevents and the
periodic resync, probes DDC/CI in the background after start and after each plug, and runs the
compositor watchdog, whose availability changes taint the devices and reach the listeners the
plugin registers (health stream, prepare refusal). Everything it counts goes to `metrics`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lightkube import AsyncClient

from draplugin.claims import ClaimRef
from draplugin.compositor import Compositor, Followed
from draplugin.driver.claimconfig import DisplayConfig
from draplugin.node import ddcmap, displays, hotplug, metrics, podwatch, reprobe, slices, watchdog
from draplugin.node.retry import fatal
from draplugin.node.settings import NodeSettings
from libdisplay.compositor import wayland
from libdisplay.compositor.renderer import RENDERER_FILE
from libdisplay.hardware import drm
from libdisplay.kube import access as kubeaccess
from libdisplay.kube import lightkube_client as kubelightkube
from libdisplay.kube.access import Endpoint
from libdisplay.pod import FIELD_MANAGER

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class _Observed:
    ddc: dict[str, displays.DdcState] = field(default_factory=dict)
    claims: dict[str, ClaimRef] = field(default_factory=dict)


class NodeRuntime:
    """Owns the publisher's pieces; see the module docstring."""

    def __init__(
        self,
        client: AsyncClient,
        config: NodeSettings,
        compositor: Compositor,
        *,
        source: hotplug.UeventSource | None = None,
        buses: ddcmap.Buses | None = None,
        registry: metrics.Metrics | None = None,
    ) -> None:
        self.config = config
        self.metrics = registry or metrics.Metrics()
        # The operator's one handle on weston, shared with the driver (draplugin.compositor).
        self.compositor = compositor
        self.metrics.watch_renderer(compositor.pid_file.parent / RENDERER_FILE)
        self._client = client
        self._source = source
        self.buses = buses or ddcmap.Buses(dev_root=config.dev_root)
        self._observed = _Observed()
        self._bus_map: dict[str, int] = {}
        self.publisher = slices.Publisher(
            client, node=config.name, resync=config.slice_resync, backoff=config.backoff,
            on_publish=self.metrics.slice_publishes.inc,
            on_error=self.metrics.api_error("resourceslices"),
            on_retry=self.metrics.api_retry, on_pass=self._passed)
        self.displays = displays.Displays(client, node=config.name, backoff=config.backoff,
                                          on_error=self.metrics.api_error("displays"),
                                          on_retry=self.metrics.api_retry)
        # Start-up counts as a pass: liveness gives the first one the same time as any.
        self._last_pass = time.monotonic()
        self._failure: asyncio.Future[None] | None = None
        self.watchdog = watchdog.Watchdog(
            compositor.socket, listeners=[self._on_availability], pid=compositor.pid,
            interval=config.watchdog_interval, budget=config.hang_budget,
            kill=compositor.kill, on_kill=lambda _pid: self.metrics.watchdog_kills.inc())
        self.hotplug: hotplug.Hotplug | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._displays_due = asyncio.Event()
        # One Display pass at a time (the loop's and a refresh's): a pass that read the cache
        # before the other's write was observed would send a write refused as stale (409).
        self._reconciling = asyncio.Lock()
        self._follow: Callable[[tuple[str, ...], tuple[drm.Card, ...]], Followed] | None = None
        self._connectors_due = asyncio.Event()
        self._plugged: set[str] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- what the plugin side uses ---------------------------------------------------------------

    def add_availability_listener(self, listener: watchdog.Listener) -> None:
        """Hear each compositor availability change (health stream, prepare refusal)."""
        self.watchdog.add_listener(listener)

    @property
    def compositor_available(self) -> bool:
        return self.watchdog.available

    def liveness(self) -> tuple[bool, str]:
        """Alive while the slice loop completed a pass within `liveness_timeout` (any thread)."""
        age = time.monotonic() - self._last_pass
        limit = self.config.liveness_timeout
        if age > limit:
            return False, f"the publisher's loop has not completed a pass for {age:.1f} s " \
                          f"(limit {limit:g} s)"
        return True, f"the publisher's loop completed a pass {age:.1f} s ago"

    def _passed(self) -> None:
        self._last_pass = time.monotonic()

    async def supervise(self, work: Coroutine[Any, Any, None]) -> None:
        """Run `work` (submitted from another thread); its failure ends the runtime, as any
        task's does, instead of waiting unread in a future."""
        try:
            await work
        except Exception as err:
            self._fail(err)
            raise

    def _fail(self, err: BaseException) -> None:
        if self._failure is not None and not self._failure.done():
            self._failure.set_exception(err)

    def ddc_hook(self) -> ddcmap.ClaimDdc:
        """Part 1's DdcHook, sharing this runtime's buses and bus map."""
        return ddcmap.ClaimDdc(self.buses, buses=lambda: self._bus_map,
                               on_applied=self._ddc_applied_from_thread,
                               states=lambda: dict(self._observed.ddc))

    def _ddc_applied_from_thread(self, device: str, config: DisplayConfig) -> None:
        # Prepares run on gRPC threads; the observed state belongs to the event loop.
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self.ddc_applied, device, config)

    def ddc_applied(self, device: str, config: DisplayConfig) -> None:
        """A claim's settings, applied and read back, become the monitor's observed state
        (written with the claim at the next Display refresh) without a new probe."""
        state = self._observed.ddc.get(device)
        if state is not None:
            self._observed.ddc[device] = ddcmap.applied(state, config)

    def follow_connectors_with(
            self, follow: Callable[[tuple[str, ...], tuple[drm.Card, ...]], Followed]) -> None:
        """After each connector change the slice published, and after a person edits a
        Display's `spec`, call `follow(plugged, cards)` (blocking, on a worker thread;
        `plugged` names the devices whose monitor was added or swapped since the last call,
        `cards` is the inventory last published): the driver derives every output's settings
        again from `cards` and applies them, so a monitor plugged in after start comes up at
        its claim's or Display's settings and a spec edit takes effect at once. "changed"
        brings a Display pass (the status shows what the outputs run at now); "unchanged"
        none, as the last pass already shows them; "failed" means "not yet" (the API or the
        compositor failed): it is called again after a backoff."""
        self._follow = follow

    def set_claims(self, claims: Mapping[str, ClaimRef]) -> None:
        """The claims holding devices now (device name → claim), for the Display status;
        written at the next reconcile (call `refresh()` to write now)."""
        self._observed.claims = dict(claims)

    async def hold_display_writes(self, held: bool) -> None:
        """Hold every Display write (creates, status, labels) while `held`; reads, the slice
        and the watches go on. The operator holds them from its start until its gRPC server
        serves, so the kubelet's registration, which waits for nothing else, does not queue
        behind a video wall's 16 Displays and their status on the API server."""
        self.displays.hold_writes(held)

    async def close(self) -> None:
        """Release the API client."""
        await self._client.close()

    async def rescan(self) -> None:
        """Re-read sysfs now and publish what changed, as after a uevent."""
        if self.hotplug is not None:
            await self.hotplug.rescan()

    async def refresh(self) -> None:
        """Write the Display status now (e.g. after a prepare or unprepare)."""
        if self.hotplug is not None:
            await self._reconcile_displays(self.hotplug.cards)

    # -- running ---------------------------------------------------------------------------------

    async def run(self) -> None:
        """Until cancelled. Uses the real netlink source unless one was given."""
        self._loop = asyncio.get_running_loop()
        self._failure = self._loop.create_future()
        source = self._source or hotplug.UdevEvents()
        scan = functools.partial(drm.enumerate_cards, sysfs_root=self.config.sysfs_root,
                                 dev_root=self.config.dev_root)
        self.hotplug = hotplug.Hotplug(
            source, scan, self._on_hotplug, resync=self.config.hotplug_resync,
            on_event=lambda _e: self.metrics.hotplug_events.inc(), reprobe=self._reprobe())
        cards = await self.hotplug.start()
        await self._publish(cards)
        self._probe_ddc_later(cards)
        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(self.publisher.run())
                group.create_task(self.hotplug.run())
                group.create_task(self.watchdog.run())
                group.create_task(self._display_loop())
                group.create_task(self._follow_loop())
                group.create_task(self.displays.watch(lambda _name: self._spec_edited()))
                if self.config.pod is not None:
                    group.create_task(podwatch.restart_follower(
                        self._client, *self.config.pod, on_count=self.metrics.set_crash_restarts,
                        on_retry=self.metrics.api_retry).run())
                # A background task's or a submitted call's failure ends the group.
                group.create_task(self._until_failure())
        finally:
            for task in self._background:
                task.cancel()

    def _reprobe(self) -> reprobe.Reprobe | None:
        """The compositor restart that makes a hotplug visible (draplugin.node.reprobe); none
        where the compositor's outputs are not the card's connectors (aliases)."""
        if self.config.aliases:
            return None
        return reprobe.for_compositor(self.compositor)

    def _spec_edited(self) -> None:
        """A Display's spec changed: apply it (the follow loop) and show it (the status)."""
        self._displays_due.set()
        self._connectors_due.set()

    async def _until_failure(self) -> None:
        assert self._failure is not None
        await self._failure

    async def _on_hotplug(self, cards: tuple[drm.Card, ...], changes: hotplug.Changes) -> None:
        for device in (*changes.removed, *changes.swapped):
            self._observed.ddc.pop(device, None)
        await self._publish(cards)
        if changes.added or changes.swapped:
            self._probe_ddc_later(cards)
        self._plugged.update(changes.added, changes.swapped)
        self._connectors_due.set()

    async def _publish(self, cards: tuple[drm.Card, ...]) -> None:
        connected = sum(c.connected for card in cards for c in card.connectors)
        self.metrics.connected_outputs.set(connected)
        # Per connector, as weston names it: an unplugged monitor's output stays in weston's
        # list, so only sysfs tells that it went.
        for card in cards:
            for c in card.connectors:
                name = self.config.aliases.get(c.output_name, c.output_name)
                try:
                    self.metrics.set_output_connected(name, c.connected)
                except ValueError as err:
                    log.warning("output %s: connection not recorded: %s", name, err)
        ddc = {d: s.supported for d, s in self._observed.ddc.items()}
        self.publisher.update(slices.build_devices(cards, ddc=ddc))
        try:
            await self.publisher.sync()
        except slices.SliceError as err:
            if fatal(err):
                raise
            log.error("%s (the publisher retries at its next resync)", err)
        # Displays follow on their own task: a burst of plugs must not queue behind them.
        self._displays_due.set()

    async def _display_loop(self) -> None:
        """One Display pass per request; a pass the API failed is owed, and made again after
        the publisher's backoff until one succeeds: the status an outage held up goes out
        within that delay of the API's return, not at the next hotplug or the watch's
        (much longer) re-list."""
        attempt = 0
        while True:
            await self._displays_due.wait()
            self._displays_due.clear()
            if self.hotplug is None or await self._reconcile_displays(self.hotplug.cards):
                attempt = 0
                continue
            delay = self.config.backoff.delay(attempt)
            attempt += 1
            log.warning("the Displays' status is owed to the API; trying again in %.1f s",
                        delay)
            await asyncio.sleep(delay)
            self._displays_due.set()

    async def _follow_loop(self) -> None:
        attempt = 0
        while True:
            await self._connectors_due.wait()
            self._connectors_due.clear()
            plugged, self._plugged = tuple(sorted(self._plugged)), set()
            # The inventory the slice shows: read again here it would cost a second sysfs
            # read per hotplug, and could show the outputs a change the slice does not.
            cards = self.hotplug.cards if self.hotplug is not None else ()
            followed: Followed = "unchanged" if self._follow is None else \
                await asyncio.to_thread(self._follow, plugged, cards)
            if followed != "failed":
                attempt = 0
                # What the outputs run at now shows in the Display status. Unchanged, the
                # pass the change itself brought shows them already: a second pass per
                # hotplug would list the outputs and compare every Display for nothing.
                if followed == "changed":
                    self._displays_due.set()
                continue
            self._plugged.update(plugged)
            delay = self.config.backoff.delay(attempt)
            attempt += 1
            log.warning("the compositor's outputs do not follow the connectors yet; "
                        "trying again in %.1f s", delay)
            await asyncio.sleep(delay)
            self._connectors_due.set()

    async def _reconcile_displays(self, cards: tuple[drm.Card, ...]) -> bool:
        """One Display pass; False when the API failed it (the pass is then owed: the
        display loop makes it again)."""
        async with self._reconciling:
            outputs = await self._outputs(cards) if self.compositor_available else {}
            observed = displays.Observed(outputs=outputs, ddc=self._observed.ddc,
                                         claims=self._observed.claims)
            try:
                await self.displays.reconcile(cards, observed=observed)
            except displays.DisplaysError as err:
                if fatal(err):
                    raise
                log.error("%s (the pass is made again)", err)
                self._displays_due.set()
                return False
            return True

    async def _outputs(self, cards: tuple[drm.Card, ...]) -> dict[str, wayland.Output]:
        """The compositor's outputs by device name: what each runs at now."""
        try:
            found = await asyncio.to_thread(wayland.list_outputs, self.compositor.socket,
                                            timeout=self.config.probe_timeout * 2)
        except wayland.WaylandError as err:
            log.info("cannot list the compositor's outputs: %s", err)
            return {}
        by_name = {o.name: o for o in found}
        aliases = self.config.aliases
        return {
            c.device_name: by_name[name]
            for card in cards
            for c in card.connectors
            if (name := aliases.get(c.output_name, c.output_name)) in by_name
        }

    def _later(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background_done)

    def _background_done(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        if not task.cancelled() and (err := task.exception()) is not None:
            self._fail(err)

    def _probe_ddc_later(self, cards: tuple[drm.Card, ...]) -> None:
        self._later(self._probe_ddc(cards))

    async def _probe_ddc(self, cards: tuple[drm.Card, ...]) -> None:
        buses = ddcmap.delivered_buses(self.config.dev_root)
        self._bus_map = await asyncio.to_thread(ddcmap.map_buses, cards, buses,
                                                access=self.buses)
        todo = {d: b for d, b in self._bus_map.items() if d not in self._observed.ddc}
        found = await ddcmap.probe_all(todo, access=self.buses, timeout=self.config.ddc_timeout)
        for state in found.values():
            self.metrics.ddc_operations.labels(operation="probe").inc()
            if not state.supported:
                self.metrics.ddc_errors.labels(operation="probe").inc()
        self._observed.ddc.update(found)
        if found and self.hotplug is not None:
            await self._publish(self.hotplug.cards)
        if any(state.supported for state in found.values()):
            # A Display's power waits for its monitor's probe to reach DDC/CI: derive again.
            self._connectors_due.set()

    def _on_availability(self, now: watchdog.Availability) -> None:
        self.metrics.compositor_up.set(1 if now.available else 0)
        self.publisher.set_tainted(not now.available)
        if now.available:
            # A (re)started compositor may run other modes: the Display status follows. It
            # also probed the card as its new master, which refreshes a stale sysfs.
            self._later(self.refresh())
            self._later(self.rescan())



def async_client(*, api_server: str | None = None, kubeconfig: Path | None = None,
                 endpoint: Endpoint | None = None,
                 field_manager: str = FIELD_MANAGER) -> AsyncClient:
    """An AsyncClient for `endpoint`, else for what `kubeaccess.discover` finds from a URL,
    a kubeconfig or the pod's service account."""
    found = endpoint or kubeaccess.discover(api_server=api_server, kubeconfig=kubeconfig)
    return kubelightkube.async_client(found, field_manager=field_manager)


class NodeThreadError(Exception):
    """The node publisher's thread could not start or is not running."""


class NodeThread:
    """Runs a NodeRuntime on an event loop of its own thread, for the operator's sync main.

    `make()` runs on that thread (so the AsyncClient belongs to its loop). Listeners added to
    the runtime are called on that thread; `submit()` runs a coroutine there from any thread.
    """

    def __init__(self, make: Callable[[], NodeRuntime], *,
                 on_fatal: Callable[[BaseException], None] | None = None) -> None:
        self._make = make
        # Hears what ended the runtime by itself (on this thread): the operator exits on it.
        self._on_fatal = on_fatal
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._runtime: NodeRuntime | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="node-publisher", daemon=True)

    def start(self, *, timeout: float = 30.0) -> NodeRuntime:
        """Start the thread; the runtime once built (its first publish goes on in the thread)."""
        self._thread.start()
        if not self._ready.wait(timeout):
            raise NodeThreadError(f"the node publisher was not built within {timeout:g} s")
        if self._runtime is None:
            raise NodeThreadError(f"the node publisher could not start: {self._error}")
        return self._runtime

    def submit(self, work: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        if self._loop is None or self._loop.is_closed() or not self._thread.is_alive():
            work.close()
            raise NodeThreadError("the node publisher is not running")
        try:
            return asyncio.run_coroutine_threadsafe(work, self._loop)
        except RuntimeError as err:  # the loop closed since the check
            work.close()
            raise NodeThreadError(f"the node publisher is not running: {err}") from err

    def stop(self, *, timeout: float = 5.0) -> None:
        """Cancel the runtime and join the thread; NodeThreadError if it outlives `timeout`."""
        if self._loop is not None and self._task is not None:
            # A runtime that ended by itself (a fatal API error) has closed its loop already.
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise NodeThreadError(f"the node publisher did not stop within {timeout:g} s")

    @property
    def error(self) -> BaseException | None:
        """What ended the runtime, when it ended by itself."""
        return self._error

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        try:
            self._runtime = self._make()
        except Exception as err:  # reported to start() in the caller's thread
            self._error = err
            self._ready.set()
            return
        self._task = asyncio.current_task()
        self._ready.set()
        try:
            await self._runtime.run()
            raise NodeThreadError("the node publisher's tasks ended by themselves")
        except asyncio.CancelledError:
            log.info("node publisher stopped")
        except Exception as err:
            log.exception("node publisher failed")
            self._error = err
            if self._on_fatal is not None:
                self._on_fatal(err)
        finally:
            await self._runtime.close()
