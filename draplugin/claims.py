"""How every part of the operator names a ResourceClaim: one type, in a leaf module (it imports
nothing of draplugin), so the kubelet's calls, the checkpoint, the Display status and the
claim's own status hand one value around instead of converting between look-alikes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A ResourceClaim: its namespace and name, and the uid that tells a claim from one that
    replaced it under the same name."""

    namespace: str
    name: str
    uid: str
