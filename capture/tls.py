"""The serving certificate: self-signed at start, the mounted secret as soon as it appears.

The secret volume (`tls.crt`, `tls.key`) is optional and may arrive or change while the server
runs. `Certificates.refresh` loads a candidate pair into a fresh `ssl.SSLContext` and makes it
`context` only once the whole pair has loaded. The listener's own context (`listener`) hands
each new connection to the `context` of the moment from its `sni_callback` (called for every
ClientHello, SNI or not), so new connections get the new leaf without a restart and a broken pair
(half-written, key not matching, empty, a directory) never reaches one: the current leaf is
kept. Until the first good pair appears the context serves a leaf made at start with the
`openssl` CLI (no Python crypto package is locked), kept in a private temp dir.
"""

from __future__ import annotations

import hashlib
import logging
import os
import ssl
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger(__name__)

Source = Literal["self-signed", "mounted"]
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
_OPENSSL_TIMEOUT_S = 30.0


class TlsError(Exception):
    """Base of every error this module raises."""


class SelfSignedError(TlsError):
    """openssl could not make the start-up certificate; the message has its stderr."""


@dataclass(frozen=True, slots=True)
class Pair:
    cert: Path
    key: Path


def make_self_signed(directory: Path, *, common_name: str = "display-capture") -> Pair:
    """An EC P-256 leaf valid for a year, for localhost and 127.0.0.1, written by openssl."""
    pair = Pair(cert=directory / CERT_FILE, key=directory / KEY_FILE)
    argv = [
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
        "-nodes", "-days", "365", "-subj", f"/CN={common_name}",
        "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
        "-keyout", os.fspath(pair.key), "-out", os.fspath(pair.cert),
    ]
    try:
        subprocess.run(argv, check=True, capture_output=True, timeout=_OPENSSL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        stderr = getattr(exc, "stderr", b"") or b""
        raise SelfSignedError(
            f"openssl req failed: {exc}: {stderr.decode(errors='replace').strip()}"
        ) from exc
    return pair


def new_context(pair: Pair) -> ssl.SSLContext:
    """A server context serving `pair`; ssl.SSLError or OSError when the pair does not load."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(pair.cert, pair.key)
    return context


def _digest(pair: Pair) -> str | None:
    """A hash of both files, or None while either cannot be read (missing, a directory,
    unreadable): the watcher waits for a readable pair rather than dying."""
    try:
        return hashlib.sha256(pair.cert.read_bytes() + b"\0" + pair.key.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.debug("mounted pair %s unreadable: %s", pair.cert, exc)
        return None


class Certificates:
    """The context new connections get, and where its leaf came from."""

    def __init__(self, mounted_dir: Path) -> None:
        self.mounted = Pair(cert=mounted_dir / CERT_FILE, key=mounted_dir / KEY_FILE)
        self._tmp = tempfile.TemporaryDirectory(prefix="capture-tls-")
        own = make_self_signed(Path(self._tmp.name))
        self.context = new_context(own)
        self.listener = new_context(own)
        self.listener.sni_callback = self._current
        self.source: Source = "self-signed"
        self._seen_digest: str | None = None
        self.refresh()
        if self.source == "self-signed":
            log.info("serving a self-signed certificate until %s loads", self.mounted.cert)

    def close(self) -> None:
        self._tmp.cleanup()

    def _current(self, connection: ssl.SSLObject | ssl.SSLSocket, _name: str | None,
                 _context: ssl.SSLContext) -> None:
        connection.context = self.context

    def refresh(self) -> None:
        """Serve the mounted pair once it is new and loads whole; otherwise change nothing."""
        digest = _digest(self.mounted)
        if digest is None or digest == self._seen_digest:
            return
        self._seen_digest = digest
        try:
            context = new_context(self.mounted)
        except (OSError, ssl.SSLError) as exc:
            log.warning("mounted certificate %s does not load, keeping the %s one: %s",
                        self.mounted.cert, self.source, exc)
            return
        self.context = context
        self.source = "mounted"
        log.info("serving the mounted certificate %s for new connections", self.mounted.cert)
