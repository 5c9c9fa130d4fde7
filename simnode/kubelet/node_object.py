"""The simulated node's Node object in its cluster (the embedded fake, or a real cluster a
kubeconfig names, as kwok publishes nodes, for testing scheduling against simulated screens).

`NodeObject` is the Node the slice belongs to, the same in both: created if missing, labelled
`display.liken.sh/simulated=true` and tainted `display.liken.sh/simulated=true:NoSchedule` so
that only pods tolerating simulated screens land there; kept Ready with room for pods by a
status heartbeat, as a kubelet keeps its Node (the scheduler places nothing on a Node that is
not Ready or has no allocatable pods). On the way out it deletes this node's ResourceSlices (a
cluster's garbage collector would, through their owner reference; a cluster without one and
the fake in tests end clean this way) and the Node. A Node of that name without the label is
someone else's, and `up` refuses to touch it. Displays are left: they are cluster-scoped
records of monitors, which the operator never deletes either.
"""

from __future__ import annotations

import logging
import re
import threading
from datetime import UTC, datetime
from typing import Final

from libdisplay.pod import DRIVER
from simnode.cluster.api import NODES, RESOURCE_SLICES, Api, ClusterError, JsonObject

log = logging.getLogger(__name__)

SIMULATED_LABEL: Final = "display.liken.sh/simulated"
NODE_TAINT: Final = {"key": SIMULATED_LABEL, "value": "true", "effect": "NoSchedule"}
# The kubelet's default nodeStatusUpdateFrequency; the node lifecycle controller marks a Node
# whose Ready heartbeat is 40-50 s old as unreachable.
HEARTBEAT_S: Final = 10.0
# What a small node offers, so that pods with resource requests fit on the simulated one.
ALLOCATABLE: Final = {"cpu": "4", "memory": "8Gi", "pods": "110"}
# A DNS-1123 subdomain short enough to be the kubernetes.io/hostname label's value too.
NODE_NAME: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
NODE_NAME_MAX: Final = 63


class NodeTakenError(ClusterError):
    """A Node of the simulated node's name exists and is not a simulated one."""


def check_node_name(name: str) -> str:
    if len(name) > NODE_NAME_MAX or not NODE_NAME.fullmatch(name):
        raise ClusterError(
            f"node name {name!r} is not a DNS-1123 subdomain of at most {NODE_NAME_MAX}"
            " characters (lower-case letters, digits, '-' and '.')"
        )
    return name


def node_object(name: str) -> JsonObject:
    """The simulated node's Node: labelled as kubelets label theirs, and as simulated."""
    labels = {SIMULATED_LABEL: "true", "kubernetes.io/hostname": name, "kubernetes.io/os": "linux"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "spec": {"taints": [NODE_TAINT]}}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NodeObject:
    """The simulated node's Node object in the cluster, from `publish` to `withdraw`."""

    def __init__(self, api: Api, name: str, *, heartbeat_s: float = HEARTBEAT_S) -> None:
        self.api = api
        self.name = name
        self.heartbeat_s = heartbeat_s
        # True once the Node is simnode's: created now, or left labelled by a killed run.
        self.owned = False
        self._since = _now()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def publish(self) -> None:
        """Create (or take over) the Node, mark it Ready, and keep it so until `withdraw`."""
        found = self.api.get(NODES, self.name)
        if found is None:
            self.api.create(NODES, node_object(self.name))
        elif (found["metadata"].get("labels") or {}).get(SIMULATED_LABEL) != "true":
            raise NodeTakenError(
                f"Node {self.name} exists in the cluster at {self.api.access} and is not a"
                f" simulated node (no label {SIMULATED_LABEL}=true): choose another --node-name"
            )
        else:
            log.info("Node %s is left from an earlier simnode: taking it over", self.name)
        self.owned = True
        self.beat()
        self._thread = threading.Thread(target=self._beat_until_stopped,
                                        name=f"heartbeat {self.name}", daemon=True)
        self._thread.start()

    def beat(self) -> None:
        """Say the node is Ready now, with room for pods."""
        ready = {"type": "Ready", "status": "True", "reason": "SimnodeUp",
                 "message": "simnode up serves this node's devices",
                 "lastHeartbeatTime": _now(), "lastTransitionTime": self._since}
        status = {"capacity": ALLOCATABLE, "allocatable": ALLOCATABLE, "conditions": [ready]}
        self.api.patch(NODES, self.name, {"status": status}, subresource="status")

    def _beat_until_stopped(self) -> None:
        while not self._stop.wait(self.heartbeat_s):
            try:
                self.beat()
            except ClusterError as exc:
                log.warning("heartbeat of Node %s failed: %s", self.name, exc)

    def withdraw(self) -> list[str]:
        """Stop the heartbeat; delete this node's display slices and the Node, if simnode's.
        What was deleted, as `Kind name`."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.api.timeout * 2)
            self._thread = None
        if not self.owned:
            return []
        fields = {"spec.nodeName": self.name, "spec.driver": DRIVER}
        names = [s["metadata"]["name"] for s in self.api.items(RESOURCE_SLICES, fields=fields)]
        deleted = [f"ResourceSlice {n}" for n in names if self.api.delete(RESOURCE_SLICES, n)]
        if self.api.delete(NODES, self.name):
            deleted.append(f"Node {self.name}")
        self.owned = False
        return deleted
