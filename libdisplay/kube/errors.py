"""One error type for every failed Kubernetes API call, and whether it is worth retrying.

Every client of the project maps its failures here: an HTTP status (with the Status body's
reason and message when the body is JSON), a body that is not JSON (a proxy's 5xx page), a
refused or reset connection, a timeout, a TLS failure. Retrying is worth it when the apiserver
may answer differently soon: 5xx, 429, 408, 409 (retried from a fresh read), and every
connection or timeout error. Other 4xx (403, 404, 422, ...) and a certificate the client does
not trust are not: the same call fails the same way until a person changes something.

Standard library only, and not even ssl unless a caller loaded it: declare imports this
inside its 64Mi budget and 0.3 s start.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Final

RETRYABLE_CODES: Final = frozenset({408, 409, 429})
"""4xx answers that a later call may not get; every 5xx is retryable too."""


class ApiCallError(Exception):
    """A Kubernetes API call failed. `operation` names the call (`GET ResourceSlice x`),
    `code` is the HTTP status (None when no answer came), `reason` the Status reason or the
    transport error's kind, `retryable` whether the same call may succeed later, and
    `retry_after` the server's Retry-After in seconds (0 without one)."""

    def __init__(self, operation: str, detail: str, *, code: int | None = None,
                 reason: str = "", retryable: bool, retry_after: float = 0.0) -> None:
        shown = str(code) if code is not None else f"{reason}:" if reason else ""
        super().__init__(f"{operation}: {shown} {detail}".replace(":  ", ": "))
        self.operation = operation
        self.detail = detail
        self.code = code
        self.reason = reason
        self.retryable = retryable
        self.retry_after = retry_after


def code_retryable(code: int) -> bool:
    return code >= 500 or code in RETRYABLE_CODES


def status_error(operation: str, code: int, body: bytes, *, reason: str = "",
                 headers: Mapping[str, str] | None = None) -> ApiCallError:
    """The error for an HTTP answer `code` with `body`: the Status's reason and message when
    the body is a JSON Status, else the start of the body (an HTML error page, say)."""
    status = _json_object(body)
    if status is not None:
        reason = str(status.get("reason") or reason)
        detail = str(status.get("message") or "") or reason or "no message"
    else:
        text = body[:200].decode("utf-8", "replace").strip()
        detail = f"body is not JSON: {' '.join(text.split())[:120]!r}" if text else "empty body"
    return ApiCallError(operation, detail, code=code, reason=reason,
                        retryable=code_retryable(code),
                        retry_after=retry_after(headers or {}))


def transport_error(operation: str, err: BaseException) -> ApiCallError:
    """The error for a call that got no answer: retryable, except a TLS peer the client does
    not trust (its CA or name is wrong, which no retry fixes)."""
    cause = _root(err)
    # ssl only matters when a TLS connection imported it; declare's plain reads never do.
    ssl = sys.modules.get("ssl")
    if ssl is not None and isinstance(cause, ssl.SSLCertVerificationError):
        return ApiCallError(operation, str(cause), reason="TLSVerifyFailed", retryable=False)
    if isinstance(cause, TimeoutError) or "timeout" in type(err).__name__.lower():
        kind = "Timeout"
    elif isinstance(cause, ConnectionRefusedError):
        kind = "ConnectionRefused"
    elif isinstance(cause, ConnectionResetError | BrokenPipeError):
        kind = "ConnectionReset"
    elif ssl is not None and isinstance(cause, ssl.SSLError):
        kind = "TLSError"
    else:
        kind = type(err).__name__
    return ApiCallError(operation, str(err) or repr(err), reason=kind, retryable=True)


def json_body(operation: str, code: int, body: bytes) -> dict[str, object]:
    """A successful answer's JSON object. A 2xx that is not one is a proxy's or a balancer's
    page, not the apiserver's: worth another try."""
    try:
        data = json.loads(body)
    except ValueError as err:
        raise ApiCallError(operation, f"body is not JSON: {err}", code=code, reason="NotJson",
                           retryable=True) from err
    if not isinstance(data, dict):
        raise ApiCallError(operation, "body is not a JSON object", code=code, reason="NotJson",
                           retryable=True)
    return data


def retry_after(headers: Mapping[str, str]) -> float:
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value else 0.0
    except ValueError:
        return 0.0


def _json_object(body: bytes) -> dict[str, object] | None:
    try:
        data = json.loads(body)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _root(err: BaseException) -> BaseException:
    """The innermost cause: HTTP libraries wrap the socket's or ssl's error."""
    seen = {id(err)}
    while (inner := err.__cause__ or err.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        err = inner
    return err
