"""The apiserver's REST semantics over the store, one method per verb: create, get, list,
replace, patch, delete, deletecollection and the start of a watch, for the main resource and its
`status` subresource. Also the lifecycle the apiserver's controllers would run at once here:
namespace deletion removes the namespace's objects, deleting an owner deletes the dependents
left without owners (background propagation), deleting a CRD deletes its custom resources.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from fakekube import claimdriver, patch, rawparams, reviews, status, strategy
from fakekube.jsoncopy import copy_json
from fakekube.kinds import Kind, Registry, field_value, kind_from_crd
from fakekube.rbac import Authorizer
from fakekube.reviews import Identity
from fakekube.schema import FieldValidation, Schemas
from fakekube.selectors import SelectorError, parse_fields, parse_labels
from fakekube.status import Cause
from fakekube.store import Store, Watcher

JsonObject = dict[str, Any]
Params = Mapping[str, str]
NAMESPACES = ("", "namespaces")
CRDS = ("apiextensions.k8s.io", "customresourcedefinitions")
CLAIMS = ("resource.k8s.io", "resourceclaims")
INITIAL_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True, slots=True)
class Target:
    """What a request addresses: a kind at a version, a namespace (None: cluster-scoped, or all
    namespaces for a list/watch), an object name and a subresource."""

    kind: Kind
    version: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None

    @property
    def ns(self) -> str:
        return self.namespace or ""

    def resource(self) -> status.Resource:
        return self.kind.resource(self.name or "")


@dataclass(frozen=True, slots=True)
class Reply:
    code: int
    body: JsonObject
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Options:
    """`kube_version` picks the built-in schemas and version-dependent DRA limits;
    `device_taints` is the DRADeviceTaints gate (off by default on 1.34/1.35, on from 1.36);
    `driver_verb` the check of a claim's status.devices writes (`fakekube.claimdriver`, 1.36+)."""

    kube_version: str = "1.34"
    device_taints: bool = True
    driver_verb: bool = True


_FIELD_VALIDATIONS: dict[str, FieldValidation] = {"Ignore": "Ignore", "Warn": "Warn",
                                                  "Strict": "Strict"}


def _field_validation(params: Params) -> FieldValidation:
    value = params.get("fieldValidation", "Warn")
    if value not in _FIELD_VALIDATIONS:
        raise status.bad_request(f"fieldValidation {value!r} is not one of Ignore, Warn, Strict")
    return _FIELD_VALIDATIONS[value]


def _dry_run(params: Params) -> bool:
    value = params.get("dryRun")
    if value not in (None, "All"):
        raise status.bad_request(f'dryRun {value!r}: only "All" is supported')
    return value == "All"


def _out(t: Target, obj: JsonObject) -> JsonObject:
    return {**obj, "apiVersion": t.kind.api_version(t.version), "kind": t.kind.kind}


def _rv(text: str | None) -> int | None:
    if text in (None, "", "0"):
        return None
    if not text.isdigit():
        raise status.bad_request(f"resourceVersion {text!r} is not a valid resource version")
    return int(text)


class Api:
    def __init__(self, store: Store, registry: Registry, policy: reviews.Policy,
                 authorizer: Authorizer, options: Options) -> None:
        self.store = store
        self.registry = registry
        self.policy = policy
        # SubjectAccessReviews answer from it whether or not the fake authorizes requests.
        self.authorizer = authorizer
        self.options = options
        self.schemas = Schemas(options.kube_version)
        self.minor = int(options.kube_version.split(".")[1])
        # Each stored claim's opaque parameters as the bytes sent, by uid (fakekube.rawparams).
        self.claim_parameters: dict[str, rawparams.Parameters] = {}
        ns_kind = registry.by_kind("Namespace", group="")
        for name in INITIAL_NAMESPACES:
            self.create(Target(ns_kind, "v1"), {"metadata": {"name": name}}, {})

    # -- reads -------------------------------------------------------------------------------

    def get(self, t: Target) -> Reply:
        return Reply(200, _out(t, self._current(t)))

    def _current(self, t: Target) -> JsonObject:
        found = self.store.get(t.kind.key, t.ns, t.name or "")
        if found is None:
            raise status.not_found(t.resource())
        return found

    def matcher(self, t: Target, params: Params) -> Callable[[JsonObject], bool]:
        try:
            labels = parse_labels(params.get("labelSelector"))
            fields = parse_fields(params.get("fieldSelector"))
        except SelectorError as e:
            raise status.bad_request(str(e)) from e
        for name in fields.fields:
            if name not in t.kind.field_labels:
                raise status.bad_request(
                    f"field label not supported for {t.kind.api_version(t.version)}, "
                    f"Kind={t.kind.kind}: {name}")
        return lambda obj: labels.matches(obj["metadata"].get("labels")) and fields.matches(
            lambda label: field_value(obj, label))

    def list_objects(self, t: Target, params: Params) -> Reply:
        matches = self.matcher(t, params)
        with self.store.lock:
            rv = str(self.store.resource_version)
            items = [o for o in self.store.items(t.kind.key, t.namespace) if matches(o)]
        start = self._continue_from(params.get("continue"))
        if start is not None:
            rv, after = start
            items = [o for o in items if self._sort_key(o) > after]
        meta: JsonObject = {"resourceVersion": rv}
        limit = int(params.get("limit") or 0)
        if 0 < limit < len(items):
            meta["continue"] = self._token(rv, self._sort_key(items[limit - 1]))
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        return self._list_reply(t, meta, items)

    def _list_reply(self, t: Target, meta: JsonObject, items: list[JsonObject]) -> Reply:
        return Reply(200, {"kind": f"{t.kind.kind}List",
                           "apiVersion": t.kind.api_version(t.version),
                           "metadata": meta, "items": [self._list_item(t, o) for o in items]})

    @staticmethod
    def _list_item(t: Target, obj: JsonObject) -> JsonObject:
        # Typed lists of built-in kinds carry no kind/apiVersion on their items; custom
        # resources (unstructured) do.
        if t.kind.builtin_schema:
            return {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
        return _out(t, obj)

    @staticmethod
    def _sort_key(obj: JsonObject) -> str:
        meta = obj["metadata"]
        return f"{meta.get('namespace', '')}/{meta['name']}"

    @staticmethod
    def _token(rv: str, after: str) -> str:
        return base64.urlsafe_b64encode(json.dumps({"rv": rv, "start": after}).encode()).decode()

    def _continue_from(self, token: str | None) -> tuple[str, str] | None:
        if not token:
            return None
        try:
            decoded = json.loads(base64.urlsafe_b64decode(token.encode()))
            return str(decoded["rv"]), str(decoded["start"])
        except (ValueError, KeyError, TypeError, binascii.Error) as e:
            raise status.bad_request(f"continue key is not valid: {e}") from e

    def watch(self, t: Target, params: Params) -> Watcher:
        """Register a watch; its queue holds the first events. 410 when history is gone."""
        since = _rv(params.get("resourceVersion"))
        watcher = Watcher(t.kind.key, t.namespace, self.matcher(t, params))
        self.store.watch(watcher, since)
        return watcher

    # -- create ------------------------------------------------------------------------------

    def _check_type(self, t: Target, body: JsonObject) -> None:
        want = t.kind.api_version(t.version)
        if body.get("apiVersion") not in (None, want) or body.get("kind") not in (None,
                                                                                   t.kind.kind):
            raise status.bad_request(
                f"the API version in the data ({body.get('apiVersion')}) and kind "
                f"({body.get('kind')}) do not match the expected {want}, Kind={t.kind.kind}")
        if not isinstance(body.get("metadata", {}), dict):
            raise status.bad_request("metadata must be an object")

    def _check_namespace(self, t: Target, body: JsonObject) -> None:
        meta = body.setdefault("metadata", {})
        if not t.kind.namespaced:
            meta.pop("namespace", None)
            return
        if meta.get("namespace") not in (None, "", t.ns):
            raise status.bad_request("the namespace of the provided object does not match the "
                                     "namespace sent on the request")
        meta["namespace"] = t.ns

    def create(self, t: Target, body: JsonObject, params: Params, *,
               sent: rawparams.Parameters | None = None) -> Reply:
        """`sent`: a claim's parameters as the body's bytes held them (else compact)."""
        self._check_type(t, body)
        if t.kind.create_only:
            return self._review(t, body)
        obj = copy_json(body)
        self._check_namespace(t, obj)
        meta = obj["metadata"]
        with self.store.lock:
            if t.kind.namespaced and self.store.get(NAMESPACES, "", t.ns) is None:
                raise status.not_found(status.Resource("", "namespaces", "Namespace", t.ns))
            if meta.get("resourceVersion"):
                raise status.internal_error(
                    "resourceVersion should not be set on objects to be created")
            obj.update(apiVersion=t.kind.api_version(t.version), kind=t.kind.kind)
            # Unknown fields of the body as sent, status included (prepare_create drops it).
            sent_unknown = self.schemas.unknown_fields(t.kind, t.version, obj)
            if sent_unknown and _field_validation(params) == "Strict":
                unknown = ", ".join(f'unknown field "{p}"' for p in sent_unknown)
                raise status.bad_request(f"strict decoding error: {unknown}")
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = self._free_name(t, str(meta["generateName"]))
            name = str(meta.get("name") or "")
            with _warning_of(sent_unknown):
                if not name:
                    raise status.invalid(t.kind.resource(), [Cause(
                        "metadata.name", "FieldValueRequired",
                        "Required value: name or generateName is required")])
                if bad := strategy.name_causes(t.kind, name):
                    raise status.invalid(t.kind.resource(name), bad)
            stamp = strategy.now()
            strategy.prepare_create(t.kind, obj, stamp=stamp)
            strategy.prepare(t.kind, obj, None, device_taints=self.options.device_taints,
                             stamp=stamp)
            with _warning_of(sent_unknown):
                checked = self.schemas.check(t.kind, t.version, obj, name=name,
                                             field_validation=_field_validation(params))
                strategy.check(t.kind, checked.obj, None, minor=self.minor)
            if self.store.get(t.kind.key, t.ns, name) is not None:
                raise status.already_exists(t.kind.resource(name))
            if _dry_run(params):
                return Reply(201, _out(t, checked.obj),
                             _warnings((*sent_unknown, *checked.unknown)))
            stored = self.store.put(t.kind.key, checked.obj)
            self._after_write(t.kind, stored)
            if t.kind.key == CLAIMS:
                spec = (sent or rawparams.compact(stored)).spec
                self.claim_parameters[stored["metadata"]["uid"]] = rawparams.Parameters(spec, None)
        return Reply(201, _out(t, stored), _warnings((*sent_unknown, *checked.unknown)))

    def _free_name(self, t: Target, prefix: str) -> str:
        for _ in range(8):
            name = strategy.generated_name(prefix)
            if self.store.get(t.kind.key, t.ns, name) is None:
                return name
        raise status.already_exists(t.kind.resource(prefix))

    def _review(self, t: Target, body: JsonObject) -> Reply:
        if t.kind.plural == "tokenreviews":
            answer = reviews.token_review(self.policy, body)
        else:
            answer = reviews.access_review(self.authorizer, body)
        return Reply(201, _out(t, answer))

    def _after_write(self, kind: Kind, stored: JsonObject) -> None:
        if kind.key == CRDS:
            self.registry.add(kind_from_crd(stored))

    # -- update ------------------------------------------------------------------------------

    def replace(self, t: Target, body: JsonObject, params: Params, *,
                who: Identity | None = None, sent: rawparams.Parameters | None = None) -> Reply:
        self._check_type(t, body)
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, "", t.name):
            raise status.bad_request(f"the name of the object ({meta.get('name')}) does not "
                                     f"match the name on the URL ({t.name})")
        if t.kind.namespaced:
            self._check_namespace(t, body)
        self.schemas.check_types(t.kind, t.version, body)
        with self.store.lock:
            current = self._current(t)
            self._preconditions(t, current, meta, require=not t.kind.unconditional_update)
            return self._commit(t, current, body, params, who=who, verb="update", sent=sent)

    def _preconditions(self, t: Target, current: JsonObject, meta: JsonObject, *,
                       require: bool) -> None:
        rv = meta.get("resourceVersion")
        if not rv and require:
            raise status.invalid(t.resource(), [Cause(
                "metadata.resourceVersion", "FieldValueInvalid",
                "Invalid value: 0x0: must be specified for an update")])
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise status.conflict(t.resource(), status.STALE)
        uid = meta.get("uid")
        if uid and uid != current["metadata"]["uid"]:
            raise status.conflict(t.resource(), f"Precondition failed: UID in precondition: "
                                                f"{uid}, UID in object meta: "
                                                f"{current['metadata']['uid']}")

    def _commit(self, t: Target, current: JsonObject, body: JsonObject, params: Params, *,
                who: Identity | None = None, verb: str = "update",
                sent: rawparams.Parameters | None = None) -> Reply:
        """`who` (None: the fake authorizes nothing) wrote `body` over `current` by `verb`;
        `sent`: a claim's parameters as a PUT's bytes held them."""
        status_only = t.subresource == "status"
        new = strategy.merge_update(t.kind, current, body, status_only=status_only)
        new.update(apiVersion=current["apiVersion"], kind=t.kind.kind)
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        strategy.prepare(t.kind, new, current, device_taints=self.options.device_taints,
                         stamp=strategy.now())
        with _warning_of(self.schemas.unknown_fields(t.kind, t.version, new)):
            checked = self.schemas.check(t.kind, t.version, new, name=t.name or "",
                                         field_validation=_field_validation(params))
            strategy.check(t.kind, checked.obj, current, minor=self.minor)
        new = checked.obj
        parameters = None
        if t.kind.key == CLAIMS:
            parameters = self._claim_parameters(t, current, new, sent, status_only=status_only)
        if who is not None and t.kind.key == CLAIMS and status_only and self.options.driver_verb:
            claimdriver.check(self.authorizer, who, verb, new, current, t.resource())
        strategy.bump_generation(t.kind, current, new)
        warnings = _warnings(checked.unknown)
        if strategy.same_object(current, new) or _dry_run(params):
            return Reply(200, _out(t, new), warnings)
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            # The update that removes the last finalizer of a deleting object deletes it.
            return Reply(200, _out(t, self._remove(t.kind, new)), warnings)
        stored = self.store.put(t.kind.key, new)
        self._after_write(t.kind, stored)
        if parameters is not None:
            self.claim_parameters[stored["metadata"]["uid"]] = parameters
        return Reply(200, _out(t, stored), warnings)

    def _claim_parameters(self, t: Target, current: JsonObject, new: JsonObject,
                          sent: rawparams.Parameters | None, *,
                          status_only: bool) -> rawparams.Parameters:
        """The bytes a claim's update leaves, refused as the apiserver refuses them when they
        differ from the stored ones where they may not change."""
        old = (self.claim_parameters.get(current["metadata"]["uid"])
               or rawparams.compact(current))
        written = sent or rawparams.compact(new)
        if status_only:  # the spec is the stored one, whatever the body said
            result = rawparams.Parameters(old.spec, written.allocation)
        else:  # and the status
            result = rawparams.Parameters(written.spec, old.allocation)
        if causes := rawparams.update_causes(old, result, status_only=status_only):
            raise status.invalid(t.resource(), causes)
        return result

    def patch(self, t: Target, raw: bytes, content_type: str, params: Params, *,
              who: Identity | None = None) -> Reply:
        how = patch.patch_kind(content_type)
        if how == "apply" and not params.get("fieldManager"):
            raise status.bad_request("PATCH with apply requires the fieldManager parameter")
        body = patch.decode_body(raw, content_type)
        with self.store.lock:
            current = self.store.get(t.kind.key, t.ns, t.name or "")
            if current is None and how == "apply" and t.subresource is None:
                return self._apply_create(t, body, params)
            if current is None:
                raise status.not_found(t.resource())
            patched = self._patched(t, current, body, how)
            self._check_type(t, patched)
            meta = patched["metadata"]
            if meta.get("name") != t.name or meta.get("namespace", "") != t.ns:
                raise status.bad_request("a patch may not change metadata.name or namespace")
            self._preconditions(t, current, meta, require=False)
            return self._commit(t, current, patched, params, who=who, verb="patch")

    def _patched(self, t: Target, current: JsonObject, body: Any, how: str) -> JsonObject:
        if how == "json":
            try:
                result = patch.json_patch(current, body)
            except patch.JsonPatchError as e:
                raise status.ApiFailure(422, "Invalid", str(e)) from e
        else:
            if not isinstance(body, dict):
                raise status.bad_request("a merge patch must be a JSON object")
            if how == "apply" and not (body.get("apiVersion") and body.get("kind")):
                raise status.bad_request("apply requires apiVersion and kind in the body")
            result = patch.merge_patch(current, body)
        if not isinstance(result, dict) or not isinstance(result.get("metadata"), dict):
            raise status.ApiFailure(422, "Invalid", "the patched object has no metadata")
        return result

    def _apply_create(self, t: Target, body: Any, params: Params) -> Reply:
        if not isinstance(body, dict) or not (body.get("apiVersion") and body.get("kind")):
            raise status.bad_request("apply requires apiVersion and kind in the body")
        meta = body.setdefault("metadata", {})
        if meta.get("name") not in (None, t.name):
            raise status.bad_request(f"the name of the object ({meta.get('name')}) does not "
                                     f"match the name on the URL ({t.name})")
        meta["name"] = t.name
        return self.create(t, body, params)

    def mutate(self, t: Target, change: Callable[[JsonObject], None]) -> Reply:
        """Read-modify-write of one object under the store lock, through the same checks as a
        PUT (for test hooks that play a controller or the kubelet)."""
        with self.store.lock:
            current = self._current(t)
            body = copy_json(current)
            change(body)
            return self._commit(t, current, body, {})

    # -- delete ------------------------------------------------------------------------------

    def delete(self, t: Target, params: Params, options: JsonObject | None = None) -> Reply:
        with self.store.lock:
            last, gone = self._delete_one(t, params, options or {})
        if gone and not t.kind.returns_deleted:
            return Reply(200, status.Success(t.resource(), last["metadata"]["uid"]).body())
        return Reply(200, _out(t, last))

    def _delete_one(self, t: Target, params: Params,
                    options: JsonObject) -> tuple[JsonObject, bool]:
        """The object's last state, and whether it is gone (False: finalizers hold it)."""
        current = self._current(t)
        pre = options.get("preconditions") or {}
        self._preconditions(t, current, {k: v for k, v in pre.items()
                                         if k in ("uid", "resourceVersion")}, require=False)
        if _dry_run(params):
            return current, True
        if current["metadata"].get("finalizers"):
            marked = copy_json(current)
            marked["metadata"].setdefault("deletionTimestamp", strategy.now())
            marked["metadata"].setdefault("deletionGracePeriodSeconds", 0)
            if marked != current:
                marked = self.store.put(t.kind.key, marked)
            return marked, False
        orphan = "Orphan" in (params.get("propagationPolicy"), options.get("propagationPolicy"))
        return self._remove(t.kind, current, orphan=orphan), True

    def _remove(self, kind: Kind, obj: JsonObject, *, orphan: bool = False) -> JsonObject:
        meta = obj["metadata"]
        if kind.key == NAMESPACES:
            self._empty_namespace(meta["name"])
        if kind.key == CRDS:
            self._drop_custom_kind(obj)
        last = self.store.remove(kind.key, obj)
        self.claim_parameters.pop(meta["uid"], None)
        if not orphan:
            self._collect_garbage(meta["uid"])
        return last

    def _empty_namespace(self, namespace: str) -> None:
        for kind in self.registry:
            if kind.namespaced:
                for obj in self.store.items(kind.key, namespace):
                    self._remove(kind, obj)

    def _drop_custom_kind(self, crd: JsonObject) -> None:
        spec = crd.get("spec") or {}
        key = (str(spec.get("group")), str((spec.get("names") or {}).get("plural")))
        for kind in self.registry:
            if kind.key == key:
                for obj in self.store.items(key):
                    self._remove(kind, obj)
        self.registry.remove(key)

    def _collect_garbage(self, owner_uid: str) -> None:
        """Delete dependents whose owners are now all gone (background propagation)."""
        live = {o["metadata"]["uid"] for k in self.registry for o in self.store.items(k.key)}
        for kind in self.registry:
            for obj in self.store.items(kind.key):
                owners = {r.get("uid") for r in obj["metadata"].get("ownerReferences") or ()}
                if owner_uid in owners and not owners & live:
                    meta = obj["metadata"]
                    if self.store.get(kind.key, meta.get("namespace", ""), meta["name"]):
                        self._remove(kind, obj)

    def delete_collection(self, t: Target, params: Params) -> Reply:
        matches = self.matcher(t, params)
        deleted = []
        with self.store.lock:
            for obj in self.store.items(t.kind.key, t.namespace):
                if not matches(obj):
                    continue
                one = Target(t.kind, t.version, obj["metadata"].get("namespace"),
                             obj["metadata"]["name"])
                deleted.append(self._delete_one(one, params, {})[0])
            rv = str(self.store.resource_version)
        return self._list_reply(t, {"resourceVersion": rv}, deleted)


@contextlib.contextmanager
def _warning_of(unknown: tuple[str, ...]) -> Iterator[None]:
    """A failure inside carries the warnings of the body's unknown fields, as the
    apiserver's 422 does."""
    try:
        yield
    except status.ApiFailure as e:
        e.warnings = e.warnings or _warnings(unknown)
        raise


def _warnings(unknown: tuple[str, ...]) -> tuple[str, ...]:
    # In the apiserver's order: sorted by path, not as the body had them.
    return tuple(f'unknown field "{path}"' for path in sorted(set(unknown)))
