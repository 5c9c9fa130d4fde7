"""The plugin's gRPC server as the kubelet uses it, dialled by grpcio's client: registration,
prepare and unprepare in both DRA versions, the health stream in both versions, and the calls'
fate at the edges (large messages, many at once, an unknown method, a malformed message, a
client deadline, stopping)."""

from __future__ import annotations

import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from draplugin.driver.checkpoint import PreparedDevice
from draplugin.driver.state import ClaimRef, Prepared
from draplugin.service import HEALTH_TIMEOUT_S, WORKERS, PluginServer
from draplugin.testing import NODE, settings
from libdisplay.proto import wire

REG = wire.REGISTRATION
DRA = wire.DRA_VERSIONS[wire.DRA_V1_SERVICE]
GET_INFO = wire.method(wire.REGISTRATION_SERVICE, "GetInfo")
PREPARE = wire.method(wire.DRA_V1_SERVICE, "NodePrepareResources")
WAIT_S = 10.0
HEALTH_PERIOD_S = 0.3  # the tests' re-send period, so that a test sees several messages
DEVICE = "card0-hdmi-a-1"  # the one monitor of draplugin.testing's card
VERSIONS = pytest.mark.parametrize("service", list(wire.DRA_VERSIONS), ids=["v1", "v1beta1"])
HEALTH_VERSIONS = pytest.mark.parametrize("service", list(wire.HEALTH_VERSIONS),
                                          ids=["v1", "v1alpha1"])


class _Driver:
    """Prepares every claim with one device whose CDI ID is long, so that many claims make an
    answer larger than a flow-control window, but fails the claim named "broken"; `gate`
    holds each call until it is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.running = 0
        self.most_running = 0
        self.unprepared: list[ClaimRef] = []
        self._lock = threading.Lock()

    def prepare(self, refs: list[ClaimRef]) -> dict[str, Prepared]:
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            assert self.gate.wait(WAIT_S), "the test never opened the gate"
            return {r.uid: Prepared(error="no such monitor") if r.name == "broken" else
                    Prepared(devices=(PreparedDevice(
                        request="screen", pool="n1", device="card0-dp-1", output="DP-1",
                        cdi_ids=(f"k8s.display.liken.sh/display={r.uid}-{'x' * 200}",)),))
                    for r in refs}
        finally:
            with self._lock:
                self.running -= 1

    def unprepare(self, refs: list[ClaimRef]) -> dict[str, str]:
        self.unprepared.extend(refs)
        return {r.uid: "busy" if r.name == "broken" else "" for r in refs}


class _Health:
    """The watchdog's verdict, settable by the test."""

    def __init__(self) -> None:
        self.verdict = (True, "compositor: answers")

    def __call__(self) -> tuple[bool, str]:
        return self.verdict


@pytest.fixture
def root() -> Iterator[Path]:
    # unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="service-", dir="/tmp") as path:
        yield Path(path)


@pytest.fixture
def driver() -> _Driver:
    return _Driver()


@pytest.fixture
def health() -> _Health:
    return _Health()


@pytest.fixture
def server(root: Path, driver: _Driver, health: _Health) -> Iterator[PluginServer]:
    served = PluginServer(settings(root), driver, health=health,  # type: ignore[arg-type]
                          health_period_s=HEALTH_PERIOD_S)
    served.start()
    try:
        yield served
    finally:
        served.stop(grace_s=0.1)
        driver.gate.set()


def _dra_socket(server: PluginServer) -> Path:
    return server._settings.dra_socket


def _get_info(channel: grpc.Channel) -> Any:
    call = channel.unary_unary(GET_INFO, request_serializer=_serialize,
                               response_deserializer=REG.PluginInfo.FromString)
    return call(REG.InfoRequest(), timeout=WAIT_S)


def _prepare_call(channel: grpc.Channel, service: str = wire.DRA_V1_SERVICE) -> Any:
    dra = wire.DRA_VERSIONS[service]
    return channel.unary_unary(wire.method(service, "NodePrepareResources"),
                               request_serializer=_serialize,
                               response_deserializer=dra.NodePrepareResourcesResponse.FromString)


def _claims(count: int, dra: Any = DRA) -> Any:
    return dra.NodePrepareResourcesRequest(claims=[
        dra.Claim(namespace="n" * 63, uid=f"uid-{n:04d}", name=f"{n:04d}" + "c" * 249)
        for n in range(count)])


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def _watch(channel: grpc.Channel, service: str) -> Any:
    health = wire.HEALTH_VERSIONS[service]
    stream = channel.unary_stream(
        wire.method(service, "NodeWatchResources"), request_serializer=_serialize,
        response_deserializer=health.NodeWatchResourcesResponse.FromString)
    return stream(health.NodeWatchResourcesRequest(), timeout=WAIT_S * 3)


# --- what the kubelet calls --------------------------------------------------------------------


def test_get_info_advertises_dra_v1_first_and_both_health_versions(
        server: PluginServer) -> None:
    with grpc.insecure_channel(f"unix:{server._settings.registration_socket}") as channel:
        info = _get_info(channel)
        notify = channel.unary_unary(
            wire.method(wire.REGISTRATION_SERVICE, "NotifyRegistrationStatus"),
            request_serializer=_serialize,
            response_deserializer=REG.RegistrationStatusResponse.FromString)
        notify(REG.RegistrationStatus(plugin_registered=True), timeout=WAIT_S)
    assert (info.type, info.name, info.endpoint) == (
        "DRAPlugin", "display.liken.sh", str(_dra_socket(server)))
    assert list(info.supported_versions) == [
        "v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth", "v1alpha1.DRAResourceHealth"]


@VERSIONS
def test_prepare_and_unprepare_answer_every_claim(server: PluginServer, driver: _Driver,
                                                  service: str) -> None:
    dra = wire.DRA_VERSIONS[service]
    request = dra.NodePrepareResourcesRequest(claims=[
        dra.Claim(namespace="shop", uid="u1", name="kiosk"),
        dra.Claim(namespace="shop", uid="u2", name="broken")])
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        prepared = _prepare_call(channel, service)(request, timeout=WAIT_S)
        unprepare = channel.unary_unary(
            wire.method(service, "NodeUnprepareResources"), request_serializer=_serialize,
            response_deserializer=dra.NodeUnprepareResourcesResponse.FromString)
        unprepared = unprepare(dra.NodeUnprepareResourcesRequest(claims=request.claims),
                               timeout=WAIT_S)
    device = prepared.claims["u1"].devices[0]
    assert (list(device.request_names), device.pool_name, device.device_name) == (
        ["screen"], "n1", "card0-dp-1")
    assert list(device.cdi_device_ids) == [f"k8s.display.liken.sh/display=u1-{'x' * 200}"]
    assert (prepared.claims["u1"].error, list(prepared.claims["u2"].devices)) == ("", [])
    assert prepared.claims["u2"].error == "no such monitor"
    assert {uid: c.error for uid, c in unprepared.claims.items()} == {"u1": "", "u2": "busy"}
    assert driver.unprepared == [ClaimRef(uid="u1", namespace="shop", name="kiosk"),
                                 ClaimRef(uid="u2", namespace="shop", name="broken")]


@HEALTH_VERSIONS
def test_the_health_stream_sends_every_device_again_within_its_timeout(
        server: PluginServer, health: _Health, service: str) -> None:
    module = wire.HEALTH_VERSIONS[service]
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        stream = _watch(channel, service)
        first = next(stream)
        health.verdict = (False, "compositor: no answer in 1 s")
        second = next(stream)
        while second.devices[0].health == module.HEALTHY:  # one sent before the change
            second = next(stream)
        stream.cancel()
    for message in (first, second):
        assert [(d.device.pool_name, d.device.device_name) for d in message.devices] == [
            (NODE, DEVICE)]
        device = message.devices[0]
        assert device.health_check_timeout_seconds == HEALTH_TIMEOUT_S
        assert abs(device.last_updated_time - time.time()) < WAIT_S * 3
    assert (first.devices[0].health, first.devices[0].message) == (module.HEALTHY, "")
    assert (second.devices[0].health, second.devices[0].message) == (
        module.UNHEALTHY, "compositor: no answer in 1 s")


def test_the_production_period_resends_well_within_the_timeout() -> None:
    from draplugin.service import HEALTH_PERIOD_S as PRODUCTION
    assert PRODUCTION * 2 < HEALTH_TIMEOUT_S


@HEALTH_VERSIONS
def test_a_cancelled_health_stream_frees_its_worker_at_once(
        server: PluginServer, service: str) -> None:
    # Longer than a test's wait: only the cancel can end the handler's wait in time.
    server._health_period_s = 3600.0
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        for _ in range(WORKERS + 1):  # one more than the workers: each must have been freed
            stream = _watch(channel, service)
            next(stream)
            # Cancelled while the handler waits between messages, not before it resumes.
            _wait_until(lambda: _handlers_running() == 1)
            stream.cancel()
            _wait_until(lambda: _handlers_running() == 0)
        assert _get_info(channel).name == "display.liken.sh"


def _handlers_running() -> int:
    """Threads in a health stream's handler (a generator suspended at its yield is on none)."""
    code = PluginServer._watch_resources.__code__
    running = 0
    for frame in sys._current_frames().values():
        walk: Any = frame
        while walk is not None and walk.f_code is not code:
            walk = walk.f_back
        running += walk is not None
    return running


def test_stop_ends_a_health_stream_within_the_grace(server: PluginServer) -> None:
    server._health_period_s = 3600.0
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        stream = _watch(channel, wire.HEALTH_V1_SERVICE)
        next(stream)
        started = time.monotonic()
        server.stop(grace_s=WAIT_S)
        assert list(stream) == []  # ended OK, not cut by the grace's end
        assert time.monotonic() - started < WAIT_S / 2


# --- the calls' fate at the edges ------------------------------------------------------------


def test_a_request_and_an_answer_larger_than_the_flow_control_window(
        server: PluginServer) -> None:
    request = _claims(256)
    assert request.ByteSize() > 65535  # the initial window of the stream and the connection
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        answer = _prepare_call(channel)(request, timeout=WAIT_S)
    assert answer.ByteSize() > 65535
    assert sorted(answer.claims) == [f"uid-{n:04d}" for n in range(256)]
    device = answer.claims["uid-0007"].devices[0]
    assert (list(device.request_names), device.device_name) == (["screen"], "card0-dp-1")


def test_many_calls_at_once_on_one_connection_all_answer_a_few_handlers_at_a_time(
        server: PluginServer, driver: _Driver) -> None:
    driver.gate.clear()
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        prepare = _prepare_call(channel)
        calls = [prepare.future(_claims(1), timeout=WAIT_S) for _ in range(64)]
        _wait_until(lambda: driver.running >= WORKERS)
        driver.gate.set()
        answers = [call.result() for call in calls]
    assert all(list(a.claims) == ["uid-0000"] for a in answers)
    assert driver.most_running == WORKERS


def test_an_unknown_method_fails_that_call_only(server: PluginServer) -> None:
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        unknown = channel.unary_unary("/k8s.io.kubelet.pkg.apis.dra.v9.DRAPlugin/Nope")
        with pytest.raises(grpc.RpcError) as failed:
            unknown(b"", timeout=WAIT_S)
        assert failed.value.code() is grpc.StatusCode.UNIMPLEMENTED
        assert _get_info(channel).name == "display.liken.sh"


@pytest.mark.parametrize("body", [
    b"\x0a\xff",  # claim 1: a length that runs past the end
    b"\x0a\x03\x12\x01\xff",  # a uid that is not UTF-8
    b"\x00\x00",  # field number 0
])
def test_a_malformed_message_fails_that_call_only(
        server: PluginServer, driver: _Driver, body: bytes) -> None:
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        raw = channel.unary_unary(PREPARE)
        with pytest.raises(grpc.RpcError) as failed:
            raw(body, timeout=WAIT_S)
        assert failed.value.code() is grpc.StatusCode.INTERNAL
        assert _get_info(channel).name == "display.liken.sh"
    assert driver.most_running == 0  # the driver never saw it


def test_a_client_deadline_ends_the_call_for_the_client_and_leaves_the_connection(
        server: PluginServer, driver: _Driver) -> None:
    # As the kubelet's 45 s: the client gives up, the prepare runs to its end (and is
    # recorded; the kubelet's retry finds it prepared), its answer is dropped without harm.
    driver.gate.clear()
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        late = _prepare_call(channel).future(_claims(1), timeout=1.0)
        _wait_until(lambda: driver.running == 1)
        assert late.exception(WAIT_S).code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert driver.running == 1  # the gate holds it up to WAIT_S
        driver.gate.set()
        _wait_until(lambda: driver.running == 0)
        assert _get_info(channel).name == "display.liken.sh"
        assert list(_prepare_call(channel)(_claims(1), timeout=WAIT_S).claims) == ["uid-0000"]


def test_after_stop_a_call_is_unavailable_at_once_and_the_sockets_are_gone(
        server: PluginServer) -> None:
    sockets = (_dra_socket(server), server._settings.registration_socket)
    assert all(s.is_socket() for s in sockets)
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        assert _get_info(channel).name == "display.liken.sh"
        server.stop(grace_s=0.1)
        with pytest.raises(grpc.RpcError) as gone:
            _get_info(channel)
        assert gone.value.code() is grpc.StatusCode.UNAVAILABLE
    assert not any(s.exists() for s in sockets)


def test_a_call_running_at_stop_finishes_within_the_grace_and_new_ones_are_refused(
        server: PluginServer, driver: _Driver) -> None:
    driver.gate.clear()
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        running = _prepare_call(channel).future(_claims(1), timeout=WAIT_S)
        _wait_until(lambda: driver.running == 1)
        stopping = threading.Thread(target=server.stop, kwargs={"grace_s": WAIT_S})
        stopping.start()
        stopping.join(WAIT_S)  # stop returns at once; the grace runs on
        with pytest.raises(grpc.RpcError) as refused:
            _get_info(channel)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
        driver.gate.set()
        assert list(running.result(WAIT_S).claims) == ["uid-0000"]


def _wait_until(check: Any) -> None:
    pause = threading.Event()
    for _ in range(int(WAIT_S / 0.01)):
        if check():
            return
        pause.wait(0.01)
    raise AssertionError("timed out")
