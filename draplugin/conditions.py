"""metav1.Condition as the operator writes it on Displays and ResourceClaims.

A condition keeps its `lastTransitionTime` while its status stays the same (a new reason or
message is no transition), and its reason and message stay within what the API accepts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, Literal

ConditionStatus = Literal["True", "False", "Unknown"]
JsonObject = dict[str, Any]

# metav1.Condition's validation (apimachinery's ValidateConditions).
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
REASON_MAX = 1024
MESSAGE_MAX = 32768


class ConditionError(ValueError):
    """A condition the API would refuse; `field` names the bad one."""

    def __init__(self, field: str, text: str) -> None:
        super().__init__(f"{field}: {text}")
        self.field = field


def check(status: str, reason: str, message: str) -> None:
    """ConditionError naming `status`, `reason` or `message` when the API would refuse it."""
    if status not in ("True", "False", "Unknown"):
        raise ConditionError("status", f"must be True, False or Unknown, got {status!r}")
    if len(reason) > REASON_MAX or not _REASON.match(reason):
        raise ConditionError("reason", f"{reason!r} is not a condition reason (a letter, then "
                                       "letters, digits, '_', ',' or ':')")
    if len(message) > MESSAGE_MAX:
        raise ConditionError("message", f"longer than {MESSAGE_MAX} characters")


def condition(
    kind: str, status: ConditionStatus, reason: str, message: str, *,
    previous: Iterable[Mapping[str, Any]] = (), generation: int | None = None,
    now: datetime | None = None,
) -> JsonObject:
    """A condition of type `kind`, with the previous one's `lastTransitionTime` while the
    status is unchanged."""
    old = next((c for c in previous if c.get("type") == kind), None)
    if old is not None and old.get("status") == status and old.get("lastTransitionTime"):
        since = str(old["lastTransitionTime"])
    else:
        since = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    built: JsonObject = {
        "type": kind,
        "status": status,
        "lastTransitionTime": since,
        "reason": reason,
        "message": message,
    }
    if generation is not None:
        built["observedGeneration"] = generation
    return built


def replace(conditions: Iterable[Mapping[str, Any]], new: JsonObject) -> list[JsonObject]:
    """`conditions` with `new` in place of the one of its type (appended when absent)."""
    out: list[JsonObject] = []
    found = False
    for c in conditions:
        if c.get("type") == new["type"]:
            out.append(new)
            found = True
        else:
            out.append(dict(c))
    return out if found else [*out, new]
