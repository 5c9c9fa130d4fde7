"""FakeKube driven by lightkube's AsyncClient: CRUD, a conflict, and a watch."""

from __future__ import annotations

from typing import Any

import pytest
from lightkube import ApiError, AsyncClient
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType

from fakekube import testing
from fakekube.client import run_async
from fakekube.server import FakeKube
from fakekube.testing import as_dict, failure, load, names

WAIT_SECONDS = 20.0


def run(fake: FakeKube, scenario: Any) -> Any:
    """Run `scenario(client)` on a fresh event loop with an AsyncClient for the fake."""
    return run_async(fake.url, scenario, timeout=WAIT_SECONDS)


def test_async_crud(fake: FakeKube) -> None:
    async def scenario(client: AsyncClient) -> None:
        created = as_dict(await client.create(load(ResourceSlice, testing.resource_slice("a"))))
        got = as_dict(await client.get(ResourceSlice, "a"))
        assert got["metadata"]["uid"] == created["metadata"]["uid"]
        assert names([o async for o in client.list(ResourceSlice)]) == ["a"]
        patched = as_dict(await client.patch(ResourceSlice, "a", {"metadata": {"labels": {
            "x": "y"}}}, patch_type=PatchType.MERGE))
        assert patched["metadata"]["labels"] == {"x": "y"}
        patched["metadata"]["labels"] = {"x": "z"}
        replaced = as_dict(await client.replace(load(ResourceSlice, patched)))
        assert replaced["metadata"]["labels"] == {"x": "z"}
        await client.delete(ResourceSlice, "a")
        assert [o async for o in client.list(ResourceSlice)] == []

    run(fake, scenario)
    assert [r.status for r in fake.request_log() if r.method == "POST"] == [201]


def test_async_conflict_is_an_api_error(fake: FakeKube) -> None:
    async def scenario(client: AsyncClient) -> None:
        created = as_dict(await client.create(load(ResourceSlice, testing.resource_slice("a"))))
        await client.patch(ResourceSlice, "a", {"metadata": {"labels": {"x": "y"}}},
                           patch_type=PatchType.MERGE)
        with pytest.raises(ApiError) as err:
            await client.replace(load(ResourceSlice, created))
        assert failure(err.value)["reason"] == "Conflict"

    run(fake, scenario)


def test_async_watch_sees_history_then_live_events(fake: FakeKube) -> None:
    async def scenario(client: AsyncClient) -> list[tuple[str, str]]:
        await client.create(load(ResourceSlice, testing.resource_slice("a")))
        seen: list[tuple[str, str]] = []
        async for kind, obj in client.watch(ResourceSlice):
            seen.append((kind, as_dict(obj)["metadata"]["name"]))
            if len(seen) == 1:
                await client.delete(ResourceSlice, "a")
            else:
                break
        return seen

    assert run(fake, scenario) == [("ADDED", "a"), ("DELETED", "a")]
