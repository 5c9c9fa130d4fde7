"""A read-only Kubernetes API reader for the init container, on the standard library alone.

`declare` reads a handful of Display objects once per pod start inside a 64Mi container
with a 0.3 s budget from start to file. lightkube's import alone peaks at ~32 MB RSS and
takes ~0.2 s (reference/kubernetes.md; bench/declare measures it), so this module does the
one thing declare needs — GET an object by path with the pod's service-account token — and
the long-running binaries use lightkube for everything else.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from libdisplay.kubeerrors import ApiCallError, status_error, transport_error

if TYPE_CHECKING:
    import ssl

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeApiError(ApiCallError):
    """Base of this module's errors: `libdisplay.kubeerrors`' one type for failed calls."""


class ApiUnreachableError(KubeApiError):
    """No answer (connection, timeout, TLS), or no configuration to find the API server."""


class ApiStatusError(KubeApiError):
    """The API server answered with an error status (not 404, which is "no such object")."""


def _no_config(detail: str) -> ApiUnreachableError:
    return ApiUnreachableError("find the API server", detail, reason="NoConfig", retryable=False)


def _unreachable(operation: str, err: BaseException) -> ApiUnreachableError:
    found = transport_error(operation, err)
    return ApiUnreachableError(operation, found.detail, reason=found.reason,
                               retryable=found.retryable)


def _status(operation: str, code: int, body: bytes, reason: str,
            headers: dict[str, str]) -> ApiStatusError:
    found = status_error(operation, code, body, reason=reason, headers=headers)
    return ApiStatusError(operation, found.detail, code=code, reason=found.reason,
                          retryable=found.retryable, retry_after=found.retry_after)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the API server is and how to authenticate: a URL, a bearer token, a CA bundle,
    or a whole TLS context (a kubeconfig's CA and client certificate)."""

    server: str
    token: str | None = None
    ca_file: Path | None = None
    tls: ssl.SSLContext | None = None


def from_kubeconfig(path: Path, *, context: str | None = None) -> Endpoint:
    """The endpoint a kubeconfig names (`libdisplay.kubeconfig`), for use outside a cluster."""
    from libdisplay import kubeconfig

    try:
        creds = kubeconfig.load(path, context=context)
        tls = creds.tls()
    except kubeconfig.KubeconfigError as err:
        raise _no_config(str(err)) from err
    return Endpoint(server=creds.server, token=creds.token, tls=tls)


def in_cluster(*, account_dir: Path = SERVICE_ACCOUNT) -> Endpoint:
    """The pod's own API endpoint and service-account credentials."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise _no_config("not in a cluster: KUBERNETES_SERVICE_HOST is unset (give --api-server)")
    try:
        token = (account_dir / "token").read_text().strip()
    except OSError as err:
        raise _no_config(f"cannot read the service-account token: {err}") from err
    netloc = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return Endpoint(server=f"https://{netloc}", token=token, ca_file=account_dir / "ca.crt")


def get_json(endpoint: Endpoint, path: str, *, timeout: float) -> dict[str, Any] | None:
    """GET `path` (e.g. `/apis/g/v/plural/name`); the object, or None on 404."""
    url = urllib.parse.urlsplit(endpoint.server)
    if url.scheme not in ("http", "https") or not url.hostname:
        raise _no_config(f"API server {endpoint.server!r} is not an http(s) URL")
    conn: http.client.HTTPConnection
    if url.scheme == "https":
        import ssl  # only in-cluster reads need TLS, and its import costs declare's start-up

        context = endpoint.tls or ssl.create_default_context(
            cafile=str(endpoint.ca_file) if endpoint.ca_file else None
        )
        conn = http.client.HTTPSConnection(url.netloc, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(url.netloc, timeout=timeout)
    headers = {"Accept": "application/json", "User-Agent": "display-operator/declare"}
    if endpoint.token:
        headers["Authorization"] = f"Bearer {endpoint.token}"
    try:
        conn.request("GET", url.path.rstrip("/") + path, headers=headers)
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as err:
        raise _unreachable(f"GET {path} from {endpoint.server}", err) from err
    finally:
        conn.close()
    if response.status == 404:
        return None
    operation = f"GET {path}"
    if response.status != 200:
        raise _status(operation, response.status, body, response.reason, dict(response.headers))
    try:
        data = json.loads(body)
    except ValueError as err:
        # A 200 that is not JSON is a proxy's page, not the apiserver: worth another try.
        raise ApiStatusError(operation, f"body is not JSON: {err}", code=response.status,
                             retryable=True) from err
    if not isinstance(data, dict):
        raise ApiStatusError(operation, "body is not a JSON object", code=response.status,
                             retryable=True)
    return data


def status_message(body: bytes, reason: str) -> str:
    """The `message` of a Status body when there is one, else the HTTP reason."""
    try:
        status = json.loads(body)
    except ValueError:
        return reason
    message = status.get("message") if isinstance(status, dict) else None
    return str(message) if message else reason
