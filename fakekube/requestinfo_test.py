"""Request attributes derived from method and URL as kube-apiserver's RequestInfoFactory does."""

from __future__ import annotations

import pytest

from fakekube.requestinfo import Attributes, attributes

POD = "/api/v1/namespaces/ns/pods"
DISPLAYS = "/apis/display.liken.sh/v1alpha1/displays"


@pytest.mark.parametrize(("method", "path", "want"), [
    ("GET", f"{POD}/p", ("get", "", "ns", "pods", "", "p")),
    ("GET", POD, ("list", "", "ns", "pods", "", "")),
    ("GET", f"{POD}?watch=true", ("watch", "", "ns", "pods", "", "")),
    ("GET", f"{POD}?watch=1&fieldSelector=metadata.name%3Dp", ("watch", "", "ns", "pods", "", "p")),
    ("GET", f"{POD}?fieldSelector=spec.nodeName%3Dn,metadata.name%3Dp",
     ("list", "", "ns", "pods", "", "p")),
    ("GET", f"{POD}?fieldSelector=metadata.name!%3Dp", ("list", "", "ns", "pods", "", "")),
    ("GET", "/api/v1/watch/namespaces/ns/pods", ("watch", "", "ns", "pods", "", "")),
    ("POST", POD, ("create", "", "ns", "pods", "", "")),
    ("PUT", f"{POD}/p", ("update", "", "ns", "pods", "", "p")),
    ("PATCH", f"{POD}/p/status", ("patch", "", "ns", "pods", "status", "p")),
    ("DELETE", f"{POD}/p", ("delete", "", "ns", "pods", "", "p")),
    ("DELETE", POD, ("deletecollection", "", "ns", "pods", "", "")),
    ("PATCH", f"{DISPLAYS}/d/status", ("patch", "display.liken.sh", "", "displays", "status", "d")),
    ("GET", "/api/v1/namespaces/ns", ("get", "", "ns", "namespaces", "", "ns")),
    ("PUT", "/api/v1/namespaces/ns/status", ("update", "", "ns", "namespaces", "status", "ns")),
    ("GET", "/apis/nothing.example/v1/things", ("list", "nothing.example", "", "things", "", "")),
])
def test_resource_requests(method: str, path: str, want: tuple[str, ...]) -> None:
    got = attributes(method, path)
    assert got.resource_request
    assert (got.verb, got.api_group, got.namespace, got.resource, got.subresource,
            got.name) == want


@pytest.mark.parametrize(("method", "path", "verb"), [
    ("GET", "/healthz", "get"),
    ("GET", "/apis", "get"),
    ("GET", "/apis/resource.k8s.io/v1", "get"),
    ("POST", "/_fakekube/compact", "post"),
])
def test_non_resource_requests(method: str, path: str, verb: str) -> None:
    assert attributes(method, path) == Attributes(verb=verb, resource_request=False,
                                                  path=path)
