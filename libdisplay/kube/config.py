"""A kubeconfig file read into what a plain HTTPS client needs: server, credentials, TLS.

Every binary reaches a cluster from outside it through this (`libdisplay.kube.access` turns
it into the one Endpoint its clients are built from), as does simnode (`simnode up
--kubeconfig`). It reads the current (or a named) context's cluster and user: bearer token
(inline or `tokenFile`), client certificate and key (files or inline data), CA (file or inline
data) and `insecure-skip-tls-verify`. Credential plugins (`exec`, `auth-provider`) are refused
by name: running them is a client's job these binaries do not take on.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import ssl


class KubeconfigError(Exception):
    """The kubeconfig cannot be read or lacks what is needed; the message names the field."""


@dataclass(frozen=True, slots=True)
class Credentials:
    """A cluster and a user, resolved: paths made absolute, inline data decoded."""

    server: str
    token: str | None = None
    ca_pem: bytes | None = None
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    insecure: bool = False
    token_file: Path | None = None
    """Where `token` came from, when the user names a `tokenFile`: a client re-reads it."""

    def ssl_context(self) -> ssl.SSLContext:
        """TLS for this cluster: its CA (or the system's), the client certificate if any."""
        from libdisplay.kube import tls as kubetls

        cert = (self.cert_pem, self.key_pem) if self.cert_pem and self.key_pem else None
        try:
            return kubetls.context(ca_pem=self.ca_pem, client_cert=cert, insecure=self.insecure)
        except kubetls.TlsConfigError as err:
            raise KubeconfigError(str(err)) from err

    def tls(self) -> ssl.SSLContext | None:
        """`ssl_context()` for an https server; None for a plain-http one (a test's fake)."""
        return self.ssl_context() if self.server.startswith("https://") else None


def load(path: Path, *, context: str | None = None) -> Credentials:
    """The credentials of `context` (default: `current-context`) in the kubeconfig at `path`."""
    import yaml  # only callers given a kubeconfig pay for it

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as err:
        raise KubeconfigError(f"cannot read kubeconfig {path}: {err}") from err
    if not isinstance(doc, Mapping):
        raise KubeconfigError(f"kubeconfig {path} is not a mapping")
    name = context or doc.get("current-context")
    if not name:
        raise KubeconfigError(f"kubeconfig {path}: no current-context and no context given")
    ctx = _named(doc, "contexts", "context", str(name), path)
    cluster = _named(doc, "clusters", "cluster", str(ctx.get("cluster", "")), path)
    user_name = ctx.get("user")
    user = _named(doc, "users", "user", str(user_name), path) if user_name else {}
    return _credentials(cluster, user, base=path.parent)


def _named(doc: Mapping[str, Any], section: str, key: str, name: str,
           path: Path) -> Mapping[str, Any]:
    for entry in doc.get(section) or []:
        if isinstance(entry, Mapping) and entry.get("name") == name:
            body = entry.get(key) or {}
            if not isinstance(body, Mapping):
                raise KubeconfigError(f"kubeconfig {path}: {section}[{name}].{key} is not a map")
            return body
    raise KubeconfigError(f"kubeconfig {path}: no {key} named {name!r} in {section}")


def _credentials(cluster: Mapping[str, Any], user: Mapping[str, Any], *,
                 base: Path) -> Credentials:
    server = cluster.get("server")
    if not isinstance(server, str) or not server.startswith(("https://", "http://")):
        raise KubeconfigError(f"cluster.server {server!r} is not an http(s) URL")
    for plugin in ("exec", "auth-provider"):
        if user.get(plugin):
            raise KubeconfigError(
                f"user.{plugin}: credential plugins are not supported; use a token or a client "
                "certificate"
            )
    token = user.get("token")
    token_file = None
    if not token and user.get("tokenFile"):
        token_file = base / str(user["tokenFile"])
        token = _read(base, user["tokenFile"], "user.tokenFile").decode().strip()
    return Credentials(
        server=server.rstrip("/"),
        token=str(token) if token else None,
        ca_pem=_pem(cluster, "certificate-authority", base),
        cert_pem=_pem(user, "client-certificate", base),
        key_pem=_pem(user, "client-key", base),
        insecure=bool(cluster.get("insecure-skip-tls-verify", False)),
        token_file=token_file,
    )


def _pem(section: Mapping[str, Any], field: str, base: Path) -> bytes | None:
    """`field-data` (base64) or `field` (a path, relative to the kubeconfig's directory)."""
    data = section.get(f"{field}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except binascii.Error as err:
            raise KubeconfigError(f"{field}-data is not base64: {err}") from err
    if section.get(field):
        return _read(base, section[field], field)
    return None


def _read(base: Path, name: object, field: str) -> bytes:
    try:
        return (base / str(name)).read_bytes()
    except OSError as err:
        raise KubeconfigError(f"{field}: {err}") from err
