"""The serving certificate: self-signed at start, the mounted pair once it loads, a broken pair
ignored. Switching without a restart is tested end to end in server_test."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

from capture import tls
from capture.tls import Certificates
from libdisplay import fsutil


def test_self_signed_pair_loads(tmp_path: Path) -> None:
    pair = tls.make_self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(pair.cert, pair.key)
    text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(pair.cert)],
                          capture_output=True, text=True, check=True, timeout=30).stdout
    assert "IP Address:127.0.0.1" in text and "DNS:localhost" in text


def test_mounted_pair_is_loaded_when_it_appears(tmp_path: Path) -> None:
    mounted = tmp_path / "mounted"
    certs = Certificates(mounted)
    try:
        initial = certs.source
        assert initial == "self-signed"
        assert not certs.refresh()
        other = tls.make_self_signed(tmp_path, common_name="mounted")
        mounted.mkdir()
        fsutil.atomic_write(mounted / "tls.crt", other.cert.read_bytes())
        assert not certs.refresh()  # the key is not there yet
        fsutil.atomic_write(mounted / "tls.key", other.key.read_bytes(), mode=0o600)
        assert certs.refresh()
        assert certs.source == "mounted"
    finally:
        certs.close()


def test_a_pair_that_does_not_load_keeps_the_current_leaf(tmp_path: Path) -> None:
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = tls.make_self_signed(tmp_path / "a")
    second = tls.make_self_signed(tmp_path / "b")
    # A certificate with another pair's key: what a half-rotated secret looks like.
    fsutil.atomic_write(mounted / "tls.crt", first.cert.read_bytes())
    fsutil.atomic_write(mounted / "tls.key", second.key.read_bytes(), mode=0o600)
    certs = Certificates(mounted)
    try:
        assert certs.source == "self-signed"
        assert not certs.refresh()
    finally:
        certs.close()
