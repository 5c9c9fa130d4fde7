"""A test's one-line grant (`FakeKube.allow`) as the RBAC objects an administrator would apply
for it: a ClusterRole and ClusterRoleBinding (or a Role and RoleBinding when the grant is for one
namespace) with one rule. The fake has a single authorizer, `fakekube.rbac`, so a grant is
decided exactly as a role applied through the API is, by requests and SubjectAccessReviews alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fakekube.rbac import GROUP

JsonObject = dict[str, Any]
_API_VERSION = f"{GROUP}/v1"
# Bound names follow the apiserver's generateName; the prefix tells a reader of the store
# where a role came from.
NAME_PREFIX = "fakekube-allow-"


@dataclass(frozen=True, slots=True)
class Grant:
    """`verb` on `resource` (`*` for any; `subresource` for one of its subresources) of
    `api_group`, in `namespace` (None: every namespace and the cluster scope), on the object
    `name` (None: any), to exactly one of `user` or `group`."""

    verb: str
    resource: str
    user: str | None = None
    group: str | None = None
    api_group: str = ""
    subresource: str = ""
    namespace: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        if (self.user is None) == (self.group is None):
            raise ValueError("allow() needs exactly one of user= or group=")
        for field in ("verb", "resource", "user", "group", "namespace", "name"):
            if getattr(self, field) == "":
                raise ValueError(f"allow(): {field} must not be empty")

    def role(self) -> JsonObject:
        """The role with the one rule, to be created with a generated name."""
        rule: JsonObject = {"verbs": [self.verb], "apiGroups": [self.api_group],
                            "resources": [self._resource()]}
        if self.name is not None:
            rule["resourceNames"] = [self.name]
        return {"apiVersion": _API_VERSION, "kind": self._kind("Role"),
                "metadata": self._metadata({"generateName": NAME_PREFIX}), "rules": [rule]}

    def binding(self, role_name: str) -> JsonObject:
        """The binding of the role created as `role_name` to the subject, under the same name."""
        kind, name = ("User", self.user) if self.user is not None else ("Group", self.group)
        return {"apiVersion": _API_VERSION, "kind": self._kind("RoleBinding"),
                "metadata": self._metadata({"name": role_name}),
                "roleRef": {"apiGroup": GROUP, "kind": self._kind("Role"), "name": role_name},
                "subjects": [{"apiGroup": GROUP, "kind": kind, "name": name}]}

    def _resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    def _kind(self, namespaced: str) -> str:
        return namespaced if self.namespace is not None else f"Cluster{namespaced}"

    def _metadata(self, meta: JsonObject) -> JsonObject:
        return meta if self.namespace is None else {**meta, "namespace": self.namespace}
