"""The pod's service account as the kubelet projects it at
`/var/run/secrets/kubernetes.io/serviceaccount`: `token`, `ca.crt`, `namespace`, written
atomically (`volumes.project`), and the token requested again before it expires.

The kubelet's token manager renews a token once 80% of its life has passed (or after 24 h) and
rewrites the projected file, which the binaries re-read on their next request. A failed
request is retried every `RETRY_S` while the old token still lives; the binaries keep the old
one meanwhile, as in a pod.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from simnode.kubelet.volumes import project

log = logging.getLogger(__name__)

RENEW_AT: Final = 0.8
"""The share of a token's life after which the kubelet requests a new one."""
MAX_AGE_S: Final = 24 * 3600.0
RETRY_S: Final = 5.0


@dataclass(frozen=True, slots=True)
class IssuedToken:
    token: str
    expires_at: float | None = None
    """Seconds since the epoch; None for a token that does not expire."""
    issued_at: float = 0.0


def renew_at(issued: IssuedToken) -> float | None:
    """When the kubelet asks for the next token (seconds since the epoch), or None: never."""
    if issued.expires_at is None:
        return None
    life = issued.expires_at - issued.issued_at
    return issued.issued_at + min(life * RENEW_AT, MAX_AGE_S)


class AccountProjection:
    """The projected service account of one pod, kept fresh until `stop`."""

    def __init__(self, directory: Path, *, issue: Callable[[], IssuedToken], ca_pem: bytes,
                 namespace: str) -> None:
        self.directory = directory
        self.issue = issue
        self.ca_pem = ca_pem
        self.namespace = namespace
        self.current: IssuedToken | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Project the first token (its failure is the caller's), then keep it renewed."""
        self.directory.mkdir(parents=True, exist_ok=True)
        self._write(self.issue())
        if renew_at(self._issued()) is not None:
            self._thread = threading.Thread(target=self._renew_until_stopped,
                                            name="service account token", daemon=True)
            self._thread.start()

    def _issued(self) -> IssuedToken:
        assert self.current is not None
        return self.current

    def _write(self, issued: IssuedToken) -> None:
        project(self.directory, {"token": issued.token.encode(), "ca.crt": self.ca_pem,
                                 "namespace": self.namespace.encode()})
        self.current = issued

    def _renew_until_stopped(self) -> None:
        while True:
            due = renew_at(self._issued())
            if due is None or self._stop.wait(max(0.0, due - time.time())):
                return
            try:
                self._write(self.issue())
                log.info("renewed the service account token in %s", self.directory)
            except Exception as exc:  # the old token still serves until it expires
                log.warning("renewing the service account token failed: %s", exc)
                if self._stop.wait(RETRY_S):
                    return

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None
