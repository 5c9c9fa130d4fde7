"""The running plugin answers every claim of a batch, whatever one of them holds.

A corrupt mode record for the second claim of three (a hand edit, a bad disk) fails that
claim alone, named by its UID; the claims before and after it are prepared.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fakekube.kubelet import Kubelet
from fakekube.server import FakeKube
from tests.draplugin_test import (
    DP,
    DRIVER,
    HDMI,
    Node,
    config,
    make_claim,
    make_kube,
    make_node,
    plugin,
)


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return make_node(tmp_path)


@pytest.fixture
def fake() -> Iterator[FakeKube]:
    kube = make_kube()
    try:
        yield kube
    finally:
        kube.stop()


def test_a_corrupt_mode_record_fails_its_claim_alone(node: Node, fake: FakeKube,
                                                     pex_root: Path) -> None:
    first = make_claim(fake, "first", devices=(HDMI,), params=config(mode="1920x1080@60"))
    second = make_claim(fake, "second", devices=(DP,), params=config(mode="1280x1024@60"))
    third = make_claim(fake, "third", devices=(DP,), params=config(transform="rotate-90"))
    with plugin(node, fake, pex_root) as process, Kubelet(node.registration_socket,
                                                          driver=DRIVER) as kubelet:
        # After start: recovery removes records of claims the checkpoint does not hold.
        node.records_dir.mkdir(parents=True, exist_ok=True)
        (node.records_dir / f"{second.uid}.json").write_text('{"claimUID": "trunc')
        answers = kubelet.prepare([first, second, third])
        assert set(answers) == {first.uid, second.uid, third.uid}
        assert answers[first.uid].error == "" and answers[third.uid].error == ""
        error = answers[second.uid].error
        assert second.uid in error and "mode record" in error and "not valid" in error, error
        assert set(node.checkpoint()) == {first.uid, third.uid}
        assert process.log_contains(second.uid)
