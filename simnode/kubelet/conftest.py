"""The `toy_pod` fixture: toy pods stopped and their volumes removed after each test."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from simnode.kubelet.testing import ToyPod


@pytest.fixture
def toy_pod(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], ToyPod]]:
    pods: list[ToyPod] = []

    def make(spec: dict[str, Any]) -> ToyPod:
        pod = ToyPod(tmp_path, spec)
        pods.append(pod)
        return pod

    yield make
    for pod in pods:
        pod.runner.stop()
        pod.volumes.remove()
