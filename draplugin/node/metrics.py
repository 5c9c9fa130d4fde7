"""The operator's Prometheus metrics (`display_*`) in a registry of their own, on METRICS_ADDR.

Counters the code increments, gauges it sets, and one collector for compositor restarts: ordered
restarts are counted here by reason as orders are written, crashes are the weston container's
`restartCount` from this pod's status (westonctl restarts weston in place for an order, so only
unordered exits restart the container) and are set, not incremented, from that status.

Label sets an alert or a dashboard asks for are created at zero as soon as they are known (every
restart reason at start, an output's reconfigure results when its state is first set): a series
that first appears at 1 has no increase Prometheus can see.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    make_wsgi_app,
)
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from libdisplay.compositor import weston
from libdisplay.compositor.renderer import RendererFileError, read_renderer_state

log = logging.getLogger(__name__)

DEFAULT_ADDR = ":9200"
WESTON_CONTAINER = "weston"
RestartReason = Literal["unsupported", "new-connector", "start"]
"""Why the operator ordered a compositor restart: the layout module answered it cannot apply a
change live, a monitor on a connector weston never drove, the derivation at the operator's start."""
RESTART_REASONS: tuple[str, ...] = ("unsupported", "new-connector", "start")
CRASH = "crash"
ReconfigureResult = Literal["live", "fallback", "failed"]
"""A change to an output: applied live, applied by a compositor restart, not applied."""
RECONFIGURE_RESULTS: tuple[str, ...] = ("live", "fallback", "failed")
# The label values: weston.ini's names, which the layout module reports and a Display states.
TRANSFORMS: tuple[str, ...] = weston.TRANSFORMS
PREPARE_ERROR_REASONS: tuple[str, ...] = ("claim", "failure", "internal", "refused")
"""The driver's `PrepareErrorReason`s (draplugin.driver.state), created at zero for the alert."""
_MODE = re.compile(r"\d+x\d+(@\d+(\.\d+)?)?")
_OUTPUT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
HEALTH_PATH = "/healthz"
Health = Callable[[], tuple[bool, str]]
"""(alive, why): the liveness verdict `/healthz` answers."""
POWER_STATES: tuple[str, ...] = ("On", "Off", "Standby")
"""A Display's `spec.power` values (libdisplay.display.POWER_STATES), the label's values."""
PREPARE_BUCKETS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class MetricsError(Exception):
    """Base of every error this module raises."""


class BadAddressError(MetricsError, ValueError):
    """METRICS_ADDR is not `[HOST]:PORT`."""


class BadLabelError(MetricsError, ValueError):
    """A label value the metric does not take; `.field` names the argument."""

    def __init__(self, field: str, value: object, allowed: str) -> None:
        super().__init__(f"{field} {value!r} is not one of: {allowed}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int


def parse_addr(text: str) -> Address:
    """`:9200` → all interfaces, port 9200; `127.0.0.1:9200`; `[::1]:9200`."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdecimal() or not 0 <= int(port) < 65536:
        raise BadAddressError(f"METRICS_ADDR {text!r} is not [HOST]:PORT (e.g. :9200)")
    return Address(host.strip("[]") or "0.0.0.0", int(port))


class _Restarts(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, float] = {CRASH: 0, **{r: 0 for r in RESTART_REASONS}}

    def add(self, reason: str) -> None:
        with self._lock:
            self._counts[reason] = self._counts.get(reason, 0) + 1

    def set_crashes(self, count: int) -> None:
        with self._lock:
            # The kubelet's count only grows; a smaller one is an older read arriving late.
            self._counts["crash"] = max(self._counts["crash"], count)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "display_compositor_restarts",
            "Compositor restarts, by reason: crash (the weston container's restart count), or "
            "the operator's order (unsupported, new-connector, start).",
            labels=["reason"],
        )
        with self._lock:
            for reason, count in self._counts.items():
                family.add_metric([reason], count)
        yield family


class _Renderer(Collector):
    """What westonctl's renderer file says at each scrape (libdisplay.compositor.renderer)."""

    def __init__(self) -> None:
        self.path: Path | None = None

    def collect(self) -> Iterator[Metric]:
        fallbacks = CounterMetricFamily(
            "display_compositor_renderer_fallbacks",
            "weston starts with pixman because the GL renderer could not start (the card has no "
            "usable GL driver: deploy/overlays/pixman-renderer states pixman).")
        info = GaugeMetricFamily(
            "display_compositor_renderer_info",
            "1 for the renderer westonctl was asked for and the one weston runs.",
            labels=["requested", "running"])
        try:
            state = read_renderer_state(self.path) if self.path is not None else None
        except (OSError, RendererFileError) as err:
            log.warning("cannot read the compositor's renderer: %s", err)
            state = None
        fallbacks.add_metric([], state.fallbacks if state else 0)
        if state is not None:
            info.add_metric([state.requested, state.running], 1)
        yield fallbacks
        yield info


class Metrics:
    """Every `display_` metric, registered in `registry`."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.connected_outputs = Gauge(
            "display_connected_outputs", "Connectors with a monitor connected.", registry=r)
        self.compositor_up = Gauge(
            "display_compositor_up", "1 while the compositor answers its socket.", registry=r)
        self.watchdog_kills = Counter(
            "display_watchdog_kills", "Hung compositors the watchdog killed.", registry=r)
        self.prepare_duration = Histogram(
            "display_prepare_duration_seconds", "NodePrepareResources time per claim.",
            buckets=PREPARE_BUCKETS, registry=r)
        self.prepare_errors = Counter(
            "display_prepare_errors", "Claims whose prepare failed, by reason.", ["reason"],
            registry=r)
        for reason in PREPARE_ERROR_REASONS:
            self.prepare_errors.labels(reason=reason)
        self.slice_publishes = Counter(
            "display_slice_publishes", "ResourceSlice writes (create or update).", registry=r)
        self.api_errors = Counter(
            "display_api_errors", "Failed apiserver calls, by resource and HTTP status.",
            ["resource", "code"], registry=r)
        self.api_retries = Counter(
            "display_api_retries", "API calls retried after a retryable failure, by operation.",
            ["operation"], registry=r)
        self.hotplug_events = Counter(
            "display_hotplug_events", "drm uevents received.", registry=r)
        self.ddc_operations = Counter(
            "display_ddc_operations", "DDC/CI operations, by operation.", ["operation"],
            registry=r)
        self.ddc_errors = Counter(
            "display_ddc_errors", "Failed DDC/CI operations, by operation.", ["operation"],
            registry=r)
        self.output_connected = Gauge(
            "display_output_connected", "1 while a monitor is connected to the output.",
            ["output"], registry=r)
        self.output_info = Gauge(
            "display_output_info", "1 for the output's current mode, transform and scale.",
            ["output", "mode", "transform", "scale"], registry=r)
        self.output_reconfigures = Counter(
            "display_output_reconfigures", "Changes to an output's configuration, by result: "
            "live, fallback (by a compositor restart), failed.", ["output", "result"],
            registry=r)
        self.outputs_by_power = Gauge(
            "display_outputs_by_power_state", "Connected outputs with a Display, by the power "
            "state the operator applied (On where none took effect).", ["state"], registry=r)
        for state in POWER_STATES:
            self.outputs_by_power.labels(state=state)
        self._restarts = _Restarts()
        r.register(self._restarts)
        self._renderer = _Renderer()
        r.register(self._renderer)
        self._outputs_lock = threading.Lock()
        self._output_info: dict[str, tuple[str, str, str]] = {}

    def compositor_restarted(self, reason: RestartReason) -> None:
        """The operator ordered a compositor restart, for `reason` (crashes are set, not
        counted here: `set_crash_restarts`)."""
        if reason not in RESTART_REASONS:
            raise BadLabelError("reason", reason, ", ".join(RESTART_REASONS))
        self._restarts.add(reason)

    def output_reconfigured(self, output: str, result: ReconfigureResult) -> None:
        """One change to `output`'s mode, transform or scale ended with `result`."""
        _check_output(output)
        if result not in RECONFIGURE_RESULTS:
            raise BadLabelError("result", result, ", ".join(RECONFIGURE_RESULTS))
        self._init_output(output)
        self.output_reconfigures.labels(output=output, result=result).inc()

    def set_output_state(self, output: str, *, connected: bool, mode: str, transform: str,
                         scale: int) -> None:
        """What `output` is now: connected or not, and the mode (`WxH` or `WxH@Hz`; empty when
        unknown), transform and scale weston drives it with. Every argument is checked before
        anything changes."""
        _check_output(output)
        if mode and not _MODE.fullmatch(mode):
            raise BadLabelError("mode", mode, "WxH or WxH@Hz (e.g. 1920x1080@60)")
        if transform not in TRANSFORMS:
            raise BadLabelError("transform", transform, ", ".join(TRANSFORMS))
        if isinstance(scale, bool) or not isinstance(scale, int) or not 1 <= scale <= 8:
            raise BadLabelError("scale", scale, "an integer 1..8")
        info = (mode, transform, str(scale))
        with self._outputs_lock:
            self._init_output(output)
            self.output_connected.labels(output=output).set(1 if connected else 0)
            old = self._output_info.get(output)
            if old is not None and old != info:
                self.output_info.remove(output, *old)
            self.output_info.labels(output, *info).set(1)
            self._output_info[output] = info

    def set_power_states(self, states: Iterable[str]) -> None:
        """The connected outputs' power states, one per output (every label set, so a state
        no output has reads 0). Checked before anything changes."""
        counted = dict.fromkeys(POWER_STATES, 0)
        for state in states:
            if state not in counted:
                raise BadLabelError("state", state, ", ".join(POWER_STATES))
            counted[state] += 1
        for state, count in counted.items():
            self.outputs_by_power.labels(state=state).set(count)

    def set_output_connected(self, output: str, connected: bool) -> None:
        """Whether a monitor is on `output`, as sysfs says, for a connector weston may no longer
        report (an unplugged one): its mode, transform and scale stay as last set."""
        _check_output(output)
        with self._outputs_lock:
            self._init_output(output)
            self.output_connected.labels(output=output).set(1 if connected else 0)

    def _init_output(self, output: str) -> None:
        for result in RECONFIGURE_RESULTS:
            self.output_reconfigures.labels(output=output, result=result)

    def prepare_done(self, seconds: float, *, error: str | None) -> None:
        """One claim's prepare answered: its time, and why it failed when it did (the
        driver's `PrepareErrorReason`). A refused claim did no work and takes no time."""
        if error != "refused":
            self.prepare_duration.observe(seconds)
        if error is not None:
            self.prepare_errors.labels(reason=error).inc()

    def watch_renderer(self, path: Path) -> None:
        """Report the renderer westonctl writes to `path` at each scrape."""
        self._renderer.path = path

    def set_crash_restarts(self, count: int) -> None:
        self._restarts.set_crashes(count)

    def api_error(self, resource: str) -> Callable[[int], None]:
        """A callback for `retry.with_retries(on_error=...)` counting errors on `resource`."""

        def count(code: int) -> None:
            self.api_errors.labels(resource=resource, code=str(code)).inc()

        return count

    def api_retry(self, operation: str) -> None:
        self.api_retries.labels(operation=operation).inc()

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))

    def serve(self, addr: str = DEFAULT_ADDR, *, health: Health | None = None) -> WSGIServer:
        """Serve /metrics and /healthz (200 while `health` says alive, else 503; 200 without
        one) on `addr` from a daemon thread; every other path is 404. `.shutdown()` the result
        to stop."""
        where = parse_addr(addr)
        app = _app(make_wsgi_app(self.registry), health or (lambda: (True, "no check")))
        server = make_server(where.host, where.port, app, _server_class(where.host),
                             handler_class=_QuietHandler)
        threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
        log.info("metrics on %s:%d", where.host, server.server_port)
        return server


def _check_output(output: str) -> None:
    if not isinstance(output, str) or not _OUTPUT.fullmatch(output):
        raise BadLabelError("output", output, "a connector name such as HDMI-A-1")


def _server_class(host: str) -> type[WSGIServer]:
    if ":" not in host:
        return ThreadingWSGIServer

    class Server6(ThreadingWSGIServer):
        address_family = socket.AF_INET6

    return Server6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)


def _app(metrics_app: Any, health: Health) -> Any:
    def app(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO") or "/"
        if path in ("/metrics", "/"):
            return metrics_app(environ, start_response)
        if path == HEALTH_PATH:
            alive, why = health()
            status = "200 OK" if alive else "503 Service Unavailable"
            body = f"{'ok' if alive else 'failing'}: {why}\n".encode()
        else:
            status, body = "404 Not Found", b"not found: /metrics and /healthz are served\n"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                                ("Content-Length", str(len(body)))])
        return [body]

    return app


def weston_restart_count(pod: Mapping[str, Any], *, container: str = WESTON_CONTAINER) -> int:
    """The container's `restartCount` in a Pod (as the API returns it); 0 before it has one.

    The compositor is a native sidecar (an init container with restartPolicy Always), and the
    kubelet reports those in `initContainerStatuses`; a plain container is looked for too.
    """
    pod_status = pod.get("status") or {}
    statuses = [*(pod_status.get("initContainerStatuses") or []),
                *(pod_status.get("containerStatuses") or [])]
    for status in statuses:
        if status.get("name") == container:
            return int(status.get("restartCount") or 0)
    return 0
