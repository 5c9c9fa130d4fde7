"""kubeconfig: fields resolved as kubectl does; TLS that a real HTTPS server with client-cert
authentication accepts; clear errors naming the field."""

from __future__ import annotations

import base64
import http.server
import json
import ssl
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from libdisplay.kube import access as kubeaccess
from libdisplay.kube import stdlib_client as kubeapi
from libdisplay.kube.config import KubeconfigError, load


@dataclass(frozen=True, slots=True)
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("pki")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
             "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
    for name, extra in (("server", "subjectAltName=IP:127.0.0.1"),
                        ("client", "extendedKeyUsage=clientAuth")):
        _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}",
                 "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"))
        (d / f"{name}.ext").write_text(extra + "\n")
        _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"),
                 "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "2",
                 "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.crt"))
    return Pki(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt",
               d / "client.key")


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        peer = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else {}
        subject = {str(pair[0][0]): str(pair[0][1]) for pair in (peer or {}).get("subject", ())}
        body = json.dumps({"path": self.path, "client": subject.get("commonName"),
                           "auth": self.headers.get("Authorization")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        """Quiet."""


@pytest.fixture
def apiserver(pki: Pki) -> Iterator[str]:
    """An HTTPS server that demands a client certificate signed by the test CA."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    context.load_verify_locations(pki.ca)
    context.verify_mode = ssl.CERT_REQUIRED
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def _write(path: Path, *, cluster: dict[str, Any], user: dict[str, Any],
           current: str | None = "ctx") -> Path:
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": current,
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def test_file_paths_are_relative_to_the_kubeconfig_and_tls_works(
    pki: Pki, apiserver: str, tmp_path: Path
) -> None:
    for name in ("ca.crt", "client.crt", "client.key"):
        (tmp_path / name).write_bytes((pki.ca.parent / name).read_bytes())
    (tmp_path / "token").write_text("file-token\n")
    config = _write(tmp_path / "config", cluster={
        "server": apiserver, "certificate-authority": "ca.crt",
    }, user={"client-certificate": "client.crt", "client-key": "client.key",
             "tokenFile": "token"})
    endpoint = kubeaccess.from_kubeconfig(config)
    assert endpoint.headers() == {"Authorization": "Bearer file-token"}
    assert endpoint.origin == f"kubeconfig {config}"
    answer = kubeapi.get_json(endpoint, "/api/v1/nodes/n1", timeout=10)
    assert answer == {"path": "/api/v1/nodes/n1", "client": "client",
                      "auth": "Bearer file-token"}
    # A tokenFile is re-read when it changes, as a rotated token would be.
    (tmp_path / "token").write_text("rotated-token\n")
    answer = kubeapi.get_json(endpoint, "/y", timeout=10)
    assert answer is not None and answer["auth"] == "Bearer rotated-token"


def test_inline_data_works_the_same(pki: Pki, apiserver: str, tmp_path: Path) -> None:
    config = _write(tmp_path / "config", cluster={
        "server": apiserver, "certificate-authority-data": _b64(pki.ca),
    }, user={"client-certificate-data": _b64(pki.client_cert),
             "client-key-data": _b64(pki.client_key), "token": "inline"})
    answer = kubeapi.get_json(kubeaccess.from_kubeconfig(config), "/x", timeout=10)
    assert answer is not None and answer["client"] == "client" and answer["auth"] == "Bearer inline"


def test_an_untrusted_server_is_refused(pki: Pki, apiserver: str, tmp_path: Path) -> None:
    # The client certificate stands in for a CA that did not sign the server's.
    config = _write(tmp_path / "config", cluster={
        "server": apiserver, "certificate-authority-data": _b64(pki.client_cert),
    }, user={"client-certificate-data": _b64(pki.client_cert),
             "client-key-data": _b64(pki.client_key)})
    with pytest.raises(kubeapi.ApiUnreachableError, match="CERTIFICATE_VERIFY_FAILED"):
        kubeapi.get_json(kubeaccess.from_kubeconfig(config), "/x", timeout=10)


def test_plain_http_server_and_named_context(tmp_path: Path) -> None:
    config = _write(tmp_path / "config", cluster={"server": "http://127.0.0.1:8080/"},
                    user={"token": "t"}, current=None)
    creds = load(config, context="ctx")
    assert (creds.server, creds.token, creds.ca_pem) == ("http://127.0.0.1:8080", "t", None)


@pytest.mark.parametrize(
    ("cluster", "user", "current", "names"),
    [
        ({"server": "https://k"}, {}, None, "no current-context"),
        ({"server": "https://k"}, {}, "other", "no context named 'other'"),
        ({"server": "k8s.example:6443"}, {}, "ctx", "cluster.server"),
        ({"server": "https://k"}, {"exec": {"command": "aws"}}, "ctx", "user.exec"),
        ({"server": "https://k"}, {"auth-provider": {"name": "gcp"}}, "ctx",
         "user.auth-provider"),
        ({"server": "https://k", "certificate-authority-data": "not base64!"}, {}, "ctx",
         "certificate-authority-data"),
        ({"server": "https://k"}, {"tokenFile": "missing"}, "ctx", "user.tokenFile"),
        ({"server": "https://k", "certificate-authority": "nope.crt"}, {}, "ctx",
         "certificate-authority"),
    ],
    ids=["no-current", "unknown-context", "server-not-url", "exec", "auth-provider",
         "bad-base64", "missing-token-file", "missing-ca-file"],
)
def test_bad_kubeconfigs_name_the_field(tmp_path: Path, cluster: dict[str, Any],
                                        user: dict[str, Any], current: str | None,
                                        names: str) -> None:
    config = _write(tmp_path / "config", cluster=cluster, user=user, current=current)
    with pytest.raises(KubeconfigError, match=names):
        load(config)


def test_unreadable_or_garbled_file(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="cannot read"):
        load(tmp_path / "absent")
    (tmp_path / "list").write_text("- a\n- b\n")
    with pytest.raises(KubeconfigError, match="not a mapping"):
        load(tmp_path / "list")
