"""The fake apiserver's certificates: its own CA and a serving leaf signed by it, made with the
`openssl` CLI (no Python crypto package is locked) in a private temp dir that `close()` removes.

The leaf names every address a client may dial: 127.0.0.1 and localhost for tests, the host the
server listens on, and the in-cluster names a pod resolves (`kubernetes.default.svc`, ...), so a
client verifying with the CA (as a pod does with the mounted `ca.crt`) checks the hostname too.
"""

from __future__ import annotations

import ipaddress
import os
import ssl
import subprocess
import tempfile
from pathlib import Path

_OPENSSL_TIMEOUT_S = 60.0
_DAYS = "7"
_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
IN_CLUSTER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)


class CertificateError(Exception):
    """openssl could not make the CA or the leaf; the message has its stderr."""


def _openssl(*args: str) -> None:
    try:
        subprocess.run(["openssl", *args], check=True, capture_output=True,
                       timeout=_OPENSSL_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        stderr = getattr(exc, "stderr", b"") or b""
        raise CertificateError(f"openssl {args[0]} failed: {exc}: "
                               f"{stderr.decode(errors='replace').strip()}") from exc


def _subject_alt_names(host: str) -> str:
    ips = {"127.0.0.1"}
    names = set(IN_CLUSTER_NAMES)
    try:
        ips.add(str(ipaddress.ip_address(host)))
    except ValueError:
        names.add(host)
    return ",".join([*(f"DNS:{n}" for n in sorted(names)), *(f"IP:{i}" for i in sorted(ips))])


class ServingCertificates:
    """A CA (`ca_file`, `ca_pem`) and a leaf for `host` signed by it (`cert_file`, `key_file`)."""

    def __init__(self, host: str) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="fakekube-tls-")
        d = Path(self._tmp.name)
        self.ca_file = d / "ca.crt"
        self.cert_file = d / "tls.crt"
        self.key_file = d / "tls.key"
        try:
            self._make(d, host)
        except BaseException:
            self._tmp.cleanup()
            raise
        self.ca_pem = self.ca_file.read_bytes()

    def _make(self, d: Path, host: str) -> None:
        ca_key, csr, ext = d / "ca.key", d / "tls.csr", d / "tls.ext"
        _openssl("req", "-x509", *_EC, "-days", _DAYS, "-subj", "/CN=fakekube-ca",
                 "-addext", "basicConstraints=critical,CA:TRUE",
                 "-addext", "keyUsage=critical,keyCertSign,cRLSign",
                 "-keyout", os.fspath(ca_key), "-out", os.fspath(self.ca_file))
        _openssl("req", "-new", *_EC, "-subj", "/CN=kube-apiserver",
                 "-keyout", os.fspath(self.key_file), "-out", os.fspath(csr))
        ext.write_text(
            f"subjectAltName={_subject_alt_names(host)}\n"
            "basicConstraints=critical,CA:FALSE\n"
            "keyUsage=critical,digitalSignature\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid\n")
        _openssl("x509", "-req", "-in", os.fspath(csr), "-CA", os.fspath(self.ca_file),
                 "-CAkey", os.fspath(ca_key), "-CAcreateserial", "-days", _DAYS,
                 "-extfile", os.fspath(ext), "-out", os.fspath(self.cert_file))
        ca_key.unlink()  # nothing needs to sign again; the CA's key does not outlive start-up

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def close(self) -> None:
        self._tmp.cleanup()
