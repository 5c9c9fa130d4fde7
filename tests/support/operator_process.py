"""The operator and weston as the end-to-end tests run them: the built PEXes (or the source
tree outside Pants), against a node's paths (`tests.support.operator_node`) and a fake API
server, each started until it answers and stopped and reaped on the way out; the claims and
checks those tests share."""

from __future__ import annotations

import contextlib
import os
import random
import socket as socket_module
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import grpc
import pytest
from lightkube.resources.resource_v1 import ResourceClaim

from fakekube.client import sync_client
from fakekube.server import FakeKube
from fakekube.testing import resource_claim
from libdisplay import cdi
from libdisplay.compositor.wayland import Liveness, probe
from libdisplay.display import API_VERSION, display_name
from libdisplay.pod import DRIVER
from libdisplay.processes import Process, running, unix_socket_accepts
from libdisplay.sim.sysfs import dev_root, sysfs_root
from simnode.kubelet.plugin import Claim
from tests.binaries import pex_env
from tests.support.operator_node import HDMI, NODE, Node

START_TIMEOUT_S = 60.0
SHELL = "kiosk-shell.so"


def binary_argv(name: str) -> list[str]:
    """The built PEX when Pants put it in the sandbox, else the module from the source tree."""
    pex = Path(name) / f"{name}.pex"
    if pex.is_file():
        return [str(pex.resolve())]
    return [sys.executable, "-m", f"{name}.main"]


def binary_env(pex_root: Path, **extra: str) -> dict[str, str]:
    """`tests.binaries.pex_env`, and this interpreter's path for the source-tree fallback."""
    return pex_env(pex_root, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **extra)


def display_spec(fake: FakeKube, device: str) -> dict[str, Any]:
    obj = fake.get(API_VERSION, "Display", display_name(NODE, device))
    assert obj is not None
    spec: dict[str, Any] = obj["spec"]
    return spec


def config(**fields: object) -> dict[str, object]:
    return {"apiVersion": "display.liken.sh/v1alpha1", "kind": "DisplayConfig", **fields}


def make_claim(
    fake: FakeKube,
    name: str,
    *,
    devices: Sequence[str] = (HDMI,),
    params: Mapping[str, object] | None = None,
    class_params: Mapping[str, object] | None = None,
    pool: str = NODE,
) -> Claim:
    """A claim allocated `devices` of this driver, one request each, with opaque configs."""
    uid = fake.create(resource_claim(name))["metadata"]["uid"]
    results = [
        {"request": "screen", "driver": DRIVER, "pool": pool, "device": d} for d in devices
    ]
    configs = []
    if class_params is not None:
        configs.append({"source": "FromClass", "requests": [],
                        "opaque": {"driver": DRIVER, "parameters": dict(class_params)}})
    if params is not None:
        configs.append({"source": "FromClaim", "requests": ["screen"],
                        "opaque": {"driver": DRIVER, "parameters": dict(params)}})
    status = {"allocation": {"devices": {"results": results, "config": configs}}}
    sync_client(fake.url).patch(ResourceClaim.Status, name, {"status": status},
                                namespace="default")
    return Claim(uid=uid, name=name)


@contextlib.contextmanager
def plugin(node: Node, fake: FakeKube, pex_root: Path, *, fault: str | None = None,
           restart_timeout: float = 30.0, alias: str | None = None,
           metrics_port: int | None = None, layout_shell: Path | None = None,
           aliases: Sequence[str] = (),
           container_dir: Path | None = None,
           extra_args: Sequence[str] = ()) -> Iterator[Process]:
    """The operator; with `metrics_port` the node publisher runs too, else the kubelet side only.

    With `layout_shell` it runs as in production: that layout module is weston's shell and
    each claim gets its own sockets from it (`--delivery=layout`); without, a stock shell and
    the compositor's public socket for every claim (`--delivery=shared`).
    """
    publisher = (
        [f"--metrics-addr=127.0.0.1:{metrics_port}"] if metrics_port else ["--no-publish"]
    )
    argv = [
        *binary_argv("draplugin"),
        "operator",
        f"--node-name={NODE}",
        f"--plugin-dir={node.plugin_dir}",
        f"--registry-dir={node.registry_dir}",
        f"--cdi-root={node.cdi_dir}",
        f"--config={node.etc / 'weston.ini'}",
        f"--restarts-dir={node.etc / 'restarts'}",
        f"--pid-file={node.etc / 'weston.pid'}",
        f"--runtime-dir={node.runtime_dir}",
        f"--container-runtime-dir={container_dir or node.runtime_dir}",
        f"--sysfs-root={sysfs_root(node.root)}",
        f"--dev-root={dev_root(node.root)}",
        f"--api-server={fake.url}",
        f"--restart-timeout={restart_timeout}",
        *(
            [f"--shell={layout_shell}", "--delivery=layout"]
            if layout_shell
            # A stock shell: those tests are about modes, not the layout module.
            else [f"--shell={SHELL}", "--delivery=shared"]
        ),
        *(f"--output-alias={a}" for a in ([alias] if alias else aliases)),
        *publisher,
        *extra_args,
    ]
    extra = {"DRAPLUGIN_FAULT_POINT": fault} if fault else {}
    with running(
        argv,
        log_path=node.root / "plugin.log",
        env=binary_env(pex_root, **extra),
        ready=lambda _: unix_socket_accepts(node.registration_socket),
        ready_timeout=START_TIMEOUT_S,
        what="registration socket accepts",
    ) as process:
        yield process


def check_invariants(node: Node) -> None:
    """No CDI spec of a claim the checkpoint does not hold; no weston.ini left unapplied."""
    held = set(node.checkpoint())
    assert set(cdi.list_specs(cdi_dir=node.cdi_dir)) <= held
    assert not (node.etc / "weston.ini.unapplied").exists()


def dies(process: Process, call: Any) -> None:
    with pytest.raises(grpc.RpcError):
        call()
    assert process.wait(timeout=30.0) == -9


@contextlib.contextmanager
def weston(node: Node, pex_root: Path, *, x11_display: str | None = None,
           outputs: int = 2) -> Iterator[Path]:
    """westonctl running weston: headless (one output), or x11 on `x11_display` (`outputs`)."""
    socket = node.runtime_dir / "wayland-0"
    node.runtime_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    backend = (
        ["--backend=headless", "--", "--renderer=pixman"]
        if x11_display is None
        else ["--backend=x11", "--", f"--output-count={outputs}", "--renderer=pixman"]
    )
    extra = {} if x11_display is None else {"DISPLAY": x11_display}
    argv = [
        *binary_argv("westonctl"),
        "weston",
        f"--config={node.etc / 'weston.ini'}",
        f"--runtime-dir={node.runtime_dir}",
        f"--restarts-dir={node.etc / 'restarts'}",
        f"--pid-file={node.etc / 'weston.pid'}",
        *backend,
    ]
    with running(
        argv,
        log_path=node.root / "westonctl.log",
        env=binary_env(pex_root, **extra),
        ready=lambda _: probe(socket, timeout=1.0).state is Liveness.ANSWERING,
        ready_timeout=START_TIMEOUT_S,
        what="weston answering",
    ):
        yield socket


INITIAL_INI = f"[core]\nshell={SHELL}\n\n[output]\nname=headless\nmode=1920x1080@60\n"


def free_port() -> int:
    """A port free now, below the kernel's ephemeral range (32768-60999): an ephemeral one,
    free when asked for, can be the source port of any test's outgoing connection by the
    time the operator binds it."""
    for _ in range(200):
        port = random.randrange(20000, 32768)
        with socket_module.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 20000-32767")


def slice_devices(fake: FakeKube) -> dict[str, list[Any]]:
    """Device name -> its taints, from this node's ResourceSlices."""
    devices: dict[str, list[Any]] = {}
    for obj in fake.objects("resource.k8s.io/v1", "ResourceSlice"):
        if obj["spec"].get("nodeName") == NODE:
            for device in obj["spec"].get("devices", []):
                devices[device["name"]] = device.get("taints", [])
    return devices
