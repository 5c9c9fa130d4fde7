"""FakeKube: an in-process Kubernetes API server for tests, driven by the real lightkube client
over real HTTP on 127.0.0.1, plus the fault hooks and logs tests assert on.

    with FakeKube() as fake:
        client = fakekube.client.sync_client(fake.url)

    with FakeKube(tls=True, authorize=True) as fake:   # HTTPS, tokens and RBAC
        client = fakekube.client.sync_client(fake.url, token=fake.admin_token, ca=fake.ca_pem)

What it does as the apiserver does: a global resourceVersion; uid, creationTimestamp,
generation (bumped when anything but metadata/status changes), generateName; 201 on create;
409 AlreadyExists and Conflict (stale resourceVersion on PUT/PATCH/DELETE preconditions);
Status bodies for 400/404/405/409/410/415/422/429/500; the status subresource (a main write keeps
status, `/status` changes only status); merge and JSON patch; label and field selectors (with
the per-kind field labels; ResourceSlices accept only metadata.name, spec.nodeName, spec.driver);
list `metadata.resourceVersion`, `limit`/`continue`; watches with synthetic ADDED from "0", replay
from N, an ERROR 410 from a compacted N, `timeoutSeconds`, selector transitions as ADDED/DELETED;
no-op updates answered without a write; pruning of unknown fields with a `Warning` header
(`fieldValidation=Strict`: 400); built-in schemas from kubernetes_validate (400 on a wrong type,
422 on a missing required field); CRD structural pruning, defaults and schema validation; the DRA
rules of `fakekube.dra` and the DRADeviceTaints gate; delete answering the object (or a Success
Status for Nodes), finalizers holding a deleting object, deletecollection; namespaces that must
exist; `dryRun=All`.

Known gaps (a test that needs one of these needs a real cluster):
- Strategic merge patch is a plain merge patch: lists are replaced, not merged by key, and the
  `$patch` directives are not understood.
- Server-side apply is a merge-create-or-update: no managedFields, no field ownership, no
  conflicts between managers, and fields a manager stops sending are not removed.
- No defaulting of built-in kinds (no `restartPolicy`, `allocationMode: ExactCount`, QoS class,
  ...), no admission plugins, no CEL (neither CRD `x-kubernetes-validations`, nor
  ValidatingAdmissionPolicy, nor DeviceClass selectors), no enum or format checks, and the Go
  validation of built-in kinds only as far as `fakekube.dra` goes (nothing for Pods, Nodes,
  Namespaces beyond names).
- One authorizer, `fakekube.rbac`, from the RBAC objects in the store (a test grants with
  `allow`, which writes such objects, or applies its own roles). SubjectAccessReviews always
  answer from it and TokenReviews from the tokens in `FakeKube.policy`. By default requests
  themselves are neither authenticated nor authorized (every one is allowed), and the store holds
  no bootstrap roles. With `authorize=True` every request is authenticated by a bearer token the
  fake issued (`service_account_token`, `user_token`, `admin_token`, or one added to the
  policy; an unknown token is a 401, no token is `system:anonymous`) and authorized by RBAC
  (see `fakekube.guard`), the bootstrap roles are there (`fakekube.bootstrap`), and a write of a
  ResourceClaim's `status.devices` needs the driver verb (`fakekube.claimdriver`); no
  impersonation, no aggregated ClusterRoles, no RBAC escalation checks, no bound-token
  invalidation when the ServiceAccount goes.
- Held to a real kube-apiserver 1.37.2: the tests that run with DISPLAY_OPERATOR_REAL_API=1
  (`tests.support.realapi`) pass against both; each difference they showed is fixed here, down
  to the words of refusals (`fakekube.decodeerror`) and a claim's parameters compared as the
  bytes sent (`fakekube.rawparams`). Not modelled, being a moment's timing rather than an answer
  a client could depend on: a new CRD's resource answering 404 until its handler is installed,
  and 429 "storage is (re)initializing" for a moment after the API server starts. Clients retry
  a 429 (`libdisplay.kube.errors`); a test that needs one injects it (`fail_next_writes`).
- No discovery (`/api`, `/apis`, OpenAPI): lightkube does not need it; kubectl does.
- Only the kinds in `fakekube.kinds.BUILTIN_KINDS` plus registered CRDs are served; no
  subresources but `status` and ServiceAccounts' `token` (`fakekube.tokenrequest`; no pod
  logs, exec, binding, eviction, scale).
- Custom resources of several versions share one stored object (conversion `None`); no webhooks.
- Deletion is immediate: no graceful pod termination, namespaces are not Terminating while their
  objects go, owner references are collected at once (background only; foreground and
  `blockOwnerDeletion` are not modelled; a dependent keeps references to owners that are gone).
- `continue` pages read the current state after the last key, not a snapshot at the list's
  resourceVersion; `resourceVersionMatch` is ignored; a watch from a resourceVersion newer than
  the store waits instead of answering "too large resource version".
- Watch bookmarks (`allowWatchBookmarks=true`) every `bookmark_interval` seconds of an idle
  stream and just before a `timeoutSeconds` end, at the store's resourceVersion; no
  `sendInitialEvents`, no HTTP/2, no protobuf. TLS only with `tls=True`
  (its own CA, `fakekube.tls`).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import ssl
import threading
import uuid
from collections.abc import Callable
from http.server import ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any

from fakekube import bootstrap, dra, grants, tokenrequest
from fakekube.faults import FaultCode, Faults, OutageKind, RequestLog, RequestRecord
from fakekube.guard import Denial, Denials, Guard
from fakekube.handler import Handler
from fakekube.kinds import Kind, Registry
from fakekube.rbac import MASTERS, Authorizer, service_account_user
from fakekube.rest import Api, Options, Target
from fakekube.reviews import Policy
from fakekube.store import Event, Store
from fakekube.tls import ServingCertificates

log = logging.getLogger(__name__)
JsonObject = dict[str, Any]
_JOIN_SECONDS = 5.0
_POLL_SECONDS = 0.05  # how long stop() waits for serve_forever to notice
BOOKMARK_INTERVAL_S = 60.0
_HANDSHAKE_SECONDS = 30.0
AUTHENTICATED = "system:authenticated"
EXTRA_PREFIX = "authentication.kubernetes.io/"
ADMIN_USER = "system:admin"


class _HttpServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer that knows its connections, so stop() can end them and reap their
    threads instead of leaving keep-alive and watch threads behind."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], fake: FakeKube,
                 context: ssl.SSLContext | None) -> None:
        super().__init__(address, Handler)
        self.fake = fake
        self.tls = context is not None
        self._context = context
        self._lock = threading.Lock()
        self._open: dict[threading.Thread, socket.socket] = {}

    def process_request(self, request: Any, client_address: Any) -> None:
        thread = threading.Thread(target=self._serve, args=(request, client_address),
                                  name="fakekube-conn", daemon=True)
        with self._lock:
            self._open[thread] = request
        thread.start()

    def _serve(self, request: Any, client_address: Any) -> None:
        conn = request
        try:
            if self._context is not None:
                conn = self._handshake(request)
            self.finish_request(conn, client_address)
        except OSError:  # ssl.SSLError included: a client that does not trust the CA
            log.debug("fakekube connection from %s ended", client_address, exc_info=True)
        finally:
            self.shutdown_request(conn)
            with self._lock:
                self._open.pop(threading.current_thread(), None)

    def _handshake(self, request: socket.socket) -> ssl.SSLSocket:
        """TLS on this connection's own thread, so a slow or silent client never holds up
        accept(); registered before the handshake so stop() can cut it short."""
        assert self._context is not None
        conn = self._context.wrap_socket(request, server_side=True,
                                         do_handshake_on_connect=False)
        with self._lock:
            self._open[threading.current_thread()] = conn
        conn.settimeout(_HANDSHAKE_SECONDS)
        conn.do_handshake()
        conn.settimeout(None)
        return conn

    def close_connections(self) -> None:
        with self._lock:
            open_now = dict(self._open)
        for sock in open_now.values():
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        for thread in open_now:
            thread.join(_JOIN_SECONDS)


class FakeKube:
    """The fake apiserver. `start()` serves on a background thread; `stop()` ends every
    connection and joins every thread it started, and removes the certificates. Also a
    context manager.

    `tls=True` serves HTTPS with a leaf from its own CA (`ca_pem`, `ca_path`); `authorize=True`
    authenticates every request by bearer token and authorizes it with RBAC (module docstring);
    `driver_verb=False` leaves out the driver verb a claim's status.devices write needs.
    """

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, kube_version: str = "1.34",
                 device_taints: bool = True, history_limit: int = 100_000, tls: bool = False,
                 authorize: bool = False,
                 token_min_expiration_s: int = tokenrequest.MIN_EXPIRATION_S,
                 bookmark_interval: float = BOOKMARK_INTERVAL_S,
                 driver_verb: bool = True) -> None:
        self.store = Store(history_limit=history_limit)
        self.registry = Registry()
        self.policy = Policy()
        self.faults = Faults()
        self.requests = RequestLog()
        authorizer = Authorizer(self.store)
        self.api = Api(self.store, self.registry, self.policy, authorizer,
                       Options(kube_version, device_taints, driver_verb))
        self._denials = Denials()
        # The apiserver's floor for a TokenRequest's expirationSeconds; a test lowers it to
        # watch a token expire.
        self.token_min_expiration_s = token_min_expiration_s
        # How often an idle watch that allows bookmarks gets one (the apiserver: about 1 min).
        self.bookmark_interval = bookmark_interval
        self.guard: Guard | None = None
        if authorize:
            self.guard = Guard(self.policy, authorizer, self._denials)
            for obj in bootstrap.objects():
                self.create(obj)
        self._admin_token = self.user_token(ADMIN_USER, (MASTERS,))
        self._certs = ServingCertificates(host) if tls else None
        try:
            context = self._certs.server_context() if self._certs else None
            self._httpd = _HttpServer((host, port), self, context)
        except BaseException:
            if self._certs is not None:
                self._certs.close()
            raise
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"{'https' if self._certs else 'http'}://{self.host}:{self.port}"

    @property
    def ca_pem(self) -> bytes:
        """The CA that signed the serving leaf (PEM), what a pod's `ca.crt` holds."""
        return self._tls().ca_pem

    @property
    def ca_path(self) -> Path:
        """The CA as a file in the fake's temp dir (gone after stop())."""
        return self._tls().ca_file

    def _tls(self) -> ServingCertificates:
        if self._certs is None:
            raise RuntimeError("this FakeKube serves plain HTTP (tls=False): it has no CA")
        return self._certs

    # -- identities ------------------------------------------------------------------------------

    @property
    def admin_token(self) -> str:
        """A token for `system:admin` in `system:masters`: allowed everything."""
        return self._admin_token

    def user_token(self, user: str, groups: tuple[str, ...] | list[str] = ()) -> str:
        """A new token authenticating as `user` in `groups` (plus system:authenticated), for
        the control plane's actors (`system:kube-scheduler`, `system:node:NODE`) and people."""
        if not user:
            raise ValueError("user_token: user must not be empty")
        bad = [g for g in groups if not isinstance(g, str) or not g]
        if bad:
            raise ValueError(f"user_token: groups must be non-empty strings, got {bad!r}")
        token = secrets.token_urlsafe(32)
        self.policy.add_token(token, user, groups=_with_authenticated(groups))
        return token

    def service_account_token(self, namespace: str, name: str, *,
                              audiences: tuple[str, ...] | list[str] | None = None,
                              expires_at: float | None = None,
                              bound: dict[str, str] | None = None) -> str:
        """A new token for ServiceAccount `namespace/name`, issued for `audiences` (the API
        server's own when None), with the identity the apiserver gives such a token, valid
        until `expires_at` (seconds since the epoch; None: for ever), bound to the objects in
        `bound` (the TokenReview's `extra` keys past `authentication.kubernetes.io/`:
        `pod-name`, `pod-uid`, `node-name`, `node-uid`). Each carries a credential id, as the
        apiserver's do. Over HTTP the TokenRequest API issues these (`fakekube.tokenrequest`)."""
        for what, value in (("namespace", namespace), ("name", name)):
            if not dra.is_dns_subdomain(value):
                raise ValueError(f"service_account_token: {what} {value!r} is not a valid name")
        account = self.store.get(("", "serviceaccounts"), namespace, name)
        token = secrets.token_urlsafe(32)
        self.policy.add_token(
            token, service_account_user(namespace, name),
            uid=str(((account or {}).get("metadata") or {}).get("uid") or ""),
            groups=("system:serviceaccounts", f"system:serviceaccounts:{namespace}",
                    AUTHENTICATED),
            audiences=tuple(audiences) if audiences else None, expires_at=expires_at,
            extra=((f"{EXTRA_PREFIX}credential-id", (f"JTI={uuid.uuid4()}",)),
                   *((EXTRA_PREFIX + k, (v,)) for k, v in sorted((bound or {}).items()))))
        return token

    def allow(self, verb: str, resource: str, *, user: str | None = None,
              group: str | None = None, api_group: str = "", subresource: str = "",
              namespace: str | None = None, name: str | None = None) -> str:
        """Grant `user` or `group` (exactly one) `verb` on `resource` (see `grants.Grant`) by
        creating a role and its binding, as an administrator would; returns their name. Raises
        ValueError for a grant without exactly one subject or with an empty field, and leaves
        nothing behind when the binding cannot be created."""
        grant = grants.Grant(verb, resource, user, group, api_group, subresource, namespace,
                             name)
        role = self.create(grant.role())
        role_name = str(role["metadata"]["name"])
        try:
            self.create(grant.binding(role_name))
        except BaseException:
            self.delete(role["apiVersion"], role["kind"], role_name, namespace=namespace)
            raise
        return role_name

    def denials(self) -> list[Denial]:
        """Every 401 and 403 answered (with `authorize=True`), oldest first."""
        return self._denials.items()

    def start(self) -> FakeKube:
        if self._thread is None:
            self._thread = threading.Thread(target=self._httpd.serve_forever,
                                            kwargs={"poll_interval": _POLL_SECONDS},
                                            name="fakekube", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(_JOIN_SECONDS)
            self._thread = None
        self.store.close_watches(abrupt=False)
        self._httpd.close_connections()
        self._httpd.server_close()
        if self._certs is not None:
            self._certs.close()

    def __enter__(self) -> FakeKube:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- objects, without HTTP (same checks as over HTTP) ---------------------------------------

    def _kind(self, api_version: str, kind: str) -> tuple[Kind, str]:
        group, _, version = api_version.rpartition("/")
        found = self.registry.by_kind(kind, group=group)
        if version not in found.versions:
            raise LookupError(f"{kind} is not served at {api_version}")
        return found, version

    def create(self, obj: JsonObject) -> JsonObject:
        """Create `obj` (any served kind, by its apiVersion and kind); returns the stored object.
        Namespaced objects without a namespace go to "default"."""
        kind, version = self._kind(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        ns = (obj.get("metadata") or {}).get("namespace") or "default"
        t = Target(kind, version, ns if kind.namespaced else None)
        return self.api.create(t, obj, {}).body

    def register_crd(self, crd: JsonObject) -> Kind:
        """Serve the kind a CustomResourceDefinition object (a dict, as in its YAML) defines."""
        stored = self.create(crd)
        spec = stored["spec"]
        return self.registry.by_kind(spec["names"]["kind"], group=spec["group"])

    def get(self, api_version: str, kind: str, name: str, *,
            namespace: str | None = None) -> JsonObject | None:
        found, _ = self._kind(api_version, kind)
        return self.store.get(found.key, (namespace or "") if found.namespaced else "", name)

    def objects(self, api_version: str, kind: str, *,
                namespace: str | None = None) -> list[JsonObject]:
        found, _ = self._kind(api_version, kind)
        return self.store.items(found.key, namespace)

    def update(self, api_version: str, kind: str, name: str,
               change: Callable[[JsonObject], None], *,
               namespace: str | None = None) -> JsonObject:
        """Apply `change` to the stored object in place and store it (a new resourceVersion, a
        MODIFIED event), as a client's read-modify-write would; returns the stored object."""
        found, version = self._kind(api_version, kind)
        t = Target(found, version, (namespace or "default") if found.namespaced else None, name)
        return self.api.mutate(t, change).body

    def delete(self, api_version: str, kind: str, name: str, *,
               namespace: str | None = None) -> None:
        """Delete the object (a DELETED event), as a client's DELETE would."""
        found, version = self._kind(api_version, kind)
        t = Target(found, version, (namespace or "default") if found.namespaced else None, name)
        self.api.delete(t, {})

    @property
    def events(self) -> list[Event]:
        """Every change since start, oldest first (never compacted)."""
        with self.store.lock:
            return list(self.store.log)

    def request_log(self) -> list[RequestRecord]:
        return self.requests.records()

    @property
    def open_watches(self) -> int:
        """How many watch streams are open now."""
        return self.store.watch_count()

    # -- fault hooks -----------------------------------------------------------------------------

    def compact(self) -> int:
        """Forget the event history: a watch from an older resourceVersion gets 410 Expired.
        Returns the resourceVersion compacted at."""
        return self.store.compact()

    def fail_next_writes(self, count: int, code: FaultCode, *, retry_after: int = 1,
                         resource: str | None = None) -> None:
        """Answer the next `count` writes (of `resource`, a plural, if given) with 409, 429
        (with Retry-After) or 500 instead of performing them."""
        self.faults.fail_next_writes(count, code, retry_after=retry_after, resource=resource)

    def set_outage(self, kind: OutageKind | None, *, code: int = 503,
                   delay: float = 0.0) -> None:
        """Fail every API request until called with None: `drop` closes the connection
        unanswered, `html` answers `code` with an HTML page, `slow` answers after `delay` s.
        Open watches are cut (abruptly for `drop`), so they meet the outage too."""
        self.faults.set_outage(kind, code=code, delay=delay)
        if kind in ("drop", "html"):
            self.store.close_watches(abrupt=kind == "drop")

    def drop_watches(self, *, abrupt: bool = False) -> int:
        """End every open watch stream: cleanly (as an apiserver restart or timeout does;
        lightkube re-watches from the last resourceVersion it saw) or, with `abrupt`, by cutting
        the connection mid-stream. Returns how many were open."""
        return self.store.close_watches(abrupt=abrupt)

    def set_restart_count(self, namespace: str, pod: str, container: str, count: int, *,
                          init: bool = False) -> JsonObject:
        """Set `status.containerStatuses[name=container].restartCount` (or the init container's)
        as the kubelet reports it; adds the container status if the pod has none yet."""
        kind = self.registry.by_kind("Pod", group="")
        t = Target(kind, "v1", namespace, pod, "status")
        return self.api.mutate(
            t, lambda obj: with_restart_count(obj, container, count, init=init)).body

    def delete_node_slices(self, node: str, *, driver: str | None = None) -> list[str]:
        """Delete the ResourceSlices of `node` (of one driver, if given), as the kubelet does
        when it starts; returns the names deleted."""
        kind = self.registry.by_kind("ResourceSlice", group="resource.k8s.io")
        selector = f"spec.nodeName={node}" + (f",spec.driver={driver}" if driver else "")
        reply = self.api.delete_collection(Target(kind, "v1"), {"fieldSelector": selector})
        return [item["metadata"]["name"] for item in reply.body["items"]]


def _with_authenticated(groups: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*groups, AUTHENTICATED]))


def with_restart_count(pod: JsonObject, container: str, count: int, *, init: bool) -> None:
    """Set `count` as the container's restartCount in `pod`'s status (an init container's
    with `init`), adding the container's status if the pod has none yet."""
    field = "initContainerStatuses" if init else "containerStatuses"
    statuses = pod.setdefault("status", {}).setdefault(field, [])
    entry = next((s for s in statuses if s.get("name") == container), None)
    if entry is None:
        entry = {"name": container, "ready": False, "image": "", "imageID": ""}
        statuses.append(entry)
    entry["restartCount"] = count
