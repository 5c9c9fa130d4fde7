"""The tier's one `simnode up --cluster local`, shared by its modules (one pytest process:
BUILD's batch tag): the README's walk first, on the fresh cluster an owner starts from, then
local_node_test, whose last test stops it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.simnode_up import Sim, running

FIRST = "readme_walk_test.py"
LAST = "test_stopping_up_stops_every_component_and_container"


@pytest.fixture(scope="session")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sim]:
    with running(tmp_path_factory.mktemp("local"), "--cluster", "local") as sim:
        yield sim


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: 2 if item.name == LAST else 0 if item.path.name == FIRST else 1)
