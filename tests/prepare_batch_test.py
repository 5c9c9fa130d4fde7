"""The running plugin answers every claim of a batch, whatever one of them holds.

A write that fails for the second claim of three (a bad disk) fails that claim alone, named by
its UID; the claims before and after it are prepared.
"""

from __future__ import annotations

from pathlib import Path

from fakekube.server import FakeKube
from libdisplay import cdi
from libdisplay.pod import DRIVER
from simnode.kubelet.plugin import Kubelet
from tests.support.operator_node import (  # noqa: F401  (fake_fixture, node_fixture: `fake`, `node`)
    DP,
    HDMI,
    Node,
    fake_fixture,
    node_fixture,
)
from tests.support.operator_process import config, make_claim, plugin


def test_a_claim_whose_writes_fail_fails_alone(node: Node, fake: FakeKube,
                                               pex_root: Path) -> None:
    first = make_claim(fake, "first", devices=(HDMI,), params=config(mode="1920x1080@60"))
    second = make_claim(fake, "second", devices=(DP,), params=config(mode="1280x1024@60"))
    third = make_claim(fake, "third", devices=(DP,), params=config(transform="rotate-90"))
    with plugin(node, fake, pex_root) as process, Kubelet(node.registration_socket,
                                                          driver=DRIVER) as kubelet:
        # After start (recovery removes CDI specs of claims it does not hold): a directory
        # where the second claim's spec goes, as a disk that refuses the write would.
        cdi.spec_path(second.uid, cdi_dir=node.cdi_dir).mkdir(parents=True)
        answers = kubelet.prepare([first, second, third])
        assert set(answers) == {first.uid, second.uid, third.uid}
        assert answers[first.uid].error == "" and answers[third.uid].error == ""
        error = answers[second.uid].error
        assert error.startswith(f"claim {second.uid}: prepare failed: ") and "Is a directory" \
            in error, error
        # It stays `started` until the kubelet repeats or unprepares it; the others are done.
        states = {uid: e["state"] for uid, e in node.checkpoint().items()}
        assert states == {first.uid: "prepared", second.uid: "started", third.uid: "prepared"}
        assert process.log_contains(second.uid)
