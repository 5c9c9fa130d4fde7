"""kubeerrors: which failures are worth retrying, and what the message says."""

from __future__ import annotations

import ssl

import pytest

from libdisplay.kube import errors as kubeerrors


@pytest.mark.parametrize(
    ("code", "retryable"),
    [(500, True), (503, True), (429, True), (409, True), (408, True),
     (400, False), (403, False), (404, False), (422, False)],
)
def test_status_codes(code: int, retryable: bool) -> None:
    assert kubeerrors.status_error("GET x", code, b"").retryable is retryable


def test_a_status_body_gives_reason_message_and_retry_after() -> None:
    body = b'{"kind":"Status","reason":"TooManyRequests","message":"slow down","code":429}'
    err = kubeerrors.status_error("PATCH Display d", 429, body, headers={"Retry-After": "3"})
    assert (err.reason, err.retry_after, str(err)) == (
        "TooManyRequests", 3.0, "PATCH Display d: 429 slow down")


def test_an_html_page_is_named_not_parsed() -> None:
    err = kubeerrors.status_error("GET x", 502, b"<html>\n<h1>Bad   Gateway</h1></html>",
                                  reason="Bad Gateway")
    assert err.retryable and "body is not JSON: '<html> <h1>Bad Gateway</h1></html>'" in str(err)


def _wrapped(inner: BaseException) -> BaseException:
    try:
        try:
            raise inner
        except BaseException as cause:
            raise RuntimeError("the HTTP library's wrapper") from cause
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize(
    ("inner", "reason", "retryable"),
    [(ConnectionRefusedError(111, "refused"), "ConnectionRefused", True),
     (ConnectionResetError(104, "reset"), "ConnectionReset", True),
     (TimeoutError("timed out"), "Timeout", True),
     (ssl.SSLCertVerificationError("CERTIFICATE_VERIFY_FAILED"), "TLSVerifyFailed", False),
     (ssl.SSLError("handshake"), "TLSError", True)],
    ids=["refused", "reset", "timeout", "untrusted-cert", "tls-other"],
)
def test_transport_errors(inner: BaseException, reason: str, retryable: bool) -> None:
    err = kubeerrors.transport_error("GET x", _wrapped(inner))
    assert (err.code, err.reason, err.retryable) == (None, reason, retryable)
