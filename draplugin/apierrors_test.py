"""apierrors: lightkube's and its HTTP library's failures become one classified error."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from lightkube import AsyncClient
from lightkube.resources.core_v1 import Node

from draplugin.apierrors import api_call
from fakekube.client import run_async
from libdisplay.kube.errors import ApiCallError


def _answering(code: int, content_type: str, body: bytes) -> type[BaseHTTPRequestHandler]:
    class Answer(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    return Answer


@pytest.fixture
def serve() -> Iterator[object]:
    servers: list[ThreadingHTTPServer] = []

    def start(handler: type[BaseHTTPRequestHandler]) -> str:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _get_node(url: str) -> ApiCallError:
    async def scenario(client: AsyncClient) -> None:
        await api_call("GET Node n1", lambda: client.get(Node, name="n1"))

    with pytest.raises(ApiCallError) as err:
        run_async(url, scenario, timeout=15)
    return err.value


STATUS = (b'{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden",'
          b'"message":"nodes \\"n1\\" is forbidden","code":403}')


@pytest.mark.parametrize(
    ("code", "content_type", "body", "retryable", "shown"),
    [
        (403, "application/json", STATUS, False, 'nodes "n1" is forbidden'),
        (503, "text/html", b"<html><body>502 Bad Gateway</body></html>", True,
         "body is not JSON: '<html><body>502 Bad Gateway</body></html>'"),
        (500, "application/json", b'{"kind":"Status","reason":"InternalError",'
         b'"message":"etcd down","code":500}', True, "etcd down"),
        (404, "text/plain", b"", False, "empty body"),
    ],
    ids=["403-status", "503-html", "500-status", "404-empty"],
)
def test_an_answer_is_classified(serve: object, code: int, content_type: str, body: bytes,
                                 retryable: bool, shown: str) -> None:
    url = serve(_answering(code, content_type, body))  # type: ignore[operator]
    err = _get_node(url)
    assert (err.code, err.retryable) == (code, retryable)
    assert shown in str(err) and "GET Node n1" in str(err)


def test_a_refused_connection_is_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    err = _get_node(f"http://127.0.0.1:{port}")
    assert err.code is None and err.retryable and err.reason == "ConnectionRefused"


def test_a_dropped_connection_is_retryable(serve: object) -> None:
    class Drop(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.connection.shutdown(socket.SHUT_RDWR)

    err = _get_node(serve(Drop))  # type: ignore[operator]
    assert err.code is None and err.retryable


def test_an_error_that_is_not_the_apis_passes_through() -> None:
    async def boom() -> None:
        raise KeyError("a bug")

    with pytest.raises(KeyError):
        asyncio.run(api_call("x", boom))
