"""FakeKube(tls=True): HTTPS verified with the fake's own CA, for every name a client dials,
refused by a client that does not trust it, watches over TLS, and nothing left behind."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
import urllib.error
from collections.abc import Iterator

import pytest
from lightkube.resources.core_v1 import Node

from fakekube import testing
from fakekube.client import sync_client
from fakekube.server import FakeKube
from fakekube.testing import call

WAIT_SECONDS = 20.0


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube(tls=True) as server:
        yield server


def test_url_and_verified_request(fake: FakeKube) -> None:
    assert fake.url == f"https://127.0.0.1:{fake.port}"
    assert fake.host == "127.0.0.1"
    assert fake.ca_pem.startswith(b"-----BEGIN CERTIFICATE-----")
    assert call(fake.url, "GET", "/healthz", ca=fake.ca_pem).code == 200


def test_a_client_without_the_ca_is_refused(fake: FakeKube) -> None:
    with pytest.raises(urllib.error.URLError) as caught:
        call(fake.url, "GET", "/healthz")  # the system's CAs only
    assert isinstance(caught.value.reason, ssl.SSLCertVerificationError)


@pytest.mark.parametrize("name", ["localhost", "kubernetes.default.svc",
                                  "kubernetes.default.svc.cluster.local"])
def test_the_leaf_names_in_cluster_addresses(fake: FakeKube, name: str) -> None:
    context = ssl.create_default_context(cadata=fake.ca_pem.decode())
    with socket.create_connection((fake.host, fake.port), timeout=WAIT_SECONDS) as raw, \
            context.wrap_socket(raw, server_hostname=name) as tls:
        assert tls.version() is not None


def test_a_name_the_leaf_lacks_fails_verification(fake: FakeKube) -> None:
    context = ssl.create_default_context(cadata=fake.ca_pem.decode())
    with socket.create_connection((fake.host, fake.port), timeout=WAIT_SECONDS) as raw, \
            pytest.raises(ssl.SSLCertVerificationError):
        context.wrap_socket(raw, server_hostname="elsewhere.example")


def test_a_silent_connection_does_not_hold_up_others(fake: FakeKube) -> None:
    with socket.create_connection((fake.host, fake.port), timeout=WAIT_SECONDS):
        # No ClientHello on this one; the next client is served all the same.
        assert call(fake.url, "GET", "/healthz", ca=fake.ca_pem).code == 200


def test_lightkube_with_the_ca(fake: FakeKube) -> None:
    fake.create(testing.node("n1"))
    for ca in (fake.ca_pem, fake.ca_path):
        client = sync_client(fake.url, ca=ca)
        try:
            assert testing.names(client.list(Node)) == ["n1"]
        finally:
            client.close()


def _open_watchers(fake: FakeKube) -> int:
    # The store has no public count of open watches that leaves them open.
    with fake.store.lock:
        return len(fake.store._watchers)


def test_watch_over_tls_ends_when_the_client_leaves(fake: FakeKube) -> None:
    fake.create(testing.node("n1"))
    context = ssl.create_default_context(cadata=fake.ca_pem.decode())
    conn = http.client.HTTPSConnection(fake.host, fake.port, context=context,
                                       timeout=WAIT_SECONDS)
    try:
        conn.request("GET", "/api/v1/nodes?watch=true")
        resp = conn.getresponse()
        event = json.loads(resp.readline())  # http.client undoes the chunking
        assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "n1")
        assert _open_watchers(fake) == 1
    finally:
        conn.close()
    deadline = time.monotonic() + WAIT_SECONDS
    while _open_watchers(fake) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _open_watchers(fake) == 0


def test_certificates_are_removed_on_stop() -> None:
    fake = FakeKube(tls=True).start()
    directory = fake.ca_path.parent
    assert sorted(p.name for p in directory.iterdir()) == ["ca.crt", "ca.srl", "tls.crt",
                                                           "tls.csr", "tls.ext", "tls.key"]
    fake.stop()
    assert not directory.exists()


def test_plain_http_has_no_ca() -> None:
    with FakeKube() as plain:
        assert plain.url.startswith("http://")
        with pytest.raises(RuntimeError, match="tls=False"):
            _ = plain.ca_pem
