"""The plugin's API reads: ResourceClaims, and Displays (whose spec, a person's, it never writes).

Behind a small protocol so the prepare logic does not care whether lightkube or a test's
fake answers. Objects are handled as the JSON the apiserver sends.

With the node publisher running, a Display is read from its informer's cache
(`draplugin.node.displays`) once that has listed: every prepare and derivation reads each
claimed monitor's Display, and a GET each time would cost the API server a request per claim
on every node of the fleet. Before the first list it is read from the API.
"""

from __future__ import annotations

from typing import Any, Protocol

from draplugin.apierrors import from_lightkube
from libdisplay import display
from libdisplay.kube.access import Endpoint
from libdisplay.kube.errors import ApiCallError
from libdisplay.pod import FIELD_MANAGER


class KubeError(Exception):
    """The API could not be asked; the message names the object. `failure` is the
    classified error (`libdisplay.kube.errors`)."""

    def __init__(self, failure: ApiCallError) -> None:
        super().__init__(str(failure))
        self.failure = failure


class Kube(Protocol):
    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_display(self, name: str) -> dict[str, Any] | None:
        """The Display (its `spec` is what a person wants, its `metadata.generation` which
        edit that is); None when there is no such Display."""
        ...


class DisplayCache(Protocol):
    def cached(self, name: str) -> dict[str, Any] | None:
        """The Display as last seen (a copy), None when there is none; LookupError while the
        cache cannot tell (not listed yet, or known to be behind for this Display)."""
        ...


class LightkubeKube:
    """`Kube` over a lightkube client built from the operator's one Endpoint; Displays from
    `displays` when it can tell (see the module docstring)."""

    def __init__(self, endpoint: Endpoint, *, displays: DisplayCache | None = None) -> None:
        from lightkube.generic_resource import create_global_resource

        from libdisplay.kube import lightkube_client as kubelightkube

        self._client = kubelightkube.client(endpoint, field_manager=FIELD_MANAGER)
        self._display = create_global_resource(
            display.GROUP, display.VERSION, display.KIND, display.PLURAL
        )
        self._displays = displays

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        from lightkube.resources.resource_v1 import ResourceClaim

        obj = self._get(ResourceClaim, name, namespace=namespace, what="ResourceClaim")
        return None if obj is None else dict(obj.to_dict())

    def get_display(self, name: str) -> dict[str, Any] | None:
        if self._displays is not None:
            try:
                return self._displays.cached(name)
            except LookupError:
                pass
        obj = self._get(self._display, name, namespace=None, what="Display")
        return None if obj is None else dict(obj.to_dict())

    def _get(self, res: Any, name: str, *, namespace: str | None, what: str) -> Any:
        try:
            return self._client.get(res, name, namespace=namespace)
        except Exception as err:
            failure = from_lightkube(err, f"cannot read {what} {name}")
            if failure is None:
                raise
            if failure.code == 404:
                return None
            raise KubeError(failure) from err
