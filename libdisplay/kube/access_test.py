"""kubeaccess: the order of the sources, in-cluster discovery from a service-account dir laid out
as the kubelet mounts it, against a real TLS server whose CA the test makes: every client
(declare's stdlib reader, lightkube sync and async, aiohttp) verifies it with the mounted CA,
refuses a server signed by another CA, and sends a rotated token without a restart."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from lightkube.resources.core_v1 import Node

from fakekube.server import FakeKube
from libdisplay.kube import access as kubeaccess
from libdisplay.kube import lightkube_client as kubelightkube
from libdisplay.kube import stdlib_client as kubeapi
from libdisplay.kube.access import Endpoint, NoEndpointError, discover
from libdisplay.kube.aiohttp_client import AioKube
from libdisplay.kube.errors import ApiCallError
from libdisplay.kube.lightkube_errors import from_lightkube
from tests.support.https_apiserver import Pki, Recorded, ServiceAccountDir, https_api, make_pki

_TIMEOUT_S = 20.0


@dataclass(frozen=True, slots=True)
class Cluster:
    """A TLS API stand-in and a pod's view of it: environment and service-account dir."""

    env: dict[str, str]
    account: ServiceAccountDir
    recorded: Recorded
    port: int

    def endpoint(self) -> Endpoint:
        return discover(environ=self.env, account_dir=self.account.root)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def other_pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("other-pki"), name="another-ca")


@pytest.fixture
def cluster(pki: Pki, tmp_path: Path) -> Iterator[Cluster]:
    with https_api(pki) as (port, recorded):
        account = ServiceAccountDir(tmp_path / "sa", ca=pki.ca, token="token-1")
        env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(port)}
        yield Cluster(env=env, account=account, recorded=recorded, port=port)


def _name(node: Node) -> str:
    assert node.metadata is not None and node.metadata.name is not None
    return node.metadata.name


def _get_node_stdlib(endpoint: Endpoint) -> str:
    obj = kubeapi.get_json(endpoint, "/api/v1/nodes/n1", timeout=_TIMEOUT_S)
    assert obj is not None
    return str(obj["metadata"]["name"])


# --- discovery -------------------------------------------------------------------------


def test_in_cluster_reads_env_and_the_mounted_account(cluster: Cluster) -> None:
    endpoint = cluster.endpoint()
    assert endpoint.url == f"https://127.0.0.1:{cluster.port}"
    assert endpoint.ca_file == cluster.account.root / "ca.crt"
    assert endpoint.namespace == "display"
    assert endpoint.origin == "in-cluster"
    assert endpoint.headers() == {"Authorization": "Bearer token-1"}


def test_an_ipv6_service_host_is_bracketed(cluster: Cluster) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "fd00:10:96::1", "KUBERNETES_SERVICE_PORT": "443"}
    endpoint = discover(environ=env, account_dir=cluster.account.root)
    assert endpoint.url == "https://[fd00:10:96::1]:443"


def test_explicit_wins_over_kubeconfig_and_in_cluster(cluster: Cluster, tmp_path: Path) -> None:
    env = {**cluster.env, "KUBECONFIG": str(tmp_path / "absent")}
    endpoint = discover(api_server="http://127.0.0.1:1/", environ=env,
                        account_dir=cluster.account.root)
    assert endpoint == Endpoint("http://127.0.0.1:1")
    # KUBECONFIG comes before the pod's account: here it names no file, and says so.
    with pytest.raises(NoEndpointError, match="cannot read kubeconfig .*absent"):
        discover(environ=env, account_dir=cluster.account.root)


def test_no_source_names_each_one(tmp_path: Path) -> None:
    with pytest.raises(NoEndpointError) as err:
        discover(environ={}, account_dir=tmp_path)
    for named in ("--api-server", "--kubeconfig", "KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        assert named in str(err.value)
    assert err.value.retryable is False


def test_in_cluster_without_the_mounted_token_or_ca_names_the_file(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    with pytest.raises(NoEndpointError, match=f"token file {tmp_path}/token"):
        discover(environ=env, account_dir=tmp_path)
    (tmp_path / "token").write_text("t\n")
    with pytest.raises(NoEndpointError, match=f"no CA file {tmp_path}/ca.crt"):
        discover(environ=env, account_dir=tmp_path)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"api_server": "ftp://x"}, "'ftp://x' is not an http"),
        ({"api_server": "https://"}, "is not an http"),
        ({"token_file": Path("/t")}, "without --api-server"),
        ({"api_server": "http://x", "ca_file": Path("/ca")}, "a CA file needs an https URL"),
        ({"api_server": "https://x", "ca_file": Path("/nonexistent/ca")}, "no CA file"),
        ({"api_server": "https://x", "token_file": Path("/nonexistent/t")}, "token file"),
    ],
)
def test_bad_explicit_settings_are_named(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(NoEndpointError, match=message):
        discover(environ={}, **kwargs)  # type: ignore[arg-type]


def test_a_kubeconfig_list_is_refused_by_name() -> None:
    with pytest.raises(NoEndpointError, match="several files"):
        discover(environ={"KUBECONFIG": "/a:/b"})


def test_a_bad_service_port_is_named(tmp_path: Path) -> None:
    with pytest.raises(NoEndpointError, match="KUBERNETES_SERVICE_PORT 'https'"):
        discover(environ={"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "https"},
                 account_dir=tmp_path)


# --- TLS: verified with the mounted CA, refused with another ---------------------------


def test_stdlib_client_verifies_with_the_mounted_ca(cluster: Cluster) -> None:
    assert _get_node_stdlib(cluster.endpoint()) == "n1"
    assert cluster.recorded.tokens() == ["Bearer token-1"]


def test_every_client_refuses_a_server_of_another_ca(
    cluster: Cluster, other_pki: Pki, tmp_path: Path
) -> None:
    wrong = ServiceAccountDir(tmp_path / "wrong", ca=other_pki.ca, token="token-1")
    endpoint = discover(environ=cluster.env, account_dir=wrong.root)

    with pytest.raises(kubeapi.ApiUnreachableError) as stdlib:
        _get_node_stdlib(endpoint)
    with kubelightkube.client(endpoint) as client, pytest.raises(Exception) as sync:
        client.get(Node, "n1")

    async def via_async() -> None:
        client = kubelightkube.async_client(endpoint)
        try:
            await client.get(Node, "n1")
        finally:
            await client.close()

    async def via_aiohttp() -> None:
        api = AioKube(endpoint, timeout_s=_TIMEOUT_S)
        try:
            await api.post_json("/apis/x/v1/reviews", {})
        finally:
            await api.close()

    with pytest.raises(Exception) as lightkube_async:
        asyncio.run(asyncio.wait_for(via_async(), _TIMEOUT_S))
    with pytest.raises(ApiCallError) as aio:
        asyncio.run(asyncio.wait_for(via_aiohttp(), _TIMEOUT_S))
    failures = [stdlib.value, from_lightkube(sync.value, "GET Node n1"),
                from_lightkube(lightkube_async.value, "GET Node n1"), aio.value]
    for failure in failures:
        assert isinstance(failure, ApiCallError), failure
        # An untrusted server is not an outage: no retry makes the CA right.
        assert (failure.reason, failure.retryable) == ("TLSVerifyFailed", False), failure
    assert cluster.recorded.tokens() == []  # no token went to the untrusted server


# --- token rotation ----------------------------------------------------------------------


def test_every_client_sends_a_rotated_token_without_a_restart(cluster: Cluster) -> None:
    endpoint = cluster.endpoint()

    async def via_async(rotate_to: str) -> list[str]:
        client = kubelightkube.async_client(endpoint)
        api = AioKube(endpoint, timeout_s=_TIMEOUT_S)
        try:
            names = [_name(await client.get(Node, "a1"))]
            await api.post_json("/apis/x/v1/reviews", {})
            cluster.account.rotate(rotate_to)
            names.append(_name(await client.get(Node, "a2")))
            await api.post_json("/apis/x/v1/reviews", {})
            return names
        finally:
            await client.close()
            await api.close()

    with kubelightkube.client(endpoint) as sync_client:
        assert _get_node_stdlib(endpoint) == "n1"
        assert _name(sync_client.get(Node, "s1")) == "s1"
        cluster.account.rotate("token-2")
        assert _get_node_stdlib(endpoint) == "n1"
        assert _name(sync_client.get(Node, "s2")) == "s2"
        names = asyncio.run(asyncio.wait_for(via_async("token-3"), _TIMEOUT_S))
    assert names == ["a1", "a2"]
    assert cluster.recorded.tokens() == [
        "Bearer token-1", "Bearer token-1",  # stdlib, sync lightkube
        "Bearer token-2", "Bearer token-2",  # after the first rotation
        "Bearer token-2", "Bearer token-2",  # async lightkube, aiohttp
        "Bearer token-3", "Bearer token-3",  # after the second
    ]


def test_a_token_file_that_vanishes_keeps_the_last_token(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("first\n")
    source = kubeaccess.FileToken(path)
    assert source.token() == "first"
    path.unlink()
    assert source.token() == "first"
    path.write_text("second")
    assert source.token() == "second"


# --- failures without an answer --------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_aiohttp_connection_refused_is_retryable() -> None:
    endpoint = Endpoint(f"http://127.0.0.1:{_closed_port()}")

    async def call() -> None:
        api = AioKube(endpoint, timeout_s=_TIMEOUT_S)
        try:
            await api.post_json("/x", {})
        finally:
            await api.close()

    with pytest.raises(ApiCallError) as err:
        asyncio.run(asyncio.wait_for(call(), _TIMEOUT_S))
    assert (err.value.reason, err.value.retryable, err.value.code) == (
        "ConnectionRefused", True, None)


# --- against the fake API server's own TLS and token authentication ----------------------


def test_in_cluster_against_the_fake_apiserver_with_a_rotated_token(tmp_path: Path) -> None:
    """A pod's default: the mounted CA verifies the fake's leaf; a token it does not know is
    a 401 that no retry fixes; the rotated (valid) token is sent by the same clients."""
    with FakeKube(tls=True, authorize=True) as fake:
        fake.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}})
        (tmp_path / "ca").write_bytes(fake.ca_pem)
        account = ServiceAccountDir(tmp_path / "sa", ca=tmp_path / "ca", token="not-issued")
        env = {"KUBERNETES_SERVICE_HOST": fake.host, "KUBERNETES_SERVICE_PORT": str(fake.port)}
        endpoint = discover(environ=env, account_dir=account.root)

        with pytest.raises(kubeapi.ApiStatusError) as refused:
            _get_node_stdlib(endpoint)
        assert (refused.value.code, refused.value.retryable) == (401, False)
        with kubelightkube.client(endpoint) as client:
            with pytest.raises(Exception) as sync:
                client.get(Node, "n1")
            failure = from_lightkube(sync.value, "GET Node n1")
            assert failure is not None and (failure.code, failure.retryable) == (401, False)

            account.rotate(fake.admin_token)
            assert _get_node_stdlib(endpoint) == "n1"
            assert _name(client.get(Node, "n1")) == "n1"

        async def via_async() -> str:
            client = kubelightkube.async_client(endpoint)
            try:
                return _name(await client.get(Node, "n1"))
            finally:
                await client.close()

        assert asyncio.run(asyncio.wait_for(via_async(), _TIMEOUT_S)) == "n1"
