"""podwatch: the compositor's restart count followed by a watch of the Pod, not polled (with
DISPLAY_OPERATOR_REAL_API=1 also against a real kube-apiserver 1.37: `tests.support.realapi`)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from lightkube import AsyncClient

from draplugin.node import podwatch
from fakekube.client import run_async
from fakekube.server import FakeKube
from libdisplay.kube.watch import Timing
from tests.support import realapi
from tests.support.realapi import ApiServer, real_kube  # noqa: F401 - a fixture

WAIT_S = 30.0


async def _until(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S / 2
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S / 2:g} s: {what}")
        await asyncio.sleep(0.01)


# The operator's pod as the manifest states it: weston a native sidecar (an init container).
POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "display-node", "namespace": "default"},
       "spec": {"nodeName": "n1",
                "initContainers": [{"name": "weston", "image": "x", "restartPolicy": "Always"}],
                "containers": [{"name": "operator", "image": "x"}]}}


def test_restart_counts_follow_the_pod_by_its_watch(
    real_kube: realapi.RealKube | None,  # noqa: F811
) -> None:
    with realapi.api_server(real_kube) as server:
        server.create(POD)
        counts: list[int] = []

        async def scenario(client: AsyncClient) -> list[str]:
            follower = podwatch.restart_follower(
                client, "default", "display-node", on_count=counts.append,
                timing=Timing(initial_delay=0.01, max_delay=0.05))
            task = asyncio.create_task(follower.run())
            try:
                await _until(lambda: counts == [0] and server.open_watches == 1,
                             "the first list")
                for count in (1, 2):
                    server.set_restart_count("default", "display-node", "weston", count,
                                             init=True)
                    await _until(lambda c=count: counts[-1] == c,  # type: ignore[misc]
                                 "the restart seen by the watch")
            finally:
                task.cancel()
            return _requests(server)

        requests = run_async(server.url, scenario, timeout=WAIT_S,
                             **realapi.client_options(server))
    assert counts == [0, 1, 2]
    # One list, then the watch only: nothing is polled.
    assert requests == ["GET list", "GET true"]


def _requests(server: ApiServer) -> list[str]:
    return [f"{r.method} {r.param('watch') or 'list'}" for r in server.request_log()]


@realapi.fake_only("drop_watches, a fault hook")
def test_restart_counts_follow_the_pod_through_a_dropped_watch() -> None:
    with FakeKube() as fake:
        fake.create(POD)
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
            return _requests(fake)

        requests = run_async(fake.url, scenario, timeout=WAIT_S)
    # One list, then watches only: nothing is polled.
    assert requests[0] == "GET list"
    assert set(requests[1:]) == {"GET true"}
