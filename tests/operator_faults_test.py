"""The running operator against an API that fails: outages it rides out, faults it exits on.

The operator runs with its publisher (no compositor: every device is tainted, which does not
matter here) against the fake apiserver's outage switch. Each phase lasts FAULT_PHASE_S
seconds (3 by default); the operator's retry delays are capped short so a phase sees many.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from fakekube.server import FakeKube
from libdisplay.processes import Process
from libdisplay.sysfs_tree import hotplug
from tests.draplugin_test import (
    DP,
    HDMI,
    NODE,
    Node,
    _free_port,
    _slice_devices,
    make_kube,
    make_node,
    plugin,
)

PHASE_S = float(os.environ.get("FAULT_PHASE_S", "3"))
STALL_S = float(os.environ.get("FAULT_STALL_S", "5"))
FATAL_EXIT_S = 10.0


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return make_node(tmp_path)


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    kube = make_kube()
    try:
        yield kube
    finally:
        kube.stop()


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


def _hold(operator: Process, seconds: float, what: str) -> None:
    """Keep a fault phase on for `seconds`; fails at once if the operator exits meanwhile."""
    deadline = time.monotonic() + seconds
    operator.wait_until(lambda: time.monotonic() >= deadline, timeout=seconds + 5, what=what)


@contextlib.contextmanager
def _operator(node: Node, fake: FakeKube, pex_root: Path, port: int,
              *extra: str) -> Iterator[Process]:
    fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}})
    args = ["--hotplug-resync=3600", "--slice-resync=0.5", "--api-backoff-cap=0.2", *extra]
    with plugin(node, fake, pex_root, metrics_port=port, extra_args=args) as operator:
        operator.wait_until(lambda: set(_slice_devices(fake)) == {HDMI, DP}, timeout=30.0,
                            what="slice published")
        yield operator


def test_an_outage_is_ridden_out_and_the_slice_follows_after_it(
        node: Node, fake: FakeKube, pex_root: Path) -> None:
    port = _free_port()
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
        operator.wait_until(lambda: set(_slice_devices(fake)) == {HDMI}, timeout=30.0,
                            what="a hotplug after the outage reaches the slice")
        by_operation = _retries(port)
        print(f"retries: {dropped - before:g} while dropped, {html - dropped:g} while 503 HTML;"
              f" by operation {by_operation}")
        assert dropped > before and html > dropped
        assert _get(port, "/healthz")[0] == 200
        assert not operator.exited()
        assert not operator.log_contains("node publisher failed")
        assert not operator.log_contains("Traceback")


def test_a_fatal_fault_stops_serving_and_exits_non_zero(
        node: Node, fake: FakeKube, pex_root: Path) -> None:
    port = _free_port()
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
    port = _free_port()
    with _operator(node, fake, pex_root, port, "--liveness-timeout=2") as operator:
        operator.wait_until(lambda: _get(port, "/healthz")[0] == 200, timeout=10.0,
                            what="liveness passes")
        fake.set_outage("slow", delay=STALL_S)
        operator.wait_until(lambda: _get(port, "/healthz")[0] == 503, timeout=STALL_S + 10,
                            what="liveness fails while every API answer is delayed")
        status, text = _get(port, "/healthz")
        print(f"while stalled: {status} {text.strip()}")
        fake.set_outage(None)
        operator.wait_until(lambda: _get(port, "/healthz")[0] == 200, timeout=STALL_S * 2 + 10,
                            what="liveness passes again once answers come")
        assert not operator.exited()
