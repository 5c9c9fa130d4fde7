"""lightkube's failures as `libdisplay.kube.errors.ApiCallError`.

lightkube raises `ApiError` for a JSON Status answer, but lets its HTTP library's errors
through as they are: a 5xx page that is not JSON arrives as the library's HTTPStatusError, a
refused or reset connection, a timeout or a TLS failure as its transport errors. lightkube and
its HTTP library are imported on the first failure, so a module that only may fail stays light.
"""

from __future__ import annotations

import json

from libdisplay.kube.errors import ApiCallError, status_error, transport_error


def from_lightkube(err: BaseException, operation: str) -> ApiCallError | None:
    """The ApiCallError for an error lightkube raised; None for anything else (a bug)."""
    import httpx2  # pants: no-infer-dep - lightkube's own HTTP library, installed with it
    from lightkube.core.exceptions import ApiError

    if isinstance(err, ApiCallError):
        return err  # raised by our own transport (the token source), or mapped already
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
