"""This pod's compositor crash count, followed with a watch of the Pod.

The kubelet writes the weston container's `restartCount` into the Pod's status; a watch of
this one Pod (by name, in its namespace) hears each change as it is written, where a poll paid
a GET every few seconds on every node of the fleet for a number that rarely moves.
"""

from __future__ import annotations

from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from draplugin.node.metrics import weston_restart_count
from libdisplay.kube.watch import DEFAULT_TIMING, Informer, JsonObject, LightkubeSource, Timing


def restart_follower(client: AsyncClient, namespace: str, pod: str, *,
                     on_count: Callable[[int], None],
                     on_retry: Callable[[str], None] | None = None,
                     timing: Timing = DEFAULT_TIMING) -> Informer:
    """An Informer of the Pod that calls `on_count` with the weston container's restart count
    after each change it sees; run it with `await informer.run()`."""

    def changed(kind: str, obj: JsonObject) -> None:
        if kind != "DELETED":
            on_count(weston_restart_count(obj))

    retried = on_retry or (lambda _operation: None)
    return Informer(LightkubeSource(client, Pod, namespace=namespace, name=pod),
                    on_change=changed, on_retry=lambda _what: retried("pod-watch"),
                    timing=timing)
