"""A fake API server (HTTPS, RBAC enforced) holding the rendered base, as a cluster owner
applies it: for tests of what the operator's ServiceAccount may do."""

from __future__ import annotations

from fakekube import testing
from fakekube.server import FakeKube
from tests.deploy.manifests import render


def applied_base() -> FakeKube:
    """A started fake holding every object of the rendered base, each created through the API
    with the admin token, in the order kustomize prints them. The caller stops it."""
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
