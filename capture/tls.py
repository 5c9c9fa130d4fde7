"""The serving certificate: self-signed at start, the mounted secret as soon as it appears.

The secret volume (`tls.crt`, `tls.key`) is optional and may arrive or change while the server
runs. `Certificates.refresh` loads it into the one `ssl.SSLContext` the listener uses, so new
connections get the new leaf without a restart; connections already open keep theirs. Until
the first good pair appears the context serves a leaf made at start with the `openssl` CLI
(no Python crypto package is locked), kept in a private temp dir. A pair that does not load
(half-written, key not matching) is logged and the current leaf is kept.
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


def _digest(pair: Pair) -> str | None:
    """A hash of both files, or None while either is missing."""
    try:
        return hashlib.sha256(pair.cert.read_bytes() + b"\0" + pair.key.read_bytes()).hexdigest()
    except FileNotFoundError:
        return None


class Certificates:
    """The listener's SSL context and where its current leaf came from."""

    def __init__(self, mounted_dir: Path) -> None:
        self.mounted = Pair(cert=mounted_dir / CERT_FILE, key=mounted_dir / KEY_FILE)
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.source: Source = "self-signed"
        self._loaded_digest: str | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="capture-tls-")
        own = make_self_signed(Path(self._tmp.name))
        self.context.load_cert_chain(own.cert, own.key)
        if not self.refresh():
            log.info("serving a self-signed certificate until %s appears", self.mounted.cert)

    def close(self) -> None:
        self._tmp.cleanup()

    def refresh(self) -> bool:
        """Load the mounted pair when it is new; True when the mounted pair is being served."""
        digest = _digest(self.mounted)
        if digest is None or digest == self._loaded_digest:
            return self.source == "mounted" and digest is not None
        try:
            self.context.load_cert_chain(self.mounted.cert, self.mounted.key)
        except (OSError, ssl.SSLError) as exc:
            log.warning(
                "mounted certificate %s does not load, keeping the %s one: %s",
                self.mounted.cert, self.source, exc,
            )
            self._loaded_digest = digest
            return False
        self._loaded_digest = digest
        self.source = "mounted"
        log.info("serving the mounted certificate %s for new connections", self.mounted.cert)
        return True
