"""volumes: a Secret volume projected as the kubelet's AtomicWriter does, and kept current by a
watch of the Secret (list once, then watch), never by polling."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from pathlib import Path

from fakekube.server import FakeKube
from libdisplay.kube.access import Endpoint
from simnode.kubelet.volumes import DATA, SecretVolumes, current

WAIT_S = 15.0


def _wait(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {WAIT_S:g} s: {what}")
        time.sleep(0.01)


def _secret(value: bytes) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "capture-tls", "namespace": "default"},
            "data": {"tls.crt": base64.b64encode(value).decode()}}


def _set(fake: FakeKube, value: bytes) -> None:
    fake.update("v1", "Secret", "capture-tls",
                lambda o: o.update(data=_secret(value)["data"]), namespace="default")


def test_a_secret_volume_follows_its_secret_by_watch(tmp_path: Path) -> None:
    volume = tmp_path / "tls"
    volume.mkdir()
    with FakeKube() as fake:
        fake.create(_secret(b"one"))
        secrets = SecretVolumes(Endpoint(fake.url), "default", {"capture-tls": volume})
        secrets.start(timeout_s=WAIT_S)
        try:
            # Projected before start returns: the pod starts with its volume filled.
            assert current(volume) == {"tls.crt": b"one"}
            assert (volume / "tls.crt").read_bytes() == b"one"
            assert (volume / DATA).is_symlink()
            _set(fake, b"two")
            _wait(lambda: current(volume) == {"tls.crt": b"two"}, "the change projected")
            fake.drop_watches(abrupt=True)
            _set(fake, b"three")
            _wait(lambda: current(volume) == {"tls.crt": b"three"}, "the change after a drop")
            fake.delete("v1", "Secret", "capture-tls", namespace="default")
            _wait(lambda: not any(volume.iterdir()), "the optional volume emptied")
        finally:
            secrets.stop()
        verbs = {(r.method, r.param("watch") or "") for r in fake.request_log()}
        assert verbs == {("GET", ""), ("GET", "true")}
        lists = [r for r in fake.request_log() if r.param("watch") is None]
        assert len(lists) == 1, "listed once, then only watched"


def test_a_missing_optional_secret_is_an_empty_volume_until_it_exists(tmp_path: Path) -> None:
    volume = tmp_path / "tls"
    volume.mkdir()
    with FakeKube() as fake:
        secrets = SecretVolumes(Endpoint(fake.url), "default", {"capture-tls": volume})
        secrets.start(timeout_s=WAIT_S)
        try:
            assert list(volume.iterdir()) == []
            fake.create(_secret(b"late"))
            _wait(lambda: current(volume) == {"tls.crt": b"late"}, "the Secret once made")
        finally:
            secrets.stop()
