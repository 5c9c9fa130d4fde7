"""The running operator against an API that fails: outages it rides out, faults it exits on,
and the crash-point matrix with its publisher on.

The operator runs with its publisher (no compositor in the outage tests: every device is
tainted, which does not matter there) against the fake apiserver's outage switch, over plain
HTTP and over the fake's HTTPS with a bearer token and its CA (the way a pod reaches its API
server: TLS verified, every failure classified by the same code). Each phase lasts
FAULT_PHASE_S seconds (3 by default); the operator's retry delays are capped short so a phase
sees many.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.resource_v1 import ResourceClaim

from draplugin.driver.state import FAULT_POINTS
from fakekube.client import sync_client
from fakekube.faults import OutageKind
from fakekube.server import FakeKube
from fakekube.testing import resource_claim
from libdisplay import cdi
from libdisplay.display import API_VERSION, display_name
from libdisplay.pod import DRIVER
from libdisplay.processes import Process
from libdisplay.sim.sysfs import hotplug
from simnode.kubelet.plugin import Claim, Kubelet
from tests.support.crds import display_crd
from tests.support.operator_node import DP, HDMI, NODE, Node, make_kube, make_node
from tests.support.operator_process import (
    INITIAL_INI,
    check_invariants,
    config,
    dies,
    display_spec,
    free_port,
    plugin,
    slice_devices,
    weston,
)

PHASE_S = float(os.environ.get("FAULT_PHASE_S", "3"))
STALL_S = float(os.environ.get("FAULT_STALL_S", "5"))
FATAL_EXIT_S = 10.0
QUIET_S = 1.5


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return make_node(tmp_path)


def _make_kube(*, tls: bool) -> FakeKube:
    """draplugin_test's fake with its Displays; with `tls`, HTTPS from its own CA and every
    request authenticated and authorized as the apiserver does."""
    if not tls:
        return make_kube()
    kube = FakeKube(tls=True, authorize=True).start()
    kube.register_crd(display_crd())
    for device, spec in ((HDMI, {}), (DP, {"mode": "1280x1024@60"})):
        kube.create({"apiVersion": API_VERSION, "kind": "Display",
                     "metadata": {"name": display_name(NODE, device)}, "spec": spec})
    return kube


@pytest.fixture(params=["http", "https"])
def fake(request: pytest.FixtureRequest) -> Iterator[FakeKube]:
    kube = _make_kube(tls=request.param == "https")
    try:
        yield kube
    finally:
        kube.stop()


@pytest.fixture
def tls_fake() -> Iterator[FakeKube]:
    kube = _make_kube(tls=True)
    try:
        yield kube
    finally:
        kube.stop()


def _api_args(fake: FakeKube, tmp: Path) -> list[str]:
    """The flags that reach `fake`: over HTTPS, a token file and the fake's CA, as a pod has
    them mounted (the URL itself is plugin()'s --api-server)."""
    if not fake.url.startswith("https://"):
        return []
    token = tmp / "api-token"
    token.write_text(fake.admin_token + "\n")
    return [f"--api-token-file={token}", f"--api-ca-file={fake.ca_path}"]


def _admin(fake: FakeKube) -> Any:
    """A lightkube client of the test's own, allowed everything."""
    if fake.url.startswith("https://"):
        return sync_client(fake.url, token=fake.admin_token, ca=fake.ca_pem)
    return sync_client(fake.url)


def _claim(fake: FakeKube, name: str, params: dict[str, object]) -> Claim:
    """A claim allocated HDMI with `params` (draplugin_test's make_claim, through a client
    with rights on a fake that checks them)."""
    uid = fake.create(resource_claim(name))["metadata"]["uid"]
    results = [{"request": "screen", "driver": DRIVER, "pool": NODE, "device": HDMI}]
    configs = [{"source": "FromClaim", "requests": ["screen"],
                "opaque": {"driver": DRIVER, "parameters": params}}]
    status = {"allocation": {"devices": {"results": results, "config": configs}}}
    _admin(fake).patch(ResourceClaim.Status, name, {"status": status}, namespace="default")
    return Claim(uid=uid, name=name)


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _retries(port: int) -> dict[str, float]:
    """display_api_retries_total by operation."""
    found = {}
    for line in _get(port, "/metrics")[1].splitlines():
        if line.startswith("display_api_retries_total{"):
            labels, value = line.rsplit(" ", 1)
            found[labels.split('"')[1]] = float(value)
    return found


def _wait_settled(operator: Process, fake: FakeKube, port: int) -> None:
    """Until the operator's start-up writes are done: its gRPC server serves (which releases
    the Display writes held until then), each Display has its spec outcome, and the API has
    seen no write for QUIET_S (a 409 between the operator's own status writes is retried
    within --api-backoff-cap)."""
    def settled() -> bool:
        if "the gRPC server answers" not in _get(port, "/healthz")[1]:
            return False
        for device in (HDMI, DP):
            found = fake.get(API_VERSION, "Display", display_name(NODE, device))
            if "observedGeneration" not in ((found or {}).get("status") or {}):
                return False
        writes = [r.at for r in fake.request_log() if r.method != "GET"]
        return not writes or time.monotonic() - max(writes) >= QUIET_S
    operator.wait_until(settled, timeout=30.0, what="the operator's start-up writes are done")


def _hold(operator: Process, seconds: float, what: str) -> None:
    """Keep a fault phase on for `seconds`; fails at once if the operator exits meanwhile."""
    deadline = time.monotonic() + seconds
    operator.wait_until(lambda: time.monotonic() >= deadline, timeout=seconds + 5, what=what)


@contextlib.contextmanager
def _operator(node: Node, fake: FakeKube, pex_root: Path, port: int,
              *extra: str) -> Iterator[Process]:
    fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    args = ["--hotplug-resync=3600", "--slice-resync=0.5", "--api-backoff-cap=0.2",
            *_api_args(fake, node.root), *extra]
    with plugin(node, fake, pex_root, metrics_port=port, extra_args=args) as operator:
        operator.wait_until(lambda: set(slice_devices(fake)) == {HDMI, DP}, timeout=30.0,
                            what="slice published")
        yield operator


def test_an_outage_is_ridden_out_and_the_slice_follows_after_it(
        node: Node, fake: FakeKube, pex_root: Path) -> None:
    port = free_port()
    with _operator(node, fake, pex_root, port) as operator:
        before = sum(_retries(port).values())
        fake.set_outage("drop")
        _hold(operator, PHASE_S, "every connection dropped")
        dropped = sum(_retries(port).values())
        fake.set_outage("html", code=503)
        _hold(operator, PHASE_S, "every answer a 503 HTML page")
        html = sum(_retries(port).values())
        fake.set_outage(None)
        hotplug(node.root, "card0-DP-1", status="disconnected")
        operator.send_signal(signal.SIGHUP)
        operator.wait_until(lambda: set(slice_devices(fake)) == {HDMI}, timeout=30.0,
                            what="a hotplug after the outage reaches the slice")
        by_operation = _retries(port)
        print(f"retries: {dropped - before:g} while dropped, {html - dropped:g} while 503 HTML;"
              f" by operation {by_operation}")
        assert dropped > before and html > dropped
        assert _get(port, "/healthz")[0] == 200
        assert not operator.exited()
        assert not operator.log_contains("node publisher failed")
        assert not operator.log_contains("Traceback")


OWED_WRITE_S = 10.0
"""How soon after the API's first good answer the writes an outage held up are made."""


def _display_connected(fake: FakeKube, device: str) -> object:
    found = fake.get(API_VERSION, "Display", display_name(NODE, device)) or {}
    return (found.get("status") or {}).get("connected")


@pytest.mark.parametrize("outage", ["drop", "html"])
def test_after_an_outage_the_slice_and_the_display_both_show_an_unplug_made_during_it(
        node: Node, fake: FakeKube, pex_root: Path, outage: OutageKind) -> None:
    """The monitor is pulled out while every request fails, long enough for each write's
    own retries to give up; both the slice and its Display follow within OWED_WRITE_S of the
    API's return, whatever the Displays' watch's back-off."""
    port = free_port()
    with _operator(node, fake, pex_root, port) as operator:
        _wait_settled(operator, fake, port)
        assert _display_connected(fake, DP) is True
        fake.set_outage(outage, code=503)
        hotplug(node.root, "card0-DP-1", status="disconnected")
        operator.send_signal(signal.SIGHUP)
        # --api-backoff-cap=0.2: each Display write gives up after about 1.5 s.
        _hold(operator, 2 * PHASE_S, f"the unplug made during the {outage} outage")
        fake.set_outage(None)
        back = time.monotonic()
        operator.wait_until(
            lambda: set(slice_devices(fake)) == {HDMI} and _display_connected(fake, DP) is False,
            timeout=OWED_WRITE_S, what="the slice and the Display show the unplug")
        print(f"{outage}: slice and Display right {time.monotonic() - back:.2f} s after the "
              "API answered again")
        assert not operator.exited()


def test_a_fatal_fault_stops_serving_and_exits_non_zero(
        node: Node, fake: FakeKube, pex_root: Path) -> None:
    port = free_port()
    with _operator(node, fake, pex_root, port) as operator:
        # A 403 is the same on every try: not retried, the process ends for a restart.
        fake.set_outage("html", code=403)
        started = time.monotonic()
        code = operator.wait(timeout=FATAL_EXIT_S)
        elapsed = time.monotonic() - started
        print(f"exited {code} {elapsed:.2f} s after the fatal fault began")
        assert code != 0
        assert elapsed < FATAL_EXIT_S
        assert not node.registration_socket.exists()
        assert not (node.plugin_dir / "dra.sock").exists()
        assert operator.log_contains("stopping so the kubelet restarts the container")


def test_liveness_fails_while_the_loop_is_stuck_and_recovers(
        node: Node, fake: FakeKube, pex_root: Path) -> None:
    port = free_port()
    with _operator(node, fake, pex_root, port, "--liveness-timeout=2") as operator:
        # Bounds for a start on a loaded 2-core machine (imports, registration, first lists).
        operator.wait_until(lambda: _get(port, "/healthz")[0] == 200, timeout=60.0,
                            what="liveness passes")
        # The slice's and the Displays' watches open: the loop reads the slice from its cache.
        operator.wait_until(lambda: fake.open_watches >= 2, timeout=60.0,
                            what="the operator's watches are open")
        _wait_settled(operator, fake, port)
        fake.set_outage("slow", delay=STALL_S)
        # Idle, the loop checks the watch's cache and never waits on the API: a slow API
        # stalls it only once it has a write to make.
        _hold(operator, 3.0, "idle while every API answer is delayed")
        assert _get(port, "/healthz")[0] == 200, "an idle loop does not wait on a slow API"
        hotplug(node.root, "card0-DP-1", status="disconnected")
        operator.send_signal(signal.SIGHUP)
        operator.wait_until(lambda: _get(port, "/healthz")[0] == 503, timeout=STALL_S + 10,
                            what="liveness fails while the slice's write is not answered")
        status, text = _get(port, "/healthz")
        print(f"while stalled: {status} {text.strip()}")
        fake.set_outage(None)
        operator.wait_until(lambda: _get(port, "/healthz")[0] == 200, timeout=STALL_S * 2 + 10,
                            what="liveness passes again once answers come")
        operator.wait_until(lambda: set(slice_devices(fake)) == {HDMI}, timeout=30.0,
                            what="the delayed write reaches the slice")
        assert not operator.exited()
        # The gRPC server is asked too: with its DRA socket gone the kubelet cannot prepare.
        assert "the gRPC server answers on both sockets" in _get(port, "/healthz")[1]
        (node.plugin_dir / "dra.sock").unlink()
        status, text = _get(port, "/healthz")
        assert status == 503 and "dra.sock: no socket there" in text, text


# --- the crash-point matrix with the publisher on ----------------------------------------


def _compositor_up(port: int) -> bool:
    """Whether the publisher's watchdog has seen the compositor answer (prepares accepted)."""
    return any(line.startswith("display_compositor_up ") and line.endswith(" 1.0")
               for line in _get(port, "/metrics")[1].splitlines())


@contextlib.contextmanager
def _publishing(node: Node, fake: FakeKube, pex_root: Path, *,
                fault: str | None = None) -> Iterator[tuple[Process, Kubelet]]:
    """The operator with its publisher, up and seeing the compositor, and a kubelet on it."""
    port = free_port()
    with (
        plugin(node, fake, pex_root, alias="HDMI-A-1=headless", metrics_port=port, fault=fault,
               extra_args=["--hotplug-resync=3600", *_api_args(fake, node.root)]) as operator,
        Kubelet(node.registration_socket, driver=DRIVER) as kubelet,
    ):
        operator.wait_until(lambda: _compositor_up(port), timeout=30.0,
                            what="the watchdog saw the compositor answer")
        yield operator, kubelet


@pytest.fixture
def short_node() -> Iterator[Node]:
    """A node under a short root: pytest's tmp dir for a long parametrized name plus the
    registration socket's path passes the 107 bytes a unix socket's path may have."""
    with tempfile.TemporaryDirectory(prefix="opf-", dir="/tmp") as root:
        yield make_node(Path(root))


@pytest.mark.parametrize("point", FAULT_POINTS, ids=FAULT_POINTS)
def test_crash_point_with_the_publisher_on(short_node: Node, tls_fake: FakeKube,
                                           pex_root: Path, point: str) -> None:
    """draplugin_test's crash-point matrix, with the publisher running beside the plugin (its
    watchdog, slice and Display writes), weston restarted for the claim's mode, and the API
    reached as in a pod: HTTPS verified with its CA, a bearer token from a file."""
    node, fake = short_node, tls_fake
    node.etc.mkdir(parents=True)
    (node.etc / "weston.ini").write_text(INITIAL_INI)
    fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    claim = _claim(fake, "kiosk", config(mode="1280x720@60", transform="rotate-90"))
    with weston(node, pex_root):
        if point.startswith("unprepare"):
            with _publishing(node, fake, pex_root) as (_, kubelet):
                assert kubelet.prepare([claim])[claim.uid].error == ""

        with _publishing(node, fake, pex_root, fault=point) as (operator, kubelet):
            call = kubelet.prepare if point.startswith("prepare") else kubelet.unprepare
            dies(operator, lambda: call([claim]))

        with _publishing(node, fake, pex_root) as (operator, kubelet):
            check_invariants(node)
            if point.startswith("prepare"):
                # The restarted compositor may still be coming up: prepare is idempotent.
                operator.wait_until(lambda: kubelet.prepare([claim])[claim.uid].error == "",
                                    timeout=30.0, what="the claim prepared after the crash")
                assert node.checkpoint()[claim.uid]["state"] == "prepared"
                assert cdi.spec_path(claim.uid, cdi_dir=node.cdi_dir).exists()
                assert "mode=1280x720@60" in (node.etc / "weston.ini").read_text()
            assert kubelet.unprepare([claim]) == {claim.uid: ""}
            check_invariants(node)
            assert node.checkpoint() == {}
            assert cdi.list_specs(cdi_dir=node.cdi_dir) == ()
            assert display_spec(fake, HDMI) == {}
            assert "mode=1920x1080@60" in (node.etc / "weston.ini").read_text()
            assert set(slice_devices(fake)) == {HDMI, DP}
            assert not operator.log_contains("node publisher failed")
