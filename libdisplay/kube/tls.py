"""The TLS context for an API server: its CA (bytes or a file, else the system's), an optional
client certificate, and kubeconfig's `insecure-skip-tls-verify`.

Every client of the project (stdlib, lightkube's HTTP library, aiohttp) takes an
`ssl.SSLContext`, so this is the one place a CA or a client certificate is loaded. Importing
this module imports ssl: callers that may talk plain HTTP import it only when they need TLS.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path


class TlsConfigError(Exception):
    """A CA or client certificate cannot be loaded; the message names which and why."""


def context(*, ca_pem: bytes | None = None, ca_file: Path | None = None,
            client_cert: tuple[bytes, bytes] | None = None,
            insecure: bool = False) -> ssl.SSLContext:
    """A client context verifying the server with `ca_pem` or `ca_file` (else system CAs)."""
    try:
        if ca_pem is not None:
            made = ssl.create_default_context(cadata=ca_pem.decode("ascii", "replace"))
        elif ca_file is not None:
            made = ssl.create_default_context(cafile=os.fspath(ca_file))
        else:
            made = ssl.create_default_context()
    except (OSError, ssl.SSLError, ValueError) as err:
        where = f"CA file {ca_file}" if ca_file is not None and ca_pem is None else "CA data"
        raise TlsConfigError(f"{where} is unusable: {err}") from err
    if insecure:
        made.check_hostname = False
        made.verify_mode = ssl.CERT_NONE
    if client_cert is not None:
        with private_files(*client_cert) as (cert, key):
            try:
                made.load_cert_chain(cert, key)
            except ssl.SSLError as err:
                raise TlsConfigError(f"client certificate or key unusable: {err}") from err
    return made


@contextlib.contextmanager
def private_files(*contents: bytes) -> Iterator[tuple[str, ...]]:
    """The contents as files only this user can read, removed on exit (ssl loads from paths)."""
    with tempfile.TemporaryDirectory(prefix="kubetls-") as tmp:
        paths = []
        for index, content in enumerate(contents):
            path = os.path.join(tmp, str(index))
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as file:
                file.write(content)
            paths.append(path)
        yield tuple(paths)
