"""A per-address rate for requests that cost the API server a TokenReview.

A token the reviewer already knows to be good costs nothing; any other (new, garbage, expired)
is reviewed, so each address may start only `burst` such reviews at once and `per_s` a second
after that. Addresses are kept in an LRU of bounded size: one forgotten starts again full,
which a flood of addresses cannot turn into memory.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Final

SOURCES: Final = 4096


class SourceRate:
    """Token buckets by source address."""

    def __init__(self, *, burst: int, per_s: float, sources: int = SOURCES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if burst < 1 or not per_s > 0:
            raise ValueError(f"burst must be >= 1 and per_s > 0, got {burst}, {per_s}")
        self.burst = burst
        self.per_s = per_s
        self._sources = sources
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._buckets)

    def take(self, source: str) -> int | None:
        """None when `source` may go ahead (one token spent), else the seconds to wait."""
        now = self._clock()
        level, at = self._buckets.pop(source, (float(self.burst), now))
        level = min(float(self.burst), level + (now - at) * self.per_s)
        allowed = level >= 1.0
        self._buckets[source] = (level - 1.0 if allowed else level, now)
        while len(self._buckets) > self._sources:
            self._buckets.popitem(last=False)
        return None if allowed else max(1, math.ceil((1.0 - level) / self.per_s))
