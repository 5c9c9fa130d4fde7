"""The plugin's gRPC server as the kubelet's grpc-go client uses it, dialled by other HTTP/2
implementations than the server's: grpcio's C-core client for calls, and h2's client where a
test must see frames (the server's preface, PING acks, GOAWAY).

Covered here: the SETTINGS exchange, PINGs answered while a call runs, many streams at once
on one connection, a request and an answer larger than the initial flow-control window, an
unknown method and a malformed message failing their call only, a client deadline, and stop
sending GOAWAY. grpcserver_test covers streams, cancellation and a call cut at stop.
"""

from __future__ import annotations

import socket
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import h2.config  # pants: no-infer-dep
import h2.connection  # pants: no-infer-dep
import h2.errors  # pants: no-infer-dep
import h2.events  # pants: no-infer-dep
import h2.settings  # pants: no-infer-dep
import pytest

from draplugin.driver.checkpoint import PreparedDevice
from draplugin.driver.state import ClaimRef, Prepared
from draplugin.rpc import grpcserver
from draplugin.service import WORKERS, PluginServer
from draplugin.testing import settings
from libdisplay.proto import wire

REG = wire.REGISTRATION
DRA = wire.DRA_VERSIONS[wire.DRA_V1_SERVICE]
GET_INFO = wire.method(wire.REGISTRATION_SERVICE, "GetInfo")
PREPARE = wire.method(wire.DRA_V1_SERVICE, "NodePrepareResources")
WAIT_S = 10.0


class _Driver:
    """Prepares every claim with one device whose CDI ID is long, so that many claims make an
    answer larger than a flow-control window; `gate` holds each call until it is set."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def prepare(self, refs: list[ClaimRef]) -> dict[str, Prepared]:
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            assert self.gate.wait(WAIT_S), "the test never opened the gate"
            return {r.uid: Prepared(devices=(PreparedDevice(
                request="screen", pool="n1", device="card0-dp-1", output="DP-1",
                cdi_ids=(f"k8s.display.liken.sh/display={r.uid}-{'x' * 200}",)),))
                for r in refs}
        finally:
            with self._lock:
                self.running -= 1


@pytest.fixture
def root() -> Iterator[Path]:
    # unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer.
    with tempfile.TemporaryDirectory(prefix="interop-", dir="/tmp") as path:
        yield Path(path)


@pytest.fixture
def driver() -> _Driver:
    return _Driver()


@pytest.fixture
def server(root: Path, driver: _Driver) -> Iterator[PluginServer]:
    served = PluginServer(settings(root), driver)  # type: ignore[arg-type]
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


def _prepare_call(channel: grpc.Channel) -> Any:
    return channel.unary_unary(PREPARE, request_serializer=_serialize,
                               response_deserializer=DRA.NodePrepareResourcesResponse.FromString)


def _claims(count: int) -> Any:
    return DRA.NodePrepareResourcesRequest(claims=[
        DRA.Claim(namespace="n" * 63, uid=f"uid-{n:04d}", name=f"{n:04d}" + "c" * 249)
        for n in range(count)])


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


# --- grpcio's client -------------------------------------------------------------------------


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
        assert "DRAPlugin/Nope" in (failed.value.details() or "")
        assert _get_info(channel).name == "display.liken.sh"


@pytest.mark.parametrize("body", [
    b"\x0a\xff",  # claim 1: a length that runs past the end
    b"\x0a\x03\x12\x01\xff",  # a uid that is not UTF-8
    b"\x08\x01",  # claims as a varint
])
def test_a_malformed_message_fails_that_call_only(server: PluginServer, body: bytes) -> None:
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        raw = channel.unary_unary(PREPARE)
        with pytest.raises(grpc.RpcError) as failed:
            raw(body, timeout=WAIT_S)
        assert failed.value.code() is grpc.StatusCode.INTERNAL
        assert "cannot parse the request" in (failed.value.details() or "")
        assert _get_info(channel).name == "display.liken.sh"


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_client_deadline_ends_the_call_for_the_client_and_leaves_the_connection(
        server: PluginServer, driver: _Driver) -> None:
    # The server does not read grpc-timeout: the client gives up and resets the stream, the
    # handler runs to its end and its answer is dropped without harm.
    driver.gate.clear()
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        late = _prepare_call(channel).future(_claims(1), timeout=2.0)
        _wait_until(lambda: driver.running == 1)
        assert late.exception(WAIT_S).code() is grpc.StatusCode.DEADLINE_EXCEEDED
        assert driver.running == 1  # the gate holds it up to WAIT_S
        driver.gate.set()
        _wait_until(lambda: driver.running == 0)
        assert _get_info(channel).name == "display.liken.sh"
        assert list(_prepare_call(channel)(_claims(1), timeout=WAIT_S).claims) == ["uid-0000"]
    _wait_until(lambda: not any(t.name.startswith("grpc-call") for t in threading.enumerate()))


def test_after_stop_a_call_is_unavailable_at_once(server: PluginServer) -> None:
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        assert _get_info(channel).name == "display.liken.sh"
        server.stop(grace_s=0.1)
        with pytest.raises(grpc.RpcError) as gone:
            _get_info(channel)
        assert gone.value.code() is grpc.StatusCode.UNAVAILABLE


def test_a_call_running_at_stop_finishes_within_the_grace_and_new_ones_are_refused(
        server: PluginServer, driver: _Driver) -> None:
    driver.gate.clear()
    with grpc.insecure_channel(f"unix:{_dra_socket(server)}") as channel:
        states: list[grpc.ChannelConnectivity] = []
        channel.subscribe(states.append)
        running = _prepare_call(channel).future(_claims(1), timeout=WAIT_S)
        _wait_until(lambda: driver.running == 1
                    and states[-1:] == [grpc.ChannelConnectivity.READY])
        stopping = threading.Thread(target=server.stop, kwargs={"grace_s": WAIT_S})
        stopping.start()
        # The client leaves READY when the GOAWAY comes; the call goes on.
        _wait_until(lambda: states[-1] is not grpc.ChannelConnectivity.READY)
        driver.gate.set()
        assert list(running.result(WAIT_S).claims) == ["uid-0000"]
        stopping.join(WAIT_S)
        with pytest.raises(grpc.RpcError) as refused:
            _get_info(channel)
        assert refused.value.code() is grpc.StatusCode.UNAVAILABLE


# --- h2's client, frame by frame ------------------------------------------------------------


class _Client:
    """An HTTP/2 client connection on the socket, reading events with a bound wait."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(WAIT_S)
        self.sock.connect(str(path))
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.flush()

    def flush(self) -> None:
        data = self.h2.data_to_send()
        if data:
            self.sock.sendall(data)

    def until(self, kind: type[h2.events.Event]) -> list[h2.events.Event]:
        """The events received up to and including the first of `kind`."""
        seen: list[h2.events.Event] = []
        while not any(isinstance(e, kind) for e in seen):
            data = self.sock.recv(65536)
            if not data:
                raise AssertionError(f"the server hung up before {kind.__name__}: {seen}")
            seen.extend(self.h2.receive_data(data))
            self.flush()
        return seen

    def start_get_info(self) -> int:
        stream_id: int = self.h2.get_next_available_stream_id()
        self.h2.send_headers(stream_id, [
            (":method", "POST"), (":scheme", "http"), (":path", GET_INFO),
            (":authority", "localhost"), ("content-type", "application/grpc"),
            ("te", "trailers"), ("grpc-timeout", "5S")])
        self.h2.send_data(stream_id, b"\x00\x00\x00\x00\x00", end_stream=True)
        self.flush()
        return stream_id

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def client(server: PluginServer) -> Iterator[_Client]:
    connected = _Client(server._settings.registration_socket)
    try:
        yield connected
    finally:
        connected.close()


def test_the_server_opens_with_its_settings_and_acknowledges_the_clients(
        client: _Client) -> None:
    events = client.until(h2.events.SettingsAcknowledged)
    remote = [e for e in events if isinstance(e, h2.events.RemoteSettingsChanged)]
    assert remote, "the server sent no SETTINGS"
    assert remote[0].changed_settings[
        h2.settings.SettingCodes.MAX_CONCURRENT_STREAMS].new_value == grpcserver.MAX_STREAMS


def test_a_ping_is_answered_while_a_call_runs(client: _Client, driver: _Driver) -> None:
    driver.gate.clear()
    stream_id = client.h2.get_next_available_stream_id()
    client.h2.send_headers(stream_id, [
        (":method", "POST"), (":scheme", "http"), (":path", PREPARE),
        (":authority", "localhost"), ("content-type", "application/grpc"), ("te", "trailers")])
    body = _serialize(_claims(1))
    client.h2.send_data(stream_id, grpcserver.PREFIX.pack(False, len(body)) + body,
                        end_stream=True)
    client.flush()
    _wait_until(lambda: driver.running == 1)
    client.h2.ping(b"keepaliv")
    client.flush()
    acks = [e for e in client.until(h2.events.PingAckReceived)
            if isinstance(e, h2.events.PingAckReceived)]
    assert acks[0].ping_data == b"keepaliv"
    driver.gate.set()
    client.until(h2.events.StreamEnded)


def test_a_lying_length_prefix_fails_that_call_only(client: _Client) -> None:
    stream_id = client.h2.get_next_available_stream_id()
    client.h2.send_headers(stream_id, [
        (":method", "POST"), (":scheme", "http"), (":path", GET_INFO),
        (":authority", "localhost"), ("content-type", "application/grpc"), ("te", "trailers")])
    client.h2.send_data(stream_id, grpcserver.PREFIX.pack(False, 9) + b"\x00", end_stream=True)
    client.flush()
    events = client.until(h2.events.StreamEnded)
    trailers = [{str(k): str(v) for k, v in e.headers or ()} for e in events
                if isinstance(e, h2.events.ResponseReceived | h2.events.TrailersReceived)]
    assert trailers[-1]["grpc-status"] == str(int(grpcserver.Status.INTERNAL))
    answered = client.start_get_info()
    ended = [e for e in client.until(h2.events.StreamEnded)
             if isinstance(e, h2.events.StreamEnded)]
    assert ended[-1].stream_id == answered


def test_stop_sends_goaway_naming_the_last_stream_served(
        server: PluginServer, client: _Client) -> None:
    served = client.start_get_info()
    client.until(h2.events.StreamEnded)
    server.stop(grace_s=0.1)
    goaway = [e for e in client.until(h2.events.ConnectionTerminated)
              if isinstance(e, h2.events.ConnectionTerminated)]
    assert goaway[0].error_code == h2.errors.ErrorCodes.NO_ERROR
    assert goaway[0].last_stream_id == served


def _wait_until(check: Any) -> None:
    pause = threading.Event()
    for _ in range(int(WAIT_S / 0.01)):
        if check():
            return
        pause.wait(0.01)
    raise AssertionError("timed out")
