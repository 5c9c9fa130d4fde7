"""Who may change a ResourceClaim's `status.devices` (1.36+, k/k PR #134947): besides the
`resourceclaims/status` verb, the apiserver asks for each driver whose entries the write
changes `<scope>:<verb>` on `resourceclaims/driver` named after the driver, where scope is
`associated-node` when the caller's token is bound to the node the claim is allocated on (the
TokenReview's `authentication.kubernetes.io/node-name`, which a pod's projected token has), and
`arbitrary-node` otherwise. A refusal is a 422 naming `status.devices`, as the apiserver's.

Answers seen from kube-apiserver 1.37.2 (tests.support.realapi): an unbound token, or a token
bound to another node, or a claim without a one-node selector, needs `arbitrary-node`.
"""

from __future__ import annotations

from typing import Any

from fakekube import status
from fakekube.guard import forbidden_reason
from fakekube.rbac import Authorizer
from fakekube.requestinfo import Attributes
from fakekube.reviews import Identity
from fakekube.status import Cause

JsonObject = dict[str, Any]
NODE_NAME = "authentication.kubernetes.io/node-name"
GROUP = "resource.k8s.io"


def _entries(claim: JsonObject | None) -> dict[tuple[str, str, str, str], JsonObject]:
    devices = ((claim or {}).get("status") or {}).get("devices") or []
    return {(str(d.get("driver")), str(d.get("pool")), str(d.get("device")),
             str(d.get("shareID") or "")): d for d in devices if isinstance(d, dict)}


def changed_drivers(new: JsonObject, old: JsonObject | None) -> list[str]:
    """The drivers whose `status.devices` entries the write adds, removes or changes."""
    before, after = _entries(old), _entries(new)
    keys = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    return sorted({k[0] for k in keys})


def allocated_node(claim: JsonObject) -> str | None:
    """The one node the claim's allocation selects by name, if it selects exactly one."""
    selector = (((claim.get("status") or {}).get("allocation") or {}).get("nodeSelector")
                or {})
    terms = selector.get("nodeSelectorTerms") or []
    if len(terms) != 1 or (terms[0] or {}).get("matchExpressions"):
        return None
    fields = terms[0].get("matchFields") or []
    if len(fields) != 1:
        return None
    field = fields[0]
    values = field.get("values") or []
    if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(
            values) == 1:
        return str(values[0])
    return None


def check(authorizer: Authorizer, who: Identity, verb: str, new: JsonObject,
          old: JsonObject | None, resource: status.Resource) -> None:
    """Raise the apiserver's 422 unless `who` may make this change of status.devices."""
    namespace = str((new.get("metadata") or {}).get("namespace") or "")
    node = allocated_node(new)
    scopes = (["associated-node"] if node and who.extra_value(NODE_NAME) == node else [])
    verbs = [f"{scope}:{verb}" for scope in [*scopes, "arbitrary-node"]]
    for driver in changed_drivers(new, old):
        attrs = [Attributes(verb=v, resource_request=True, api_group=GROUP,
                            api_version="v1", namespace=namespace, resource="resourceclaims",
                            subresource="driver", name=driver) for v in verbs]
        if any(authorizer.authorize(who.username, who.groups, a).allowed for a in attrs):
            continue
        denied = status.forbidden(GROUP, "resourceclaims", driver,
                                  forbidden_reason(who.username, attrs[-1]))
        raise status.invalid(resource, [Cause(
            "status.devices", "FieldValueForbidden",
            f'Forbidden: changing status.devices requires resource="resourceclaims/driver", '
            f'verb="[{" ".join(verbs)}]" permission: {denied.message}')])
