"""How the host's samples of a head become the spans it was dark (bench/vm-monitors)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.vm.sampler import LIT_COVERAGE, dark_spans, interval


def _samples(*rows: tuple[float, int, float]) -> list[dict[str, Any]]:
    return [{"t": t, "head": head, "size": [1024, 768], "coverage": share}
            for t, head, share in rows]


def test_a_head_lit_throughout_has_no_dark_span() -> None:
    assert dark_spans(_samples((0.0, 0, 1.0), (0.1, 2, 0.0), (0.2, 0, LIT_COVERAGE)), 0) == []


def test_a_dark_span_runs_from_the_first_dark_sample_to_the_next_lit_one() -> None:
    samples = _samples((0.0, 0, 1.0), (0.1, 0, 0.2), (0.15, 2, 1.0), (0.2, 0, 0.0),
                       (0.3, 0, 0.95), (0.4, 0, 0.0))
    assert dark_spans(samples, 0) == [(0.1, 0.3), (0.4, None)]


def test_only_the_asked_heads_samples_count() -> None:
    samples = _samples((0.0, 2, 0.0), (0.1, 0, 1.0), (0.2, 2, 1.0))
    assert dark_spans(samples, 0) == []
    assert dark_spans(samples, 2) == [(0.0, 0.2)]


def test_the_interval_is_the_median_gap_between_one_heads_samples() -> None:
    samples = _samples((0.0, 0, 1.0), (0.1, 2, 1.0), (0.2, 0, 1.0), (0.5, 0, 1.0),
                       (0.7, 0, 1.0))
    assert interval(samples, 0) == pytest.approx(0.2)
    assert interval(samples, 2) is None
