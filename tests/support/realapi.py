"""A real kube-apiserver and etcd (v1.37.2, built by build-support/kube/build) for the
API-facing tests, with the part of FakeKube's interface those tests use, so the same test can
hold the fake to the real server.

The switch: `DISPLAY_OPERATOR_REAL_API=1` makes `api_server()` start this control plane instead
of a FakeKube; without it nothing here runs. With the switch set a missing binary or a server
that does not come up fails the test (never a skip).

Only the control plane runs (no controller-manager, scheduler or kubelet), configured as the
local cluster's (`simnode.cluster.local.components`: TLS, Node,RBAC, NodeRestriction, a
service-account issuer, an audit log) but on free ports and in a directory of its own, so it
runs beside a `simnode up --cluster local` on the same machine. What the missing controllers
would do that the tests rely on, the fixture does itself: each namespace it creates gets its
`default` ServiceAccount (the ServiceAccount admission plugin refuses pods without one).

Identities: bearer tokens, as the fake's. The API server asks a token webhook served here
(`--authentication-token-webhook-config-file`) about tokens it did not sign itself, so
`user_token(user, groups)` mints an identity at any time, as the fake's does; ServiceAccount
tokens are real ones from the TokenRequest API.

The request log is read from the API server's audit log (one event per request), as the fake's
`request_log()` records: a test's own requests and its clients', not the fixture's (which
authenticates as `FIXTURE_USER`). Between tests `reset()` deletes, straight from etcd, every key
made since the server came up (no namespace controller runs to finish a namespace deletion).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import logging
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Final, Protocol

import pytest

from fakekube import grants
from fakekube.faults import RequestRecord
from fakekube.guard import Denial
from fakekube.server import FakeKube, with_restart_count
from fakekube.testing import RawReply, call
from libdisplay.processes import Process, ProcessError, start
from simnode.cluster.local import components, pki
from simnode.cluster.local.components import Paths

log = logging.getLogger(__name__)
JsonObject = dict[str, Any]

ENV: Final = "DISPLAY_OPERATOR_REAL_API"
REPO: Final = Path(__file__).resolve().parents[2]
BUILD: Final = REPO / "build-support" / "kube" / "build"
# Bounds a loaded two-core machine meets: a first start migrates etcd's schema and builds
# the OpenAPI of every built-in kind (about 10 s on a quiet machine here).
START_TIMEOUT_S: Final = 180.0
WAIT_S: Final = 60.0
PORT_ATTEMPTS: Final = 3
FIXTURE_USER: Final = "realapi:fixture"
ADMIN_USER: Final = "system:admin"
MASTERS: Final = "system:masters"
AUTHENTICATED: Final = "system:authenticated"
NODE_NAME_EXTRA: Final = "authentication.kubernetes.io/node-name"


class Clearable(Protocol):
    def clear(self) -> None: ...


class ApiServer(Protocol):
    """What FakeKube and RealKube both offer, which a test held to both may use."""

    @property
    def url(self) -> str: ...
    @property
    def host(self) -> str: ...
    @property
    def port(self) -> int: ...
    @property
    def ca_pem(self) -> bytes: ...
    @property
    def admin_token(self) -> str: ...
    @property
    def open_watches(self) -> int: ...
    @property
    def requests(self) -> Clearable: ...

    def create(self, obj: JsonObject) -> JsonObject: ...
    def register_crd(self, crd: JsonObject) -> object: ...
    def get(self, api_version: str, kind: str, name: str, *,
            namespace: str | None = None) -> JsonObject | None: ...
    def objects(self, api_version: str, kind: str, *,
                namespace: str | None = None) -> list[JsonObject]: ...
    def delete_node_slices(self, node: str, *, driver: str | None = None) -> list[str]: ...
    def set_restart_count(self, namespace: str, pod: str, container: str, count: int, *,
                          init: bool = False) -> JsonObject: ...
    def user_token(self, user: str, groups: tuple[str, ...] | list[str] = ()) -> str: ...
    def service_account_token(self, namespace: str, name: str, *,
                              audiences: tuple[str, ...] | list[str] | None = None,
                              expires_at: float | None = None) -> str: ...
    def allow(self, verb: str, resource: str, *, user: str | None = None,
              group: str | None = None, api_group: str = "", subresource: str = "",
              namespace: str | None = None, name: str | None = None) -> str: ...
    def request_log(self) -> list[RequestRecord]: ...
    def denials(self) -> list[Denial]: ...


class RealApiError(Exception):
    """The real control plane could not be built, started or used; the message says which
    part and where its log is."""


def enabled() -> bool:
    """Whether the switch asks for the real API server."""
    return os.environ.get(ENV) == "1"


def binaries() -> Path:
    """The components' bin dir (build-support/kube/build: warm, it builds nothing)."""
    try:
        done = subprocess.run([str(BUILD)], stdout=subprocess.PIPE, text=True, check=True,
                              timeout=3600)
    except (OSError, subprocess.SubprocessError) as exc:
        raise RealApiError(f"{BUILD} failed ({ENV}=1 needs the built components): {exc}"
                           ) from exc
    bin_dir = Path(done.stdout.strip().splitlines()[-1])
    for name in ("etcd", "kube-apiserver"):
        if not os.access(bin_dir / name, os.X_OK):
            raise RealApiError(f"{bin_dir / name} is missing after {BUILD}")
    return bin_dir


def free_port() -> int:
    """A port no one listens on now (the kernel's choice); etcd and the API server bind it
    moments later."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Tokens:
    """The identities the webhook vouches for: token -> TokenReview user info."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._users: dict[str, JsonObject] = {}

    def add(self, user: str, groups: tuple[str, ...]) -> str:
        token = secrets.token_urlsafe(32)
        with self._lock:
            self._users[token] = {"username": user,
                                  "groups": list(dict.fromkeys([*groups, AUTHENTICATED]))}
        return token

    def find(self, token: str) -> JsonObject | None:
        with self._lock:
            return self._users.get(token)


class _WebhookHandler(BaseHTTPRequestHandler):
    server: _Webhook

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        review = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        user = self.server.tokens.find(str((review.get("spec") or {}).get("token") or ""))
        status: JsonObject = {"authenticated": user is not None}
        if user is not None:
            status["user"] = user
        body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
                           "status": status}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Webhook(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, tokens: _Tokens) -> None:
        super().__init__(("127.0.0.1", 0), _WebhookHandler)
        self.tokens = tokens
        self.thread = threading.Thread(target=self.serve_forever, name="realapi-webhook",
                                       daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


class RealKube:
    """etcd and kube-apiserver of their own, started by `start()` and stopped and reaped by
    `stop()` (also a context manager). The methods mirror FakeKube's of the same names."""

    def __init__(self, work: Path | None = None) -> None:
        self._own_work = work is None
        self.work = Path(tempfile.mkdtemp(prefix="realapi-")) if work is None else work
        self.paths = Paths(state=self.work, cache=self.work, bin=binaries())
        self.etcd_url = f"http://127.0.0.1:{free_port()}"
        self._etcd_peer = f"http://127.0.0.1:{free_port()}"
        self.port = free_port()
        self.host = "127.0.0.1"
        self.tokens = _Tokens()
        self._webhook = _Webhook(self.tokens)
        self._etcd: Process | None = None
        self._apiserver: Process | None = None
        self.pki: pki.Pki | None = None
        self._fixture_token = self.tokens.add(FIXTURE_USER, (MASTERS,))
        self.admin_token = self.tokens.add(ADMIN_USER, (MASTERS,))
        self._baseline: set[str] = set()
        self._audit_offset = 0
        self._started_offset = 0  # where the running API server's audit events begin
        self._resources: dict[tuple[str, str], tuple[str, bool]] = {}

    @property
    def url(self) -> str:
        return f"https://{self.host}:{self.port}"

    @property
    def ca_path(self) -> Path:
        assert self.pki is not None, "start() first"
        return self.pki.ca

    @property
    def ca_pem(self) -> bytes:
        return self.ca_path.read_bytes()

    @property
    def apiserver_pid(self) -> int:
        assert self._apiserver is not None, "the API server is not running"
        return self._apiserver.pid

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> RealKube:
        try:
            self._webhook.thread.start()
            self.pki = pki.ensure(self.work / "pki", node="realapi-node", node_ip="127.0.0.1",
                                  api_ips=["127.0.0.1"])
            self.paths.logs.mkdir(parents=True, exist_ok=True)
            self._start_on_free_ports()
            # What the controller-manager would make: the ServiceAccount admission plugin
            # refuses a pod whose namespace lacks its `default` ServiceAccount.
            for namespace in ("default", "kube-system", "kube-public"):
                self._ok("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                         {"metadata": {"name": "default"}})
            self._baseline = set(self._etcd_keys())
            self.requests_clear()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_on_free_ports(self) -> None:
        """etcd and the API server, on other free ports when one was taken between its choice
        and the bind (another session starting its own at the same moment)."""
        for attempt in range(PORT_ATTEMPTS):
            try:
                self._etcd = self._run("etcd", components.etcd(
                    self.paths, client=self.etcd_url, peer=self._etcd_peer),
                    lambda: _get(f"{self.etcd_url}/health")[0] == 200)
                self.start_apiserver()
                return
            except RealApiError as exc:
                logs = "".join(_tail(self.paths.logs / f"{n}.log", 0)
                               for n in ("etcd", "kube-apiserver"))
                if "address already in use" not in logs or attempt == PORT_ATTEMPTS - 1:
                    raise
                log.warning("realapi: a port was taken (%s); starting on others", exc)
                self.stop_apiserver()
                if self._etcd is not None:
                    with contextlib.suppress(ProcessError):
                        self._etcd.stop(grace=10)
                    self._etcd = None
                shutil.rmtree(self.work / "etcd", ignore_errors=True)
                for name in ("etcd", "kube-apiserver"):
                    (self.paths.logs / f"{name}.log").unlink(missing_ok=True)
                self.etcd_url = f"http://127.0.0.1:{free_port()}"
                self._etcd_peer = f"http://127.0.0.1:{free_port()}"
                self.port = free_port()

    def _webhook_config(self) -> Path:
        path = self.work / "token-webhook.kubeconfig"
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "webhook",
            "clusters": [{"name": "webhook", "cluster": {"server": self._webhook.url}}],
            "users": [{"name": "apiserver", "user": {}}],
            "contexts": [{"name": "webhook",
                          "context": {"cluster": "webhook", "user": "apiserver"}}]}))
        return path

    def start_apiserver(self) -> None:
        """The API server (again, after `stop_apiserver`), awaited on /readyz."""
        self._apiserver = self._await("kube-apiserver", self._launch_apiserver())

    async def start_apiserver_async(self) -> None:
        """`start_apiserver` for an event loop: started from the loop's thread (a child dies
        with the thread that started it), its readiness awaited on another."""
        process = self._launch_apiserver()
        self._apiserver = await asyncio.to_thread(self._await, "kube-apiserver", process)

    def _launch_apiserver(self) -> Process:
        assert self.pki is not None
        self._started_offset = _size(self.paths.audit_log)
        argv = components.apiserver(
            self.paths, self.pki, etcd=self.etcd_url, port=self.port, bind="127.0.0.1",
            advertise="127.0.0.1",
            extra=[f"--authentication-token-webhook-config-file={self._webhook_config()}",
                   "--authentication-token-webhook-version=v1",
                   # A token minted for a test is asked about at its first use.
                   "--authentication-token-webhook-cache-ttl=10s",
                   # No `kubernetes` Endpoints for a loopback address (refused) or that
                   # another cluster on this machine owns.
                   "--endpoint-reconciler-type=none"])
        return start(argv, log_path=self.paths.logs / "kube-apiserver.log")

    def _apiserver_ready(self) -> bool:
        assert self.pki is not None
        context = ssl.create_default_context(cafile=str(self.pki.ca))
        return _get(f"{self.url}/readyz", context=context, token=self._fixture_token)[0] == 200

    def stop_apiserver(self) -> None:
        """The API server stopped and reaped (an outage); etcd keeps the state."""
        if self._apiserver is not None:
            with contextlib.suppress(ProcessError):
                self._apiserver.stop(grace=10)
            self._apiserver = None

    def _run(self, name: str, argv: list[str], ready: Callable[[], bool]) -> Process:
        return self._await(name, start(argv, log_path=self.paths.logs / f"{name}.log"), ready)

    def _await(self, name: str, process: Process,
               ready: Callable[[], bool] | None = None) -> Process:
        """`process` once `ready` (the API server's /readyz when None); stopped and reaped
        if it does not get there within START_TIMEOUT_S."""
        try:
            process.wait_until(ready or self._apiserver_ready, timeout=START_TIMEOUT_S,
                               what=f"{name} ready")
        except ProcessError as exc:
            with contextlib.suppress(ProcessError):
                process.stop(grace=5)
            raise RealApiError(f"{name} did not become ready (log "
                               f"{self.paths.logs / f'{name}.log'}): {exc}") from exc
        return process

    def stop(self) -> None:
        self.stop_apiserver()
        if self._etcd is not None:
            with contextlib.suppress(ProcessError):
                self._etcd.stop(grace=10)
            self._etcd = None
        if self._webhook.thread.is_alive():
            self._webhook.shutdown()
            self._webhook.thread.join(5)
        self._webhook.server_close()
        if self._own_work:
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> RealKube:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- etcd: the reset between tests ------------------------------------------------------

    def _etcd_call(self, op: str, body: JsonObject) -> JsonObject:
        request = urllib.request.Request(f"{self.etcd_url}/v3/kv/{op}",
                                         data=json.dumps(body).encode(), method="POST")
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=30) as answer:
            found: JsonObject = json.loads(answer.read())
        return found

    def _etcd_keys(self) -> list[str]:
        everything = {"key": _b64("\0"), "range_end": _b64("\0"), "keys_only": True}
        found = self._etcd_call("range", everything)
        return [base64.b64decode(kv["key"]).decode() for kv in found.get("kvs", [])]

    def reset(self) -> None:
        """Every object made since start deleted (from etcd, as no controllers run to finish
        a namespace's or a pod's deletion); the request log restarts."""
        for key in self._etcd_keys():
            if key not in self._baseline and not key.startswith(_KEPT):
                self._etcd_call("deleterange", {"key": _b64(key)})
        self.requests_clear()

    # -- raw calls as the fixture -----------------------------------------------------------

    def call(self, method: str, path: str, body: object = None, *,
             content_type: str = "application/json", token: str | None = None) -> RawReply:
        """One request (as the fixture unless `token`), again after a 429: a new CRD's
        storage answers "storage is (re)initializing" for a moment."""
        deadline = time.monotonic() + WAIT_S
        while True:
            reply = call(self.url, method, path, body, content_type=content_type,
                         token=token or self._fixture_token, ca=self.ca_pem)
            if reply.code != 429 or time.monotonic() > deadline:
                return reply
            retry = (reply.body.get("details") or {}).get("retryAfterSeconds") or 1
            time.sleep(min(float(retry), 1.0))

    def _ok(self, method: str, path: str, body: object = None, *,
            content_type: str = "application/json") -> JsonObject:
        reply = self.call(method, path, body, content_type=content_type)
        if reply.code >= 300:
            raise RealApiError(f"{method} {path}: {reply.code} {reply.body}")
        return reply.body

    def _resource(self, api_version: str, kind: str) -> tuple[str, bool]:
        """(plural, namespaced) of a kind, from the server's discovery."""
        key = (api_version, kind)
        if key not in self._resources:
            base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
            for r in self._ok("GET", base)["resources"]:
                if "/" not in r["name"]:
                    self._resources[(api_version, r["kind"])] = (r["name"], r["namespaced"])
        if key not in self._resources:
            raise LookupError(f"{kind} is not served at {api_version}")
        return self._resources[key]

    def path(self, api_version: str, kind: str, name: str | None = None, *,
             namespace: str | None = None, subresource: str | None = None) -> str:
        plural, namespaced = self._resource(api_version, kind)
        base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
        if namespaced and namespace is not None:
            base += f"/namespaces/{namespace}"
        return "/".join(p for p in (base, plural, name, subresource) if p)

    # -- objects, as FakeKube's methods ------------------------------------------------------

    def create(self, obj: JsonObject) -> JsonObject:
        """Create `obj`; namespaced objects without a namespace go to "default". A Namespace
        gets its `default` ServiceAccount, as the controller-manager would make it."""
        api_version, kind = str(obj["apiVersion"]), str(obj["kind"])
        _, namespaced = self._resource(api_version, kind)
        ns = (obj.get("metadata") or {}).get("namespace") or "default"
        created = self._ok("POST", self.path(api_version, kind,
                                             namespace=ns if namespaced else None), obj)
        if (api_version, kind) == ("v1", "Namespace"):
            name = created["metadata"]["name"]
            self._ok("POST", f"/api/v1/namespaces/{name}/serviceaccounts",
                     {"metadata": {"name": "default"}})
        if kind == "CustomResourceDefinition":
            self._established(created["metadata"]["name"])
        return created

    def register_crd(self, crd: JsonObject) -> JsonObject:
        """Serve the CRD: the one registered already when its spec is the same, else this one
        in its place."""
        digest = hashlib.sha256(json.dumps(crd["spec"], sort_keys=True).encode()).hexdigest()
        name = crd["metadata"]["name"]
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        found = self.call("GET", path)
        if found.code == 200:
            if (found.body["metadata"].get("annotations") or {}).get(_CRD_HASH) == digest:
                return found.body
            self._ok("DELETE", path)
            self._until(lambda: self.call("GET", path).code == 404, f"CRD {name} deleted")
        meta = crd["metadata"]
        marked = {**crd, "metadata": {**meta, "annotations": {
            **(meta.get("annotations") or {}), _CRD_HASH: digest}}}
        return self.create(marked)

    def _until(self, check: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + WAIT_S
        while not check():
            if time.monotonic() > deadline:
                raise RealApiError(f"not within {WAIT_S:g} s: {what}")
            time.sleep(0.05)

    def _established(self, name: str) -> None:
        path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            crd = self._ok("GET", path)
            spec = crd["spec"]
            conditions = (crd.get("status") or {}).get("conditions") or []
            version = spec["versions"][0]["name"]
            if any(c["type"] == "Established" and c["status"] == "True" for c in conditions):
                # Served once discovery lists it (the API server's handler follows the
                # condition).
                with contextlib.suppress(LookupError, RealApiError):
                    self._resources.pop((f"{spec['group']}/{version}",
                                         spec["names"]["kind"]), None)
                    self._resource(f"{spec['group']}/{version}", spec["names"]["kind"])
                    return
            time.sleep(0.05)
        raise RealApiError(f"CRD {name} not Established within {WAIT_S:g} s")

    def get(self, api_version: str, kind: str, name: str, *,
            namespace: str | None = None) -> JsonObject | None:
        reply = self.call("GET", self.path(api_version, kind, name, namespace=namespace))
        if reply.code == 404:
            return None
        if reply.code >= 300:
            raise RealApiError(f"GET {kind} {name}: {reply.code} {reply.body}")
        return reply.body

    def objects(self, api_version: str, kind: str, *,
                namespace: str | None = None) -> list[JsonObject]:
        items: list[JsonObject] = self._ok(
            "GET", self.path(api_version, kind, namespace=namespace))["items"]
        return items

    def update(self, api_version: str, kind: str, name: str,
               change: Callable[[JsonObject], None], *,
               namespace: str | None = None) -> JsonObject:
        """Read, `change`, write back (the status too, through its subresource when the kind
        has one); again from a fresh read on a conflict."""
        path = self.path(api_version, kind, name, namespace=namespace or "default")
        for _ in range(10):
            obj = self._ok("GET", path)
            change(obj)
            reply = self.call("PUT", path, obj)
            if reply.code == 409:
                continue
            if reply.code >= 300:
                raise RealApiError(f"PUT {path}: {reply.code} {reply.body}")
            if "status" in obj:
                status = self.call("PUT", f"{path}/status", {**reply.body,
                                                             "status": obj["status"]})
                if status.code == 409:
                    continue
                if status.code < 300:
                    return status.body
            return reply.body
        raise RealApiError(f"PUT {path}: conflicts on every try")

    def delete(self, api_version: str, kind: str, name: str, *,
               namespace: str | None = None) -> None:
        self._ok("DELETE", self.path(api_version, kind, name, namespace=namespace or "default"),
                 {"gracePeriodSeconds": 0})

    def set_restart_count(self, namespace: str, pod: str, container: str, count: int, *,
                          init: bool = False) -> JsonObject:
        """The container's restartCount in the pod's status, as the kubelet reports it (the
        fake's hook of the same name), written through the status subresource."""
        path = self.path("v1", "Pod", pod, namespace=namespace)
        for _ in range(10):
            obj = self._ok("GET", path)
            with_restart_count(obj, container, count, init=init)
            reply = self.call("PUT", f"{path}/status", obj)
            if reply.code != 409:
                if reply.code >= 300:
                    raise RealApiError(f"PUT {path}/status: {reply.code} {reply.body}")
                return reply.body
        raise RealApiError(f"PUT {path}/status: conflicts on every try")

    def delete_node_slices(self, node: str, *, driver: str | None = None) -> list[str]:
        """Delete the ResourceSlices of `node` (of one driver), as the kubelet does at its
        start; returns the names deleted."""
        selector = f"spec.nodeName={node}" + (f",spec.driver={driver}" if driver else "")
        path = "/apis/resource.k8s.io/v1/resourceslices?" + urllib.parse.urlencode(
            {"fieldSelector": selector})
        names = [o["metadata"]["name"] for o in self._ok("GET", path)["items"]]
        self._ok("DELETE", path)
        return names

    # -- identities ---------------------------------------------------------------------------

    def user_token(self, user: str, groups: tuple[str, ...] | list[str] = ()) -> str:
        if not user:
            raise ValueError("user_token: user must not be empty")
        return self.tokens.add(user, tuple(groups))

    def service_account_token(self, namespace: str, name: str, *,
                              audiences: tuple[str, ...] | list[str] | None = None,
                              expires_at: float | None = None,
                              node: str | None = None) -> str:
        """A real token from the TokenRequest API for ServiceAccount `namespace/name` (made,
        with its namespace, when missing), bound to Node `node` when given."""
        if self.get("v1", "Namespace", namespace) is None:
            self.create({"apiVersion": "v1", "kind": "Namespace",
                         "metadata": {"name": namespace}})
        if self.get("v1", "ServiceAccount", name, namespace=namespace) is None:
            self.create({"apiVersion": "v1", "kind": "ServiceAccount",
                         "metadata": {"name": name, "namespace": namespace}})
        spec: JsonObject = {}
        if audiences:
            spec["audiences"] = list(audiences)
        if expires_at is not None:
            spec["expirationSeconds"] = max(600, int(expires_at - time.time()))
        if node is not None:
            found = self.get("v1", "Node", node)
            if found is None:
                raise RealApiError(f"service_account_token: no Node {node} to bind to")
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Node", "name": node,
                                      "uid": found["metadata"]["uid"]}
        answer = self._ok(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
        return str(answer["status"]["token"])

    def allow(self, verb: str, resource: str, *, user: str | None = None,
              group: str | None = None, api_group: str = "", subresource: str = "",
              namespace: str | None = None, name: str | None = None) -> str:
        grant = grants.Grant(verb, resource, user, group, api_group, subresource, namespace,
                             name)
        role = self.create(grant.role())
        role_name = str(role["metadata"]["name"])
        self.create(grant.binding(role_name))
        return role_name

    # -- the request log, from the audit log -------------------------------------------------

    def requests_clear(self) -> None:
        """Forget the requests logged so far (those answered before this call)."""
        if self._apiserver is not None:
            self._audit_barrier()
        self._audit_offset = _size(self.paths.audit_log)

    def compact(self) -> int:
        """etcd's history compacted at its current revision (as the apiserver does every
        5 minutes); returns that revision. A watch from an older version than the API server's
        watch cache holds then gets 410 Expired."""
        revision = int(self._etcd_call("range", {"key": _b64("\0"), "limit": 1})
                       ["header"]["revision"])
        self._etcd_call("compaction", {"revision": revision, "physical": True})
        return revision

    def apiserver_cpu_seconds(self) -> float:
        """User and system CPU the running API server has used (/proc/<pid>/stat)."""
        fields = Path(f"/proc/{self.apiserver_pid}/stat").read_text().rsplit(")", 1)[1].split()
        # utime and stime are the stat file's 14th and 15th fields, in clock ticks.
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _audit_barrier(self) -> str:
        """A request of the fixture's own, awaited in the audit log: every request answered
        before it is logged too."""
        marker = f"realapi-barrier-{secrets.token_hex(4)}"
        self.call("GET", f"/api/v1/namespaces/default/configmaps/{marker}")
        deadline = time.monotonic() + WAIT_S
        while marker not in _tail(self.paths.audit_log, self._audit_offset):
            if time.monotonic() > deadline:
                raise RealApiError(f"the audit log shows no request within {WAIT_S:g} s")
            time.sleep(0.02)
        return marker

    def audit_events(self) -> list[JsonObject]:
        """The audit events (one a request, at its end) since the last `requests_clear`."""
        self._audit_barrier()
        events = []
        for line in _tail(self.paths.audit_log, self._audit_offset).splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                # A watch is logged when its stream starts, as the fake records it; every
                # other request when it is answered.
                if event.get("stage") == ("ResponseStarted" if event.get("verb") == "watch"
                                          else "ResponseComplete"):
                    events.append(event)
        return events

    @property
    def requests(self) -> _Requests:
        """What the fake's `requests` offers that the audit log can give: `clear()`."""
        return _Requests(self)

    @property
    def open_watches(self) -> int:
        """Watches the running API server serves now, the fixture's own left out (the audit
        log logs a watch at its start and again at its end)."""
        self._audit_barrier()
        open_ids: set[str] = set()
        for line in _tail(self.paths.audit_log, self._started_offset).splitlines():
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                user = (event.get("user") or {}).get("username", "")
                if event.get("verb") != "watch" or user in _NOT_LOGGED:
                    continue
                if event.get("stage") == "ResponseStarted":
                    open_ids.add(event["auditID"])
                elif event.get("stage") == "ResponseComplete":
                    open_ids.discard(event["auditID"])
        return len(open_ids)

    def denials(self) -> list[Denial]:
        """Every 401 and 403 answered since start or the last clear (the fake's `denials`),
        from the audit log; the fixture's own left out."""
        found = []
        for event in self.audit_events():
            code = int((event.get("responseStatus") or {}).get("code", 0))
            user = (event.get("user") or {}).get("username", "")
            if code not in (401, 403) or user in _NOT_LOGGED:
                continue
            ref = event.get("objectRef") or {}
            found.append(Denial(
                at=0.0, user=user, verb=event["verb"], api_group=ref.get("apiGroup", ""),
                resource=ref.get("resource", ""), subresource=ref.get("subresource", ""),
                namespace=ref.get("namespace", ""), name=ref.get("name", ""),
                path=urllib.parse.urlsplit(event["requestURI"]).path, code=code,
                message=(event.get("responseStatus") or {}).get("message", "")))
        return found

    def request_log(self) -> list[RequestRecord]:
        """The requests answered since start or the last clear, as FakeKube records them,
        the fixture's own left out."""
        records = []
        for event in self.audit_events():
            user = (event.get("user") or {}).get("username", "")
            if user in _NOT_LOGGED:
                continue
            uri = urllib.parse.urlsplit(event["requestURI"])
            records.append(RequestRecord(
                method=_METHODS.get(event["verb"], event["verb"].upper()), path=uri.path,
                query=uri.query, status=int((event.get("responseStatus") or {}).get("code", 0)),
                user=user))
        return records


class _Requests:
    def __init__(self, real: RealKube) -> None:
        self._real = real

    def clear(self) -> None:
        self._real.requests_clear()


# The fixture's own requests, and the API server's to itself (the fake makes none).
_NOT_LOGGED: Final = {FIXTURE_USER, "system:apiserver"}
# Kept by `reset`: the API server's leases, and CRDs (serving one again takes seconds; they
# are replaced when a test registers another of the same name).
_KEPT: Final = ("/registry/leases/", "/registry/apiextensions.k8s.io/")
_CRD_HASH: Final = "realapi.display.liken.sh/spec-sha256"
_METHODS: Final = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST",
                   "update": "PUT", "patch": "PATCH", "delete": "DELETE",
                   "deletecollection": "DELETE"}


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _tail(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


def _get(url: str, *, context: ssl.SSLContext | None = None,
         token: str | None = None) -> tuple[int, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(url, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    try:
        with opener.open(request, timeout=5) as answer:
            return answer.status, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, ""
    except (OSError, ValueError):
        return 0, ""


# -- the switch --------------------------------------------------------------------------------

def fake_only(why: str) -> pytest.MarkDecorator:
    """A test of what only the fake has (fault hooks, its own records): it runs against the
    fake, and is skipped with the switch set, saying `why`."""
    return pytest.mark.skipif(enabled(), reason=f"fake only: {why}")


@pytest.fixture(scope="module")
def real_kube() -> Iterator[RealKube | None]:
    """With the switch, one real control plane for the module (its tests reset it); else
    None. Import it into a test module to use `api_server`."""
    if not enabled():
        yield None
        return
    with RealKube() as real:
        yield real


@contextlib.contextmanager
def api_server(real: RealKube | None, **fake_options: Any) -> Iterator[ApiServer]:
    """The API server a test talks to: the module's real one, reset, when the switch is set,
    else a FakeKube started with `fake_options`."""
    if real is not None:
        real.reset()
        yield real
        return
    with FakeKube(**fake_options) as fake:
        yield fake


def client_options(server: ApiServer) -> dict[str, Any]:
    """What a lightkube client (`fakekube.client`) needs to act as the administrator: the
    admin token and the CA of an HTTPS server; nothing for a fake that authorizes nothing."""
    if not isinstance(server, FakeKube):
        return {"token": server.admin_token, "ca": server.ca_pem}
    options: dict[str, Any] = {}
    if server.guard is not None:
        options["token"] = server.admin_token
    if server.url.startswith("https:"):
        options["ca"] = server.ca_pem
    return options
