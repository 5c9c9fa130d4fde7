from __future__ import annotations

import ctypes
from typing import Any

import pytest

from draplugin import arenas


class FakeLibc:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return 1


def _fake_cdll(libc: Any) -> Any:
    def cdll(name: object) -> Any:
        assert name is None, "mallopt is looked up in the process's own libc"
        return libc

    return cdll


def test_the_operator_limits_glibc_to_two_arenas(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = FakeLibc()
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setattr(ctypes, "CDLL", _fake_cdll(libc))
    assert arenas.limit_malloc_arenas()
    assert libc.calls == [(-8, 2)]


def test_malloc_arena_max_in_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    libc = FakeLibc()
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    monkeypatch.setattr(ctypes, "CDLL", _fake_cdll(libc))
    assert not arenas.limit_malloc_arenas()
    assert libc.calls == []


def test_a_libc_without_mallopt_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setattr(ctypes, "CDLL", _fake_cdll(object()))
    assert not arenas.limit_malloc_arenas()


def test_the_real_glibc_takes_the_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    assert arenas.limit_malloc_arenas()
