"""podwatch: the compositor's restart count followed by a watch of the Pod, not polled."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lightkube import AsyncClient

from draplugin.node import podwatch
from fakekube.client import run_async
from fakekube.server import FakeKube
from libdisplay.kube.watch import Timing

WAIT_S = 30.0


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S / 2
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S / 2:g} s: {what}")
        await asyncio.sleep(0.01)


def test_restart_counts_follow_the_pod_through_a_dropped_watch() -> None:
    with FakeKube() as fake:
        fake.create({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": "display-node", "namespace": "default"},
                     "spec": {"containers": [{"name": "operator", "image": "x"}]}})
        counts: list[int] = []

        async def scenario(client: AsyncClient) -> list[str]:
            follower = podwatch.restart_follower(
                client, "default", "display-node", on_count=counts.append,
                timing=Timing(initial_delay=0.01, max_delay=0.05))
            task = asyncio.create_task(follower.run())
            try:
                await _until(lambda: counts == [0] and fake.open_watches == 1, "the first list")
                fake.set_restart_count("default", "display-node", "weston", 2, init=True)
                await _until(lambda: counts[-1] == 2, "the restart seen by the watch")
                fake.drop_watches(abrupt=True)
                fake.set_restart_count("default", "display-node", "weston", 3, init=True)
                await _until(lambda: counts[-1] == 3, "the restart after the drop")
            finally:
                task.cancel()
            return [f"{r.method} {r.param('watch') or 'list'}" for r in fake.request_log()]

        requests = run_async(fake.url, scenario, timeout=WAIT_S)
    # One list, then watches only: nothing is polled.
    assert requests[0] == "GET list"
    assert set(requests[1:]) == {"GET true"}
