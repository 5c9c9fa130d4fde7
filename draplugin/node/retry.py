"""The publisher's one error policy for API calls: retry what may pass later, refuse the rest.

Every failure is mapped to `ApiCallError` (`draplugin.apierrors`). A retryable one (5xx, 429,
409, no connection, a timeout) is counted and the call made again from a fresh read, after a
doubling delay that honours `Retry-After` up to the cap. A failure that is not retryable
(403, 404, 422, an untrusted certificate) ends at once in a RetryError whose `retryable` is
False: the caller lets it end the publisher, and the supervisor ends the process. A
retryable failure that outlasts the attempts ends in a RetryError with `retryable` True: the
caller's loop tries again at its next pass.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import TypeVar

from draplugin.apierrors import from_lightkube
from libdisplay.kube.errors import ApiCallError

log = logging.getLogger(__name__)

T = TypeVar("T")
_FIRST_DELAY_S = 0.05


class RetryError(Exception):
    """A call failed for good, or kept failing; the message names what and the last error.
    `retryable` says whether a later attempt may still succeed (the outage may pass)."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry delays: `first` doubling up to `cap`, at most `attempts` tries."""

    first: float = _FIRST_DELAY_S
    cap: float = 2.0
    attempts: int = 8

    def delay(self, attempt: int) -> float:
        return float(min(self.cap, self.first * 2**attempt))

    @classmethod
    def capped(cls, cap: float) -> Backoff:
        """The default tries with delays of at most `cap` seconds (tests shorten it)."""
        return cls(first=min(_FIRST_DELAY_S, cap), cap=cap)


DEFAULT_BACKOFF = Backoff()


async def with_retries(
    call: Callable[[], Awaitable[T]],
    *,
    what: str,
    backoff: Backoff = DEFAULT_BACKOFF,
    on_error: Callable[[int], None] | None = None,
    on_retry: Callable[[], None] | None = None,
    also_retry: Collection[int] = (),
) -> T:
    """`await call()`, again after a retryable failure (or one of `also_retry`'s codes, which
    the caller knows a fresh read settles); RetryError otherwise or after the last try.
    `on_error` hears the status code (0 without an answer) of every failure, `on_retry` is
    called before each retry (for metrics). An error that is not the API's propagates."""
    for attempt in range(backoff.attempts):
        try:
            return await call()
        except Exception as err:
            failure = from_lightkube(err, what)
            if failure is None:
                raise
        if on_error is not None:
            on_error(failure.code or 0)
        retryable = failure.retryable or failure.code in also_retry
        if not retryable:
            raise RetryError(str(failure), retryable=False) from failure
        if attempt == backoff.attempts - 1:
            raise RetryError(f"{failure} (after {backoff.attempts} tries)",
                             retryable=True) from failure
        delay = min(backoff.cap, max(backoff.delay(attempt), failure.retry_after))
        log.info("%s; retrying in %.2fs", failure, delay)
        if on_retry is not None:
            on_retry()
        await asyncio.sleep(delay)
    raise RetryError(f"{what}: no attempt made (backoff allows {backoff.attempts})",
                     retryable=False)


def fatal(err: BaseException) -> bool:
    """Whether `err`, caught in a loop, must end the publisher rather than wait a pass."""
    if isinstance(err, RetryError):
        return not err.retryable
    if isinstance(err, ApiCallError):
        return not err.retryable
    cause = err.__cause__
    return isinstance(cause, RetryError | ApiCallError) and fatal(cause)
