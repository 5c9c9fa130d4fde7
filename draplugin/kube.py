"""The plugin's API reads and writes: ResourceClaims, and the Display objects' spec.

Behind a small protocol so the prepare logic does not care whether lightkube or a test's
fake answers. Objects are handled as the JSON the apiserver sends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from draplugin.settings import KubeAccess
from libdisplay import display


class KubeError(Exception):
    """The API could not be asked; the message names the object."""


class Kube(Protocol):
    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_display_spec(self, name: str) -> dict[str, Any] | None:
        """The Display's `spec` ({} without one); None when there is no such Display."""
        ...

    def patch_display_spec(self, name: str, patch: Mapping[str, object]) -> None:
        """Merge-patch the Display's `spec` (a None value deletes the field)."""
        ...


class LightkubeKube:
    """`Kube` over a lightkube client."""

    def __init__(self, access: KubeAccess) -> None:
        from lightkube import Client, KubeConfig
        from lightkube.config.models import Cluster, User
        from lightkube.generic_resource import create_global_resource

        if access.api_server:
            config = KubeConfig.from_one(
                cluster=Cluster(server=access.api_server, insecure=True), user=User()
            )
        elif access.kubeconfig:
            config = KubeConfig.from_file(access.kubeconfig)
        else:
            config = KubeConfig.from_service_account()
        self._client = Client(config, field_manager="display-operator", trust_env=False)
        self._display = create_global_resource(
            display.GROUP, display.VERSION, display.KIND, display.PLURAL
        )

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        from lightkube.resources.resource_v1 import ResourceClaim

        obj = self._get(ResourceClaim, name, namespace=namespace, what="ResourceClaim")
        return None if obj is None else dict(obj.to_dict())

    def get_display_spec(self, name: str) -> dict[str, Any] | None:
        obj = self._get(self._display, name, namespace=None, what="Display")
        if obj is None:
            return None
        return dict(obj.to_dict().get("spec") or {})

    def patch_display_spec(self, name: str, patch: Mapping[str, object]) -> None:
        from lightkube import ApiError
        from lightkube.types import PatchType

        try:
            self._client.patch(
                self._display, name, {"spec": dict(patch)}, patch_type=PatchType.MERGE
            )
        except ApiError as err:
            raise KubeError(f"cannot update Display {name}: {err}") from err
        except Exception as err:  # the HTTP library's transport errors, as in _get
            raise KubeError(f"cannot update Display {name}: {err}") from err

    def _get(self, res: Any, name: str, *, namespace: str | None, what: str) -> Any:
        from lightkube import ApiError

        try:
            return self._client.get(res, name, namespace=namespace)
        except ApiError as err:
            if err.status.code == 404:
                return None
            raise KubeError(f"cannot read {what} {name}: {err}") from err
        # lightkube lets its HTTP library's transport errors through, and that library is
        # lightkube's own dependency, not ours to name.
        except Exception as err:
            raise KubeError(f"cannot read {what} {name}: {err}") from err
