"""The direction of imports in docs/architecture.md is a rule; this test enforces it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FORBIDDEN = {
    "lockimpls": {"locust", "workloads", "bench", "dashboards", "infra"},
    "dashboards": {"locust", "bench", "workloads", "infra", "lockimpls", "redis"},
    "infra": {"locust", "bench", "workloads", "dashboards", "lockimpls"},
    "workloads": {"bench", "dashboards", "infra"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_downwards(package: str) -> None:
    bad = {
        str(p.relative_to(ROOT)): sorted(_imports(p) & FORBIDDEN[package])
        for p in (ROOT / package).rglob("*.py")
        if _imports(p) & FORBIDDEN[package]
    }
    assert not bad, bad


def test_bench_process_never_imports_locust() -> None:
    """bench runs Locust as a subprocess; importing it here would gevent-patch the CLI."""
    bad = [str(p) for p in (ROOT / "bench").rglob("*.py") if {"locust", "gevent"} & _imports(p)]
    assert not bad, bad
