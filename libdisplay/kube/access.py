"""Where the Kubernetes API server is and how to authenticate to it: one `Endpoint` for every
client of the project (declare's stdlib reader, the operator's lightkube clients, capture's
aiohttp client, simnode).

`discover` tries, in order: an explicit URL (`--api-server`, with an optional token file and
CA file), a kubeconfig (`--kubeconfig`, else `KUBECONFIG`), and the pod's own service account
(`KUBERNETES_SERVICE_HOST`/`_PORT` and the mounted token, CA and namespace). In a pod with no
flags that last one applies, and the server is verified with the mounted CA. When none applies
the error says what each source lacked.

The token is a *source*, not a string: the kubelet rotates projected service-account tokens
in place (a new file behind the `..data` symlink), so a long-running client asks the source
for the token on every request and the source re-reads the file when it changed.

Standard library only, and no ssl until a TLS context is asked for: declare imports this
inside its 64Mi budget and 0.3 s start.
"""

from __future__ import annotations

import os
import threading
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from libdisplay.kube.errors import ApiCallError

if TYPE_CHECKING:
    import ssl

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
"""Where the kubelet mounts the pod's service account: token, ca.crt, namespace."""


class NoEndpointError(ApiCallError):
    """No API server can be found or its credentials cannot be read; the message names the
    flag, variable or file. Not retryable: a person must change the pod or the flags."""

    def __init__(self, detail: str) -> None:
        super().__init__("find the API server", detail, reason="NoEndpoint", retryable=False)


class TokenSource(Protocol):
    def token(self) -> str:
        """The bearer token to send now."""
        ...


@dataclass(frozen=True, slots=True)
class StaticToken:
    """A token given inline (a kubeconfig's `token`)."""

    value: str

    def token(self) -> str:
        return self.value


class FileToken:
    """A token file, re-read whenever it changes (its inode, size or mtime), so a rotated
    projected token is sent from the next request on without a restart."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._seen: tuple[int, int, int] | None = None
        self._value = ""

    def __repr__(self) -> str:
        return f"FileToken({str(self.path)!r})"

    def token(self) -> str:
        try:
            info = os.stat(self.path)  # follows the kubelet's ..data symlink to the current file
            seen = (info.st_ino, info.st_size, info.st_mtime_ns)
            with self._lock:
                if seen != self._seen:
                    value = self.path.read_text().strip()
                    if not value:
                        raise OSError(f"{self.path} is empty")
                    self._value, self._seen = value, seen
                return self._value
        except OSError as err:
            if self._value:
                return self._value  # the swap is atomic, so this is a passing race: keep the last
            raise NoEndpointError(f"cannot read the token file {self.path}: {err}") from err


@dataclass(frozen=True, slots=True)
class Endpoint:
    """An API server: its URL, how to verify it (a CA as bytes or a file; neither means the
    system's CAs), a bearer token source and/or a client certificate (PEM cert, PEM key)."""

    url: str
    token: TokenSource | None = None
    ca_pem: bytes | None = None
    ca_file: Path | None = None
    client_cert: tuple[bytes, bytes] | None = None
    insecure: bool = False
    """kubeconfig's insecure-skip-tls-verify: the server is not verified."""
    namespace: str | None = None
    """The pod's namespace (in-cluster), when known."""
    origin: str = "--api-server"
    """Which source gave it, for messages: `--api-server`, `kubeconfig PATH`, `in-cluster`."""

    @property
    def https(self) -> bool:
        return self.url.startswith("https://")

    def headers(self) -> dict[str, str]:
        """The Authorization header for a request sent now (the token re-read if rotated)."""
        return {"Authorization": f"Bearer {self.token.token()}"} if self.token else {}

    def ssl_context(self) -> ssl.SSLContext | None:
        """A TLS context verifying this server (None for plain http). NoEndpointError when the
        CA or client certificate cannot be loaded."""
        if not self.https:
            return None
        from libdisplay.kube import (
            tls as kubetls,  # imports ssl: plain-http callers never pay for it
        )

        try:
            return kubetls.context(ca_pem=self.ca_pem, ca_file=self.ca_file,
                                   client_cert=self.client_cert, insecure=self.insecure)
        except kubetls.TlsConfigError as err:
            raise NoEndpointError(f"{self.origin}: {err}") from err


def discover(
    *,
    api_server: str | None = None,
    token_file: Path | None = None,
    ca_file: Path | None = None,
    kubeconfig: Path | None = None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
    account_dir: Path = SERVICE_ACCOUNT,
) -> Endpoint:
    """The endpoint the first applicable source names: explicit, kubeconfig, in-cluster.
    `account_dir` is for tests; every binary reads the kubelet's fixed mount."""
    env = os.environ if environ is None else environ
    if api_server:
        return explicit(api_server, token_file=token_file, ca_file=ca_file)
    if token_file is not None or ca_file is not None:
        raise NoEndpointError("an API token file or CA file was given without --api-server")
    config = kubeconfig or _kubeconfig_env(env)
    if config is not None:
        return from_kubeconfig(config, context=context)
    if not env.get("KUBERNETES_SERVICE_HOST"):
        raise NoEndpointError(
            "no --api-server, no --kubeconfig or KUBECONFIG, and not in a pod "
            "(KUBERNETES_SERVICE_HOST is unset)"
        )
    return in_cluster(environ=env, account_dir=account_dir)


def explicit(url: str, *, token_file: Path | None = None,
             ca_file: Path | None = None) -> Endpoint:
    """`--api-server URL`, with a token file (re-read when rotated) and a CA file for https."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise NoEndpointError(f"--api-server {url!r} is not an http(s) URL with a host")
    if ca_file is not None and parts.scheme != "https":
        raise NoEndpointError(f"--api-server {url!r}: a CA file needs an https URL")
    token = None
    if token_file is not None:
        token = FileToken(token_file)
        token.token()  # a missing or empty file is named now, not at the first call
    if ca_file is not None and not ca_file.is_file():
        raise NoEndpointError(f"--api-server {url!r}: no CA file {ca_file}")
    return Endpoint(url=url.rstrip("/"), token=token, ca_file=ca_file)


def from_kubeconfig(path: Path, *, context: str | None = None) -> Endpoint:
    """The endpoint of a kubeconfig's current (or named) context (`libdisplay.kube.config`)."""
    from libdisplay.kube import config as kubeconfig

    try:
        creds = kubeconfig.load(path, context=context)
    except kubeconfig.KubeconfigError as err:
        raise NoEndpointError(str(err)) from err
    token: TokenSource | None = None
    if creds.token_file is not None:
        token = FileToken(creds.token_file)
    elif creds.token:
        token = StaticToken(creds.token)
    cert = (creds.cert_pem, creds.key_pem) if creds.cert_pem and creds.key_pem else None
    return Endpoint(url=creds.server, token=token, ca_pem=creds.ca_pem, client_cert=cert,
                    insecure=creds.insecure, origin=f"kubeconfig {path}")


def in_cluster(*, environ: Mapping[str, str] | None = None,
               account_dir: Path = SERVICE_ACCOUNT) -> Endpoint:
    """The pod's API server (the `kubernetes` Service's address the kubelet puts in every
    container's environment) with its service account's token, CA and namespace."""
    env = os.environ if environ is None else environ
    host = env.get("KUBERNETES_SERVICE_HOST", "").strip()
    port = env.get("KUBERNETES_SERVICE_PORT", "").strip() or "443"
    if not host:
        raise NoEndpointError("not in a pod: KUBERNETES_SERVICE_HOST is unset")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise NoEndpointError(f"KUBERNETES_SERVICE_PORT {port!r} is not a port number")
    token = FileToken(account_dir / "token")
    token.token()
    ca = account_dir / "ca.crt"
    if not ca.is_file():
        raise NoEndpointError(f"in-cluster: no CA file {ca} (is the service account mounted?)")
    try:
        namespace = (account_dir / "namespace").read_text().strip() or None
    except OSError:
        namespace = None  # only a convenience: every call names its namespace
    netloc = f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"
    return Endpoint(url=f"https://{netloc}", token=token, ca_file=ca, namespace=namespace,
                    origin="in-cluster")


def _kubeconfig_env(env: Mapping[str, str]) -> Path | None:
    value = env.get("KUBECONFIG", "").strip()
    if not value:
        return None
    if os.pathsep in value:
        raise NoEndpointError(
            f"KUBECONFIG={value!r} lists several files; these binaries read one: "
            "give it with --kubeconfig"
        )
    return Path(value)
