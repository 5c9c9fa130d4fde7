"""How simnode reaches its cluster: `Access` (what the state file records, the embedded fake's
URL or a kubeconfig and context) and `Api`, a small JSON client of the apiserver's REST API.

Credentials are read as `declare` reads them (`libdisplay.kubeconfig`: a token or tokenFile,
client certificate, CA, insecure-skip-tls-verify), so simnode reaches a cluster exactly when its
binaries can. Every failure is a `ClusterError` a user can act on: a kubeconfig that cannot be
used, an API server that does not answer, credentials refused (401), rights missing (403, the
message names the verb and the resource). Proxies from the environment are not used, as the
operator's lightkube client does not use them.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from libdisplay import display, kubeapi, kubeconfig

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
    """The API server answered a request with an error status (`code`)."""

    def __init__(self, message: str, *, code: int) -> None:
        super().__init__(message)
        self.code = code


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
    without a kubeconfig the server is the embedded fake, plain HTTP without credentials."""

    server: str
    kubeconfig: Path | None = None
    context: str | None = None

    @classmethod
    def from_kubeconfig(cls, path: Path, *, context: str | None = None) -> Access:
        """The access a kubeconfig gives; KubeconfigUnusableError names what is wrong in it."""
        path = path.absolute()
        return cls(server=credentials(path, context=context).server, kubeconfig=path,
                   context=context)

    def __str__(self) -> str:
        if self.kubeconfig is None:
            return f"{self.server} (the embedded fake apiserver)"
        return f"{self.server} (kubeconfig {self.kubeconfig}, context {self.context or 'current'})"


def credentials(path: Path, *, context: str | None) -> kubeconfig.Credentials:
    try:
        return kubeconfig.load(path, context=context)
    except kubeconfig.KubeconfigError as exc:
        raise KubeconfigUnusableError(f"cannot use --kubeconfig {path}: {exc}") from exc


class Api:
    """JSON requests to one cluster, each bounded by `timeout` seconds."""

    def __init__(self, access: Access, *, timeout: float = TIMEOUT_S) -> None:
        self.access = access
        self.timeout = timeout
        self._token: str | None = None
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if access.kubeconfig is not None:
            creds = credentials(access.kubeconfig, context=access.context)
            self._token = creds.token
            tls = _tls(creds, access)
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

    def create(self, resource: Resource, obj: JsonObject, *,
               namespace: str | None = None) -> JsonObject:
        return self._call("POST", resource, namespace=namespace, body=obj)

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
        url = self.access.server + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        headers = {"Accept": "application/json", "User-Agent": _USER_AGENT}
        if body is not None:
            headers["Content-Type"] = MERGE_PATCH if method == "PATCH" else "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        what = _what(method, resource, name=name, namespace=namespace, subresource=subresource)
        try:
            with self._opener.open(request, timeout=self.timeout) as response:
                answer = response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                raise self._status_error(exc.code, exc.read(), exc.reason, what) from exc
        except OSError as exc:
            raise UnreachableError(
                f"cannot reach the API server at {self.access} to {what}: {_reason(exc)}"
            ) from exc
        try:
            decoded: JsonObject = json.loads(answer)
        except ValueError as exc:
            raise StatusError(f"{what}: the API server at {self.access} answered no JSON",
                              code=200) from exc
        return decoded

    def _status_error(self, code: int, body: bytes, reason: str, what: str) -> StatusError:
        message = kubeapi.status_message(body, reason)
        if code == 401:
            text = (f"the API server at {self.access} refused the credentials (401 {message}):"
                    " renew the kubeconfig's token or certificate")
        elif code == 403:
            text = (f"no rights to {what} in the cluster at {self.access}: {message}"
                    " (grant them to the kubeconfig's user, e.g. with an RBAC ClusterRole)")
        else:
            text = f"cannot {what} in the cluster at {self.access}: {code} {message}"
        return StatusError(text, code=code)


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


def _tls(creds: kubeconfig.Credentials, access: Access) -> ssl.SSLContext | None:
    try:
        return creds.tls()
    except (kubeconfig.KubeconfigError, ssl.SSLError) as exc:
        raise KubeconfigUnusableError(
            f"cannot use --kubeconfig {access.kubeconfig}: its TLS settings: {exc}"
        ) from exc


def _reason(exc: OSError) -> str:
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    return str(exc)
