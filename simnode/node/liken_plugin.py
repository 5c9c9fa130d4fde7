"""liken's DRA driver as the local cluster's kubelet meets it: a real kubelet plugin of the test
harness (driver `liken.sh`) for the simulated card.

It does what liken does on a node with a card: publishes the card node, its render node and its
i2c buses as devices of its own ResourceSlice, each with `liken.sh/type` and the card's PCI
address `liken.sh/address` (what the base's DeviceClasses and the claim template's
`matchAttribute` select on), after a second card's i2c bus at another address that a claim
must not pair with this card; writes their CDI spec (`simnode.node.card_cdi`: the simulated
sysfs tree, device nodes, DDC/CI sockets and the x11 outputs); registers with the kubelet over
the plugin-registration socket; and answers NodePrepareResources with each allocated device's
CDI id, read from the claim's allocation as the kubelet's helper library does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent import futures
from pathlib import Path
from typing import Any, Final

import grpc

from libdisplay.proto import wire
from simnode.cluster.api import Api, JsonObject, Resource
from simnode.node import card, card_cdi

log = logging.getLogger(__name__)

DRIVER: Final = card_cdi.LIKEN_DRIVER
PCI_ADDRESS: Final = "0000:00:02.0"
# A second card's i2c bus on the same node (a machine with two GPUs), listed before the
# simulated card's own: the allocator takes the first device that fits, so only the claim
# template's `matchAttribute: liken.sh/address` keeps it from pairing the wrong wires.
OTHER_I2C: Final = ("card1-i2c", "0000:00:03.0")
SLICES: Final = Resource("resource.k8s.io/v1", "resourceslices")
CLAIMS: Final = Resource("resource.k8s.io/v1", "resourceclaims")
PLUGINS: Final = Path("/var/lib/kubelet/plugins")
REGISTRY: Final = Path("/var/lib/kubelet/plugins_registry")
DEVICE_TYPES: Final = {card_cdi.CARD_DEVICE: "card", card_cdi.RENDER_DEVICE: "render",
                       card_cdi.I2C_DEVICE: "i2c"}


def slice_of(node: str, *, address: str = PCI_ADDRESS) -> JsonObject:
    """liken's ResourceSlice of the simulated card on `node`, after another card's i2c bus."""
    def device(name: str, kind: str, at: str) -> JsonObject:
        return {"name": name, "attributes": {"liken.sh/type": {"string": kind},
                                             "liken.sh/address": {"string": at}}}

    other, other_address = OTHER_I2C
    devices = [device(other, "i2c", other_address),
               *(device(name, kind, address) for name, kind in DEVICE_TYPES.items())]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {"driver": DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}


class _Registration:
    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint
        self.registered: bool | None = None

    def get_info(self, _request: Any, _context: Any) -> Any:
        return wire.REGISTRATION.PluginInfo(type=wire.PLUGIN_TYPE, name=DRIVER,
                                            endpoint=str(self.endpoint),
                                            supported_versions=["v1.DRAPlugin"])

    def notify(self, request: Any, _context: Any) -> Any:
        self.registered = bool(request.plugin_registered)
        if not self.registered:
            log.error("liken stand-in: the kubelet refused the registration: %s",
                      request.error)
        return wire.REGISTRATION.RegistrationStatusResponse()


class _Dra:
    def __init__(self, api: Api) -> None:
        self.api = api

    def prepare(self, request: Any, _context: Any) -> Any:
        answer = wire.DRA_V1.NodePrepareResourcesResponse()
        for claim in request.claims:
            result = answer.claims[claim.uid]
            try:
                found = self.api.get(CLAIMS, claim.name, namespace=claim.namespace)
                if found is None or found["metadata"]["uid"] != claim.uid:
                    raise LookupError(f"claim {claim.namespace}/{claim.name} {claim.uid} is gone")
                for r in found["status"]["allocation"]["devices"]["results"]:
                    if r["driver"] != DRIVER:
                        continue
                    result.devices.add(request_names=[r["request"]], pool_name=r["pool"],
                                       device_name=r["device"],
                                       cdi_device_ids=[f"{card_cdi.CDI_KIND}={r['device']}"])
            except Exception as exc:  # the kubelet shows the error on the pod
                result.error = f"liken stand-in: {exc}"
        return answer

    def unprepare(self, request: Any, _context: Any) -> Any:
        answer = wire.DRA_V1.NodeUnprepareResourcesResponse()
        for claim in request.claims:
            answer.claims[claim.uid].SetInParent()
        return answer


def _handler(service: str, methods: dict[str, tuple[Any, Any]]) -> Any:
    """Unary methods of `service`, each `name -> (function, request message class)`."""
    return grpc.method_handlers_generic_handler(service, {
        name: grpc.unary_unary_rpc_method_handler(
            fn, request_deserializer=request.FromString,
            response_serializer=lambda m: m.SerializeToString())
        for name, (fn, request) in methods.items()})


class LikenPlugin:
    """The stand-in for one simulated card: `start` publishes, writes the spec, serves and
    registers; `stop` undoes all of it."""

    def __init__(self, api: Api, *, node: str, host_root: Path,
                 monitors: Sequence[card.Monitor], display: str, cdi_dir: Path) -> None:
        self.api = api
        self.node = node
        self.host_root = host_root
        self.monitors = monitors
        self.display = display
        self.cdi_dir = cdi_dir
        self.endpoint = PLUGINS / DRIVER / "dra.sock"
        self.registration_socket = REGISTRY / f"{DRIVER}-reg.sock"
        self.registration = _Registration(self.endpoint)
        self._servers: list[grpc.Server] = []
        self.spec: Path | None = None

    def start(self) -> None:
        self.spec = card_cdi.write_spec(self.cdi_dir, card_cdi.edits(
            self.host_root, self.monitors, display=self.display), sysfs_tmpfs=True)
        self.publish()
        dra = _Dra(self.api)
        self._serve(self.endpoint, _handler(wire.DRA_V1_SERVICE, {
            "NodePrepareResources": (dra.prepare, wire.DRA_V1.NodePrepareResourcesRequest),
            "NodeUnprepareResources": (dra.unprepare,
                                       wire.DRA_V1.NodeUnprepareResourcesRequest)}))
        # Registration last: the kubelet dials the endpoint as soon as it sees this socket.
        self._serve(self.registration_socket, _handler(wire.REGISTRATION_SERVICE, {
            "GetInfo": (self.registration.get_info, wire.REGISTRATION.InfoRequest),
            "NotifyRegistrationStatus": (self.registration.notify,
                                         wire.REGISTRATION.RegistrationStatus)}))

    def publish(self, *, replace: bool = True) -> None:
        """The slice created if missing (the kubelet deletes a node's slices when it starts),
        else replaced unless `replace` is False."""
        wanted = slice_of(self.node)
        name = wanted["metadata"]["name"]
        if self.api.get(SLICES, name) is None:
            self.api.create(SLICES, wanted)
            log.info("liken stand-in: published %s", name)
        elif replace:
            self.api.patch(SLICES, name, {"spec": wanted["spec"]})

    def _serve(self, path: Path, handler: Any) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2),
                             handlers=[handler])
        server.add_insecure_port(f"unix:{path}")
        server.start()
        self._servers.append(server)

    def stop(self) -> None:
        for server in reversed(self._servers):
            server.stop(grace=2).wait()
        self._servers.clear()
        self.registration_socket.unlink(missing_ok=True)
        self.endpoint.unlink(missing_ok=True)
        if self.spec is not None:
            self.spec.unlink(missing_ok=True)
