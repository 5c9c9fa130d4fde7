"""lightkube clients pointed at a fake (or any plain-HTTP apiserver URL), sync and async.

`KubeConfig.from_one` with an empty `User` is needed: lightkube's `from_server` leaves the user
out and its HTTP adapter asserts on a missing user. `trust_env=False` keeps a proxy configured in
the environment from intercepting requests to the fake.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from lightkube import AsyncClient, Client, KubeConfig
from lightkube.config.models import Cluster, User

T = TypeVar("T")


def kubeconfig(url: str, *, namespace: str | None = None) -> KubeConfig:
    # The fake speaks plain HTTP, so TLS settings never apply; `insecure` only spares lightkube
    # loading the system CA bundle (~0.2 s per client).
    return KubeConfig.from_one(cluster=Cluster(server=url, insecure=True), user=User(),
                               namespace=namespace)


def sync_client(url: str, *, namespace: str | None = None,
                field_manager: str | None = None) -> Client:
    return Client(kubeconfig(url, namespace=namespace), field_manager=field_manager,
                  trust_env=False)


def async_client(url: str, *, namespace: str | None = None,
                 field_manager: str | None = None) -> AsyncClient:
    return AsyncClient(kubeconfig(url, namespace=namespace), field_manager=field_manager,
                       trust_env=False)


def run_async(url: str, scenario: Callable[[AsyncClient], Awaitable[T]], *,
              timeout: float) -> T:
    """`scenario(client)` on a fresh event loop with an AsyncClient for `url`, bounded by
    `timeout` seconds; the client is closed whatever happens."""

    async def main() -> T:
        client = async_client(url)
        try:
            return await asyncio.wait_for(scenario(client), timeout)
        finally:
            await client.close()

    return asyncio.run(main())
