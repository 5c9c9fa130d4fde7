"""api: the REST calls simnode makes, against the fake apiserver (plain and HTTPS with its CA),
the token sent on every request (a rotated token file re-read), and the errors a user reads
(kubeconfig unusable, API server unreachable, 401, 403 naming the verb and resource)."""

from __future__ import annotations

import http.server
import json
import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from fakekube.server import FakeKube
from fakekube.testing import node, resource_slice
from libdisplay.kube import access as kubeaccess
from simnode.cluster import api


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as fake:
        yield fake


def _kubeconfig(path: Path, server: str, *, user: dict[str, object] | None = None) -> Path:
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "sim",
        "contexts": [{"name": "sim", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": user if user is not None else {"token": "t0ken"}}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.parametrize(
    ("resource", "name", "namespace", "subresource", "expected"),
    [
        (api.NODES, "n1", None, "status", "/api/v1/nodes/n1/status"),
        (api.RESOURCE_SLICES, None, None, None, "/apis/resource.k8s.io/v1/resourceslices"),
        (api.RESOURCE_CLAIMS, "c", "default", None,
         "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims/c"),
        (api.DISPLAYS, "sim.card0-dp-1", None, None,
         "/apis/display.liken.sh/v1alpha1/displays/sim.card0-dp-1"),
    ],
    ids=["core-status", "group-list", "namespaced", "custom"],
)
def test_resource_paths(resource: api.Resource, name: str | None, namespace: str | None,
                        subresource: str | None, expected: str) -> None:
    assert resource.path(name, namespace=namespace, subresource=subresource) == expected


def test_calls_against_the_fake(kube: FakeKube) -> None:
    client = api.Api(api.Access(server=kube.url))
    assert client.get(api.NODES, "n1") is None
    created = client.create(api.NODES, node("n1"))
    assert created["metadata"]["uid"]
    patched = client.patch(api.NODES, "n1", {"status": {"capacity": {"pods": "110"}}},
                           subresource="status")
    assert patched["status"]["capacity"] == {"pods": "110"}
    kube.create(resource_slice("s1", node="n1"))
    kube.create(resource_slice("s2", node="n2"))
    picked = client.items(api.RESOURCE_SLICES, fields={"spec.nodeName": "n1"})
    assert [s["metadata"]["name"] for s in picked] == ["s1"]
    assert len(client.objects("resource.k8s.io/v1", "ResourceSlice")) == 2
    assert client.delete(api.NODES, "n1") is True
    assert client.delete(api.NODES, "n1") is False, "a second delete finds nothing"


@dataclass
class Stub:
    """An HTTP server answering every request with `code` and a Status `message` (or `raw`)."""

    url: str
    code: int = 200
    message: str = ""
    raw: bytes | None = None
    headers: list[dict[str, str]] = field(default_factory=list)


@pytest.fixture
def stub() -> Iterator[Stub]:
    found = Stub(url="")

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            found.headers.append(dict(self.headers))
            body = json.dumps({"kind": "Status", "code": found.code, "message": found.message,
                               "items": []}).encode() if found.raw is None else found.raw
            self.send_response(found.code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PATCH = do_DELETE = _answer  # noqa: N815 (http.server's names)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    found.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield found
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_the_kubeconfig_token_is_sent(stub: Stub, tmp_path: Path) -> None:
    access = api.Access.from_kubeconfig(_kubeconfig(tmp_path / "kc", stub.url))
    assert access.server == stub.url and access.kubeconfig == tmp_path / "kc"
    api.Api(access).items(api.DISPLAYS)
    assert stub.headers[-1]["Authorization"] == "Bearer t0ken"


def test_a_rotated_token_file_is_sent_from_the_next_request(stub: Stub, tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    client = api.Api(api.Access.from_kubeconfig(
        _kubeconfig(tmp_path / "kc", stub.url, user={"tokenFile": str(token)})))
    client.items(api.DISPLAYS)
    rotated = tmp_path / "token.new"
    rotated.write_text("second\n")
    rotated.replace(token)  # as the kubelet swaps a projected token: a new file, atomically
    client.items(api.DISPLAYS)
    assert [h["Authorization"] for h in stub.headers] == ["Bearer first", "Bearer second"]


def test_an_endpoint_given_directly_is_used(stub: Stub) -> None:
    endpoint = kubeaccess.Endpoint(url=stub.url, token=kubeaccess.StaticToken("direct"))
    api.Api(api.Access(server=stub.url, endpoint=endpoint)).items(api.DISPLAYS)
    assert stub.headers[-1]["Authorization"] == "Bearer direct"
    assert "Authorization" not in _sent(api.Access(server=stub.url), stub), "the fake: none"


def _sent(access: api.Access, stub: Stub) -> dict[str, str]:
    api.Api(access).items(api.DISPLAYS)
    return stub.headers[-1]


def test_https_verified_with_the_kubeconfig_ca(tmp_path: Path) -> None:
    with FakeKube(tls=True, authorize=True) as fake:
        kc = tmp_path / "kc"
        _kubeconfig(kc, fake.url, user={"token": fake.admin_token})
        doc = yaml.safe_load(kc.read_text())
        doc["clusters"][0]["cluster"]["certificate-authority"] = str(fake.ca_path)
        kc.write_text(yaml.safe_dump(doc))
        assert api.Api(api.Access.from_kubeconfig(kc)).get(api.NODES, "n1") is None
        with pytest.raises(api.UnreachableError, match="certificate is not trusted"):
            api.Api(api.Access.from_kubeconfig(_kubeconfig(kc, fake.url))).items(api.NODES)


def test_an_answer_that_is_not_json_is_a_retryable_status(stub: Stub) -> None:
    stub.raw = b"<html>bad gateway</html>"
    with pytest.raises(api.StatusError, match="list displays: the API server at .* answered no"
                       " JSON") as caught:
        api.Api(api.Access(server=stub.url)).items(api.DISPLAYS)
    assert caught.value.retryable


@pytest.mark.parametrize(
    ("code", "call", "expected"),
    [
        (403, lambda c: c.create(api.NODES, node("n1")),
         r"no rights to create nodes in the cluster at http://\S+ \(kubeconfig .*kc, context"
         r" current\): nodes is forbidden"),
        (403, lambda c: c.patch(api.RESOURCE_CLAIMS, "c1", {}, namespace="default",
                                subresource="status"),
         "no rights to patch resourceclaims/status c1 in namespace default"),
        (403, lambda c: c.items(api.DISPLAYS), "no rights to list displays"),
        (401, lambda c: c.get(api.NODES, "n1"), r"refused the credentials \(401"),
        (500, lambda c: c.delete(api.NODES, "n1"), "cannot delete nodes n1 .*: 500"),
    ],
    ids=["create", "patch-status", "list", "unauthorized", "server-error"],
)
def test_error_statuses_name_the_verb_and_resource(
    stub: Stub, tmp_path: Path, code: int, call: Callable[[api.Api], object], expected: str
) -> None:
    stub.code, stub.message = code, "nodes is forbidden: User \"sim\" cannot do it"
    client = api.Api(api.Access.from_kubeconfig(_kubeconfig(tmp_path / "kc", stub.url)))
    with pytest.raises(api.StatusError, match=expected) as caught:
        call(client)
    assert caught.value.code == code
    assert caught.value.retryable is (code >= 500)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_api_server_that_does_not_answer(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    client = api.Api(api.Access.from_kubeconfig(_kubeconfig(tmp_path / "kc", url)))
    with pytest.raises(api.UnreachableError,
                       match=f"cannot reach the API server at {url} .* to list displays: "):
        client.items(api.DISPLAYS)


@pytest.mark.parametrize(
    ("write", "expected"),
    [
        (None, r"cannot use --kubeconfig .*/kc: cannot read kubeconfig"),
        ("users: [", "cannot use --kubeconfig .*/kc: cannot read kubeconfig"),
        ("exec", "user.exec: credential plugins are not supported"),
    ],
    ids=["missing", "not-yaml", "exec-plugin"],
)
def test_an_unusable_kubeconfig_says_why(tmp_path: Path, write: str | None,
                                         expected: str) -> None:
    path = tmp_path / "kc"
    if write == "exec":
        _kubeconfig(path, "https://example.invalid", user={"exec": {"command": "aws"}})
    elif write is not None:
        path.write_text(write)
    with pytest.raises(api.KubeconfigUnusableError, match=expected):
        api.Access.from_kubeconfig(path)


def test_a_context_the_kubeconfig_lacks(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "kc", "http://127.0.0.1:1")
    with pytest.raises(api.KubeconfigUnusableError, match="no context named 'prod'"):
        api.Access.from_kubeconfig(path, context="prod")


def test_a_ca_that_cannot_be_loaded_is_an_unusable_kubeconfig(tmp_path: Path) -> None:
    kc = _kubeconfig(tmp_path / "kc", "https://127.0.0.1:1")
    doc = yaml.safe_load(kc.read_text())
    doc["clusters"][0]["cluster"]["certificate-authority-data"] = "bm90IGEgY2VydA=="  # "not a cert"
    kc.write_text(yaml.safe_dump(doc))
    with pytest.raises(api.KubeconfigUnusableError,
                       match=r"cannot use --kubeconfig .*/kc: its TLS settings: "):
        api.Api(api.Access.from_kubeconfig(kc))
