"""The TokenRequest API (`POST /api/v1/namespaces/NS/serviceaccounts/NAME/token`), as the
kubelet uses it to project a pod's service-account token.

Authorized like any request (verb `create`, resource `serviceaccounts`, subresource `token`).
The answer is the TokenRequest with `status.token` and `status.expirationTimestamp`; the token
authenticates as `system:serviceaccount:NS:NAME` until then. As the apiserver: the
ServiceAccount must exist (404), `spec.expirationSeconds` defaults to 3600 and may not be under
10 minutes (422; `FakeKube(token_min_expiration_s=)` lowers that floor so a test can watch a
token expire), `spec.audiences` defaults to the API server's, and a `boundObjectRef` must name
an existing object of its kind with that uid (404, 409). Bound objects: Pods only (the
apiserver also binds to Secrets and Nodes); deleting the bound object does not invalidate the
token.
"""

from __future__ import annotations

import datetime
import time
from typing import TYPE_CHECKING, Any, Final

from fakekube import status
from fakekube.status import Cause

if TYPE_CHECKING:
    from fakekube.server import FakeKube

JsonObject = dict[str, Any]
API_VERSION: Final = "authentication.k8s.io/v1"
SERVICE_ACCOUNTS: Final = ("", "serviceaccounts")
SUBRESOURCE: Final = "token"
DEFAULT_EXPIRATION_S: Final = 3600
MIN_EXPIRATION_S: Final = 600
MAX_EXPIRATION_S: Final = 1 << 32
_RESOURCE: Final = status.Resource("authentication.k8s.io", "tokenrequests", "TokenRequest")


def _invalid(field: str, value: object, why: str) -> status.ApiFailure:
    return status.invalid(_RESOURCE, [Cause(field, "FieldValueInvalid",
                                            f"Invalid value: {value!r}: {why}")])


def _expiration(spec: JsonObject, floor: int) -> int:
    seconds = spec.get("expirationSeconds", DEFAULT_EXPIRATION_S)
    if seconds is None:
        seconds = DEFAULT_EXPIRATION_S
    if isinstance(seconds, bool) or not isinstance(seconds, int):
        raise status.bad_request(f"spec.expirationSeconds must be an integer, got {seconds!r}")
    if seconds < floor:
        raise _invalid("spec.expirationSeconds", seconds,
                       "may not specify a duration less than 10 minutes")
    if seconds > MAX_EXPIRATION_S:
        raise _invalid("spec.expirationSeconds", seconds,
                       "may not specify a duration larger than 2^32 seconds")
    return seconds


def check_bound(fake: FakeKube, namespace: str, ref: JsonObject | None) -> dict[str, str]:
    """The bound object checked; what the token's identity then carries about it (a pod's
    token names its node too, as the apiserver's do since 1.32)."""
    if not ref:
        return {}
    kind = ref.get("kind")
    if kind not in ("Pod", "Node") or ref.get("apiVersion", "v1") != "v1":
        raise status.invalid(_RESOURCE, [Cause(
            "spec.boundObjectRef.kind", "FieldValueNotSupported",
            f'Unsupported value: {ref.get("kind")!r}: supported values (in fakekube): "Pod", '
            '"Node"')])
    name = str(ref.get("name") or "")
    plural = "pods" if kind == "Pod" else "nodes"
    found = fake.store.get(("", plural), namespace if kind == "Pod" else "", name)
    if found is None:
        raise status.not_found(status.Resource("", plural, str(kind), name))
    uid = ref.get("uid")
    if uid and uid != found["metadata"].get("uid"):
        raise status.conflict(status.Resource("", plural, str(kind), name),
                              f"the UID in the bound object reference ({uid}) does not match"
                              " the UID in record. The object might have been deleted and then"
                              " recreated")
    if kind == "Node":
        return {"node-name": name, "node-uid": str(found["metadata"].get("uid", ""))}
    bound = {"pod-name": name, "pod-uid": str(found["metadata"].get("uid", ""))}
    node = (found.get("spec") or {}).get("nodeName")
    if node:
        bound["node-name"] = str(node)
        node_obj = fake.store.get(("", "nodes"), "", str(node))
        if node_obj is not None:
            bound["node-uid"] = str(node_obj["metadata"].get("uid", ""))
    return bound


def _timestamp(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def create(fake: FakeKube, namespace: str, name: str, body: JsonObject) -> JsonObject:
    """The TokenRequest answered for ServiceAccount `namespace/name` (raises ApiFailure)."""
    if body.get("kind") not in (None, "TokenRequest") or body.get("apiVersion") not in (
            None, API_VERSION):
        raise status.bad_request(f"the body is a {body.get('apiVersion')}/{body.get('kind')},"
                                 f" not a {API_VERSION} TokenRequest")
    if fake.store.get(SERVICE_ACCOUNTS, namespace, name) is None:
        raise status.not_found(status.Resource("", "serviceaccounts", "ServiceAccount", name))
    spec = dict(body.get("spec") or {})
    seconds = _expiration(spec, fake.token_min_expiration_s)
    bound = check_bound(fake, namespace, spec.get("boundObjectRef"))
    audiences = tuple(spec.get("audiences") or ()) or fake.policy.api_audiences
    now = time.time()
    token = fake.service_account_token(namespace, name, audiences=audiences,
                                       expires_at=now + seconds, bound=bound)
    return {"apiVersion": API_VERSION, "kind": "TokenRequest",
            "metadata": {"name": name, "namespace": namespace,
                         "creationTimestamp": _timestamp(now)},
            "spec": {**spec, "audiences": list(audiences), "expirationSeconds": seconds},
            "status": {"token": token, "expirationTimestamp": _timestamp(now + seconds)}}
