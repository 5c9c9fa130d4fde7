"""retry: the one policy — retryable failures counted and retried, the rest refused at once."""

from __future__ import annotations

import asyncio

import pytest

from draplugin.node.retry import Backoff, RetryError, fatal, with_retries
from libdisplay.kube.errors import ApiCallError, status_error

FAST = Backoff(first=0.001, cap=0.002, attempts=4)


def _failing(errors: list[Exception]) -> tuple[list[int], object]:
    calls: list[int] = []

    async def call() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return "done"

    return calls, call


def _run(call: object, **kw: object) -> tuple[str, list[str]]:
    retries: list[str] = []
    result: str = asyncio.run(with_retries(call, what="op", backoff=FAST,  # type: ignore[arg-type]
                                      on_retry=lambda: retries.append("op"), **kw))  # type: ignore[arg-type]
    return result, retries


def test_retryable_failures_are_counted_and_retried() -> None:
    outage = ApiCallError("op", "refused", reason="ConnectionRefused", retryable=True)
    html = status_error("op", 503, b"<html>down</html>")
    calls, call = _failing([outage, html])
    assert _run(call) == ("done", ["op", "op"])
    assert len(calls) == 3


def test_a_failure_that_is_not_retryable_ends_at_once_and_is_fatal() -> None:
    calls, call = _failing([status_error("op", 403, b'{"message":"forbidden"}')])
    with pytest.raises(RetryError, match="403 forbidden") as err:
        _run(call)
    assert len(calls) == 1 and fatal(err.value)


def test_a_retryable_outage_outlasting_the_attempts_is_not_fatal() -> None:
    calls, call = _failing([status_error("op", 500, b"")] * 10)
    with pytest.raises(RetryError, match="after 4 tries") as err:
        _run(call)
    assert len(calls) == 4 and not fatal(err.value)


def test_a_code_the_caller_settles_with_a_fresh_read_is_retried() -> None:
    calls, call = _failing([status_error("op", 404, b"")])
    assert _run(call, also_retry=(404,))[0] == "done"


def test_a_bug_is_not_the_apis_and_propagates() -> None:
    calls, call = _failing([KeyError("spec")])
    with pytest.raises(KeyError):
        _run(call)


def test_a_capped_backoff_keeps_the_tries_and_shortens_the_delays() -> None:
    assert Backoff.capped(0.02) == Backoff(first=0.02, cap=0.02, attempts=Backoff().attempts)
    assert Backoff.capped(1.0).first == Backoff().first
