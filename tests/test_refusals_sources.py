"""Bad values refused by the real ``bench`` command: one line, exit 2, naming where the value came from.

Issue 43: every refusal names its source (the flag, the LOCKBENCH_* variable, or the pyproject
key with its file), is decided before the heavy imports, and nothing starts.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import NO_SERVERS, PROJECT, bench, refused


def test_a_bad_ttl_names_each_source(tmp_path: Path) -> None:
    flag = refused(bench("run", "--backend", "redis", "--ttl", "-1", cwd=tmp_path, env=NO_SERVERS), "--ttl")
    assert "(from" not in flag
    refused(
        bench("run", "--backend", "redis", cwd=tmp_path, env={**NO_SERVERS, "LOCKBENCH_TTL": "-1"}),
        "--ttl", "(from LOCKBENCH_TTL)",
    )  # fmt: skip
    (tmp_path / "pyproject.toml").write_text("[tool.lockbench]\nttl = -1\n")
    refused(
        bench("run", "--backend", "redis", cwd=tmp_path, env=NO_SERVERS),
        "--ttl", f"[tool.lockbench] ttl in {tmp_path / 'pyproject.toml'}",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("command", "variable", "value"),
    [
        ("run", "LOCKBENCH_BACKEND", "nope"),
        ("run", "LOCKBENCH_IMPL", "redis.nope"),
        ("run", "LOCKBENCH_WORKLOAD", "flash-sail"),
        ("run", "LOCKBENCH_FAULT", "restrat"),
        ("run", "LOCKBENCH_EVIDENCE", "sure"),
        ("run", "LOCKBENCH_SUITE", "cj"),
        ("run", "LOCKBENCH_FENCING", "always"),
        ("run", "LOCKBENCH_PAUSE_KIND", "nap"),
        ("run", "LOCKBENCH_PROCESSES", "many"),
        ("run", "LOCKBENCH_FAULT", "kill-leader"),  # a real kind, refused while planning: still named
        ("run", "LOCKBENCH_EXPECT_WORKERS", "2"),
        ("matrix", "LOCKBENCH_SCENARIO", "nope"),
        ("matrix", "LOCKBENCH_SHARD", "5/4"),
        ("matrix", "LOCKBENCH_LANES", "x"),
        ("matrix", "LOCKBENCH_EVIDENCE", "sure"),
    ],
)
def test_a_bad_name_from_a_variable_names_the_variable(
    tmp_path: Path, command: str, variable: str, value: str
) -> None:
    args = (
        [command]
        if variable in ("LOCKBENCH_BACKEND", "LOCKBENCH_IMPL")
        else [command, "--impl", "redis.set-nx-px"]
    )
    r = bench(*args, "--results-dir", str(tmp_path / "r"), cwd=tmp_path, env={**NO_SERVERS, variable: value})
    refused(r, f"(from {variable})")
    assert not (tmp_path / "r").exists()


def test_unknown_pyproject_key_and_table_get_a_did_you_mean(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.lockbench]\ntll = 1\n")
    refused(bench("run", "--backend", "redis", cwd=tmp_path, env=NO_SERVERS), "'tll'", "did you mean ttl")
    (tmp_path / "pyproject.toml").write_text("[tool.lockbench.mtrix]\nlanes = 1\n")
    refused(
        bench("run", "--backend", "redis", cwd=tmp_path, env=NO_SERVERS),
        "did you mean [tool.lockbench.matrix]",
    )


def test_a_refusal_imports_no_heavy_module(tmp_path: Path) -> None:
    """`python -X importtime` lists every module imported: a refused --ttl must import no pandas or Locust."""
    r = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "bench", "run", "--backend", "redis", "--ttl", "-1"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, env={**NO_SERVERS, "PYTHONPATH": str(PROJECT)},
    )  # fmt: skip
    assert r.returncode == 2 and "--ttl" in r.stderr
    imported = {
        line.split("|")[-1].strip() for line in r.stderr.splitlines() if line.startswith("import time:")
    }
    assert "typer" in imported  # the listing is there
    heavy = {
        "pandas",
        "numpy",
        "locust",
        "plotly",
        "psycopg",
        "kazoo",
        "pyarrow",
        "gevent",
        "redis",
    } & imported
    assert not heavy, heavy


def test_a_deep_lock_params_is_one_line(tmp_path: Path) -> None:
    deep = "[" * 30_000 + "]" * 30_000
    refused(
        bench("run", "--backend", "redis", "--lock-params", deep, cwd=tmp_path, env=NO_SERVERS),
        "--lock-params",
    )
    refused(
        bench("run", "--backend", "redis", cwd=tmp_path, env={**NO_SERVERS, "LOCKBENCH_LOCK_PARAMS": deep}),
        "--lock-params", "(from LOCKBENCH_LOCK_PARAMS)",
    )  # fmt: skip


def test_a_deep_pyproject_array_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.lockbench]\nusers = " + "[" * 5000 + "]" * 5000 + "\n")
    refused(
        bench("run", "--backend", "redis", cwd=tmp_path, env=NO_SERVERS), str(tmp_path / "pyproject.toml")
    )


def test_a_plugin_raising_base_exception_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "exiting_plugin.py").write_text("raise SystemExit('boom')\n")
    r = bench(
        "run",
        "--impl",
        "exiting_plugin:Lock",
        cwd=tmp_path,
        env={**NO_SERVERS, "PYTHONPATH": f"{tmp_path}:{PROJECT}"},
    )
    refused(r, "exiting_plugin")


def test_a_fault_after_the_case_ends_isrefused(tmp_path: Path) -> None:
    r = bench("run", "--impl", "redis.set-nx-px", "--fault", "restart@99999s", "--duration", "2",
              "--results-dir", str(tmp_path / "r"), cwd=tmp_path, env=NO_SERVERS)  # fmt: skip
    refused(r, "--fault restart@99999s", "--duration", "restart@held")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("lanes", ["0", "17", "99999999"])
def test_lanes_out_of_range_is_refused_in_its_own_words(tmp_path: Path, lanes: str) -> None:
    args = ("matrix", "--impl", "redis.set-nx-px", "--results-dir", str(tmp_path / "r"))
    refused(bench(*args, "--lanes", lanes, cwd=tmp_path, env=NO_SERVERS), "--lanes", "1..16")
    refused(
        bench(*args, cwd=tmp_path, env={**NO_SERVERS, "LOCKBENCH_LANES": lanes}), "--lanes", "LOCKBENCH_LANES"
    )
    (tmp_path / "pyproject.toml").write_text(f'[tool.lockbench.matrix]\nlanes = "{lanes}"\n')
    refused(bench(*args, cwd=tmp_path, env=NO_SERVERS), "--lanes", "[tool.lockbench.matrix] lanes in")
    assert not (tmp_path / "r").exists()


def test_empty_results_dir_variable_is_refused_by_merge(tmp_path: Path) -> None:
    r = bench("merge", str(tmp_path / "a"), cwd=tmp_path, env={**NO_SERVERS, "LOCKBENCH_RESULTS_DIR": ""})
    refused(r, "LOCKBENCH_RESULTS_DIR is set but empty")
    assert not (tmp_path / "results").exists()


def test_report_out_empty_isrefused(tmp_path: Path) -> None:
    refused(bench("report", str(tmp_path), "--out", "", cwd=tmp_path, env=NO_SERVERS), "--out", "empty path")
