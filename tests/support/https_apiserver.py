"""Tests only: a CA made with openssl, a pod's service-account dir laid out as the kubelet
mounts it (with its token rotation), and an HTTPS stand-in for the API server that records
the bearer token of every request. For the clients' TLS and token tests, where the fake API
server's own TLS is not needed."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_OPENSSL_TIMEOUT_S = 60


@dataclass(frozen=True, slots=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True,
                   timeout=_OPENSSL_TIMEOUT_S)


def make_pki(directory: Path, *, name: str = "test-ca") -> Pki:
    """A CA and a server leaf for 127.0.0.1, ::1 and localhost, signed by it."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key = directory / "ca.crt", directory / "ca.key"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", str(ca_key), "-out", str(ca))
    key, csr, cert = directory / "server.key", directory / "server.csr", directory / "server.crt"
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=kubernetes",
             "-keyout", str(key), "-out", str(csr))
    ext = directory / "server.ext"
    ext.write_text("subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
             "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert))
    return Pki(ca=ca, server_cert=cert, server_key=key)


class ServiceAccountDir:
    """`token`, `ca.crt` and `namespace` as the kubelet projects them: symlinks into a
    `..data` symlink to a timestamped dir, swapped atomically on rotation."""

    def __init__(self, root: Path, *, ca: Path, token: str, namespace: str = "display") -> None:
        self.root = root
        self._ca = ca.read_bytes()
        self._namespace = namespace
        self._generation = 0
        root.mkdir(parents=True, exist_ok=True)
        self.rotate(token)
        for name in ("token", "ca.crt", "namespace"):
            (root / name).symlink_to(f"..data/{name}")

    def rotate(self, token: str) -> None:
        """Write a new generation and swap `..data` to it, as the kubelet does."""
        self._generation += 1
        data = self.root / f"..gen_{self._generation}"
        data.mkdir()
        (data / "token").write_text(token)
        (data / "ca.crt").write_bytes(self._ca)
        (data / "namespace").write_text(self._namespace)
        tmp = self.root / "..data_tmp"
        tmp.symlink_to(data.name)
        os.replace(tmp, self.root / "..data")


@dataclass
class Recorded:
    """What the stand-in saw: the Authorization header of each request, in order."""

    authorizations: list[str | None] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def tokens(self) -> list[str | None]:
        with self.lock:
            return list(self.authorizations)


def _handler(recorded: Recorded) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self, obj: dict[str, Any]) -> None:
            with recorded.lock:
                recorded.authorizations.append(self.headers.get("Authorization"))
            body = json.dumps(obj).encode()
            self.send_response(200 if self.command == "GET" else 201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            name = self.path.rstrip("/").rsplit("/", 1)[-1]
            self._answer({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            sent = json.loads(self.rfile.read(length) or b"{}")
            self._answer({**sent, "status": {"authorization": self.headers.get("Authorization")}})

        def log_message(self, *_args: Any) -> None:
            """Quiet."""

    return Handler


@contextlib.contextmanager
def https_api(pki: Pki, *, host: str = "127.0.0.1") -> Iterator[tuple[int, Recorded]]:
    """An HTTPS server with `pki`'s leaf answering every GET with a Node named by the path's
    last segment and every POST with its body plus `status.authorization`; (port, record)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    recorded = Recorded()

    class Server(http.server.ThreadingHTTPServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        daemon_threads = True

    server = Server((host, 0), _handler(recorded))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, name="https-api", daemon=True)
    thread.start()
    try:
        yield server.server_address[1], recorded
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
