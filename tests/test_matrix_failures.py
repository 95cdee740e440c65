"""A matrix finishes, the same way twice (issue 39): failed starts and server deaths cost only their
cases, the servers' logs stay in the results folder, and ``bench matrix-compare`` names what differs.

Real servers throughout; the failures are made by infra/process.py's test-only hooks
(``LOCKBENCH_TEST_FAIL_START``, ``LOCKBENCH_TEST_KILL_AFTER``), which make a named server's
start fail or SIGKILL it a few seconds after it became ready.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from infra.process import FAIL_START_ENV, KILL_AFTER_ENV
from resultsio import read_results
from tests.bench_forkserver import ENABLE_ENV
from tests.helpers import bench


@pytest.fixture(scope="module")
def failed_matrix(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, object]:
    """One small real matrix: memcached's lock server fails its first start, Redis's dies in its group.

    Redis is SIGKILLed 1 s after it became ready: its lane's one unit (the long-cs group) clears the
    lock state, then waits seconds for its warm Locust processes, so the death falls inside the group.
    """
    # one run for the session: pytest-xdist workers share it through a folder beside their own
    base = tmp_path_factory.getbasetemp()
    base = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    root = base / "matrix-failures"
    with open(base / "matrix-failures.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        said = root / "said.json"
        if not said.is_file():
            root.mkdir(exist_ok=True)
            env = {FAIL_START_ENV: "memcached-lock:1", KILL_AFTER_ENV: "redis-lock:1"}
            env[ENABLE_ENV] = "bench"  # the warm Locust's own imports are the seconds the death falls in
            r = bench(
                "matrix", "--impl", "memcached.add", "--impl", "redis.set-nx-px-lua", "--scenario", "long-cs",
                "--evidence", "quick", "--lanes", "1", "--results-dir", str(root), env=env, timeout=600,
            )  # fmt: skip
            said.write_text(json.dumps({"returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr}))
        r = subprocess.CompletedProcess([], **json.loads(said.read_text()))
    runs = [p for p in root.iterdir() if p.is_dir()]
    assert len(runs) == 1, r.stderr[-3000:]
    return runs[0], r


@pytest.mark.slow
def test_a_failed_start_and_a_server_death_cost_only_their_cases(failed_matrix: tuple[Path, object]) -> None:
    run, r = failed_matrix
    assert r.returncode == 1, r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    assert (run / "matrix.md").is_file() and (run / "report.html").is_file()
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "complete-with-failures" and meta["report"] == "report.html"
    # every row rests on its files, lost cases too: the folder reads without a problem
    assert read_results(run).problems == []
    logs = run / "logs" / "servers"

    # memcached's first start failed, its output kept under a name that says so; fresh servers worked
    kept = logs / "memcached-0" / "memcached-lock.start-failed-1.log"
    assert "start 1 of memcached-lock fails" in kept.read_text()
    assert (logs / "memcached-0" / "memcached-lock.log").is_file()
    assert any(str(kept) in line for line in meta["incidents"]) and str(kept) in r.stderr
    cases = pd.read_csv(run / "cases.csv").set_index("case")
    memcached = cases[cases["impl"] == "memcached.add"]
    assert len(memcached) == 2 and (memcached["verdict"] != "unknown").all()

    # Redis died in the long-cs group: its cases are unknown, naming the kept log; the lane said so
    died = logs / "redis-0" / "redis-lock.died-1.log"
    assert died.is_file()
    group = cases[cases["backend"] == "redis"]
    assert len(group) == 3 and (group["verdict"] == "unknown").all()
    assert all(str(died) in reason for reason in group["verdict_reason"])
    assert any(str(died) in line for line in meta["failures"])
    assert "undecided: redis.set-nx-px-lua x long-cs" in r.stderr
    assert "undecided: memcached.add" not in r.stderr


@pytest.mark.slow
def test_a_lane_whose_servers_never_start_records_its_cases_unknown(tmp_path: Path) -> None:
    """Fresh servers on fresh ports fail too: the lane's cases are unknown rows naming the kept log."""
    r = bench(
        "matrix", "--impl", "file.flock", "--scenario", "flash-sale", "--evidence", "quick", "--no-report",
        "--results-dir", str(tmp_path), env={FAIL_START_ENV: "resource:2"},
    )  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert (run / "matrix.md").is_file()
    kept = [run / "logs" / "servers" / "file-0" / f"resource.start-failed-{n}.log" for n in (1, 2)]
    assert all(k.is_file() for k in kept)
    row = pd.read_csv(run / "cases.csv").iloc[0]
    assert row["case"] == "file.flock__flash-sale" and row["verdict"] == "unknown"
    assert "did not start" in row["verdict_reason"] and str(kept[1]) in row["verdict_reason"]
    assert "undecided: file.flock x flash-sale" in r.stderr
    assert read_results(run).problems == []


def _copy(run: Path, dest: Path) -> Path:
    shutil.copytree(run, dest)
    return dest


def _edit_cases(run: Path, case: str, **values: object) -> None:
    """Change one row in both case tables (the reader checks that they agree)."""
    frame = pd.read_csv(run / "cases.csv")
    for column, value in values.items():
        frame.loc[frame["case"] == case, column] = value
    frame.to_csv(run / "cases.csv", index=False)
    frame.to_parquet(run / "cases.parquet", index=False)


@pytest.mark.slow
def test_matrix_compare_names_the_cell_that_differs(
    failed_matrix: tuple[Path, object], tmp_path: Path
) -> None:
    run, _ = failed_matrix
    same = _copy(run, tmp_path / "same")
    r = bench("matrix-compare", str(run), str(same))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "cells the same" in r.stderr

    other = _copy(run, tmp_path / "other")
    case = "redis.set-nx-px-lua__long-cs__unfenced"
    _edit_cases(other, case, verdict="invalid", overlapping_holds=2, verdict_reason="edited by the test")
    r = bench("matrix-compare", str(run), str(other))
    assert r.returncode == 1, r.stderr[-2000:]
    lines = [ln for ln in r.stderr.splitlines() if " x " in ln]
    assert len(lines) == 1 and "redis.set-nx-px-lua x long-cs" in lines[0], r.stderr
    # A: the cases of a dead server, undecided with the kept log (dashboards/cells.py); B: the edited failure
    assert "unknown" in lines[0].split(" | ")[0] and "bad (failed" in lines[0].split(" | ")[1]
    assert "promises nothing" not in lines[0]  # the catalog says violates: an unexplained difference


def test_a_cell_the_catalog_leaves_to_a_race_is_explained_by_its_note() -> None:
    from bench.matrix.compare import promised

    assert "ZOOKEEPER-5051" in promised("zookeeper.kazoo", "restart")
    assert "promises nothing" in promised("redis.redlock", "restart-aof")
    assert promised("redis.set-nx-px-lua", "long-cs") == ""  # violates, by the catalog
    assert promised("zookeeper.kazoo", "kill-leader") == ""  # survives, by the catalog


@pytest.mark.slow
def test_matrix_compare_refuses_other_commits_and_non_matrices(
    failed_matrix: tuple[Path, object], tmp_path: Path
) -> None:
    run, _ = failed_matrix
    moved = _copy(run, tmp_path / "moved")
    meta = json.loads((moved / "run.json").read_text())
    meta["git_commit"] = "0" * 40
    (moved / "run.json").write_text(json.dumps(meta))
    r = bench("matrix-compare", str(run), str(moved))
    assert r.returncode == 2 and "differ in commit" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1

    fewer = _copy(run, tmp_path / "fewer")
    meta = json.loads((fewer / "run.json").read_text())
    meta["params"]["impls"] = ["redis.set-nx-px-lua"]
    (fewer / "run.json").write_text(json.dumps(meta))
    r = bench("matrix-compare", str(run), str(fewer))
    assert r.returncode == 2 and "differ in selection: impls" in r.stderr

    running = _copy(run, tmp_path / "running")
    meta = json.loads((running / "run.json").read_text())
    meta["status"] = "running"
    (running / "run.json").write_text(json.dumps(meta))
    r = bench("matrix-compare", str(run), str(running))
    assert r.returncode == 2 and "still running" in r.stderr and "Traceback" not in r.stderr

    r = bench("matrix-compare", str(run), str(tmp_path))
    assert r.returncode == 2 and "Traceback" not in r.stderr


@pytest.mark.slow
def test_bench_run_keeps_the_log_of_a_server_that_died(tmp_path: Path) -> None:
    """bench run too: the message names the dead server's log as kept in the run's folder."""
    r = bench(
        "run", "--impl", "redis.set-nx-px", "--duration", "6", "--no-report", "--results-dir", str(tmp_path),
        env={KILL_AFTER_ENV: "redis-lock:1"},
    )  # fmt: skip
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    died = run / "logs" / "servers" / "redis-lock.died-1.log"
    assert died.is_file() and str(died) in r.stderr
    assert (run / "logs" / "servers" / "resource.log").is_file()
