"""The scheduler, the kubelet and a consumer of the VM tier, as one command the guest runs (a
PEX: it needs gRPC, and the consumer is tests/support/layout.py's client).

    claim prepare API_FLAGS --registration SOCKET --node NODE --device DEV [--mode MODE] NAME
    claim unprepare API_FLAGS --registration SOCKET NAME UID
    claim show --socket PATH --colour R,G,B

API_FLAGS are `--api URL --token-file FILE --ca-file FILE`: the API's HTTPS address, the
bearer token of the identity that calls it and the CA its certificate is verified with.
`prepare` creates ResourceClaim NAME in `default`, allocates DEV of pool NODE to it with the
claim's DisplayConfig and the node's selector (as the scheduler writes status.allocation),
then asks the operator to prepare it the way the kubelet does (simnode.kubelet.plugin); prints
{"uid", "error"} as JSON.
`unprepare` asks the operator to unprepare it and deletes the claim; prints {"error"}.
`show` is the claim's app: one toplevel of a solid colour on the claim's Wayland socket; it
prints {"shown", "configured", "outputs_offered", "output_events"} once the compositor has
processed its first frame (or {"error"}, exiting 1, when it has not within SHOW_TIMEOUT_S)
and stays until SIGTERM.
On SIGUSR1 it sends a wl_display.sync on the same connection and prints {"roundtrip"
(answered within ROUNDTRIP_TIMEOUT_S), "configured", "output_events"} (events its wl_output
sent since it was bound).
"""

from __future__ import annotations

import argparse
import json
import signal
import ssl
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from simnode.kubelet.plugin import Kubelet

DRIVER = "display.liken.sh"
NAMESPACE = "default"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
SHOW_TIMEOUT_S = 120.0
"""Connect to first frame processed: a round trip or two, but weston shares two emulated CPUs."""
ROUNDTRIP_TIMEOUT_S = 30.0
REGISTER_BOUND_S = 120.0
"""How long the kubelet's registration calls are retried. Each has simnode's 5 s deadline, which
a guest on TCG misses when the host's two cores are shared with other jobs (seen: an
unprepare's GetInfo exceeded it with the operator idle)."""


def _kubelet(registration: Path) -> Kubelet:
    """The kubelet's registration with the operator, retried past a missed deadline."""
    import grpc

    from simnode.kubelet.plugin import Kubelet

    deadline = time.monotonic() + REGISTER_BOUND_S
    while True:
        try:
            return Kubelet(registration, driver=DRIVER)
        except grpc.RpcError as err:
            if err.code() != grpc.StatusCode.DEADLINE_EXCEEDED or time.monotonic() > deadline:
                raise


def _call(args: argparse.Namespace, method: str, path: str, body: Any = None,
          content_type: str = "application/json") -> Any:
    data = None if body is None else json.dumps(body).encode()
    token = Path(args.token_file).read_text().strip()
    request = urllib.request.Request(args.api + path, data=data, method=method,
                                     headers={"Content-Type": content_type,
                                              "Authorization": f"Bearer {token}"})
    context = ssl.create_default_context(cafile=args.ca_file)
    with urllib.request.urlopen(request, timeout=30, context=context) as response:
        return json.load(response)


def prepare(args: argparse.Namespace) -> dict[str, Any]:
    from simnode.cluster import control  # the allocation as the scheduler writes it
    from simnode.kubelet.plugin import Claim  # gRPC: only for the kubelet's calls

    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
             "metadata": {"name": args.name, "namespace": NAMESPACE},
             "spec": {"devices": {"requests": [
                 {"name": "screen", "exactly": {"deviceClassName": DRIVER}}]}}}
    uid = str(_call(args, "POST", CLAIMS, claim)["metadata"]["uid"])
    parameters = {"mode": args.mode} if args.mode else {}
    allocation = {"status": {"allocation": control.allocation(args.node, args.device, parameters,
                                                              driver=DRIVER)}}
    _call(args, "PATCH", f"{CLAIMS}/{args.name}/status", allocation,
          "application/merge-patch+json")
    with _kubelet(Path(args.registration)) as kubelet:
        answer = kubelet.prepare([Claim(uid=uid, name=args.name, namespace=NAMESPACE)])[uid]
    return {"uid": uid, "error": answer.error}


def unprepare(args: argparse.Namespace) -> dict[str, Any]:
    from simnode.kubelet.plugin import Claim

    with _kubelet(Path(args.registration)) as kubelet:
        error = kubelet.unprepare([Claim(uid=args.uid, name=args.name, namespace=NAMESPACE)])
    _call(args, "DELETE", f"{CLAIMS}/{args.name}")
    return {"error": error[args.uid]}


def colour(text: str) -> tuple[int, int, int]:
    parts = text.split(",")
    if len(parts) != 3 or not all(p.isdecimal() and int(p) <= 255 for p in parts):
        raise argparse.ArgumentTypeError(f"--colour must be R,G,B of 0-255, got {text!r}")
    red, green, blue = (int(p) for p in parts)
    return red, green, blue


def show(args: argparse.Namespace) -> int:
    from tests.support.layout import ClientError, SolidClient

    stop = threading.Event()
    asked = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGUSR1, lambda *_: asked.set())
    try:
        client = SolidClient(Path(args.socket), colour=args.colour, bind_outputs=True)
    except ClientError as err:
        print(json.dumps({"error": str(err)}), flush=True)
        return 1
    with client:
        if not client.shown.wait(SHOW_TIMEOUT_S) or client.error is not None:
            why = client.error or f"not shown within {SHOW_TIMEOUT_S:g} s"
            print(json.dumps({"error": str(why)}), flush=True)
            return 1
        print(json.dumps({"shown": True, "configured": client.configured,
                          "outputs_offered": client.outputs_offered,
                          "output_events": client.output_events}), flush=True)
        while not stop.wait(0.1) and not client.closed.is_set():
            if asked.is_set():
                asked.clear()
                answered = client.roundtrip(ROUNDTRIP_TIMEOUT_S)
                print(json.dumps({"roundtrip": answered, "configured": client.configured,
                                  "output_events": client.output_events}), flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="claim")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("prepare", "unprepare"):
        p = sub.add_parser(name)
        p.add_argument("--api", required=True)
        p.add_argument("--token-file", required=True)
        p.add_argument("--ca-file", required=True)
        p.add_argument("--registration", required=True)
        p.add_argument("name")
    sub.choices["prepare"].add_argument("--node", required=True)
    sub.choices["prepare"].add_argument("--device", required=True)
    sub.choices["prepare"].add_argument("--mode")
    sub.choices["unprepare"].add_argument("uid")
    shower = sub.add_parser("show")
    shower.add_argument("--socket", required=True)
    shower.add_argument("--colour", required=True, type=colour)
    args = parser.parse_args(argv)
    if args.command == "show":
        return show(args)
    result = prepare(args) if args.command == "prepare" else unprepare(args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
