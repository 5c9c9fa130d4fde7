"""Injected failures and the request log tests assert on.

A queued `WriteFault` answers the next write (POST, PUT, PATCH, DELETE; optionally only for one
resource plural) instead of the store: 409 Conflict, 429 TooManyRequests with `Retry-After`, or
500 InternalError, each as the Status body the apiserver would send.

An `Outage` is a switch for every API request until it is cleared, as a broken network or a
proxy in front of the apiserver behaves: `drop` closes each connection without an answer,
`html` answers `code` with an HTML page (not a Status), `slow` answers after `delay` seconds.
"""

from __future__ import annotations

import collections
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Literal

from fakekube import status

FaultCode = Literal[409, 429, 500]
FAULT_CODES: tuple[FaultCode, ...] = (409, 429, 500)
OutageKind = Literal["drop", "html", "slow"]
OUTAGE_KINDS: tuple[OutageKind, ...] = ("drop", "html", "slow")
MAX_DELAY_S = 60.0


@dataclass(frozen=True, slots=True)
class Outage:
    kind: OutageKind
    code: int = 503
    delay: float = 0.0

    def page(self) -> bytes:
        return (f"<html><head><title>{self.code}</title></head><body><h1>{self.code} "
                "Service Unavailable</h1><p>fakekube outage</p></body></html>\n").encode()


@dataclass(frozen=True, slots=True)
class WriteFault:
    code: FaultCode
    retry_after: int = 1
    resource: str | None = None

    def failure(self, res: status.Resource) -> status.ApiFailure:
        if self.code == 409:
            return status.conflict(res, status.STALE)
        if self.code == 429:
            return status.too_many_requests(self.retry_after)
        return status.internal_error("injected by fakekube")


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: collections.deque[WriteFault] = collections.deque()
        self._outage: Outage | None = None

    def set_outage(self, kind: OutageKind | None, *, code: int = 503,
                   delay: float = 0.0) -> None:
        """Start an outage of `kind` for every request, or end it (None)."""
        if kind is None:
            with self._lock:
                self._outage = None
            return
        if kind not in OUTAGE_KINDS:
            raise ValueError(f"outage {kind!r} is not one of {OUTAGE_KINDS}")
        if not 400 <= code <= 599 or not 0 <= delay <= MAX_DELAY_S:
            raise ValueError(f"code {code} must be 400-599 and delay {delay} 0-{MAX_DELAY_S:g}")
        with self._lock:
            self._outage = Outage(kind, code, delay)

    def outage(self) -> Outage | None:
        with self._lock:
            return self._outage

    def fail_next_writes(self, count: int, code: FaultCode, *, retry_after: int = 1,
                         resource: str | None = None) -> None:
        if code not in FAULT_CODES:
            raise ValueError(f"code {code} is not one of {FAULT_CODES}")
        if count < 1 or retry_after < 0:
            raise ValueError(f"count {count} must be >= 1 and retry_after {retry_after} >= 0")
        with self._lock:
            self._queue.extend([WriteFault(code, retry_after, resource)] * count)

    def take(self, plural: str) -> WriteFault | None:
        """The first queued fault for this resource, removed from the queue."""
        with self._lock:
            for fault in self._queue:
                if fault.resource in (None, plural):
                    self._queue.remove(fault)
                    return fault
            return None

    def pending(self) -> int:
        with self._lock:
            return len(self._queue)


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as answered: method, path without query, raw query, HTTP status, who
    sent it (the authenticated user with `authorize=True`, else "") and when it was answered
    (`time.monotonic()`)."""

    method: str
    path: str
    query: str
    status: int
    user: str = ""
    at: float = 0.0

    def param(self, name: str) -> str | None:
        values = urllib.parse.parse_qs(self.query, keep_blank_values=True).get(name)
        return values[-1] if values else None


class RequestLog:
    """The requests answered, and the body bytes sent to each user (watch events included)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._bytes: collections.Counter[str] = collections.Counter()

    def add_bytes(self, user: str, count: int) -> None:
        with self._lock:
            self._bytes[user] += count

    def bytes_sent(self) -> dict[str, int]:
        """User -> body bytes sent to it ("" for requests not authenticated)."""
        with self._lock:
            return dict(self._bytes)

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self._records.append(record)

    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
            self._bytes.clear()
