"""The gRPC server against grpcio's client, a gRPC implementation other than the kubelet's
grpc-go but the same wire: answers, statuses, streams, flow control, cancellation, stopping."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import h2.config  # pants: no-infer-dep
import h2.connection  # pants: no-infer-dep
import hpack  # pants: no-infer-dep
import hyperframe.frame  # pants: no-infer-dep
import pytest

from draplugin.rpc import grpcserver
from libdisplay.proto import wire

REG = wire.REGISTRATION
HEALTH = wire.HEALTH_V1ALPHA1
GET_INFO = wire.method(wire.REGISTRATION_SERVICE, "GetInfo")
NOTIFY = wire.method(wire.REGISTRATION_SERVICE, "NotifyRegistrationStatus")
WATCH = wire.method(wire.HEALTH_V1ALPHA1_SERVICE, "NodeWatchResources")
WAIT_S = 10.0


def _serialize(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "plugin.sock"


def serving(sock: Path, methods: dict[str, grpcserver.Method]) -> grpcserver.Server:
    server = grpcserver.Server(methods, workers=4)
    server.add_unix_socket(sock)
    server.start()
    return server


def get_info(channel: grpc.Channel, *, timeout: float = WAIT_S) -> Any:
    call = channel.unary_unary(GET_INFO, request_serializer=_serialize,
                               response_deserializer=REG.PluginInfo.FromString)
    return call(REG.InfoRequest(), timeout=timeout)


def test_unary_answers_with_the_handlers_message(sock: Path) -> None:
    seen = []

    def info(request: Any, context: grpcserver.CallContext) -> Any:
        seen.append(request)
        return _serialize(REG.PluginInfo(name="display.liken.sh",
                                         supported_versions=["v1.DRAPlugin"]))

    server = serving(sock, {GET_INFO: grpcserver.unary(info, REG.InfoRequest.FromString)})
    try:
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            answers = [get_info(channel) for _ in range(3)]
    finally:
        server.stop(1.0)
    assert [a.name for a in answers] == ["display.liken.sh"] * 3
    assert list(answers[0].supported_versions) == ["v1.DRAPlugin"]
    assert len(seen) == 3


def test_a_failing_handler_and_an_unknown_method_get_their_statuses(sock: Path) -> None:
    def fail(request: Any, context: grpcserver.CallContext) -> Any:
        raise ValueError("no such claim")

    server = serving(sock, {NOTIFY: grpcserver.unary(fail, REG.RegistrationStatus.FromString)})
    try:
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            notify = channel.unary_unary(
                NOTIFY, request_serializer=_serialize,
                response_deserializer=REG.RegistrationStatusResponse.FromString)
            with pytest.raises(grpc.RpcError) as failed:
                notify(REG.RegistrationStatus(), timeout=WAIT_S)
            assert failed.value.code() is grpc.StatusCode.UNKNOWN
            assert "no such claim" in (failed.value.details() or "")
            with pytest.raises(grpc.RpcError) as unknown:
                get_info(channel)
            assert unknown.value.code() is grpc.StatusCode.UNIMPLEMENTED
    finally:
        server.stop(1.0)


def test_a_stream_sends_every_message_beyond_the_flow_control_window(sock: Path) -> None:
    # 8 MB in all: more than any window the client opens at once, so the sender must wait
    # for its WINDOW_UPDATEs.
    big = "x" * 1_000_000

    def watch(request: Any, context: grpcserver.CallContext) -> Iterator[bytes]:
        for n in range(8):
            yield _serialize(HEALTH.NodeWatchResourcesResponse(devices=[HEALTH.DeviceHealth(
                device=HEALTH.DeviceIdentifier(pool_name=f"p{n}"), message=big)]))

    server = serving(sock, {WATCH: grpcserver.server_stream(
        watch, HEALTH.NodeWatchResourcesRequest.FromString)})
    try:
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            stream = channel.unary_stream(
                WATCH, request_serializer=_serialize,
                response_deserializer=HEALTH.NodeWatchResourcesResponse.FromString)
            got = list(stream(HEALTH.NodeWatchResourcesRequest(), timeout=WAIT_S))
    finally:
        server.stop(1.0)
    assert [r.devices[0].device.pool_name for r in got] == [f"p{n}" for n in range(8)]
    assert all(r.devices[0].message == big for r in got)


def test_a_cancelled_stream_ends_its_handler_and_a_slow_call_blocks_no_other(sock: Path) -> None:
    started, ended = threading.Event(), threading.Event()

    def watch(request: Any, context: grpcserver.CallContext) -> Iterator[bytes]:
        yield b""  # an empty NodeWatchResourcesResponse
        started.set()
        while context.is_active():
            ended.wait(0.01)
        ended.set()

    server = serving(sock, {
        WATCH: grpcserver.server_stream(watch, HEALTH.NodeWatchResourcesRequest.FromString),
        GET_INFO: grpcserver.unary(lambda r, c: _serialize(REG.PluginInfo(name="n")),
                                   REG.InfoRequest.FromString),
    })
    try:
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            stream = channel.unary_stream(
                WATCH, request_serializer=_serialize,
                response_deserializer=HEALTH.NodeWatchResourcesResponse.FromString)
            call = stream(HEALTH.NodeWatchResourcesRequest(), timeout=WAIT_S)
            next(call)
            assert started.wait(WAIT_S)
            assert get_info(channel).name == "n"  # while the stream's handler runs
            call.cancel()
            assert ended.wait(WAIT_S), "the handler never saw the client cancel"
    finally:
        server.stop(1.0)


def test_stop_cuts_a_call_after_the_grace_and_refuses_new_ones(sock: Path) -> None:
    release = threading.Event()

    def stuck(request: Any, context: grpcserver.CallContext) -> bytes:
        release.wait(WAIT_S)
        return b""

    server = serving(sock, {GET_INFO: grpcserver.unary(stuck, REG.InfoRequest.FromString)})
    outcome: list[Any] = []
    with grpc.insecure_channel(f"unix:{sock}") as channel:
        caller = threading.Thread(target=lambda: outcome.append(_code(channel)))
        caller.start()
        try:
            _wait_until(lambda: any(t.name.startswith("grpc-call") for t in threading.enumerate()))
            server.stop(0.2)
            server.wait()
            caller.join(WAIT_S)
        finally:
            release.set()
    assert outcome == [grpc.StatusCode.UNAVAILABLE]
    assert not sock.exists() or _refused(sock)


def test_a_client_that_writes_before_reading_the_last_answer_still_gets_it(sock: Path) -> None:
    """A stop after the last call answered ends the server's sending only: a frame the
    client writes after the server's end but before it reads the answer (here a PING) is
    taken, not refused with EPIPE, which a gRPC client would take as the transport failing
    and fail the answered call with."""
    entered, release = threading.Event(), threading.Event()

    def slow(request: Any, context: grpcserver.CallContext) -> bytes:
        entered.set()
        release.wait(WAIT_S)
        return _serialize(REG.PluginInfo(name="display.liken.sh"))

    server = serving(sock, {GET_INFO: grpcserver.unary(slow, REG.InfoRequest.FromString)})
    client = h2.connection.H2Connection(h2.config.H2Configuration(
        client_side=True, header_encoding="utf-8"))
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stopping = threading.Thread(target=server.stop, args=(WAIT_S,))
    try:
        raw.settimeout(WAIT_S)
        raw.connect(str(sock))
        client.initiate_connection()
        client.send_headers(1, [(":method", "POST"), (":scheme", "http"), (":path", GET_INFO),
                                (":authority", "localhost"), ("te", "trailers"),
                                ("content-type", "application/grpc")])
        body = _serialize(REG.InfoRequest())
        client.send_data(1, grpcserver.PREFIX.pack(False, len(body)) + body, end_stream=True)
        raw.sendall(client.data_to_send())
        assert entered.wait(WAIT_S)
        stopping.start()
        release.set()
        received = bytearray()
        while chunk := raw.recv(65536):  # until the server's end
            received += chunk
        client.ping(b"8 bytes!")
        raw.sendall(client.data_to_send())
    finally:
        release.set()
        raw.close()
        if stopping.is_alive():
            stopping.join(WAIT_S)
        server.stop(0.0)
    assert _last_headers(bytes(received), stream_id=1).get("grpc-status") == "0"


def _last_headers(data: bytes, *, stream_id: int) -> dict[str, str]:
    """The header block that ended `stream_id` in the frames `data` holds (h2's client
    state machine refuses every frame after a GOAWAY, so the frames are read one by one)."""
    decoder, view = hpack.Decoder(), memoryview(data)
    found: dict[str, str] = {}
    while view:
        frame, length = hyperframe.frame.Frame.parse_frame_header(view[:9])
        frame.parse_body(view[9:9 + length])
        view = view[9 + length:]
        if isinstance(frame, hyperframe.frame.HeadersFrame):
            block = {str(k): str(v) for k, v in decoder.decode(frame.data, raw=False)}
            if frame.stream_id == stream_id and "END_STREAM" in frame.flags:
                found = block
    return found


def _code(channel: grpc.Channel) -> grpc.StatusCode | None:
    try:
        get_info(channel)
    except grpc.RpcError as err:
        code: grpc.StatusCode = err.code()
        return code
    return None


def _refused(sock: Path) -> bool:
    with grpc.insecure_channel(f"unix:{sock}") as channel:
        return _code(channel) is grpc.StatusCode.UNAVAILABLE


def _wait_until(check: Any) -> None:
    done = threading.Event()
    for _ in range(int(WAIT_S / 0.01)):
        if check():
            return
        done.wait(0.01)
    raise AssertionError("timed out")
