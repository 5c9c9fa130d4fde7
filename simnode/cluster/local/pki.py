"""The local cluster's certificates and keys, made with the `openssl` CLI (no Python crypto
package is locked), as local-up-cluster makes them: one CA signs the API server's serving
certificate, the kubelet's, and a client certificate for each component and the admin; the
service accounts' tokens are signed with a key of their own.

Every file is written into a fresh directory that replaces `dir` whole once all exist, so a
failure leaves no half-made PKI; an existing complete one is reused (its CA stays valid for
a year).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from simnode.cluster.api import ClusterError

_EC: Final = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
_DAYS: Final = "365"
_DONE: Final = "complete"


class PkiError(ClusterError):
    """openssl could not make a key or certificate; the message has its stderr."""


@dataclass(frozen=True, slots=True)
class Identity:
    """A client certificate: the user `cn` in the groups `orgs`."""

    name: str
    cn: str
    orgs: tuple[str, ...] = ()


def identities(node: str) -> tuple[Identity, ...]:
    """Who talks to the API server with a certificate, as kubeadm names them."""
    return (
        Identity("admin", "kubernetes-admin", ("system:masters",)),
        Identity("controller-manager", "system:kube-controller-manager"),
        Identity("scheduler", "system:kube-scheduler"),
        Identity("kube-proxy", "system:kube-proxy"),
        Identity("kubelet", f"system:node:{node}", ("system:nodes",)),
        # The API server's own client certificate for the kubelet's API (logs, exec).
        Identity("apiserver-kubelet-client", "kube-apiserver-kubelet-client",
                 ("system:masters",)),
    )


@dataclass(frozen=True, slots=True)
class Pki:
    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    def cert(self, name: str) -> Path:
        return self.dir / f"{name}.crt"

    def key(self, name: str) -> Path:
        return self.dir / f"{name}.key"

    @property
    def service_account_key(self) -> Path:
        return self.dir / "sa.key"

    @property
    def service_account_pub(self) -> Path:
        return self.dir / "sa.pub"


def ensure(dir: Path, *, node: str, node_ip: str, api_ips: Sequence[str]) -> Pki:
    """The PKI in `dir`, made now unless a complete one is there."""
    pki = Pki(dir)
    if (dir / _DONE).is_file():
        return pki
    dir.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dir.name}.", dir=dir.parent))
    try:
        _make(Pki(work), node=node, node_ip=node_ip, api_ips=api_ips)
        (work / _DONE).write_text("")
        shutil.rmtree(dir, ignore_errors=True)
        os.rename(work, dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return pki


def _make(pki: Pki, *, node: str, node_ip: str, api_ips: Sequence[str]) -> None:
    _openssl("req", "-x509", *_EC, "-days", _DAYS, "-subj", "/CN=simnode-local-ca",
             "-keyout", pki.key("ca"), "-out", pki.ca)
    api_names = ["kubernetes", "kubernetes.default", "kubernetes.default.svc",
                 "kubernetes.default.svc.cluster.local", "localhost"]
    _leaf(pki, "apiserver", "/CN=kube-apiserver",
          [f"DNS:{n}" for n in api_names] + [f"IP:{ip}" for ip in api_ips], server=True)
    _leaf(pki, "kubelet-serving", f"/O=system:nodes/CN=system:node:{node}",
          [f"DNS:{node}", "DNS:localhost", "IP:127.0.0.1", f"IP:{node_ip}"], server=True)
    for who in identities(node):
        subject = "".join(f"/O={o}" for o in who.orgs) + f"/CN={who.cn}"
        _leaf(pki, who.name, subject, [], server=False)
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:prime256v1",
             "-out", pki.service_account_key)
    _openssl("pkey", "-in", pki.service_account_key, "-pubout", "-out",
             pki.service_account_pub)


def _leaf(pki: Pki, name: str, subject: str, sans: list[str], *, server: bool) -> None:
    csr = pki.dir / f"{name}.csr"
    ext = pki.dir / f"{name}.ext"
    usage = "serverAuth" if server else "clientAuth"
    lines = ["basicConstraints=CA:FALSE", "keyUsage=critical,digitalSignature,keyEncipherment",
             f"extendedKeyUsage={usage}"]
    if sans:
        lines.append("subjectAltName=" + ",".join(sans))
    ext.write_text("\n".join(lines) + "\n")
    _openssl("req", "-new", *_EC, "-subj", subject, "-keyout", pki.key(name), "-out", csr)
    _openssl("x509", "-req", "-in", csr, "-CA", pki.ca, "-CAkey", pki.key("ca"),
             "-CAcreateserial", "-days", _DAYS, "-extfile", ext, "-out", pki.cert(name))
    csr.unlink()
    ext.unlink()


def _openssl(*args: str | Path) -> None:
    argv = ["openssl", *(os.fspath(a) for a in args)]
    try:
        subprocess.run(argv, check=True, capture_output=True, timeout=60)
    except subprocess.CalledProcessError as exc:
        raise PkiError(f"openssl {args[0]} failed: {exc.stderr.decode(errors='replace')}"
                       ) from exc
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise PkiError(f"openssl {args[0]} failed: {exc}") from exc
