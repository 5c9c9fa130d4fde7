"""`python3 -m fakekube --port N`: run the fake apiserver as its own process (the simulated node).

Prints its URL as the first line of stdout once it answers, then serves until SIGTERM or SIGINT.
`--tls` serves HTTPS with its own CA and prints `ca-file=PATH` (the CA, in a temp dir removed at
exit); `--authorize` requires bearer tokens and RBAC and prints `admin-token=TOKEN`. Those lines
follow the URL line, in that order, before anything else.
`--load FILE` (repeatable) creates the objects of a YAML file at start, CRDs first, so the kinds
they define can be loaded from the same files. Fault hooks are reachable over HTTP under
`/_fakekube/` (see `fakekube.admin`).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import yaml

from fakekube.server import FakeKube
from fakekube.status import ApiFailure

log = logging.getLogger("fakekube")


class LoadError(Exception):
    """A `--load` file that cannot be read or holds an object the fake refuses."""


def _documents(paths: list[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        try:
            loaded = list(yaml.safe_load_all(path.read_text()))
        except (OSError, yaml.YAMLError) as e:
            raise LoadError(f"{path}: {e}") from e
        for doc in loaded:
            if doc is None:
                continue
            if not isinstance(doc, dict) or not doc.get("kind"):
                raise LoadError(f"{path}: a document without a kind: {doc!r:.80}")
            docs.append(doc)
    # CRDs first: the custom resources in the same files need their kinds served.
    return sorted(docs, key=lambda d: d["kind"] != "CustomResourceDefinition")


def load(fake: FakeKube, paths: list[Path]) -> int:
    docs = _documents(paths)
    for doc in docs:
        name = (doc.get("metadata") or {}).get("name")
        try:
            fake.create(doc)
        except (ApiFailure, LookupError) as e:
            raise LoadError(f"{doc['kind']} {name!r}: {e}") from e
    return len(docs)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m fakekube", description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port")
    p.add_argument("--kube-version", default="1.34", help="schemas and DRA limits of this minor")
    p.add_argument("--no-device-taints", action="store_true",
                   help="DRADeviceTaints off: taints in ResourceSlices are dropped")
    p.add_argument("--load", type=Path, action="append", default=[], metavar="FILE",
                   help="YAML file of objects to create at start (repeatable)")
    p.add_argument("--tls", action="store_true", help="serve HTTPS with a CA of its own")
    p.add_argument("--authorize", action="store_true",
                   help="authenticate bearer tokens and authorize with RBAC objects")
    p.add_argument("-v", "--verbose", action="store_true", help="log every request")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    fake = FakeKube(host=args.host, port=args.port, kube_version=args.kube_version,
                    device_taints=not args.no_device_taints, tls=args.tls,
                    authorize=args.authorize)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        loaded = load(fake, args.load)
    except LoadError as e:
        log.error("cannot load: %s", e)
        fake.stop()
        return 2
    fake.start()
    log.info("fakekube serving %s with %d loaded objects", fake.url, loaded)
    lines = [fake.url]
    if args.tls:
        lines.append(f"ca-file={fake.ca_path}")
    if args.authorize:
        lines.append(f"admin-token={fake.admin_token}")
    print("\n".join(lines), flush=True)
    try:
        stop.wait()
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
