"""A read-only stand-in for the images' registry (ghcr.io) on the real-cluster tier, which
reaches no registry: the images containerd holds, served under their own names through the
Docker Registry HTTP API, and containerd pointed at it for ghcr.io by its standard per-host
config (ghcr.io/hosts.toml in the cluster's `config_path`, read on every pull). A pod whose pull
policy pulls (`:latest`, as the README's manifests leave it) then pulls as an owner's node
does, and gets the images built from this checkout (the tier put them into containerd).
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Final

from simnode.cluster.local import components
from simnode.cluster.local.components import Paths

REGISTRY: Final = "ghcr.io"
_PATH: Final = re.compile(r"^/v2/(?P<name>.+)/(?P<kind>manifests|blobs)/(?P<ref>[^/]+)$")
_OCI_MANIFEST: Final = "application/vnd.oci.image.manifest.v1+json"


class _Content:
    """containerd's images (ref -> media type, digest) and its content store's blobs."""

    def __init__(self, paths: Paths) -> None:
        self.paths = paths
        self.blobs = paths.containerd_root / "io.containerd.content.v1.content" / "blobs"

    def resolve(self, ref: str) -> tuple[str, str] | None:
        listing = subprocess.run(
            [self.paths.exe("ctr"), "--address", str(components.CONTAINERD_SOCKET), "-n",
             "k8s.io", "images", "ls"], capture_output=True, text=True, timeout=60,
            check=True).stdout
        for line in listing.splitlines()[1:]:
            fields = line.split()
            if fields and fields[0] == ref:
                return fields[1], fields[2]
        return None

    def blob(self, digest: str) -> Path | None:
        algorithm, _, hexdigest = digest.partition(":")
        path = self.blobs / algorithm / hexdigest
        return path if re.fullmatch(r"[0-9a-f]{64}", hexdigest) and path.is_file() else None


def _handler(content: _Content, served: list[str]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_HEAD(self) -> None:  # noqa: N802 (http.server's name)
            self._answer(body=False)

        def do_GET(self) -> None:  # noqa: N802
            self._answer(body=True)

        def _answer(self, *, body: bool) -> None:
            path = self.path.split("?", 1)[0]
            if path in ("/v2", "/v2/"):
                return self._send(200, "application/json", b"{}", "", body)
            found = _PATH.match(path)
            if not found:
                return self._send(404, "text/plain", b"not found\n", "", body)
            ref, media = found["ref"], ""
            if found["kind"] == "manifests" and not ref.startswith("sha256:"):
                resolved = content.resolve(f"{REGISTRY}/{found['name']}:{ref}")
                if resolved is None:
                    return self._send(404, "text/plain", b"unknown tag\n", "", body)
                media, ref = resolved
            blob = content.blob(ref)
            if blob is None:
                return self._send(404, "text/plain", b"unknown blob\n", "", body)
            data = blob.read_bytes() if found["kind"] == "manifests" else b""
            if found["kind"] == "manifests" and not media:
                media = json.loads(data).get("mediaType", _OCI_MANIFEST)
            served.append(f"{self.command} {path}")
            if found["kind"] == "manifests":
                return self._send(200, media, data, ref, body)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(blob.stat().st_size))
            self.send_header("Docker-Content-Digest", ref)
            self.end_headers()
            if body:
                with blob.open("rb") as source:
                    shutil.copyfileobj(source, self.wfile)

        def _send(self, code: int, media: str, data: bytes, digest: str, body: bool) -> None:
            self.send_response(code)
            self.send_header("Content-Type", media)
            self.send_header("Content-Length", str(len(data)))
            if digest:
                self.send_header("Docker-Content-Digest", digest)
            self.end_headers()
            if body:
                self.wfile.write(data)

    return Handler


@contextlib.contextmanager
def serving(paths: Paths) -> Iterator[list[str]]:
    """The stand-in on a free loopback port and containerd's hosts.toml for ghcr.io naming
    it; yields the requests it answered. Both undone on the way out."""
    served: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(_Content(paths), served))
    thread = threading.Thread(target=server.serve_forever, name="registry", daemon=True)
    thread.start()
    hosts = paths.registry_hosts / REGISTRY / "hosts.toml"
    made = [d for d in (paths.registry_hosts, hosts.parent) if not d.exists()]
    try:
        hosts.parent.mkdir(parents=True, exist_ok=True)
        hosts.write_text(f'server = "https://{REGISTRY}"\n\n'
                         f'[host."http://127.0.0.1:{server.server_port}"]\n'
                         '  capabilities = ["pull", "resolve"]\n')
        yield served
    finally:
        hosts.unlink(missing_ok=True)
        for directory in reversed(made):
            directory.rmdir()
        server.shutdown()
        server.server_close()
        thread.join(timeout=30)
