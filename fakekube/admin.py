"""The fault hooks, tokens and grants over HTTP, for a fake running as its own process (the
simulated node): `POST /_fakekube/<hook>` with a JSON body, `GET /_fakekube/requests`.
Each hook maps one to one onto the `FakeKube` method of the same meaning.

| path | body | FakeKube method |
|---|---|---|
| `compact` | - | `compact()` |
| `fail-writes` | `count`, `code`, `retryAfter?`, `resource?` | `fail_next_writes(...)` |
| `drop-watches` | `abrupt?` | `drop_watches(abrupt=)` |
| `outage` | `kind` (`drop`, `html`, `slow` or null), `code?`, `delay?` | `set_outage(...)` |
| `restart-count` | `namespace`, `pod`, `container`, `count`, `init?` | `set_restart_count(...)` |
| `delete-node-slices` | `node`, `driver?` | `delete_node_slices(...)` |
| `token` | `token`, `username`, `uid?`, `groups?`, `audiences?` | `policy.add_token(...)` |
| `allow` | `verb`, `resource`, `user?`/`group?`, `apiGroup?`, `subresource?`, `namespace?`,
  `name?` -> `{"name"}` | `allow(...)` |
| `service-account-token` | `namespace`, `name`, `audiences?` -> `{"token"}` |
  `service_account_token(...)` |
| `user-token` | `user`, `groups?` -> `{"token"}` | `user_token(...)` |

`GET /_fakekube/denials` (also served as `/fakekube/denials`) answers `{"items": [Denial...]}`
(`denials()`), `GET /_fakekube/requests` the request log (each request's method, path, query,
status and user) and `bytesSent`, the body bytes sent to each user. With `authorize=True` these
paths are non-resource URLs like any other: only a caller RBAC allows them to (the admin token)
gets in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fakekube import patch, status

if TYPE_CHECKING:
    from fakekube.server import FakeKube

JsonObject = dict[str, Any]


def _field(body: JsonObject, name: str, kind: type, default: Any = ...) -> Any:
    value = body.get(name, default)
    if value is ... or (value is not None and not isinstance(value, kind)):
        raise status.bad_request(f"field {name!r} must be a {kind.__name__}, got {value!r}")
    return value


def _compact(fake: FakeKube, body: JsonObject) -> JsonObject:
    return {"resourceVersion": str(fake.compact())}


def _fail_writes(fake: FakeKube, body: JsonObject) -> JsonObject:
    try:
        fake.fail_next_writes(_field(body, "count", int), _field(body, "code", int),
                              retry_after=_field(body, "retryAfter", int, 1),
                              resource=_field(body, "resource", str, None))
    except ValueError as e:
        raise status.bad_request(str(e)) from e
    return {"pending": fake.faults.pending()}


def _drop_watches(fake: FakeKube, body: JsonObject) -> JsonObject:
    return {"dropped": fake.drop_watches(abrupt=_field(body, "abrupt", bool, False))}


def _outage(fake: FakeKube, body: JsonObject) -> JsonObject:
    delay = body.get("delay", 0.0)
    if isinstance(delay, bool) or not isinstance(delay, int | float):
        raise status.bad_request(f"field 'delay' must be a number, got {delay!r}")
    try:
        fake.set_outage(_field(body, "kind", str, None), code=_field(body, "code", int, 503),
                        delay=float(delay))
    except ValueError as e:
        raise status.bad_request(str(e)) from e
    return {}


def _restart_count(fake: FakeKube, body: JsonObject) -> JsonObject:
    return fake.set_restart_count(
        _field(body, "namespace", str), _field(body, "pod", str), _field(body, "container", str),
        _field(body, "count", int), init=_field(body, "init", bool, False))


def _delete_node_slices(fake: FakeKube, body: JsonObject) -> JsonObject:
    deleted = fake.delete_node_slices(_field(body, "node", str),
                                      driver=_field(body, "driver", str, None))
    return {"deleted": deleted}


def _token(fake: FakeKube, body: JsonObject) -> JsonObject:
    fake.policy.add_token(_field(body, "token", str), _field(body, "username", str),
                          uid=_field(body, "uid", str, ""),
                          groups=tuple(_field(body, "groups", list, [])),
                          audiences=tuple(_field(body, "audiences", list, [])) or None)
    return {}


def _allow(fake: FakeKube, body: JsonObject) -> JsonObject:
    try:
        name = fake.allow(
            _field(body, "verb", str), _field(body, "resource", str),
            user=_field(body, "user", str, None), group=_field(body, "group", str, None),
            api_group=_field(body, "apiGroup", str, ""),
            subresource=_field(body, "subresource", str, ""),
            namespace=_field(body, "namespace", str, None), name=_field(body, "name", str, None))
    except ValueError as e:
        raise status.bad_request(str(e)) from e
    return {"name": name}


def _service_account_token(fake: FakeKube, body: JsonObject) -> JsonObject:
    try:
        token = fake.service_account_token(
            _field(body, "namespace", str), _field(body, "name", str),
            audiences=tuple(_field(body, "audiences", list, [])) or None)
    except ValueError as e:
        raise status.bad_request(str(e)) from e
    return {"token": token}


def _user_token(fake: FakeKube, body: JsonObject) -> JsonObject:
    try:
        token = fake.user_token(_field(body, "user", str), tuple(_field(body, "groups", list, [])))
    except ValueError as e:
        raise status.bad_request(str(e)) from e
    return {"token": token}


_HOOKS: dict[str, Callable[[FakeKube, JsonObject], JsonObject]] = {
    "compact": _compact,
    "fail-writes": _fail_writes,
    "drop-watches": _drop_watches,
    "outage": _outage,
    "restart-count": _restart_count,
    "delete-node-slices": _delete_node_slices,
    "token": _token,
    "allow": _allow,
    "service-account-token": _service_account_token,
    "user-token": _user_token,
}
_PREFIX = "/_fakekube/"
_DENIALS_ALIAS = "/fakekube/denials"


def is_admin_path(path: str) -> bool:
    return path.startswith(_PREFIX) or path == _DENIALS_ALIAS


def handle(fake: FakeKube, method: str, path: str, raw: bytes) -> tuple[int, JsonObject]:
    hook = "denials" if path == _DENIALS_ALIAS else path.removeprefix(_PREFIX)
    if hook == "requests" and method == "GET":
        return 200, {"items": [{"method": r.method, "path": r.path, "query": r.query,
                                "status": r.status, "user": r.user}
                               for r in fake.requests.records()],
                     "bytesSent": fake.requests.bytes_sent()}
    if hook == "denials" and method == "GET":
        return 200, {"items": [d.to_json() for d in fake.denials()]}
    if hook not in _HOOKS:
        raise status.no_route()
    if method != "POST":
        raise status.method_not_allowed()
    body = patch.decode_object(raw, patch.JSON, hook) if raw else {}
    return 200, _HOOKS[hook](fake, body)
