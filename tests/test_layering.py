"""The direction of imports in docs/architecture.md is a rule; this test enforces it.

Two levels: the top-level packages (lockimpls never imports locust, workloads or bench;
dashboards read files only, through resultsio, which imports none of the others), and the rooms inside ``bench/`` and ``workloads/``, each on
a floor: a module may import its own package, and packages on lower floors, never a
package on its own floor or above.
"""

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
    # the one reader of a results folder: bench (gate, history, merge) and dashboards both import it
    "resultsio": {"locust", "gevent", "bench", "dashboards", "workloads", "infra", "lockimpls", "redis"},
}

#: Floors inside bench/: lower numbers are imported by higher ones, never the reverse.
#: ``bench.errors`` is the foundation every room may use; ``bench.validate`` checks what a user
#: typed (it redacts URLs in its messages, so it stands on results).
BENCH_FLOORS = {
    "bench.errors": 0,
    "bench.results": 1,
    "bench.validate": 2,
    "bench.measure": 2,
    "bench.nemesis": 3,
    "bench.gate": 3,
    "bench.run": 4,
    "bench.history": 4,  # reads results and the gate's rules; cli runs it
    "bench.matrix": 5,
    "bench.explore": 5,  # bench explore / replay: schedules played as cases on bench.run and bench.nemesis
    "bench.cli": 6,
    "bench.__main__": 7,
}

#: Floors inside workloads/: checkers are pure, the harness runs them, locustfiles sit on top.
WORKLOADS_FLOORS = {"workloads.checks": 0, "workloads.harness": 1}
LOCUSTFILE_FLOOR = 2


def _imports(path: Path) -> set[str]:
    """Every absolute module name imported by ``path``, in full (``a.b.c``), also inside functions."""
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


def _top(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def _room(module: str, floors: dict[str, int]) -> str | None:
    return next((room for room in floors if module == room or module.startswith(room + ".")), None)


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_downwards(package: str) -> None:
    bad = {
        str(p.relative_to(ROOT)): sorted(_top(_imports(p)) & FORBIDDEN[package])
        for p in (ROOT / package).rglob("*.py")
        if _top(_imports(p)) & FORBIDDEN[package]
    }
    assert not bad, bad


def _upward_imports(package: str, floors: dict[str, int], default_floor: int | None) -> dict[str, list[str]]:
    bad: dict[str, list[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        module = _module_name(path)
        if module == package:
            continue
        room = _room(module, floors)
        floor = floors[room] if room else default_floor
        assert floor is not None, f"{module} is in no room of {package}: give it one in test_layering"
        for name in _imports(path):
            if not name.startswith(package + "."):
                continue
            target = _room(name, floors)
            if target is None or target == room:
                continue
            if floors[target] >= floor:
                bad.setdefault(module, []).append(name)
    return {module: sorted(names) for module, names in bad.items()}


def test_bench_rooms_import_only_lower_floors() -> None:
    bad = _upward_imports("bench", BENCH_FLOORS, None)
    assert not bad, bad


def test_workloads_rooms_import_only_lower_floors() -> None:
    bad = _upward_imports("workloads", WORKLOADS_FLOORS, LOCUSTFILE_FLOOR)
    assert not bad, bad


def test_workloads_top_level_holds_only_locustfiles() -> None:
    """A module at workloads/ top level is a locustfile: it defines a Locust User."""
    for path in (ROOT / "workloads").glob("*.py"):
        if path.name == "__init__.py":
            continue
        assert "locust" in _top(_imports(path)), (
            f"{path.name} is not a locustfile: move it to harness/ or checks/"
        )


def test_checkers_are_pure() -> None:
    """A checker never does I/O and never needs Locust: workloads.checks imports no harness, no server client."""
    for path in (ROOT / "workloads" / "checks").rglob("*.py"):
        tops = _top(_imports(path))
        assert not tops & {"locust", "gevent", "redis", "psycopg", "kazoo", "lockimpls"}, (path.name, tops)


def test_the_layering_check_sees_an_upward_import(tmp_path: Path) -> None:
    """The floor rule itself: a measure module importing the run package is reported."""
    floors = {"bench.measure": 2, "bench.run": 4}
    fake = ROOT / "bench" / "measure" / "_layering_probe.py"
    fake.write_text("from bench.run import runner\n")
    try:
        bad = _upward_imports("bench", {**BENCH_FLOORS, **floors}, None)
    finally:
        fake.unlink()
    assert bad == {"bench.measure._layering_probe": ["bench.run", "bench.run.runner"]}


def test_bench_process_never_imports_locust() -> None:
    """bench runs Locust as a subprocess; importing it here would gevent-patch the CLI."""
    bad = [str(p) for p in (ROOT / "bench").rglob("*.py") if {"locust", "gevent"} & _top(_imports(p))]
    assert not bad, bad
