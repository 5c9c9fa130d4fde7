"""The pods' network on this machine: the CNI bridge made before the kubelet starts (its
address is the node's and the API server's advertised one), and a guard that keeps every pod's
packets on the machine: a packet from the bridge may reach this host (the API server through
the `kubernetes` Service) and the other pods, and is dropped before it could be forwarded
anywhere else. The bridge plugin's own masquerade is off (`components.cni_config`)."""

from __future__ import annotations

import subprocess
from typing import Final

from simnode.cluster.api import ClusterError
from simnode.cluster.local.components import BRIDGE, BRIDGE_IP, POD_CIDR

_GUARD: Final = ("FORWARD", "-i", BRIDGE, "!", "-o", BRIDGE, "-j", "DROP")


class NetworkError(ClusterError):
    """The bridge or the guard could not be set up; the message has the command's output."""


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NetworkError(f"{' '.join(argv)}: {exc}") from exc
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done


def ensure() -> None:
    """The bridge up with the gateway's address, and the guard in the FORWARD chain."""
    prefix = POD_CIDR.split("/")[1]
    for line in _run("ip", "-o", "-4", "addr", "show").stdout.splitlines():
        device = line.split()[1]
        if f" {BRIDGE_IP}/" in line and device != BRIDGE:
            raise NetworkError(f"{device} holds {BRIDGE_IP}, the pods' gateway: two routes to"
                               f" {POD_CIDR} would lose the pods' packets; remove it"
                               f" (ip link del {device})")
    if _run("ip", "link", "show", BRIDGE, check=False).returncode != 0:
        _run("ip", "link", "add", BRIDGE, "type", "bridge")
    addresses = _run("ip", "-o", "-4", "addr", "show", "dev", BRIDGE).stdout
    if f" {BRIDGE_IP}/{prefix} " not in addresses:
        _run("ip", "addr", "flush", "dev", BRIDGE)  # an earlier pod network's address
        _run("ip", "addr", "add", f"{BRIDGE_IP}/{prefix}", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")
    if _run("iptables", "-C", *_GUARD, check=False).returncode != 0:
        _run("iptables", "-I", *_GUARD[:1], "1", *_GUARD[1:])
