"""HTTP for the fake: the apiserver's URL shapes, methods, media types and watch streams, on
`http.server` (HTTP/1.1, keep-alive, one thread per connection).

Paths: `/api/v1/...` (core) and `/apis/{group}/{version}/...`, each either
`[namespaces/{ns}/]{plural}[/{name}[/status]]` (`/token` for a ServiceAccount, the TokenRequest
API) or the deprecated `watch/` prefixed form.
A watch (`?watch=true`, what lightkube sends, or a `watch/` path) answers 200 with a chunked
stream of newline-delimited JSON events; an expired resourceVersion is an ERROR event carrying a
410 Status inside that stream, as the apiserver sends it.
"""

from __future__ import annotations

import json
import logging
import queue
import select
import socket
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import TYPE_CHECKING, Any

from fakekube import admin, patch, rawparams, rest, status, tokenrequest
from fakekube.faults import RequestRecord
from fakekube.rest import Reply, Target
from fakekube.reviews import Identity
from fakekube.store import Closed, Watcher

if TYPE_CHECKING:
    from fakekube.server import FakeKube

log = logging.getLogger(__name__)
JsonObject = dict[str, Any]
_POLL_SECONDS = 0.25  # how often an idle watch checks its deadline and whether the client left
_WRITES = ("POST", "PUT", "PATCH", "DELETE")


@dataclass(frozen=True, slots=True)
class Route:
    target: Target
    watch: bool


def _split(path: str) -> tuple[str, str, list[str]] | None:
    parts = [urllib.parse.unquote(p) for p in path.strip("/").split("/") if p]
    if len(parts) >= 2 and parts[0] == "api":
        return "", parts[1], parts[2:]
    if len(parts) >= 3 and parts[0] == "apis":
        return parts[1], parts[2], parts[3:]
    return None


def resolve(fake: FakeKube, path: str) -> Route:
    """The kind, namespace, name and subresource a path addresses; 404 for anything else."""
    split = _split(path)
    if split is None:
        raise status.no_route()
    group, version, rest = split
    watch = bool(rest) and rest[0] == "watch"
    rest = rest[1:] if watch else rest
    namespace = None
    if len(rest) >= 3 and rest[0] == "namespaces":
        nested = fake.registry.lookup(group, version, rest[2])
        if nested is not None and nested.namespaced:
            namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise status.no_route()
    kind = fake.registry.lookup(group, version, rest[0])
    if kind is None:
        raise status.no_route()
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    served = (sub is None or (sub == "status" and kind.status_subresource)
              or (sub == tokenrequest.SUBRESOURCE and kind.key == tokenrequest.SERVICE_ACCOUNTS))
    if not served or (kind.namespaced and name is not None and namespace is None):
        raise status.no_route()
    return Route(Target(kind, version, namespace, name, sub), watch)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakekube"
    # Headers and body go out in separate writes; with Nagle on, delayed ACKs add ~40 ms to
    # every keep-alive request.
    disable_nagle_algorithm = True
    _user = ""  # who sent the request being answered, for the request log
    _who: Identity | None = None  # and who they are, when the fake authorizes

    @property
    def fake(self) -> FakeKube:
        fake: FakeKube = getattr(self.server, "fake")  # noqa: B009 - set by the server
        return fake

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._dispatch()

    def do_POST(self) -> None:  # noqa: N802
        self._dispatch()

    def do_PUT(self) -> None:  # noqa: N802
        self._dispatch()

    def do_PATCH(self) -> None:  # noqa: N802
        self._dispatch()

    def do_DELETE(self) -> None:  # noqa: N802
        self._dispatch()

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _dispatch(self) -> None:
        self._user = ""  # a keep-alive connection's next request may be someone else's
        self._who = None
        url = urllib.parse.urlsplit(self.path)
        params = {k: v[-1] for k, v in
                  urllib.parse.parse_qs(url.query, keep_blank_values=True).items()}
        raw = self._read_body()
        try:
            if admin.is_admin_path(url.path):
                self._authorize()
                code, body = admin.handle(self.fake, self.command, url.path, raw)
                self._send_json(code, body, query=url.query)
                return
            if self._outage(url.query):
                return
            self._authorize()
            if url.path in ("/healthz", "/readyz", "/livez", "/version"):
                self._send_plain(url.path, url.query)
                return
            route = resolve(self.fake, url.path)
            if route.watch or (self.command == "GET" and route.target.name is None
                               and params.get("watch") in ("true", "1")):
                self._watch(route.target, params, url.query)
                return
            reply = self._call(route.target, params, raw)
            self._send_json(reply.code, reply.body, query=url.query, warnings=reply.warnings)
        except status.ApiFailure as e:
            self._send_json(e.code, e.body(), query=url.query, headers=e.headers,
                            warnings=e.warnings)
        except Exception as e:  # an apiserver answers 500 for a bug, and so does the fake
            log.exception("fakekube failed on %s %s", self.command, self.path)
            failure = status.internal_error(f"{type(e).__name__}: {e}")
            self._send_json(failure.code, failure.body(), query=url.query)

    def _authorize(self) -> None:
        """Raise the 401/403 failure unless the caller may make this request (always may when
        the fake does not authorize); the caller is kept for the request log."""
        guard = self.fake.guard
        if guard is not None:
            self._who = guard.check(self.command, self.path, self.headers.get("Authorization"))
            self._user = self._who.username

    def _outage(self, query: str) -> bool:
        """Act out the current outage; True when the request is answered (or dropped)."""
        outage = self.fake.faults.outage()
        if outage is None:
            return False
        if outage.kind == "slow":
            time.sleep(outage.delay)
            return False
        if outage.kind == "drop":
            self._record(0, query)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return True
        page = outage.page()
        self._record(outage.code, query)
        self.send_response(outage.code)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)
        return True

    def _call(self, t: Target, params: dict[str, str], raw: bytes) -> Reply:
        method = self.command
        if t.kind.create_only and (method != "POST" or t.name is not None):
            raise status.method_not_allowed()
        if method in _WRITES and (fault := self.fake.faults.take(t.kind.plural)) is not None:
            raise fault.failure(t.resource())
        api = self.fake.api
        content_type = patch.media_type(self.headers.get("Content-Type"))
        if method in ("POST", "PUT") and content_type not in patch.BODY_TYPES:
            raise status.unsupported_media_type(content_type, patch.BODY_TYPES)
        if t.subresource == tokenrequest.SUBRESOURCE:
            if method != "POST" or t.name is None:
                raise status.method_not_allowed()
            body = tokenrequest.create(self.fake, t.ns, t.name,
                                       patch.decode_object(raw, content_type, "TokenRequest"))
            return Reply(201, body)
        if t.name is None:
            if method == "GET":
                return api.list_objects(t, params)
            if method == "POST" and (t.namespace is not None or not t.kind.namespaced):
                body = patch.decode_object(raw, content_type, t.kind.kind)
                return api.create(t, body, params, sent=_sent_parameters(t, raw, body))
            if method == "DELETE":
                return api.delete_collection(t, params)
            raise status.method_not_allowed()
        if method == "GET":
            return api.get(t)
        if method == "PUT":
            body = patch.decode_object(raw, content_type, t.kind.kind)
            return api.replace(t, body, params, who=self._who,
                               sent=_sent_parameters(t, raw, body))
        if method == "PATCH":
            return api.patch(t, raw, content_type, params, who=self._who)
        if method == "DELETE" and t.subresource is None:
            options = patch.decode_object(raw, patch.JSON, "DeleteOptions") if raw else None
            return api.delete(t, params, options)
        raise status.method_not_allowed()

    # -- responses ---------------------------------------------------------------------------

    def _record(self, code: int, query: str) -> None:
        path = urllib.parse.urlsplit(self.path).path
        self.fake.requests.add(RequestRecord(self.command, path, query, code,
                                             self._user, time.monotonic()))

    def _send_json(self, code: int, body: JsonObject, *, query: str,
                   headers: dict[str, str] | None = None, warnings: tuple[str, ...] = ()) -> None:
        payload = json.dumps(body).encode()
        self._record(code, query)  # before the answer, so a client that has it sees the record
        self.send_response(code)
        # lightkube turns an error into ApiError only for exactly "application/json".
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        for warning in warnings:
            self.send_header("Warning", f"299 - {json.dumps(warning)}")
        self.end_headers()
        self.wfile.write(payload)
        self.fake.requests.add_bytes(self._user, len(payload))

    def _send_plain(self, path: str, query: str) -> None:
        if path == "/version":
            minor = self.fake.api.options.kube_version.split(".")[1]
            self._send_json(200, {"major": "1", "minor": minor,
                                  "gitVersion": f"v1.{minor}.0-fakekube"}, query=query)
            return
        self._record(200, query)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    # -- watch -------------------------------------------------------------------------------

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()
        self.fake.requests.add_bytes(self._user, len(data))

    def _event(self, t: Target, kind: str, obj: JsonObject) -> None:
        out = {**obj, "apiVersion": t.kind.api_version(t.version), "kind": t.kind.kind}
        self._chunk(json.dumps({"type": kind, "object": out}).encode() + b"\n")

    def _watch(self, t: Target, params: dict[str, str], query: str) -> None:
        if t.kind.create_only:
            raise status.method_not_allowed()
        timeout = params.get("timeoutSeconds")
        if timeout is not None and not timeout.isdigit():
            raise status.bad_request(f"timeoutSeconds {timeout!r} is not a whole number")
        if t.name is not None:  # the deprecated /watch/.../{name} form
            params = {**params, "fieldSelector": ",".join(
                filter(None, [params.get("fieldSelector"), f"metadata.name={t.name}"]))}
            t = Target(t.kind, t.version, t.namespace)
        try:
            watcher = self.fake.api.watch(t, params)
        except status.ApiFailure as e:
            if e.code != 410:
                raise
            self._start_stream(query)
            self._chunk(json.dumps({"type": "ERROR", "object": e.body()}).encode() + b"\n")
            self._chunk(b"")
            return
        # timeoutSeconds=0 is no timeout asked (the apiserver then picks its own, minutes).
        deadline = time.monotonic() + int(timeout) if timeout and int(timeout) else None
        bookmarks = params.get("allowWatchBookmarks") in ("true", "1")
        try:
            self._start_stream(query)
            self._stream(t, watcher, deadline, bookmarks=bookmarks)
        except OSError:  # the client went away mid-write
            self.close_connection = True
        finally:
            self.fake.store.unwatch(watcher)

    def _start_stream(self, query: str) -> None:
        self._record(200, query)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

    def _stream(self, t: Target, watcher: Watcher, deadline: float | None, *,
                bookmarks: bool) -> None:
        interval = self.fake.bookmark_interval
        next_bookmark = time.monotonic() + interval
        while True:
            wait = _POLL_SECONDS
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
                if wait <= 0:
                    if bookmarks:  # as the apiserver does just before it times a watch out
                        self._bookmark(t, watcher)
                    self._chunk(b"")
                    return
            try:
                item = watcher.queue.get(timeout=wait)
            except queue.Empty:
                if self._client_gone():
                    self.close_connection = True
                    return
                if bookmarks and time.monotonic() >= next_bookmark:
                    self._bookmark(t, watcher)
                    next_bookmark = time.monotonic() + interval
                continue
            if isinstance(item, Closed):
                if item.abrupt:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                else:
                    self._chunk(b"")
                return
            self._event(t, *item)

    def _bookmark(self, t: Target, watcher: Watcher) -> None:
        """A BOOKMARK at the store's resourceVersion, sent only while this watch has nothing
        queued: every event up to that version it selects has then been sent already."""
        with self.fake.store.lock:
            rv = self.fake.store.resource_version
            if not watcher.queue.empty():
                return
        self._event(t, "BOOKMARK", {"metadata": {"resourceVersion": str(rv)}})

    def _client_gone(self) -> bool:
        readable, _, _ = select.select([self.connection], [], [], 0)
        if not readable:
            return False
        if isinstance(self.connection, ssl.SSLSocket):
            return self._tls_client_gone(self.connection)
        try:
            return bool(self.connection.recv(1, socket.MSG_PEEK) == b"")
        except OSError:
            return True

    @staticmethod
    def _tls_client_gone(conn: ssl.SSLSocket) -> bool:
        # TLS cannot peek: read what arrived. A watch client sends nothing while it streams,
        # so anything but an incomplete record (close_notify, EOF, stray bytes) ends it.
        conn.settimeout(0)
        try:
            conn.recv(1)
        except ssl.SSLWantReadError:
            return False
        except OSError:
            return True
        finally:
            conn.settimeout(None)
        return True


def _sent_parameters(t: Target, raw: bytes, body: JsonObject) -> rawparams.Parameters | None:
    """A claim's opaque parameters as the request's bytes hold them (fakekube.rawparams)."""
    if t.kind.key != rest.CLAIMS:
        return None
    return rawparams.sent(raw, body)
