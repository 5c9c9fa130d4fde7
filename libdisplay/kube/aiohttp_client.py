"""A small aiohttp JSON client of the API server, from a `libdisplay.kube.access.Endpoint`.

For the capture server, which already runs aiohttp and makes two kinds of call (TokenReview,
SubjectAccessReview): lightkube would add its HTTP stack for them. Every failure is an
`ApiCallError`: an error status (with the Status body's reason), a body that is not JSON, a
refused or reset connection, a timeout, a TLS failure. The token is asked of the Endpoint's
source on every request, so a rotated service-account token is used without a restart.
Create it on the event loop that uses it (aiohttp's session belongs to that loop).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp

from libdisplay.kube.access import Endpoint
from libdisplay.kube.errors import ApiCallError, json_body, status_error, transport_error


class AioKube:
    """JSON calls to `endpoint`, each bounded by `timeout_s` in all."""

    def __init__(self, endpoint: Endpoint, *, timeout_s: float) -> None:
        self.endpoint = endpoint
        self._session = aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            # False for plain http only: an https Endpoint always gives a verifying context.
            connector=aiohttp.TCPConnector(ssl=endpoint.ssl_context() or False),
            trust_env=False,
        )

    async def close(self) -> None:
        await self._session.close()

    async def post_json(self, path: str, body: Mapping[str, Any]) -> dict[str, object]:
        """POST `body` to `path`; the answer's JSON object."""
        return await self.call("POST", path, body)

    async def call(self, method: str, path: str,
                   body: Mapping[str, Any] | None = None) -> dict[str, object]:
        operation = f"{method} {path}"
        headers = {"Accept": "application/json", **self.endpoint.headers()}
        try:
            async with self._session.request(
                method, self.endpoint.url + path, json=body, headers=headers
            ) as response:
                data = await response.read()
                code = response.status
                if code >= 300:
                    raise status_error(operation, code, data, reason=response.reason or "",
                                       headers=dict(response.headers))
        except ApiCallError:
            raise
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise transport_error(f"{operation} at {self.endpoint.url}", err) from err
        return json_body(operation, code, data)
