"""lightkube clients (sync and async) built from a `libdisplay.kube.access.Endpoint`.

lightkube would otherwise discover the server on its own (`KubeConfig.from_service_account`,
`from_file`), with its own errors, its own idea of token rotation (re-read only after a 401)
and, for a bare URL, no verification. Here lightkube gets only the URL; the transport under it
carries everything else: the TLS context the Endpoint makes (the mounted CA, a kubeconfig's
CA and client certificate) and, on every request, the token the Endpoint's source gives now.
Failures are mapped to `ApiCallError` where the operator calls (`draplugin.apierrors`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx2  # pants: no-infer-dep - lightkube's own HTTP library, installed with it
from lightkube import AsyncClient, Client
from lightkube.config.kubeconfig import SingleConfig
from lightkube.config.models import Cluster, Context, User

if TYPE_CHECKING:
    import ssl

    from libdisplay.kube.access import Endpoint, TokenSource

_TIMEOUT_S = 10.0


def client(endpoint: Endpoint, *, field_manager: str | None = None,
           timeout_s: float = _TIMEOUT_S) -> Client:
    return Client(_config(endpoint), field_manager=field_manager, trust_env=False,
                  timeout=httpx2.Timeout(timeout_s),
                  transport=_SyncTransport(_verify(endpoint), endpoint.token))


def async_client(endpoint: Endpoint, *, field_manager: str | None = None,
                 timeout_s: float = _TIMEOUT_S) -> AsyncClient:
    return AsyncClient(_config(endpoint), field_manager=field_manager, trust_env=False,
                       timeout=httpx2.Timeout(timeout_s),
                       transport=_AsyncTransport(_verify(endpoint), endpoint.token))


def _config(endpoint: Endpoint) -> SingleConfig:
    # insecure=True only stops lightkube building a TLS context of its own, which a client
    # given a transport never uses: the transport's context (below) verifies the server.
    return SingleConfig(
        context_name="endpoint",
        context=Context(cluster="endpoint", namespace=endpoint.namespace),
        cluster=Cluster(server=endpoint.url, insecure=True),
        user=User(),
    )


def _verify(endpoint: Endpoint) -> ssl.SSLContext | bool:
    # A plain-http endpoint never uses TLS; False only spares loading the system CAs.
    return endpoint.ssl_context() or False


def _authorize(request: httpx2.Request, token: TokenSource | None) -> None:
    if token is not None:
        request.headers["Authorization"] = f"Bearer {token.token()}"


class _SyncTransport(httpx2.HTTPTransport):
    def __init__(self, verify: ssl.SSLContext | bool, token: TokenSource | None) -> None:
        super().__init__(verify=verify, trust_env=False)
        self._token = token

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        _authorize(request, self._token)
        return super().handle_request(request)


class _AsyncTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, verify: ssl.SSLContext | bool, token: TokenSource | None) -> None:
        super().__init__(verify=verify, trust_env=False)
        self._token = token

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        _authorize(request, self._token)
        return await super().handle_async_request(request)
