"""`simnode up --cluster local`: the node on a real one-machine Kubernetes cluster
(`simnode.cluster.local.node`), printed as `up` prints the embedded one: what it started,
the kubeconfig a person's kubectl uses, `simnode: ready`; served until SIGINT/SIGTERM, then
everything stopped and reaped."""

from __future__ import annotations

import os
import time
from typing import TextIO

from libdisplay import fsutil
from simnode.cli import report
from simnode.cli.state import State, check_free, save
from simnode.cli.up import Options, StartInterruptedError, handled_signals
from simnode.cluster.local.components import K8S_VERSION, api_url
from simnode.node.checkout import check_tools, repo_of
from simnode.node.local_node import LocalConfig, LocalNode

SUPERVISE_S = 1.0


def run(options: Options, out: TextIO) -> None:
    check_tools()
    check_free(options.layout, clean=options.clean)
    layout = options.layout
    layout.root.mkdir(parents=True, exist_ok=True)
    fsutil.atomic_write(layout.marker, "")
    node = LocalNode(LocalConfig(state=layout.root, repo=repo_of(options.dist),
                                 node_name=options.node_name, monitors=options.monitors))
    started = time.monotonic()
    with handled_signals() as signals:
        try:
            node.start()
            assert node.cluster is not None
            for process in node.cluster.processes:
                print(f"{process.name}: pid {process.pid}, log {process.log_path}", file=out)
            pod = node.operator_pod() or {}
            print(f"node: {options.node_name} Ready (Kubernetes {K8S_VERSION}), "
                  f"{options.monitors} simulated monitors", file=out)
            print(f"operator pod: {pod.get('metadata', {}).get('name')} Running", file=out)
            for what, seconds in node.timings.items():
                print(f"took: {what} {seconds:.1f} s", file=out)
            print(f"took: up to ready {time.monotonic() - started:.1f} s", file=out)
            print(f"bin: {node.cluster.paths.bin} (kubectl, crictl, ctr)", file=out)
            print(f"audit log: {node.cluster.paths.audit_log}", file=out)
            print(f"kubeconfig: {node.cluster.admin_kubeconfig}", file=out)
            save(layout, _state(options.node_name, options.monitors, node))
            print(report.READY_LINE, file=out, flush=True)
            signals.interrupting = False
            while not signals.stop.wait(SUPERVISE_S):
                if node.supervise():
                    print("simnode: the kubelet exited; started it again", file=out,
                          flush=True)
        except StartInterruptedError as exc:
            print(f"simnode: {exc} while starting", file=out, flush=True)
        finally:
            signals.interrupting = False
            print("simnode: stopping", file=out, flush=True)
            node.stop()
            fsutil.remove(layout.state_file)
    print("simnode: stopped, no process left", file=out, flush=True)


def _state(node_name: str, monitors: int, node: LocalNode) -> State:
    """What the subcommands read: the real cluster's kubeconfig and tools, the card's root."""
    assert node.cluster is not None
    return State(pid=os.getpid(), node_name=node_name, api_url=api_url(),
                 metrics_url="", monitors=monitors, xvfb_display=node.display,
                 pids={p.name: p.pid for p in node.cluster.processes},
                 kubeconfig=str(node.cluster.admin_kubeconfig), host_root=str(node.host),
                 cluster="local", bin_dir=str(node.cluster.paths.bin))
