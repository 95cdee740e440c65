"""The report's first screen (issue 33 item 1, issue 31 item 4): one ranked row per lock, a pick,
safety from the newest matrix of the same commit and machine class, never green on a fault-free run.

The folders are real results folders (run.json, cases.csv, cases.parquet, histograms, histories);
the matrix folder is found by bench's own finder (bench/results/matrices.py, DuckDB) and drawn
by the renderer, as `bench run` and `bench report` do it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from bench.results.matrices import find_matrices, sources_for_run
from dashboards import render_report
from tests.helpers import add_case_files
from tests.test_report import CASES, make_run

COMMIT = "0123456789abcdef"
MACHINE = "x86_64-2cpu-8gib"


def _row_of(page: str, table: str, row: str) -> str:
    start = page.index(f'id="{table}"')
    start = page.index(f'data-row="{row}"', start)
    return page[start : page.index("</tr>", start)]


def _matrix(root: Path, name: str, *, commit: str = COMMIT, started: str = "2025-01-02T00:00:00Z",
            machine: str = MACHINE, status: str = "complete", cells: dict | None = None,
            applicable: dict | None = None, shard: dict | None = None) -> Path:  # fmt: skip
    """A bench matrix folder: per (impl, scenario) one case with strikes and grants after them."""
    cells = cells or {
        ("redis.setnx", "restart"): {"verdict": "invalid", "overlapping_holds": 4},
        ("redis.setnx", "crash"): {"verdict": "valid", "stuck_locks": 1, "stuck_bound_s": 5.0},
        ("file.flock", "crash"): {"verdict": "valid"},
        ("file.flock", "long-cs"): {"verdict": "valid"},
        ("file.flock", "flash-sale"): {"verdict": "valid", "strikes": 0, "evidence_target_k": None},
    }
    path = root / name
    path.mkdir(parents=True)
    rows = []
    for (impl, scenario), extra in cells.items():
        rows.append(
            {"case": f"{impl}__{scenario}__t0", "impl": impl, "backend": impl.split(".")[0],
             "matrix_scenario": scenario, "scenario": scenario, "verdict": "valid", "fencing": "observe",
             "strikes": 10, "acquisitions_after_strike": 1_500, "evidence_target_k": 10,
             "evidence_target_n": 1_000, "acquisitions": 2_000, "overlapping_holds": 0, "stuck_locks": 0,
             # every row bench writes has these (resultsio's schema): without them the folder is damaged
             "workload": scenario, "throughput_acq_s": 100.0, "witness_violations": 0, "oversold_units": 0,
             "lost_updates": 0,
             # each fault cell's own control failed beside it, in its group (bench/matrix/controls.py)
             "control_outcome": "" if scenario == "flash-sale" else "failed (x.control, 10 strikes)", **extra}
        )  # fmt: skip
    frame = pd.DataFrame(rows)
    frame.to_csv(path / "cases.csv", index=False)
    frame.to_parquet(path / "cases.parquet", index=False)
    meta = {
        "schema": 1, "kind": "matrix", "run_id": name, "status": status, "started_at": started,
        "finished_at": started, "git_commit": commit, "host": {"machine_class": machine},
        "params": {"evidence": "standard", "evidence_target": "k >= 10 strikes, n >= 1,000 grants",
                   "scenarios": {"flash-sale": {"workload": "flash-sale", "fault": ""},  # the fault-free baseline
                                 "restart": {"workload": "flash-sale", "fault": "restart@held"},
                                 "crash": {"workload": "crash", "fault": ""},
                                 "long-cs": {"workload": "long-cs", "fault": ""}},
                   # what a pick needs decided: every fault scenario the whole plan runs on the lock
                   "applicable": applicable or {"redis.setnx": ["restart", "crash"], "file.flock": ["crash", "long-cs"]},
                   "shard": shard},
        "cases": [r["case"] for r in rows],
    }  # fmt: skip
    (path / "run.json").write_text(json.dumps(meta))
    return add_case_files(path)  # each case's histograms and history, as bench writes them


def _default_run(root: Path) -> Path:
    """A fault-free flash-sale run of three locks, as `bench run` leaves it (with cases.parquet)."""
    run = make_run(root, name="20250103T000000Z-run001", cases=[CASES[0], CASES[1], CASES[4]],
                   meta_extra={"kind": "run", "impls": ["redis.setnx", "redis.setnx-no-owner", "file.flock"]})  # fmt: skip
    pd.read_csv(run / "cases.csv").to_parquet(run / "cases.parquet", index=False)
    return run


def test_a_fault_free_run_draws_no_green_safety_chip(tmp_path: Path) -> None:
    """Without a matrix: every lock reads "no fault tried" (grey), none is green, no pick is claimed."""
    run = _default_run(tmp_path)
    assert sources_for_run(run) == []
    page = render_report([run]).read_text(encoding="utf-8")
    first = page[
        page.index('id="decision-table"') : page.index("</table>", page.index('id="decision-table"'))
    ]
    assert "chip good" not in first and "chip thin" not in first
    assert first.count(">no fault tried</span>") == 2  # the two locks that held; the third failed outright
    details = page[page.index('id="decision-details"') :]
    details = details[: details.index("</table>")]
    assert "chip good" not in details  # plain contention shows exclusion, never "survived"
    assert '<span class="chip nofault" data-scenario="flash-sale"' in _row_of(
        page, "decision-details", "file.flock"
    )
    # a lock that failed without any fault is ranked last and says so
    broken = _row_of(page, "decision-table", "redis.setnx-no-owner")
    assert 'data-tier="bad"' in broken and "failed: flash-sale" in broken
    assert (
        "not yet a pick: no fault was tried" in page and "bench matrix --backend file --backend redis" in page
    )


def test_safety_comes_from_the_newest_matrix_of_the_same_commit_with_provenance(tmp_path: Path) -> None:
    run = _default_run(tmp_path)
    _matrix(tmp_path, "20250101T000000Z-old111", started="2025-01-01T00:00:00Z",
            cells={("file.flock", "crash"): {"verdict": "invalid", "overlapping_holds": 1}})  # fmt: skip
    _matrix(tmp_path, "20250102T000000Z-new222")
    _matrix(tmp_path, "20250102T120000Z-other3", machine="aarch64-64cpu-256gib")  # another machine class
    _matrix(tmp_path, "20250102T130000Z-dead44", status="running")  # never finished: not a source
    found = find_matrices(tmp_path, ["redis.setnx", "file.flock"], COMMIT + "+dirty", MACHINE)
    assert [(m.run_id, m.impls) for m in found] == [
        ("20250102T000000Z-new222", ("redis.setnx", "file.flock"))
    ]
    page = render_report([run], safety_sources=sources_for_run(run)).read_text(encoding="utf-8")
    flock = _row_of(page, "decision-table", "file.flock")
    assert "survived 2" in flock and 'data-tier="safe"' in flock and "#safety-source-1" in flock
    setnx = _row_of(page, "decision-table", "redis.setnx")
    assert "failed: restart" in setnx and "stuck: crash" in setnx and 'data-tier="bad"' in setnx
    assert "k=10 strikes" in setnx and "n=1,500 grants" in setnx  # each cell's k and n, in the chip's tooltip
    sources = page[page.index('id="safety-sources"') : page.index("</ol>", page.index('id="safety-sources"'))]
    assert "matrix 20250102T000000Z-new222 of this commit" in sources and "2025-01-02 00:00 UTC" in sources
    assert "k &gt;= 10 strikes, n &gt;= 1,000 grants" in sources
    # ranked safety first: the safe lock is the pick, with its reason in one line
    order = re.findall(r'<tr data-row="([^"]+)" data-tier', page)
    assert order == [
        "file.flock",
        "redis.setnx-no-owner",
        "redis.setnx",
    ]  # among the unsafe, fewer failures first
    assert re.search(
        r'<p id="pick"><b>Pick: file.flock</b>: survived every scenario that applies \(2\); fastest', page
    )
    # "not tested" only for a lock no matrix holds
    assert "not tested: no matrix" in _row_of(page, "decision-table", "redis.setnx-no-owner")
    assert "not tested: no matrix" not in flock


def test_a_matrix_of_another_commit_is_shown_as_older(tmp_path: Path) -> None:
    run = _default_run(tmp_path)
    _matrix(tmp_path, "20250102T000000Z-prev55", commit="fedcba9876543210")
    page = render_report([run], safety_sources=sources_for_run(run)).read_text(encoding="utf-8")
    assert "older: from matrix 20250102T000000Z-prev55 of commit fedcba987654" in page
    assert "survived 2" in _row_of(page, "decision-table", "file.flock")
    # a matrix of the run's own commit wins over a newer one of another commit
    _matrix(tmp_path, "20250101T000000Z-same66", started="2025-01-01T00:00:00Z")
    found = find_matrices(tmp_path, ["file.flock"], COMMIT, MACHINE)
    assert [m.run_id for m in found] == ["20250101T000000Z-same66"] and found[0].same_commit


@pytest.mark.server
@pytest.mark.slow
def test_a_default_run_after_a_matrix_of_the_same_commit_shows_its_safety(tmp_path: Path) -> None:
    """Issue 31's must-show, end to end on real servers: bench matrix, then bench run, in one results folder."""
    from tests.helpers import bench

    results = tmp_path / "results"
    matrix = bench("matrix", "--impl", "redis.set-nx-px-lua", "--scenario", "crash", "--evidence", "quick",
                   "--parallel", "1", "--no-report", "--results-dir", str(results), timeout=900)  # fmt: skip
    assert matrix.returncode in (0, 1), matrix.stderr  # 1: a cell undecided; the folder is what counts
    (matrix_dir,) = list(results.iterdir())
    run = bench("run", "--impl", "redis.set-nx-px-lua", "--duration", "2", "--users", "5",
                "--results-dir", str(results), timeout=900)  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = Path(run.stdout.strip().splitlines()[-1])
    page = report.read_text(encoding="utf-8")
    row = _row_of(page, "decision-table", "redis.set-nx-px-lua")
    assert "no fault tried" not in row and "#safety-source-1" in row
    assert re.search(r'class="chip (good|thin|bad|warn|stuck|unknown)"', row), row
    sources = page[page.index('id="safety-sources"') :]
    assert f"matrix {matrix_dir.name} of this commit" in sources[: sources.index("</ol>")]


def test_a_partial_matrix_is_no_pick_and_says_what_is_missing(tmp_path: Path) -> None:
    """A pick is a safety claim: every scenario that applies, decided and green. A shard that ran 2 of
    the lock's 3 scenarios, all green, is "not a pick", and thin never ranks above untested."""
    run = _default_run(tmp_path)
    _matrix(
        tmp_path, "20250102T000000Z-shard4",
        applicable={"redis.setnx": ["restart", "crash"], "file.flock": ["crash", "long-cs", "restart"]},
        shard={"index": 4, "of": 4},
    )  # fmt: skip
    page = render_report([run], safety_sources=sources_for_run(run)).read_text(encoding="utf-8")
    flock = _row_of(page, "decision-table", "file.flock")
    assert 'data-tier="thin"' in flock and "not a pick: 2 of 3 scenarios decided green (shard 4/4)" in flock
    assert "Pick: file.flock" not in page and "<b>No pick</b>" in page
    order = re.findall(r'<tr data-row="([^"]+)" data-tier="([^"]+)"', page)
    tiers = [t for _, t in order]
    assert (
        tiers.index("thin") > tiers.index("bad")
        or "none" not in tiers
        or tiers.index("none") < tiers.index("thin")
    )


def test_a_green_without_its_own_control_is_no_pick(tmp_path: Path) -> None:
    run = _default_run(tmp_path)
    _matrix(
        tmp_path, "20250102T000000Z-noctl",
        cells={("file.flock", "crash"): {"verdict": "valid", "control_outcome": ""},
               ("file.flock", "long-cs"): {"verdict": "valid"}},
    )  # fmt: skip
    page = render_report([run], safety_sources=sources_for_run(run)).read_text(encoding="utf-8")
    flock = _row_of(page, "decision-table", "file.flock")
    assert 'data-tier="safe"' not in flock and "Pick: file.flock" not in page
