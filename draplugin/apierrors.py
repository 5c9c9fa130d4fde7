"""lightkube's failures as `libdisplay.kube.errors.ApiCallError`, at the operator's boundary.

The mapping is `libdisplay.kube.lightkube_errors.from_lightkube`. Everything the operator does with
the API goes through `api_call` (or `from_lightkube`), so callers catch one type and ask it
whether to retry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from libdisplay.kube.lightkube_errors import from_lightkube

__all__ = ["api_call", "from_lightkube"]

T = TypeVar("T")


async def api_call(operation: str, call: Callable[[], Awaitable[T]]) -> T:
    """`await call()`, its API failures raised as ApiCallError (naming `operation`)."""
    try:
        return await call()
    except Exception as err:
        mapped = from_lightkube(err, operation)
        if mapped is None or mapped is err:
            raise
        raise mapped from err
