"""The per-address review rate: a burst, then a steady rate, each address on its own, and a
bounded number of addresses remembered."""

from __future__ import annotations

import pytest

from capture.limits import SourceRate


def test_a_burst_then_the_rate() -> None:
    now = [0.0]
    rate = SourceRate(burst=3, per_s=2.0, clock=lambda: now[0])
    assert [rate.take("a") for _ in range(4)] == [None, None, None, 1]
    now[0] = 0.5
    assert rate.take("a") is None
    assert rate.take("a") == 1
    assert rate.take("b") is None  # another address has its own bucket


def test_addresses_are_forgotten_past_the_bound() -> None:
    rate = SourceRate(burst=1, per_s=0.001, sources=10, clock=lambda: 0.0)
    for index in range(1000):
        rate.take(f"10.0.{index // 256}.{index % 256}")
    assert len(rate) == 10


def test_nonsense_bounds_are_refused() -> None:
    with pytest.raises(ValueError, match="burst"):
        SourceRate(burst=0, per_s=1.0)
