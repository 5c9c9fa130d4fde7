"""The serving certificate: self-signed at start, the mounted pair once it loads whole, a broken
pair never served. Each check completes a real TLS handshake against `Certificates.context`
(in memory, through BIOs) and reads the leaf the client was shown. Switching without a restart
is tested end to end in server_test."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from capture import tls
from capture.tls import Certificates, Pair
from libdisplay import fsutil


def _pump(source: ssl.MemoryBIO, sink: ssl.MemoryBIO) -> bool:
    data = source.read()
    sink.write(data)
    return bool(data)


def served_common_name(context: ssl.SSLContext) -> str:
    """The CN of the leaf `context` shows a client; ssl.SSLError when no handshake completes."""
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    c_in, c_out, s_in, s_out = (ssl.MemoryBIO() for _ in range(4))
    client = client_ctx.wrap_bio(c_in, c_out, server_side=False)
    server = context.wrap_bio(s_in, s_out, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(20):
        for name, side in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        moved = _pump(c_out, s_in) | _pump(s_out, c_in)
        if all(done.values()) and not moved:
            break
    assert all(done.values()), "the handshake never completed"
    der = client.getpeercert(binary_form=True)
    assert der is not None
    text = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-subject"],
                          input=der, capture_output=True, check=True, timeout=30).stdout
    return text.decode().strip().rpartition("=")[2].strip()


def _pair(tmp_path: Path, name: str) -> Pair:
    (tmp_path / name).mkdir()
    return tls.make_self_signed(tmp_path / name, common_name=name)


def _mount(mounted: Path, *, cert: bytes, key: bytes) -> None:
    mounted.mkdir(exist_ok=True)
    fsutil.atomic_write(mounted / "tls.crt", cert)
    fsutil.atomic_write(mounted / "tls.key", key, mode=0o600)


@pytest.fixture
def certs(tmp_path: Path) -> Iterator[Certificates]:
    certificates = Certificates(tmp_path / "mounted")
    try:
        yield certificates
    finally:
        certificates.close()


def test_self_signed_pair_loads(tmp_path: Path) -> None:
    pair = tls.make_self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair.cert, pair.key)
    text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(pair.cert)],
                          capture_output=True, text=True, check=True, timeout=30).stdout
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text


def test_mounted_pair_is_served_when_it_appears(tmp_path: Path, certs: Certificates) -> None:
    assert (certs.source, served_common_name(certs.context)) == ("self-signed", "display-capture")
    good = _pair(tmp_path, "mounted-a")
    (tmp_path / "mounted").mkdir()
    fsutil.atomic_write(tmp_path / "mounted" / "tls.crt", good.cert.read_bytes())
    certs.refresh()  # the key is not there yet
    assert served_common_name(certs.context) == "display-capture"
    fsutil.atomic_write(tmp_path / "mounted" / "tls.key", good.key.read_bytes(), mode=0o600)
    certs.refresh()
    assert (certs.source, served_common_name(certs.context)) == ("mounted", "mounted-a")


@pytest.mark.parametrize("broken", ["mismatched-key", "empty-key", "garbage-cert"])
def test_a_broken_new_pair_keeps_serving_the_old_leaf(
    tmp_path: Path, certs: Certificates, broken: str
) -> None:
    good, other = _pair(tmp_path, "good"), _pair(tmp_path, "other")
    _mount(tmp_path / "mounted", cert=good.cert.read_bytes(), key=good.key.read_bytes())
    certs.refresh()
    assert served_common_name(certs.context) == "good"
    cert, key = {
        "mismatched-key": (other.cert.read_bytes(), good.key.read_bytes()),
        "empty-key": (other.cert.read_bytes(), b""),
        "garbage-cert": (b"-----BEGIN CERTIFICATE-----\nAAAA\n", other.key.read_bytes()),
    }[broken]
    _mount(tmp_path / "mounted", cert=cert, key=key)
    certs.refresh()
    assert (certs.source, served_common_name(certs.context)) == ("mounted", "good")


@pytest.mark.parametrize("broken", ["mismatched-key", "empty-key"])
def test_a_broken_pair_at_start_serves_the_self_signed_leaf(tmp_path: Path, broken: str) -> None:
    first, second = _pair(tmp_path, "first"), _pair(tmp_path, "second")
    key = second.key.read_bytes() if broken == "mismatched-key" else b""
    _mount(tmp_path / "mounted", cert=first.cert.read_bytes(), key=key)
    certs = Certificates(tmp_path / "mounted")
    try:
        assert (certs.source, served_common_name(certs.context)) == (
            "self-signed", "display-capture")
    finally:
        certs.close()


def test_a_directory_for_tls_crt_is_waited_out(tmp_path: Path, certs: Certificates) -> None:
    mounted = tmp_path / "mounted"
    (mounted / "tls.crt").mkdir(parents=True)
    (mounted / "tls.key").write_text("")
    certs.refresh()
    assert served_common_name(certs.context) == "display-capture"
    (mounted / "tls.crt").rmdir()
    good = _pair(tmp_path, "later")
    _mount(mounted, cert=good.cert.read_bytes(), key=good.key.read_bytes())
    certs.refresh()
    assert served_common_name(certs.context) == "later"


def test_the_listener_hands_each_connection_the_current_leaf(
    tmp_path: Path, certs: Certificates
) -> None:
    listener = certs.listener
    assert served_common_name(listener) == "display-capture"
    good = _pair(tmp_path, "rotated")
    _mount(tmp_path / "mounted", cert=good.cert.read_bytes(), key=good.key.read_bytes())
    certs.refresh()
    assert certs.listener is listener
    assert served_common_name(listener) == "rotated"
