"""Fixtures for fakekube's tests: a started fake and lightkube clients for it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from lightkube import Client

from fakekube.client import sync_client
from fakekube.server import FakeKube


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    with FakeKube() as server:
        yield server


@pytest.fixture
def client(fake: FakeKube) -> Iterator[Client]:
    c = sync_client(fake.url)
    try:
        yield c
    finally:
        c.close()
