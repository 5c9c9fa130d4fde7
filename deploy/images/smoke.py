"""Runs each image build.sh made, as a cluster owner's node would start it, and checks it.

    python3 deploy/images/smoke.py [--registry R] [--tag T]

- The four pod images hold no shell (`/bin/sh` cannot be run) and their binary answers
  `--version`.
- The capture image starts with no Secret mounted, without capabilities, and answers HTTPS on
  /healthz from its self-signed start-up leaf (the leaf's subject is printed).
- The -cli image decodes an EDID of the corpus and agrees with edid-decode on its name.
Prints each image's size. Exits 1 naming the first check that failed.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
IMAGES = REPO / "deploy" / "images"
POD_IMAGES = ("display-declare", "display-weston", "display-operator", "display-capture")
CLI_IMAGE = "display-operator-cli"
HEALTHZ_WITHIN_S = 90.0
EDID = "dell-up2718q-dp-28d8f761.bin"


class SmokeError(Exception):
    """A check failed; the message says which and what was seen."""


def podman(*args: str, timeout: float = 120.0,
           check: bool = True) -> subprocess.CompletedProcess[str]:
    """podman with build.sh's settings (unless the caller names its own)."""
    env = {
        "CONTAINERS_CONF": str(IMAGES / "podman" / "containers.conf"),
        "CONTAINERS_STORAGE_CONF": str(IMAGES / "podman" / "storage.conf"),
        **os.environ,
    }
    done = subprocess.run(["podman", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, check=False)
    if check and done.returncode != 0:
        raise SmokeError(f"podman {' '.join(args)}: rc {done.returncode}: {done.stderr.strip()}")
    return done


def check_no_shell(image: str) -> None:
    done = podman("run", "--rm", "--entrypoint", "/bin/sh", image, "-c", "true", check=False)
    if done.returncode == 0:
        raise SmokeError(f"{image} runs /bin/sh: a pod image must hold no shell")


def check_version(image: str) -> str:
    done = podman("run", "--rm", "--cap-drop=ALL", image, "--version")
    return done.stdout.strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def _capture_container(image: str, port: int) -> Iterator[str]:
    name = f"display-smoke-capture-{os.getpid()}"
    podman("run", "-d", "--name", name, "--network=host", "--cap-drop=ALL",
           "--security-opt=no-new-privileges", "-e", "NODE_NAME=smoke",
           "-e", f"CAPTURE_ADDR=127.0.0.1:{port}", "-e", "CAPTURE_KUBE_URL=http://127.0.0.1:9",
           image)
    try:
        yield name
    finally:
        podman("rm", "-f", name, check=False)


def _healthz(port: int) -> tuple[int, dict[str, object]]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    try:
        connection.request("GET", "/healthz")
        status = connection.getresponse().status
        sock = connection.sock
        assert isinstance(sock, ssl.SSLSocket)
        der = sock.getpeercert(binary_form=True)
    finally:
        connection.close()
    return status, {"certificate_bytes": len(der or b"")}


def check_capture_serves_https(image: str) -> str:
    port = _free_port()
    with _capture_container(image, port) as name:
        deadline = time.monotonic() + HEALTHZ_WITHIN_S
        while True:
            try:
                status, cert = _healthz(port)
                break
            except OSError as exc:
                if time.monotonic() > deadline:
                    logs = podman("logs", name, check=False)
                    raise SmokeError(f"{image}: no HTTPS on :{port} within "
                                     f"{HEALTHZ_WITHIN_S:g} s ({exc}); its log:\n"
                                     f"{logs.stdout}{logs.stderr}") from exc
                time.sleep(0.2)
    return f"/healthz answered {status} over TLS ({cert['certificate_bytes']} B leaf)"


def check_cli_decodes_an_edid(image: str) -> str:
    edid_dir = REPO / "testdata" / "edid"
    ours = podman("run", "--rm", "-v", f"{edid_dir}:/edid:ro", "--entrypoint",
                  "/usr/local/bin/declare", image, "edid", f"/edid/{EDID}").stdout
    theirs = podman("run", "--rm", "-v", f"{edid_dir}:/edid:ro", "--entrypoint",
                    "/usr/bin/edid-decode", image, f"/edid/{EDID}", check=False).stdout
    if "DELL UP2718Q" not in ours or "DELL UP2718Q" not in theirs:
        raise SmokeError(f"{image}: declare edid and edid-decode disagree on {EDID}:\n"
                         f"{ours}\n---\n{theirs[:400]}")
    return "declare edid and edid-decode agree on the monitor's name"


def _version() -> str:
    """libdisplay.__version__, the tag build.sh gives the images by default."""
    text = (REPO / "libdisplay" / "__init__.py").read_text()
    found = re.search(r'^__version__ = "(.*)"$', text, re.MULTILINE)
    if found is None:
        raise SmokeError("no __version__ in libdisplay/__init__.py")
    return found.group(1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--registry", default="ghcr.io/liken-sh")
    parser.add_argument("--tag", default=_version(), help="default: the binaries' version")
    args = parser.parse_args(argv)
    try:
        for repo in (*POD_IMAGES, CLI_IMAGE):
            image = f"{args.registry}/{repo}:{args.tag}"
            size = podman("image", "inspect", "--format", "{{.Size}}", image).stdout.strip()
            print(f"{repo}: {int(size) / 2**20:.0f} MiB", flush=True)
        for repo in POD_IMAGES:
            image = f"{args.registry}/{repo}:{args.tag}"
            check_no_shell(image)
            print(f"{repo}: no shell; --version: {check_version(image)}", flush=True)
        capture = f"{args.registry}/display-capture:{args.tag}"
        print(f"display-capture, no Secret: {check_capture_serves_https(capture)}", flush=True)
        cli = f"{args.registry}/{CLI_IMAGE}:{args.tag}"
        print(f"{CLI_IMAGE}: {check_cli_decodes_an_edid(cli)}", flush=True)
    except (SmokeError, subprocess.TimeoutExpired) as err:
        print(f"smoke: FAILED: {err}", file=sys.stderr)
        return 1
    print("smoke: every image passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
