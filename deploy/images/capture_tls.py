"""The capture image's serving certificate in its container: the self-signed start-up leaf with
no Secret, then a Secret's leaf once the kubelet projects one, without a restart.

The Secret's directory is mounted read-only at /var/run/display-capture-tls, as the manifest
mounts it, from an empty host directory. The Secret then arrives the way the kubelet's atomic
writer projects one: the files in a fresh timestamped directory, a `..data` symlink swapped to
it by rename, and `tls.crt`/`tls.key` symlinks through `..data`.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from deploy.images.podmanrun import SmokeError, podman

TLS_DIR = "/var/run/display-capture-tls"
WITHIN_S = 90.0
SECRET_CN = "display-capture.smoke.svc"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def capture_container(image: str, port: int, *, tls_dir: Path) -> Iterator[str]:
    name = f"display-smoke-capture-{os.getpid()}"
    podman("run", "-d", "--name", name, "--network=host", "--cap-drop=ALL",
           "--security-opt=no-new-privileges", "-v", f"{tls_dir}:{TLS_DIR}:ro",
           "-e", "NODE_NAME=smoke", "-e", f"CAPTURE_ADDR=127.0.0.1:{port}",
           "-e", "CAPTURE_KUBE_URL=http://127.0.0.1:9", image)
    try:
        yield name
    finally:
        podman("rm", "-f", name, check=False)


def served_leaf(port: int) -> tuple[int, bytes]:
    """/healthz's status and the DER leaf the server presented."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=5, context=context)
    try:
        connection.request("GET", "/healthz")
        status = connection.getresponse().status
        sock = connection.sock
        assert isinstance(sock, ssl.SSLSocket)
        der = sock.getpeercert(binary_form=True) or b""
    finally:
        connection.close()
    return status, der


def _wait_leaf(name: str, port: int, *, unlike: bytes | None, what: str) -> bytes:
    deadline = time.monotonic() + WITHIN_S
    last = "nothing"
    while True:
        try:
            status, der = served_leaf(port)
            if status == 200 and der and der != unlike:
                return der
            last = f"/healthz {status}, the same leaf" if der == unlike else f"/healthz {status}"
        except OSError as err:
            last = str(err)
        if time.monotonic() > deadline:
            logs = podman("logs", name, check=False)
            raise SmokeError(f"capture: {what} not seen within {WITHIN_S:g} s (last: {last}); "
                             f"its log:\n{logs.stdout}{logs.stderr}")
        time.sleep(0.2)


def make_leaf(directory: Path) -> tuple[bytes, bytes]:
    """A Secret's tls.crt and tls.key, made by the host's openssl."""
    key, cert = directory / "k.pem", directory / "c.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                    "-subj", f"/CN={SECRET_CN}", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True, timeout=30)
    return cert.read_bytes(), key.read_bytes()


def project_secret(tls_dir: Path, files: dict[str, bytes]) -> None:
    """Write `files` into `tls_dir` as the kubelet's atomic writer projects a Secret."""
    stamp = tls_dir / time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    data = Path(tempfile.mkdtemp(prefix=stamp.name, dir=tls_dir))
    for name, content in files.items():
        (data / name).write_bytes(content)
    (data / "tls.key").chmod(0o644)  # the Secret volume's defaultMode
    temporary = tls_dir / "..data_tmp"
    temporary.symlink_to(data.name)
    temporary.rename(tls_dir / "..data")
    for name in files:
        link = tls_dir / name
        if not link.is_symlink():
            link.symlink_to(f"..data/{name}")


def _state(name: str) -> tuple[str, int]:
    done = podman("inspect", "--format", "{{.Id}} {{.RestartCount}}", name)
    container, restarts = done.stdout.split()
    return container, int(restarts)


def check_secret_rotation(image: str) -> list[str]:
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="smoke-tls-") as tmp:
        tls_dir = Path(tmp) / "secret"
        tls_dir.mkdir()
        with capture_container(image, port, tls_dir=tls_dir) as name:
            first = _wait_leaf(name, port, unlike=None, what="HTTPS /healthz")
            before = _state(name)
            cert, key = make_leaf(Path(tmp))
            project_secret(tls_dir, {"tls.crt": cert, "tls.key": key})
            second = _wait_leaf(name, port, unlike=first, what="the Secret's leaf")
            expected = ssl.PEM_cert_to_DER_cert(cert.decode())
            if second != expected:
                raise SmokeError("capture: the leaf served after the Secret is not the Secret's")
            after = _state(name)
            if after != before or after[1] != 0:
                raise SmokeError(f"capture: restarted while switching (before {before}, after "
                                 f"{after})")
    return ["no Secret: /healthz 200 over TLS from the self-signed leaf",
            f"Secret projected (..data swap): the Secret's leaf ({SECRET_CN}) is served, same "
            f"container {after[0][:12]}, restart count {after[1]}"]
