"""lightkube's failures as `libdisplay.kubeerrors.ApiCallError`, at the operator's boundary.

lightkube raises `ApiError` for a JSON Status answer, but lets its HTTP library's errors
through as they are: a 5xx page that is not JSON arrives as the library's HTTPStatusError, a
refused or reset connection, a timeout or a TLS failure as its transport errors. Everything the
operator does with the API goes through `api_call` (or `from_lightkube`), so callers catch one
type and ask it whether to retry.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TypeVar

from libdisplay.kubeerrors import ApiCallError, status_error, transport_error

T = TypeVar("T")


def from_lightkube(err: BaseException, operation: str) -> ApiCallError | None:
    """The ApiCallError for an error lightkube raised; None for anything else (a bug)."""
    # Here, not at the top: the sync client's module stays light until a call fails.
    import httpx2  # pants: no-infer-dep - lightkube's own HTTP library, installed with it
    from lightkube.core.exceptions import ApiError

    if isinstance(err, ApiCallError):
        return err
    if isinstance(err, ApiError):
        status = err.status
        code = int(status.code or (err.response.status_code if err.response is not None else 0))
        headers = dict(err.response.headers) if err.response is not None else {}
        fields = {"reason": status.reason or "", "message": status.message or ""}
        return status_error(operation, code, json.dumps(fields).encode(), headers=headers)
    if isinstance(err, httpx2.HTTPStatusError):
        response = err.response
        try:
            body = response.content
        except httpx2.ResponseNotRead:  # a watch's stream: its body was never read
            body = b""
        return status_error(operation, response.status_code, body,
                            reason=response.reason_phrase, headers=dict(response.headers))
    if isinstance(err, httpx2.HTTPError | httpx2.StreamError | OSError | TimeoutError):
        return transport_error(operation, err)
    return None


def wrap(err: BaseException, operation: str) -> BaseException:
    """`from_lightkube`, or the error itself when it is not the API's."""
    return from_lightkube(err, operation) or err


async def api_call(operation: str, call: Callable[[], Awaitable[T]]) -> T:
    """`await call()`, its API failures raised as ApiCallError (naming `operation`)."""
    try:
        return await call()
    except Exception as err:
        mapped = from_lightkube(err, operation)
        if mapped is None or mapped is err:
            raise
        raise mapped from err
