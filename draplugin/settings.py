"""Everything the operator reads from its flags and environment, in one frozen value: its
paths and the compositor's at the top, the API access (`KubeAccess`) and the node with its
publisher's cadence (`NodeSettings`) as groups, each handed whole to the part that uses it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, Literal

from draplugin.node.settings import NodeSettings
from draplugin.options import DRA_SOCKET
from libdisplay.compositor.outputs import LAYOUT_SHELL, LayoutSockets
from libdisplay.kube import access as kubeaccess
from libdisplay.kube.access import Endpoint
from libdisplay.pod import DRIVER

if TYPE_CHECKING:
    from draplugin.compositor import Compositor, Recorder

REGISTRATION_SOCKET: Final = f"{DRIVER}-reg.sock"

DeliveryKind = Literal["layout", "shared"]
"""How a claim gets its socket (`draplugin.driver.delivery`): the layout module's per-claim sockets,
or the compositor's public socket shared by every claim (tests with a stock shell)."""


@dataclass(frozen=True, slots=True)
class KubeAccess:
    """How to reach the API, as the flags say (`libdisplay.kube.cli_options`): a URL with an
    optional token file and CA, a kubeconfig, or (none given) the pod's service account."""

    api_server: str | None = None
    kubeconfig: Path | None = None
    token_file: Path | None = None
    ca_file: Path | None = None

    def endpoint(self) -> Endpoint:
        """The endpoint these name (`kubeaccess.NoEndpointError` when none applies)."""
        return kubeaccess.discover(api_server=self.api_server, token_file=self.token_file,
                                   ca_file=self.ca_file, kubeconfig=self.kubeconfig)


@dataclass(frozen=True, slots=True)
class Settings:
    node: NodeSettings
    """The node's facts and the publisher's cadence."""
    plugin_dir: Path
    registry_dir: Path
    cdi_dir: Path
    weston_ini: Path
    restarts_dir: Path
    pid_file: Path
    socket_dir: Path
    """The compositor's runtime dir on the host: the CDI spec mounts it."""
    container_socket_dir: Path
    socket_name: str
    restart_timeout_s: float
    kube: KubeAccess
    shell: str = LAYOUT_SHELL
    """weston's shell, as declare writes it: the layout module, or a stock shell in tests."""
    delivery: DeliveryKind = "layout"
    fault_point: str | None = None
    """Test hook: the plugin kills itself with SIGKILL when it reaches this step."""

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / DRA_SOCKET

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / REGISTRATION_SOCKET

    @property
    def layout_control(self) -> Path:
        """The layout module's control socket, beside weston.ini as declare writes it."""
        return LayoutSockets.beside(self.weston_ini).control

    @property
    def wayland_socket(self) -> Path:
        return self.socket_dir / self.socket_name

    def compositor(self, *, recorder: Recorder | None = None,
                   probe_timeout: float = 1.0) -> Compositor:
        """The operator's one handle on weston, from these settings: every caller that
        restarts or reconfigures it (prepare, hotplug, start-up) shares this one, so the
        restart timeout and the paths have a single source."""
        from draplugin.compositor import Compositor

        return Compositor(socket=self.wayland_socket, pid_file=self.pid_file,
                          restarts_dir=self.restarts_dir, control=self.layout_control,
                          restart_timeout=self.restart_timeout_s, probe_timeout=probe_timeout,
                          recorder=recorder)
