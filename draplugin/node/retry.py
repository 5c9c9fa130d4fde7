"""Retrying API writes that the apiserver refused for now: 409 Conflict and 429 Too Many Requests.

A 409 means the object moved under us (or already exists), so the call is made again from a
fresh read; a 429 carries `Retry-After`, honoured up to the backoff's cap.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from lightkube.core.exceptions import ApiError

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRY_CODES = frozenset({409, 429})


class RetryError(Exception):
    """A write failed for good, or kept failing; the message names what and the last status."""


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry delays: `first` doubling up to `cap`, at most `attempts` tries."""

    first: float = 0.05
    cap: float = 2.0
    attempts: int = 8

    def delay(self, attempt: int) -> float:
        return float(min(self.cap, self.first * 2**attempt))


DEFAULT_BACKOFF = Backoff()


async def with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    backoff: Backoff = DEFAULT_BACKOFF,
    on_error: Callable[[int], None] | None = None,
) -> T:
    """`await call()`, again after a 409/429; RetryError on any other error or the last try.
    `on_error` hears the status code of every failed call (for metrics)."""
    for attempt in range(backoff.attempts):
        try:
            return await call()
        except ApiError as err:
            code = err.status.code or 0
            if on_error is not None:
                on_error(code)
            if code not in RETRY_CODES or attempt == backoff.attempts - 1:
                raise RetryError(f"{what}: {code} {err.status.message}") from err
            delay = min(backoff.cap, max(backoff.delay(attempt), _retry_after(err)))
            log.info("%s: %s, retrying in %.2fs", what, code, delay)
            await asyncio.sleep(delay)
    raise RetryError(f"{what}: no attempt made (backoff allows {backoff.attempts})")


def _retry_after(err: ApiError) -> float:
    header = err.response.headers.get("Retry-After") if err.response is not None else None
    try:
        return float(header) if header else 0.0
    except ValueError:
        return 0.0
