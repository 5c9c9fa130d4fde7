from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fakekube.server import FakeKube
from libdisplay.kube import stdlib_client as kubeapi


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        yield fake


def test_get_returns_the_object_and_none_for_404(kube: FakeKube) -> None:
    endpoint = kubeapi.Endpoint(kube.url)
    node = kubeapi.get_json(endpoint, "/api/v1/nodes/n1", timeout=5.0)
    assert node is not None and node["metadata"]["name"] == "n1"
    assert kubeapi.get_json(endpoint, "/api/v1/nodes/absent", timeout=5.0) is None


class _Forbidden(BaseHTTPRequestHandler):
    """What an API server answers a service account that RBAC does not allow."""

    def do_GET(self) -> None:  # noqa: N802 (http.server names it)
        body = json.dumps(
            {
                "kind": "Status",
                "code": 403,
                "reason": "Forbidden",
                "message": "displays is forbidden",
            }
        ).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_an_error_status_carries_the_servers_message() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Forbidden)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = kubeapi.Endpoint(f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(kubeapi.ApiStatusError, match="403 displays is forbidden") as err:
            kubeapi.get_json(endpoint, "/apis/display.liken.sh/v1alpha1/displays/x", timeout=5.0)
        assert err.value.code == 403
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_closed_port_is_unreachable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(kubeapi.ApiUnreachableError, match="GET /api/v1/nodes/n1"):
        kubeapi.get_json(
            kubeapi.Endpoint(f"http://127.0.0.1:{port}"), "/api/v1/nodes/n1", timeout=2
        )


def test_a_200_that_is_not_json_is_retryable() -> None:
    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server names it)
            body = b"<html>proxy</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = kubeapi.Endpoint(f"http://127.0.0.1:{server.server_address[1]}")
        with pytest.raises(kubeapi.ApiStatusError, match="not JSON") as err:
            kubeapi.get_json(endpoint, "/api/v1/nodes/n1", timeout=5.0)
        assert (err.value.reason, err.value.retryable) == ("NotJson", True)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
