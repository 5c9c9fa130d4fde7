"""The operator pod's cross-container contract, named once: what its containers, the kubelet
and the consumers' containers must agree on (deploy/base/namespaced/daemonset.yaml mounts the
paths; tests/deploy/pod_contract_test.py checks the two agree).

- `DRIVER`: the DRA driver's name, in the ResourceSlice, the claims' results and CDI's vendor.
- `CONFIG_DIR`: the emptyDir every container mounts: weston.ini, mode records, restart orders,
  the layout module's control and capture sockets.
- `RUNTIME_DIR`: the hostPath weston's public socket lives in, which consumers' CDI mounts name.
- `CDI_DIR`: the hostPath the container runtime reads CDI specs from.
- `PLUGIN_DIR`: the kubelet plugin's hostPath (dra.sock, the checkpoint).
- `FIELD_MANAGER`: the operator's name in every object's managedFields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

DRIVER: Final = "display.liken.sh"
CONFIG_DIR: Final = Path("/etc/weston")
RUNTIME_DIR: Final = Path("/var/run/display.liken.sh")
CDI_DIR: Final = Path("/var/run/cdi")
PLUGIN_DIR: Final = Path("/var/lib/kubelet/plugins") / DRIVER
FIELD_MANAGER: Final = "display-operator"
