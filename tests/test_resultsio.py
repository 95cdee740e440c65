"""resultsio: the one reader of a results folder and its declared schema, on folders written here.

No server: the folders are written the way bench writes them (tests/test_gate.py ``write_run``),
so ``scripts/test --quick`` runs these. The corpus of damage made from a real run, through
every reader, is tests/test_damaged_results.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from bench.measure.analysis import CASE_COLUMNS
from bench.results.folder import SCHEMA_VERSION as WRITER_SCHEMA
from resultsio import SCHEMA_VERSION, parse_json, read_results
from resultsio.schema import CASES_SCHEMA, REQUIRED_COLUMNS
from tests.helpers import PROJECT
from tests.test_gate import noisy, write_run


def _run(tmp_path: Path, **groups: dict) -> Path:
    return write_run(tmp_path, "r", groups or {"redis.x": {"throughput_acq_s": noisy(1000)}})


def _edit(run: Path, fn) -> None:
    frame = pd.read_csv(run / "cases.csv")
    fn(frame).to_csv(run / "cases.csv", index=False)


def test_the_writer_and_the_reader_share_one_schema_version_and_every_column_is_declared() -> None:
    assert SCHEMA_VERSION == WRITER_SCHEMA
    declared = list(CASES_SCHEMA.columns)
    undeclared = [
        c for c in CASE_COLUMNS if c not in declared and not any(re.match(p, c) for p in declared if "^" in p)
    ]
    assert undeclared == [], undeclared  # a column bench writes that the schema does not know
    assert set(REQUIRED_COLUMNS) <= set(CASE_COLUMNS)


def test_a_clean_folder_and_the_committed_baseline_have_no_problem(tmp_path: Path) -> None:
    assert read_results(_run(tmp_path)).problems == []
    committed = read_results(PROJECT / "results" / "baselines" / "ci")
    assert committed.problems == [] and len(committed.cases) == 10


@pytest.mark.parametrize(
    ("edit", "column", "what"),
    [
        (
            lambda f: f.assign(oversold_units=[0, 2, 0, 0, 0]),
            "verdict",
            "is valid beside a nonzero violation",
        ),
        (lambda f: f.assign(acquire_p50_us=900.0, acquire_p99_us=0.0), "acquire_p99_us", "is out of order"),
        (lambda f: f.assign(impl="redis.y"), "impl", "does not match the case id"),
        (lambda f: f.assign(acquisitions=10, duration_s=1.0), "throughput_acq_s", "more than acquisitions"),
        (lambda f: f.assign(jain_index=1.5), "jain_index", "is implausibly large"),
        (lambda f: f.assign(generator_bound="maybe"), "generator_bound", "is not true, false or empty"),
        (lambda f: f.assign(acquisitions=1e30), "acquisitions", "is implausibly large"),
    ],
    ids=["valid beside violation", "p99 below p50", "impl", "throughput", "fraction", "flag", "huge"],
)
def test_checks_between_and_within_columns_name_the_column_and_the_case(
    tmp_path: Path, edit, column: str, what: str
) -> None:
    run = _run(tmp_path)
    _edit(run, edit)
    problems = read_results(run).problems
    assert problems, what
    first = problems[0]
    assert first.column == column and what in first.what and "in case redis.x__flash-sale__t" in first.what
    assert str(first).startswith(f"{run}/cases.csv: {column} ") and "bench run" in str(first)


def test_parquet_must_agree_with_csv_cell_by_cell(tmp_path: Path) -> None:
    run = _run(tmp_path)
    frame = pd.read_csv(run / "cases.csv")
    frame.to_parquet(run / "cases.parquet", index=False)
    assert read_results(run).problems == []  # written by pandas, read back exactly
    frame.loc[3, "throughput_acq_s"] = 1.0
    frame.to_parquet(run / "cases.parquet", index=False)
    (problem,) = read_results(run).problems
    assert problem.column == "throughput_acq_s" and problem.cases == ("redis.x__flash-sale__t3",)
    assert "differs between cases.parquet and cases.csv" in problem.what


def test_marked_rows_read_unknown_damaged_and_a_failure_stays_a_failure(tmp_path: Path) -> None:
    run = _run(tmp_path)
    _edit(run, lambda f: f.assign(overlapping_holds=[-1, 0, 0, 0, 0], lost_updates=[0, 0, 0, 0, 0.5]))
    frame = pd.read_csv(run / "cases.csv")
    frame.loc[4, "verdict"] = "invalid"
    frame.to_csv(run / "cases.csv", index=False)
    marked = read_results(run).marked()
    assert list(marked["verdict"]) == ["unknown", "valid", "valid", "valid", "invalid"]
    assert marked.loc[0, "verdict_reason"].startswith("damaged: overlapping_holds is negative")
    assert pd.isna(marked.loc[0, "overlapping_holds"]) and pd.isna(marked.loc[4, "lost_updates"])
    assert marked.loc[1, "overlapping_holds"] == 0


def test_json_deeper_than_the_limit_is_a_value_error_not_a_recursion_error() -> None:
    with pytest.raises(ValueError, match="recursion limit"):
        parse_json("[" * 100_000)
    assert parse_json('{"a": NaN, "b": [1, 2]}')["b"] == [1, 2]


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"[" * 100_000, "is not valid JSON (recursion limit"),
        (b"{", "is not valid JSON"),
        (b"[]", "not a JSON object"),
    ],
)
def test_an_unreadable_run_json_is_fatal_and_named(tmp_path: Path, content: bytes, needle: str) -> None:
    run = _run(tmp_path)
    (run / "run.json").write_bytes(content)
    results = read_results(run)
    assert len(results.fatal) == 1 and needle in str(results.fatal[0]) and "run.json" in str(results.fatal[0])


def test_run_json_fields_of_the_wrong_type_are_removed_and_named(tmp_path: Path) -> None:
    run = _run(tmp_path)
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "cases": 5, "host": "x"}))
    results = read_results(run)
    assert not results.fatal and "cases" not in results.meta and "host" not in results.meta
    texts = [str(p) for p in results.problems]
    assert any("cases must be a JSON list, got 5" in t for t in texts)
    assert any("host must be a JSON dict" in t for t in texts)
    assert results.damaged_cases() is None  # the whole run is in doubt


def test_the_enums_the_schema_checks_are_the_ones_bench_writes() -> None:
    """run.json ``params.evidence`` and cases.csv ``evidence`` are checked against bench's own lists."""
    from bench.measure.strikes import LEVELS
    from resultsio.schema import EVIDENCE_GRADES, EVIDENCE_LEVELS, RunParams

    assert set(EVIDENCE_LEVELS) == set(LEVELS)
    assert RunParams.model_validate({"evidence": "quick"}).evidence == "quick"
    assert {"earned", "thin", "not-struck", "failed"} <= set(EVIDENCE_GRADES)


def test_a_baseline_needs_no_history_and_a_matrix_no_merged_histograms(tmp_path: Path) -> None:
    """Which files a folder must hold depends on what made it (resultsio.schema.required_files)."""
    import shutil

    run = _run(tmp_path)
    shutil.rmtree(run / "history")
    assert any("history/ is missing" in str(p) for p in read_results(run).problems)
    (run / "baseline.json").write_text(json.dumps({"machine_class": "x86_64-2cpu-8gib", "schema": 1}))
    assert read_results(run).problems == []  # a baseline keeps no history
    merged = next((run / "hist").glob("*.merged.json"))
    merged.unlink()
    assert any(".merged.json is missing" in str(p) for p in read_results(run).problems)
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "kind": "matrix"}))
    frame = pd.read_csv(run / "cases.csv").assign(matrix_scenario="flash-sale")
    frame.to_csv(run / "cases.csv", index=False)
    assert read_results(run).problems == []  # a matrix writes no merged histograms
