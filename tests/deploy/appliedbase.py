"""An API server (HTTPS, RBAC enforced) holding the rendered base, as a cluster owner applies
it: for tests of what the operator's ServiceAccount may do. A FakeKube, or with
DISPLAY_OPERATOR_REAL_API=1 the real kube-apiserver of `tests.support.realapi`."""

from __future__ import annotations

from typing import Any

from fakekube import testing
from fakekube.server import FakeKube
from tests.deploy.manifests import render
from tests.support.realapi import RealKube


def applied_base(real: RealKube | None = None) -> Any:
    """A started fake, or `real` reset, holding every object of the rendered base, each
    created through the API with the admin token, in the order kustomize prints them. The
    caller stops a fake (`stop` of a real one is left to its fixture). Typed Any: the tests
    use what both have."""
    if real is not None:
        real.reset()
        for doc in render("base"):
            if doc["kind"] == "CustomResourceDefinition":
                real.register_crd(doc)
            else:
                reply = real.call("POST", real.path(doc["apiVersion"], doc["kind"],
                                  namespace=doc["metadata"].get("namespace", "default")),
                                  doc, token=real.admin_token)
                assert reply.code == 201, (doc["kind"], doc["metadata"]["name"], reply.body)
        return _Shared(real)
    fake = FakeKube(tls=True, authorize=True).start()
    try:
        for doc in render("base"):
            path = testing.collection_path(fake.registry, doc)
            reply = testing.call(fake.url, "POST", path, doc, token=fake.admin_token,
                                 ca=fake.ca_pem)
            assert reply.code == 201, (doc["kind"], doc["metadata"]["name"], reply.body)
    except BaseException:
        fake.stop()
        raise
    return fake


class _Shared:
    """The module's real server as `applied_base` hands it out: everything but `stop`, which
    its fixture does once the module is done."""

    def __init__(self, real: RealKube) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def stop(self) -> None:
        pass
