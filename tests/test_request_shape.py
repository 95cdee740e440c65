"""Issue 40's "one request": the CLI hands bench run and bench matrix one object, options are declared once.

These read the code itself (its signatures and syntax tree), the way tests/test_layering.py
reads the imports: a new option that skips the request, or a function that grows past a
screenful, fails here.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

from bench.cli import options as o
from bench.matrix.command import matrix_command
from bench.matrix.request import MatrixRequest
from bench.run.command import run_command
from bench.run.request import RENAMED, WORKLOAD_OPTIONS, RunRequest

ROOT = Path(__file__).resolve().parent.parent
#: the files whose functions must stay under about 100 lines (the option declarations excepted)
OWN = [
    "bench/cli/app.py", "bench/cli/options.py", "bench/cli/config.py", "bench/cli/__init__.py",
    "bench/cli/scratch.py", "bench/cli/infra_cmd.py", "bench/validate.py", "bench/errors.py",
    "bench/run/command.py", "bench/run/request.py", "bench/run/impls.py", "bench/matrix/command.py",
    "bench/matrix/request.py",
]  # fmt: skip


def _functions(path: str) -> list[ast.FunctionDef]:
    tree = ast.parse((ROOT / path).read_text())
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]


def test_run_and_matrix_take_one_request() -> None:
    assert list(inspect.signature(run_command).parameters) == ["request", "console"]
    assert list(inspect.signature(matrix_command).parameters) == ["request", "console"]


def test_every_run_option_reaches_the_request() -> None:
    """An option of bench run that the request cannot carry would be read nowhere."""
    fields = set(RunRequest.__dataclass_fields__)
    carried = {RENAMED.get(n, n) for n in o.RUN} - fields - set(WORKLOAD_OPTIONS) - set(o.SERVER_OPTIONS)
    assert carried == set(), carried
    request = RunRequest.from_options({"ttl": 0.5, "items": 3, "backend": ["redis"], "report": False})
    assert (request.ttl, request.workload_options["items"], request.backends, request.render) == (
        0.5, 3, ("redis",), False,
    )  # fmt: skip


def test_matrix_request_resolves_lanes_and_shard() -> None:
    request = MatrixRequest.from_options({"lanes": "3", "shard": "2/4", "backend": ["redis"]})
    assert request.parallel == 3 and request.shard is not None and request.shard.text == "2/4"
    assert MatrixRequest.from_options({"lanes": "auto"}).parallel is None


def test_no_option_is_declared_outside_the_options_file() -> None:
    for path in (ROOT / "bench/cli").glob("*.py"):
        if path.name == "options.py":
            continue
        text = path.read_text()
        assert "typer.Option(" not in text and "typer.Argument(" not in text, path


def test_no_function_is_over_about_100_lines() -> None:
    long = [
        (path, f.name, f.end_lineno - f.lineno + 1)
        for path in OWN
        for f in _functions(path)
        if f.end_lineno - f.lineno + 1 > 100 and f.name != "_declarations"  # the option table itself
    ]
    assert long == [], long


def test_nothing_below_the_cli_takes_more_than_about_8_parameters() -> None:
    wide = []
    for path in ("bench/run/command.py", "bench/matrix/command.py"):
        for f in _functions(path):
            args = f.args
            count = len(args.posonlyargs) + len(args.args) + len(args.kwonlyargs)
            count -= 1 if args.args and args.args[0].arg in ("self", "cls") else 0
            if count > 8:
                wide.append((path, f.name, count))
    assert wide == [], wide


def test_naming_a_level_a_fault_or_a_scenario_imports_nothing_heavy() -> None:
    """The catalogs a refusal reads (bench/cli/options.py ``catalogs``) stay light: a refusal of
    ``--evidence``, ``--fault`` or ``--scenario`` must not wait for pandas, numpy or redis."""
    import subprocess
    import sys

    code = (
        "import sys, bench.measure.levels, bench.nemesis.faults, bench.nemesis.scenarios; "
        "print(' '.join(m for m in ('pandas', 'numpy', 'redis', 'locust', 'pyarrow') if m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == ""
