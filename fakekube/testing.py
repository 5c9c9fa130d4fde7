"""Helpers for fakekube's own tests: sample objects as plain dicts in their YAML shape, and a raw
HTTP caller for what lightkube cannot send or hides (bad media types, delete answers, headers).

`display_crd()` is a stand-in shaped like the project's Display CRD (`displays.display.liken.sh`,
cluster-scoped, v1alpha1, status subresource); the real one lives with the manifests.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from email.message import Message
from typing import Any, TypeVar, cast

from fakekube.kinds import Registry

JsonObject = dict[str, Any]
T = TypeVar("T")
DRIVER = "display.liken.sh"


def display_crd() -> JsonObject:
    mode = {"type": "string", "pattern": r"^(preferred|\d+x\d+@\d+)$"}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "displays.display.liken.sh"},
        "spec": {
            "group": "display.liken.sh",
            "scope": "Cluster",
            "names": {"kind": "Display", "plural": "displays", "singular": "display",
                      "listKind": "DisplayList"},
            "versions": [{
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "selectableFields": [{"jsonPath": ".spec.node"}],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "required": ["node", "connector"],
                            "properties": {
                                "node": {"type": "string"},
                                "connector": {"type": "string"},
                                "mode": mode,
                                "transform": {"type": "string", "default": "normal",
                                              "enum": ["normal", "rotate-90", "rotate-180",
                                                       "rotate-270"]},
                                "scale": {"type": "integer", "minimum": 1, "nullable": True},
                            },
                        },
                        "status": {
                            "type": "object",
                            "properties": {
                                "connected": {"type": "boolean"},
                                "currentMode": {"type": "string"},
                                "edid": {"type": "object",
                                         "x-kubernetes-preserve-unknown-fields": True},
                            },
                        },
                    },
                }},
            }],
        },
    }


def display(name: str, *, node: str = "n1", connector: str = "HDMI-A-1",
            mode: str | None = None) -> JsonObject:
    spec: JsonObject = {"node": node, "connector": connector}
    if mode is not None:
        spec["mode"] = mode
    return {"apiVersion": "display.liken.sh/v1alpha1", "kind": "Display",
            "metadata": {"name": name}, "spec": spec}


def device(name: str, **attributes: str | int | bool) -> JsonObject:
    kinds = {str: "string", int: "int", bool: "bool"}
    return {"name": name,
            "attributes": {k: {kinds[type(v)]: v} for k, v in attributes.items()}}


def resource_slice(name: str, *, node: str = "n1", driver: str = DRIVER,
                   devices: list[JsonObject] | None = None,
                   labels: dict[str, str] | None = None) -> JsonObject:
    meta: JsonObject = {"name": name}
    if labels:
        meta["labels"] = labels
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": meta,
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices if devices is not None else [device("card0-hdmi-a-1",
                                                                   connector="HDMI-A-1")],
        },
    }


def resource_claim(name: str, *, namespace: str = "default",
                   device_class: str = DRIVER) -> JsonObject:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [
            {"name": "screen", "exactly": {"deviceClassName": device_class}}]}},
    }


def node(name: str, *, labels: dict[str, str] | None = None) -> JsonObject:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": labels or {}}}


def pod(name: str, *, namespace: str = "default", node_name: str | None = None,
        containers: tuple[str, ...] = ("kiosk",)) -> JsonObject:
    spec: JsonObject = {"containers": [{"name": c, "image": "example/kiosk:1"} for c in containers]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


@dataclass(frozen=True, slots=True)
class RawReply:
    code: int
    body: JsonObject
    headers: Message


def call(url: str, method: str, path: str, body: object = None, *,
         content_type: str = "application/json", token: str | None = None,
         ca: bytes | None = None) -> RawReply:
    """One request without lightkube (and without any proxy from the environment), with
    `token` as bearer token and `ca` (PEM) verifying an https URL."""
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    headers = {"Content-Type": content_type}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url + path, data=data, method=method, headers=headers)
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
    if ca is not None:
        context = ssl.create_default_context(cadata=ca.decode())
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=30) as resp:
            return RawReply(resp.status, _decoded(resp.read()), resp.headers)
    except urllib.error.HTTPError as e:
        with e:
            return RawReply(e.code, _decoded(e.read()), e.headers)


def _decoded(raw: bytes) -> JsonObject:
    """The JSON body, or a plain-text one (`/healthz`) as {"text": ...}."""
    try:
        body: JsonObject = json.loads(raw)
    except ValueError:
        return {"text": raw.decode(errors="replace")}
    return body


def collection_path(registry: Registry, obj: JsonObject) -> str:
    """The URL path an object of its apiVersion and kind is created at (POST), namespaced
    objects in their namespace ("default" when they name none)."""
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    kind = registry.by_kind(str(obj["kind"]), group=group)
    base = f"/apis/{group}/{version}" if group else f"/api/{version}"
    if kind.namespaced:
        base += f"/namespaces/{(obj.get('metadata') or {}).get('namespace') or 'default'}"
    return f"{base}/{kind.plural}"


def load(res: type[T], obj: JsonObject) -> T:
    """`res.from_dict(obj)`, typed as `res` (lightkube types it as its base class)."""
    loaded = cast(Any, res).from_dict(obj)
    assert isinstance(loaded, res)
    return loaded


def as_dict(obj: object) -> JsonObject:
    """A lightkube object (typed model, generic resource or Status) as its JSON dict."""
    found: JsonObject = cast(Any, obj).to_dict()
    return found


def names(objs: Iterable[object]) -> list[str]:
    """The metadata.name of each lightkube object, in order."""
    return [str(as_dict(o)["metadata"]["name"]) for o in objs]


def failure(err: object) -> JsonObject:
    """The Status body an `ApiError` carries, as a dict."""
    return as_dict(cast(Any, err).status)
