"""The kubelet's gRPC wire: generated message modules, service names and method paths.

The `*_pb2` modules are generated at build time (Pants `protobuf_sources`) and build their
classes at import, so mypy sees no names in them; they are loaded here once, typed `Any`, and
everything else goes through this module. Services are served and called with grpc's generic
handlers and plain channel methods, not the generated `*_pb2_grpc` stubs, which carry no types.
"""

from __future__ import annotations

import importlib
from typing import Any, Final


def _load(name: str) -> Any:
    return importlib.import_module(f"libdisplay.proto.{name}")


REGISTRATION: Final[Any] = _load("pluginregistration_pb2")
DRA_V1: Final[Any] = _load("dra_v1_pb2")
DRA_V1BETA1: Final[Any] = _load("dra_v1beta1_pb2")
HEALTH_V1: Final[Any] = _load("dra_health_v1_pb2")
HEALTH_V1ALPHA1: Final[Any] = _load("dra_health_v1alpha1_pb2")

REGISTRATION_SERVICE: Final = "pluginregistration.Registration"
DRA_V1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin"
DRA_V1BETA1_SERVICE: Final = "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin"
HEALTH_V1_SERVICE: Final = "v1.DRAResourceHealth"
HEALTH_V1ALPHA1_SERVICE: Final = "v1alpha1.DRAResourceHealth"

# What GetInfo advertises: `<proto package>.<service>`. The kubelet takes the first DRAPlugin it
# knows, and of the health services the newest it knows (1.37 consumes v1, older ones v1alpha1).
SUPPORTED_VERSIONS: Final = ("v1.DRAPlugin", "v1beta1.DRAPlugin", "v1.DRAResourceHealth",
                             "v1alpha1.DRAResourceHealth")
PLUGIN_TYPE: Final = "DRAPlugin"

# One module per DRA API version the plugin serves; both carry the same messages.
DRA_VERSIONS: Final[dict[str, Any]] = {
    DRA_V1_SERVICE: DRA_V1,
    DRA_V1BETA1_SERVICE: DRA_V1BETA1,
}
# Likewise for the health stream's versions.
HEALTH_VERSIONS: Final[dict[str, Any]] = {
    HEALTH_V1_SERVICE: HEALTH_V1,
    HEALTH_V1ALPHA1_SERVICE: HEALTH_V1ALPHA1,
}


def method(service: str, name: str) -> str:
    """The gRPC method path, e.g. `/pluginregistration.Registration/GetInfo`."""
    return f"/{service}/{name}"
