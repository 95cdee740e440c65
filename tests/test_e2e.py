"""End to end: ``bench run`` against real servers writes a complete results folder and report."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import bench
from workloads.recording import decode_histogram

pytestmark = pytest.mark.slow

SHORT = ["--duration", "3", "--users", "8", "--cs", "1ms"]


def _only_run(results: Path) -> Path:
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def test_run_writes_complete_results_folder_and_report(tmp_path: Path) -> None:
    results = tmp_path / "results"
    r = bench("run", "--impl", "redis.set-nx-px-lua", "--impl", "redis.setnx-expire", *SHORT,
              "--results-dir", str(results))  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = _only_run(results)
    assert r.stdout.strip() == str(run / "report.html")
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "complete" and meta["schema"] == 1
    assert meta["cases"] == ["redis.set-nx-px-lua__flash-sale", "redis.setnx-expire__flash-sale"]
    assert meta["versions"]["servers"]["redis-lock"]
    assert meta["versions"]["libraries"]["locust"]
    assert meta["endpoints"]["redis"]["source"] == "started"
    assert meta["endpoints"]["resource"]["urls"] != meta["endpoints"]["redis"]["urls"]
    cases = pd.read_csv(run / "cases.csv")
    assert list(cases["verdict"]) == ["valid", "valid"]
    assert (cases["acquisitions"] > 0).all()
    assert (cases["overlapping_holds"] == 0).all() and (cases["lost_updates"] == 0).all()
    assert pd.read_parquet(run / "cases.parquet").shape == cases.shape
    for case in meta["cases"]:
        hist = json.loads((run / "hist" / f"{case}.json").read_text())
        history = pd.read_parquet(run / "history" / f"{case}.parquet")
        acquired = decode_histogram(hist["histograms"]["acquire_ok"]).get_total_count()
        assert acquired == ((history["op"] == "acquire") & (history["type"] == "ok")).sum()
    html = (run / "report.html").read_text()
    assert "redis.set-nx-px-lua" in html and '<script src="http' not in html


def test_broken_lock_is_caught(tmp_path: Path) -> None:
    """A lock with no mutual exclusion must show overlaps, witness violations and lost updates."""
    results = tmp_path / "results"
    r = bench("run", "--impl", "test.no-mutex", *SHORT, "--results-dir", str(results))
    assert r.returncode == 0, r.stderr
    row = pd.read_csv(_only_run(results) / "cases.csv").iloc[0]
    assert row["verdict"] == "invalid"
    assert row["overlapping_holds"] > 0
    assert row["witness_violations"] > 0
    assert row["lost_updates"] > 0


def test_merge_across_two_processes_is_lossless(tmp_path: Path) -> None:
    results = tmp_path / "results"
    r = bench("run", "--impl", "redis.set-nx-px-lua", *SHORT, "--processes", "2", "--no-report",
              "--results-dir", str(results))  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = _only_run(results)
    case = "redis.set-nx-px-lua__flash-sale"
    hist = json.loads((run / "hist" / f"{case}.json").read_text())
    assert hist["recording_complete"] is True, hist["recording_problems"]
    workers = hist["workers"]
    assert len(workers) == 2
    history = pd.read_parquet(run / "history" / f"{case}.parquet")
    recorded_events = sum(w["events"] for w in workers.values())
    recorded_acquires = sum(w["acquire_ok"] for w in workers.values())
    assert all(w["acquire_ok"] > 0 for w in workers.values()), "both workers must have worked"
    assert len(history) == recorded_events
    merged = decode_histogram(hist["histograms"]["acquire_ok"]).get_total_count()
    assert merged == recorded_acquires == ((history["op"] == "acquire") & (history["type"] == "ok")).sum()
    assert history["client"].str.split("-u").str[0].nunique() == 2


def test_report_rerenders_from_files_alone(tmp_path: Path) -> None:
    results = tmp_path / "results"
    r = bench("run", "--impl", "redis.set-nx-px", *SHORT, "--no-report", "--results-dir", str(results))
    assert r.returncode == 0, r.stderr
    run = _only_run(results)
    assert not (run / "report.html").exists()
    r = bench("report", str(run))
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()) == run / "report.html"
    assert (run / "report.html").stat().st_size > 100_000
