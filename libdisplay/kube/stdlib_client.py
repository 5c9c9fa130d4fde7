"""A read-only Kubernetes API reader for the init container, on the standard library alone.

`declare` reads a handful of Display objects once per pod start inside a 64Mi container
with a 0.3 s budget from start to file. lightkube's import alone peaks at ~32 MB RSS and
takes ~0.2 s (docs/kubernetes.md §2; bench/declare measures it), so this module does the
one thing declare needs — GET an object by path with the pod's service-account token — and
the long-running binaries use lightkube for everything else. Where the server is and how to
authenticate come from `libdisplay.kube.access`, as for every other client.
"""

from __future__ import annotations

import http.client
import urllib.parse
from typing import Any

from libdisplay.kube.access import Endpoint, NoEndpointError
from libdisplay.kube.errors import ApiCallError, json_body, status_error, transport_error

__all__ = ["ApiStatusError", "ApiUnreachableError", "Endpoint", "KubeApiError", "get_json"]


class KubeApiError(ApiCallError):
    """Base of this module's errors: `libdisplay.kube.errors`' one type for failed calls."""


class ApiUnreachableError(KubeApiError):
    """No answer (connection, timeout, TLS), or a TLS context that cannot be made."""


class ApiStatusError(KubeApiError):
    """The API server answered with an error status (not 404, which is "no such object"),
    or with a body that is not a JSON object."""


def _as(kind: type[KubeApiError], found: ApiCallError) -> KubeApiError:
    return kind(found.operation, found.detail, code=found.code, reason=found.reason,
                retryable=found.retryable, retry_after=found.retry_after)


def get_json(endpoint: Endpoint, path: str, *, timeout: float) -> dict[str, Any] | None:
    """GET `path` (e.g. `/apis/g/v/plural/name`); the object, or None on 404."""
    url = urllib.parse.urlsplit(endpoint.url)
    operation = f"GET {path} from {endpoint.url}"
    try:
        context = endpoint.ssl_context()
        headers = {"Accept": "application/json", "User-Agent": "display-operator/declare",
                   **endpoint.headers()}
    except NoEndpointError as err:
        raise _as(ApiUnreachableError, err) from err
    conn: http.client.HTTPConnection
    if context is not None:
        conn = http.client.HTTPSConnection(url.netloc, timeout=timeout, context=context)
    else:
        conn = http.client.HTTPConnection(url.netloc, timeout=timeout)
    try:
        conn.request("GET", url.path.rstrip("/") + path, headers=headers)
        response = conn.getresponse()
        body = response.read()
    except (OSError, http.client.HTTPException) as err:
        raise _as(ApiUnreachableError, transport_error(operation, err)) from err
    finally:
        conn.close()
    if response.status == 404:
        return None
    if response.status != 200:
        found = status_error(f"GET {path}", response.status, body, reason=response.reason,
                             headers=dict(response.headers))
        raise _as(ApiStatusError, found)
    try:
        return json_body(f"GET {path}", response.status, body)
    except ApiCallError as err:
        raise _as(ApiStatusError, err) from err

