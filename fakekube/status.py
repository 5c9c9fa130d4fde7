"""The apiserver's failure answers: `Status` bodies with the reason, code, message and details
real clients branch on, raised as `ApiFailure` anywhere below the HTTP layer.

Messages follow the apiserver's wording (`k8s.io/apimachinery/pkg/api/errors`), because client
code and logs quote them: `resourceslices.resource.k8s.io "x" not found`, `Operation cannot be
fulfilled on ...`. `details.kind` is the resource plural for NotFound/AlreadyExists/Conflict and
the Kind for Invalid, as the apiserver does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JsonObject = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Cause:
    """One `details.causes[]` entry of an Invalid answer: which field and why."""

    field: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Resource:
    """What a failure is about: group and plural, Kind and object name (any may be empty)."""

    group: str = ""
    plural: str = ""
    kind: str = ""
    name: str = ""

    @property
    def qualified(self) -> str:
        """`plural.group` (`resourceslices.resource.k8s.io`); the bare plural in the core group."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def qualified_kind(self) -> str:
        return f"{self.kind}.{self.group}" if self.group else self.kind


class ApiFailure(Exception):  # noqa: N818 - the apiserver calls these "failures"
    """An answer other than success, carried up to the HTTP layer and sent as a Status body."""

    def __init__(
        self,
        code: int,
        reason: str,
        message: str,
        *,
        details: JsonObject | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}
        # The apiserver warns of what it met while decoding (unknown fields) whatever the
        # outcome, so a refused write carries its Warning headers too.
        self.warnings: tuple[str, ...] = ()

    def body(self) -> JsonObject:
        status: JsonObject = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            status["details"] = self.details
        return status


@dataclass(frozen=True, slots=True)
class Success:
    """The Status a delete answers with for kinds that do not return the deleted object."""

    resource: Resource
    uid: str

    def body(self) -> JsonObject:
        details = {"name": self.resource.name, "kind": self.resource.plural, "uid": self.uid}
        if self.resource.group:
            details["group"] = self.resource.group
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        }


def _details(res: Resource, *, kind: str | None = None) -> JsonObject:
    details: JsonObject = {"name": res.name, "kind": res.plural if kind is None else kind}
    if res.group:
        details["group"] = res.group
    return details


def not_found(res: Resource) -> ApiFailure:
    return ApiFailure(
        404, "NotFound", f'{res.qualified} "{res.name}" not found', details=_details(res)
    )


def no_route() -> ApiFailure:
    """A path that names no resource the server serves (the apiserver's bare 404)."""
    return ApiFailure(404, "NotFound", "the server could not find the requested resource",
                      details={})


def already_exists(res: Resource) -> ApiFailure:
    return ApiFailure(
        409, "AlreadyExists", f'{res.qualified} "{res.name}" already exists', details=_details(res)
    )


def conflict(res: Resource, why: str) -> ApiFailure:
    return ApiFailure(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {res.qualified} "{res.name}": {why}',
        details=_details(res),
    )


STALE = ("the object has been modified; please apply your changes to the latest version and "
         "try again")


def invalid(res: Resource, causes: list[Cause]) -> ApiFailure:
    summary = ", ".join(f"{c.field}: {c.message}" for c in causes)
    if len(causes) > 1:  # apimachinery's aggregate of several field errors
        summary = f"[{summary}]"
    details = _details(res, kind=res.kind)
    details["causes"] = [
        {"reason": c.reason, "message": c.message, "field": c.field} for c in causes
    ]
    return ApiFailure(
        422, "Invalid", f'{res.qualified_kind} "{res.name}" is invalid: {summary}', details=details
    )


def bad_request(message: str) -> ApiFailure:
    return ApiFailure(400, "BadRequest", message)


def method_not_allowed() -> ApiFailure:
    return ApiFailure(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource",
        details={},
    )


def unsupported_media_type(content_type: str, accepted: tuple[str, ...]) -> ApiFailure:
    return ApiFailure(
        415,
        "UnsupportedMediaType",
        f"the body of the request was in an unknown format ({content_type!r}) - accepted media "
        f"types include: {', '.join(accepted)}",
        details={},
    )


def too_many_requests(retry_after: int) -> ApiFailure:
    return ApiFailure(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        details={"retryAfterSeconds": retry_after},
        headers={"Retry-After": str(retry_after)},
    )


def internal_error(message: str) -> ApiFailure:
    return ApiFailure(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        details={"causes": [{"message": message}]},
    )


def expired(message: str) -> ApiFailure:
    """410 Gone with reason Expired: a watch or continue token older than the compacted history."""
    return ApiFailure(410, "Expired", message)


def unauthorized() -> ApiFailure:
    """401 for a request without a valid bearer token, as the authentication filter answers."""
    return ApiFailure(401, "Unauthorized", "Unauthorized")


def forbidden(group: str, plural: str, name: str, why: str) -> ApiFailure:
    """403 as `apierrors.NewForbidden`: the message names `plural.group` and the object when
    there is one; details carry the plural as `kind` (empty for a non-resource request)."""
    res = Resource(group=group, plural=plural, name=name)
    if not plural:
        message = f"forbidden: {why}"
    elif name:
        message = f'{res.qualified} "{name}" is forbidden: {why}'
    else:
        message = f"{res.qualified} is forbidden: {why}"
    details = {k: v for k, v in (("name", name), ("group", group), ("kind", plural)) if v}
    return ApiFailure(403, "Forbidden", message, details=details)
