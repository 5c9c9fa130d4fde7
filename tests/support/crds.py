"""The project's own CRDs as shipped in deploy/base, for the fake apiserver and tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# Tests depend on the `deploy:manifests` files target, which puts deploy/ in the sandbox.
_DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DISPLAY_CRD = _DEPLOY / "base" / "cluster" / "crd-displays.yaml"


def display_crd(path: Path = DISPLAY_CRD) -> dict[str, Any]:
    """The Display CustomResourceDefinition as a dict."""
    with path.open() as f:
        crd: dict[str, Any] = yaml.safe_load(f)
    return crd
