"""How simnode reaches its cluster: `Access` (what the state file records, the embedded fake's
URL or a kubeconfig and context) and `Api`, a small JSON client of the apiserver's REST API.

The endpoint and its credentials come from `libdisplay.kube.access`, as for every other client
of the project, so simnode reaches a cluster exactly when its binaries can; the token is asked
for on every request, so a rotated token file is used without a restart. Failures are mapped by
`libdisplay.kube.errors` and raised as a `ClusterError` a user can act on: a kubeconfig that
cannot be used, an API server that does not answer, credentials refused (401), rights missing
(403, the message names the verb and the resource). Proxies from the environment are not used,
as the operator's lightkube client does not use them.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from libdisplay import display
from libdisplay.kube import access as kubeaccess
from libdisplay.kube import errors as kubeerrors

JsonObject = dict[str, Any]
TIMEOUT_S: Final = 10.0
MERGE_PATCH: Final = "application/merge-patch+json"
_USER_AGENT: Final = "display-operator/simnode"
_VERBS: Final = {"POST": "create", "PATCH": "patch", "DELETE": "delete"}


class ClusterError(Exception):
    """The cluster cannot be used as asked; the message says what to do."""


class KubeconfigUnusableError(ClusterError):
    """The kubeconfig cannot be read, lacks its context, or needs a credential plugin."""


class UnreachableError(ClusterError):
    """No answer from the API server: refused, timed out, or TLS failed."""


class StatusError(ClusterError):
    """The API server answered a request with an error status (`code`); `retryable` says
    whether the same call may succeed later (5xx, 429, 409, an answer that is not JSON)."""

    def __init__(self, message: str, *, code: int, retryable: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = retryable


@dataclass(frozen=True, slots=True)
class Resource:
    """A kind as the REST API addresses it."""

    api_version: str
    plural: str

    def path(self, name: str | None = None, *, namespace: str | None = None,
             subresource: str | None = None) -> str:
        """`/apis/g/v[/namespaces/ns]/plural[/name[/sub]]`; no namespace lists all of them."""
        parts = ["/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"]
        if namespace is not None:
            parts += ["namespaces", namespace]
        parts.append(self.plural)
        parts += [p for p in (name, subresource) if p]
        return "/".join(urllib.parse.quote(p, safe="/") for p in parts)


NODES: Final = Resource("v1", "nodes")
RESOURCE_SLICES: Final = Resource("resource.k8s.io/v1", "resourceslices")
RESOURCE_CLAIMS: Final = Resource("resource.k8s.io/v1", "resourceclaims")
DISPLAYS: Final = Resource(display.API_VERSION, display.PLURAL)
_BY_KIND: Final = {("v1", "Node"): NODES,
                   (RESOURCE_SLICES.api_version, "ResourceSlice"): RESOURCE_SLICES,
                   (RESOURCE_CLAIMS.api_version, "ResourceClaim"): RESOURCE_CLAIMS,
                   (display.API_VERSION, display.KIND): DISPLAYS}


@dataclass(frozen=True, slots=True)
class Access:
    """Where the cluster is: `server`, and the kubeconfig (and context) that reach it, if any;
    without a kubeconfig the server is the embedded fake, plain HTTP without credentials.
    `endpoint` is the resolved endpoint when the caller has one (not part of the record)."""

    server: str
    kubeconfig: Path | None = None
    context: str | None = None
    endpoint: kubeaccess.Endpoint | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_kubeconfig(cls, path: Path, *, context: str | None = None) -> Access:
        """The access a kubeconfig gives; KubeconfigUnusableError names what is wrong in it."""
        path = path.absolute()
        endpoint = _kubeconfig_endpoint(path, context=context)
        return cls(server=endpoint.url, kubeconfig=path, context=context, endpoint=endpoint)

    def resolve(self) -> kubeaccess.Endpoint:
        """The endpoint: the one given, the kubeconfig's, or the embedded fake's plain URL."""
        if self.endpoint is not None:
            return self.endpoint
        if self.kubeconfig is not None:
            return _kubeconfig_endpoint(self.kubeconfig, context=self.context)
        return kubeaccess.Endpoint(url=self.server, origin="the embedded fake apiserver")

    def __str__(self) -> str:
        if self.kubeconfig is None:
            return f"{self.server} (the embedded fake apiserver)"
        return f"{self.server} (kubeconfig {self.kubeconfig}, context {self.context or 'current'})"


def _kubeconfig_endpoint(path: Path, *, context: str | None) -> kubeaccess.Endpoint:
    try:
        return kubeaccess.from_kubeconfig(path, context=context)
    except kubeaccess.NoEndpointError as exc:
        raise KubeconfigUnusableError(f"cannot use --kubeconfig {path}: {exc.detail}") from exc


class Api:
    """JSON requests to one cluster, each bounded by `timeout` seconds."""

    def __init__(self, access: Access, *, timeout: float = TIMEOUT_S) -> None:
        self.access = access
        self.timeout = timeout
        self.endpoint = access.resolve()
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        try:
            tls = self.endpoint.ssl_context()
        except kubeaccess.NoEndpointError as exc:
            raise KubeconfigUnusableError(
                f"cannot use {_source(access)}: its TLS settings: {exc.__cause__ or exc.detail}"
            ) from exc
        if tls is not None:
            handlers.append(urllib.request.HTTPSHandler(context=tls))
        self._opener = urllib.request.build_opener(*handlers)

    # --- the calls simnode makes ---------------------------------------------------------

    def get(self, resource: Resource, name: str, *,
            namespace: str | None = None) -> JsonObject | None:
        """The object, or None when there is none."""
        try:
            return self._call("GET", resource, name=name, namespace=namespace)
        except StatusError as exc:
            if exc.code == 404:
                return None
            raise

    def items(self, resource: Resource, *, fields: Mapping[str, str] | None = None,
             limit: int | None = None) -> list[JsonObject]:
        """Every object of the kind (in every namespace), or those the field selector picks."""
        query = {}
        if fields:
            query["fieldSelector"] = ",".join(f"{k}={v}" for k, v in fields.items())
        if limit is not None:
            query["limit"] = str(limit)
        items: list[JsonObject] = self._call("GET", resource, query=query)["items"]
        return items

    def create(self, resource: Resource, obj: JsonObject, *, namespace: str | None = None,
               name: str | None = None, subresource: str | None = None) -> JsonObject:
        """POST `obj` to the collection, or to an object's `subresource` (`token`)."""
        return self._call("POST", resource, name=name, namespace=namespace,
                          subresource=subresource, body=obj)

    def patch(self, resource: Resource, name: str, patch: JsonObject, *,
              namespace: str | None = None, subresource: str | None = None) -> JsonObject:
        """A JSON merge patch of the object (or its `subresource`)."""
        return self._call("PATCH", resource, name=name, namespace=namespace,
                          subresource=subresource, body=patch)

    def delete(self, resource: Resource, name: str, *, namespace: str | None = None) -> bool:
        """Delete the object; False when there was none."""
        try:
            self._call("DELETE", resource, name=name, namespace=namespace)
        except StatusError as exc:
            if exc.code == 404:
                return False
            raise
        return True

    def objects(self, api_version: str, kind: str) -> list[JsonObject]:
        """Every object of a kind simnode knows, as `report` reads them."""
        return self.items(_BY_KIND[(api_version, kind)])

    # --- HTTP ----------------------------------------------------------------------------

    def _call(self, method: str, resource: Resource, *, name: str | None = None,
              namespace: str | None = None, subresource: str | None = None,
              query: Mapping[str, str] | None = None, body: JsonObject | None = None,
              ) -> JsonObject:
        path = resource.path(name, namespace=namespace, subresource=subresource)
        url = self.endpoint.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        what = _what(method, resource, name=name, namespace=namespace, subresource=subresource)
        headers = {"Accept": "application/json", "User-Agent": _USER_AGENT,
                   **self._credentials()}
        if body is not None:
            headers["Content-Type"] = MERGE_PATCH if method == "PATCH" else "application/json"
        # Compact, as Go clients send it: kube-apiserver 1.37 keeps a claim's opaque
        # parameters as the bytes it was sent and compares them byte for byte on every
        # status update, which its own re-encoding (compact) then fails as "status.allocation:
        # field cannot be modified once set": the driver could never write status.devices.
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                code, answer = response.status, response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                failed = kubeerrors.status_error(what, exc.code, exc.read(), reason=exc.reason,
                                                 headers=dict(exc.headers.items()))
            raise self._status_error(failed, what) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(kubeerrors.transport_error(what, _cause(exc)), what) from exc
        try:
            return kubeerrors.json_body(what, code, answer)
        except kubeerrors.ApiCallError as exc:
            raise StatusError(f"{what}: the API server at {self.access} answered no JSON"
                              f" ({exc.detail})", code=code, retryable=exc.retryable) from exc

    def _credentials(self) -> dict[str, str]:
        """This request's Authorization header: a token file is re-read when it was rotated."""
        try:
            return self.endpoint.headers()
        except kubeaccess.NoEndpointError as exc:
            raise KubeconfigUnusableError(f"cannot use {_source(self.access)}: {exc.detail}"
                                          ) from exc

    def _status_error(self, failed: kubeerrors.ApiCallError, what: str) -> StatusError:
        code, message = failed.code or 0, failed.detail
        if code == 401:
            text = (f"the API server at {self.access} refused the credentials (401 {message}):"
                    " renew the kubeconfig's token or certificate")
        elif code == 403:
            text = (f"no rights to {what} in the cluster at {self.access}: {message}"
                    " (grant them to the kubeconfig's user, e.g. with an RBAC ClusterRole)")
        else:
            text = f"cannot {what} in the cluster at {self.access}: {code} {message}"
        return StatusError(text, code=code, retryable=failed.retryable)

    def _unreachable(self, failed: kubeerrors.ApiCallError, what: str) -> UnreachableError:
        text = f"cannot reach the API server at {self.access} to {what}: {failed.detail}"
        if failed.reason == "TLSVerifyFailed":
            text += " (the server's certificate is not trusted: check the kubeconfig's CA)"
        return UnreachableError(text)


def _what(method: str, resource: Resource, *, name: str | None, namespace: str | None,
          subresource: str | None) -> str:
    """`create resourceclaims in namespace default`: the verb and resource a 403 is about."""
    verb = _VERBS.get(method) or ("get" if name else "list")
    text = f"{verb} {resource.plural}" + (f"/{subresource}" if subresource else "")
    if name:
        text += f" {name}"
    if namespace:
        text += f" in namespace {namespace}"
    return text


def _source(access: Access) -> str:
    return f"--kubeconfig {access.kubeconfig}" if access.kubeconfig else str(access)


def _cause(exc: BaseException) -> BaseException:
    """urllib wraps the socket's or ssl's error in a URLError; its reason is the error."""
    if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, BaseException):
        return exc.reason
    return exc
