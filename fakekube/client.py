"""lightkube clients pointed at a fake (or any apiserver URL), sync and async.

`KubeConfig.from_one` with an empty `User` is needed: lightkube's `from_server` leaves the user
out and its HTTP adapter asserts on a missing user. `trust_env=False` keeps a proxy configured in
the environment from intercepting requests to the fake. `token` is sent as a bearer token; `ca`
(PEM bytes or a file) is the CA an https URL is verified with.
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from lightkube import AsyncClient, Client, KubeConfig
from lightkube.config.models import Cluster, User

T = TypeVar("T")
Ca = bytes | Path | None


def kubeconfig(url: str, *, namespace: str | None = None, token: str | None = None,
               ca: Ca = None) -> KubeConfig:
    if isinstance(ca, bytes):
        cluster = Cluster(server=url, certificate_auth_data=base64.b64encode(ca).decode())
    elif ca is not None:
        cluster = Cluster(server=url, certificate_auth=os.fspath(ca))
    else:
        # Plain HTTP needs no TLS settings; `insecure` only spares lightkube loading the system
        # CA bundle (~0.2 s per client).
        cluster = Cluster(server=url, insecure=True)
    return KubeConfig.from_one(cluster=cluster, user=User(token=token), namespace=namespace)


def sync_client(url: str, *, namespace: str | None = None, field_manager: str | None = None,
                token: str | None = None, ca: Ca = None) -> Client:
    return Client(kubeconfig(url, namespace=namespace, token=token, ca=ca),
                  field_manager=field_manager, trust_env=False)


def async_client(url: str, *, namespace: str | None = None, field_manager: str | None = None,
                 token: str | None = None, ca: Ca = None) -> AsyncClient:
    return AsyncClient(kubeconfig(url, namespace=namespace, token=token, ca=ca),
                       field_manager=field_manager, trust_env=False)


def run_async(url: str, scenario: Callable[[AsyncClient], Awaitable[T]], *,
              timeout: float, token: str | None = None, ca: Ca = None) -> T:
    """`scenario(client)` on a fresh event loop with an AsyncClient for `url` (with `token`
    and `ca`, as `async_client`), bounded by `timeout` seconds; the client is closed whatever
    happens."""

    async def main() -> T:
        client = async_client(url, token=token, ca=ca)
        try:
            return await asyncio.wait_for(scenario(client), timeout)
        finally:
            await client.close()

    return asyncio.run(main())
