"""The kubelet's httpGet probe: success is a status in 200-399 within the timeout; HTTPS
without verifying the certificate, as the kubelet does."""

from __future__ import annotations

import http.client
import ssl
from collections.abc import Mapping

from simnode.kubelet.manifest import HttpProbe

PROBE_HOST = "127.0.0.1"


class ProbeError(Exception):
    """A probe that names a port the container does not declare."""


def port(probe: HttpProbe, ports: Mapping[str, int]) -> int:
    if isinstance(probe.port, int):
        return probe.port
    if str(probe.port).isdecimal():
        return int(probe.port)
    if probe.port not in ports:
        raise ProbeError(f"probe port {probe.port!r} is not a named port of the container"
                         f" ({sorted(ports)})")
    return ports[probe.port]


def check(probe: HttpProbe, ports: Mapping[str, int], *, host: str = PROBE_HOST) -> str | None:
    """None when the probe passes, else why it failed (the kubelet's event message)."""
    number = port(probe, ports)
    connection: http.client.HTTPConnection
    if probe.scheme == "HTTPS":
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        connection = http.client.HTTPSConnection(host, number, timeout=probe.timeout_s,
                                                 context=context)
    else:
        connection = http.client.HTTPConnection(host, number, timeout=probe.timeout_s)
    try:
        connection.request("GET", probe.path, headers={"User-Agent": "kube-probe/1.34"})
        status = connection.getresponse().status
    except (OSError, http.client.HTTPException) as exc:
        return f"Get \"{probe.scheme.lower()}://{host}:{number}{probe.path}\": {exc}"
    finally:
        connection.close()
    if 200 <= status < 400:
        return None
    return f"HTTP probe failed with statuscode: {status}"
