"""simnode's packages import only downwards: `cli` uses the others, `node` uses `kubelet` and
`cluster`, and those two never reach back up to the node or the command (tests may)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIMNODE = Path(__file__).resolve().parent
ABOVE: dict[str, set[str]] = {"cli": set(), "node": {"cli"}, "kubelet": {"cli", "node"},
                              "cluster": {"cli", "node"}}


def _imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _product_modules(package: str) -> list[Path]:
    return sorted(p for p in (SIMNODE / package).rglob("*.py")
                  if not p.name.endswith("_test.py") and p.name != "conftest.py")


@pytest.mark.parametrize("package", sorted(ABOVE))
def test_no_module_imports_a_package_above_its_own(package: str) -> None:
    modules = _product_modules(package)
    assert modules, f"simnode/{package} has no modules in this sandbox"
    upward = [f"{path.relative_to(SIMNODE)} imports {name}"
              for path in modules for name in sorted(_imported(path))
              if name.split(".")[:2] in (["simnode", above] for above in ABOVE[package])]
    assert upward == []
