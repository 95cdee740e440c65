"""End to end: ``bench run`` against real servers writes a complete results folder and report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import bench, bench_popen
from workloads.harness.recording import decode_histogram

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
    # the checker found the lock unsafe: the run fails, naming the case (as Jepsen's runner does)
    assert r.returncode == 1, r.stderr
    assert "found the lock unsafe (verdict invalid): test.no-mutex" in r.stderr
    row = pd.read_csv(_only_run(results) / "cases.csv").iloc[0]
    assert row["verdict"] == "invalid"
    assert row["overlapping_holds"] > 0
    assert row["witness_violations"] > 0
    assert row["lost_updates"] > 0


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of one lock in two Locust processes without a report, which two tests below read.

    Why one: the merge test and the re-render test each started the same kind of run (one
    lock, --no-report; the re-render test's had two processes too, by --processes auto on 2
    cores), a full run of CPU for nothing. Each test works on its own copy.
    """
    results = tmp_path_factory.mktemp("two-process") / "results"
    r = bench("run", "--impl", "redis.set-nx-px-lua", *SHORT, "--processes", "2", "--no-report",
              "--results-dir", str(results))  # fmt: skip
    assert r.returncode == 0, r.stderr
    return _only_run(results)


def _own_copy(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "results" / run.name))


def test_merge_across_two_processes_is_lossless(two_process_run: Path, tmp_path: Path) -> None:
    run = _own_copy(two_process_run, tmp_path)
    case = "redis.set-nx-px-lua__flash-sale"
    hist = json.loads((run / "hist" / f"{case}.json").read_text())
    assert hist["recording_complete"] is True, hist["recording_problems"]
    workers = hist["workers"]
    assert len(workers) == 2
    history = pd.read_parquet(run / "history" / f"{case}.parquet")
    recorded_events = sum(w["events"] for w in workers.values())
    recorded_acquires = sum(w["acquire_ok"] for w in workers.values())
    assert all(w["acquire_ok"] > 0 for w in workers.values()), "both workers must have worked"
    # the master process's own loop stalls (the loop-lag probe's "stall" events) are in the history
    # too, but in no worker's totals
    worker_pids = set(history.loc[history["op"] != "stall", "client"].str.split("-u").str[0])
    stalls = history[history["op"] == "stall"]
    master_stalls = int((~stalls["client"].str.removeprefix("loop:").isin(worker_pids)).sum())
    assert len(history) - master_stalls == recorded_events
    merged = decode_histogram(hist["histograms"]["acquire_ok"]).get_total_count()
    assert merged == recorded_acquires == ((history["op"] == "acquire") & (history["type"] == "ok")).sum()
    # the clients' processes (the loop-lag probe's stall events name their process as loop:<pid>)
    clients = history.loc[history["op"] != "stall", "client"]
    assert clients.str.split("-u").str[0].nunique() == 2


def test_report_rerenders_from_files_alone(two_process_run: Path, tmp_path: Path) -> None:
    run = _own_copy(two_process_run, tmp_path)
    assert not (run / "report.html").exists()
    r = bench("report", str(run))
    assert r.returncode == 0, r.stderr
    assert Path(r.stdout.strip()) == run / "report.html"
    assert (run / "report.html").stat().st_size > 100_000


def _children_running(pid: int, name: str) -> list[int]:
    """Pids of processes named ``name`` whose parent is ``pid`` (read from /proc)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid and name in cmdline:
            out.append(int(entry.name))
    return out


def test_ctrl_c_keeps_finished_cases_and_leaves_no_server(tmp_path: Path) -> None:
    import os
    import signal
    import time

    from infra.state import pid_alive

    results = tmp_path / "results"
    proc = bench_popen(
        "run", "--impl", "redis.set-nx-px-lua", "--impl", "redis.set-nx-px", "--impl", "redis.setnx-expire",
        *SHORT, "--results-dir", str(results), start_new_session=True,
    )  # fmt: skip
    servers: list[int] = []
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if len(servers) < 2:  # both servers start before the first case; catch them both
                servers = _children_running(proc.pid, "redis-server")
            runs = list(results.glob("*/run.json")) if results.exists() else []
            if runs and json.loads(runs[0].read_text())["cases"]:
                break
            time.sleep(0.1)
        assert len(servers) >= 2, "a lock server and a resource server were running"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal sends
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    run = _only_run(results)
    meta = json.loads((run / "run.json").read_text())
    assert meta["status"] == "incomplete"
    finished = pd.read_csv(run / "cases.csv")
    assert len(finished) >= 1 and list(finished["case"]) == meta["cases"]
    assert "redis.set-nx-px-lua__flash-sale" in meta["cases"]
    assert not any(pid_alive(p) for p in servers), "a server outlived the interrupted command"


def test_a_dead_lock_server_stops_the_run_and_keeps_results(tmp_path: Path) -> None:
    """Kill the lock server during the first case: the run ends, says so, keeps what finished."""
    import os
    import signal
    import time

    results = tmp_path / "results"
    proc = bench_popen(
        "run", "--impl", "redis.set-nx-px-lua", "--impl", "redis.set-nx-px", "--duration", "4", "--users", "5",
        "--acquire-timeout", "0.5", "--results-dir", str(results), start_new_session=True,
    )  # fmt: skip
    try:
        lock_server = None
        deadline = time.monotonic() + 60
        while lock_server is None and time.monotonic() < deadline:
            metas = list(results.glob("*/run.json")) if results.exists() else []
            if metas:
                port = (
                    json.loads(metas[0].read_text())["endpoints"]["redis"]["urls"][0]
                    .split(":")[-1]
                    .split("/")[0]
                )
                for pid in _children_running(proc.pid, "redis-server"):
                    if f":{port}" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                        lock_server = pid
            time.sleep(0.05)
        assert lock_server is not None
        while not json.loads(metas[0].read_text()).get("calibration", {}).get("solo") and (
            time.monotonic() < deadline + 60
        ):
            time.sleep(0.05)  # the impl's solo calibration comes first: wait for its first case
        time.sleep(2)  # mid-case
        os.kill(lock_server, signal.SIGKILL)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 1, err
    assert "died" in err and "Traceback" not in err
    meta = json.loads((_only_run(results) / "run.json").read_text())
    assert meta["status"] == "incomplete"
    assert meta["cases"] == [
        "redis.set-nx-px-lua__flash-sale"
    ]  # the case in flight is kept, the next not run


def test_a_lock_that_never_grants_is_unknown_not_valid(tmp_path: Path) -> None:
    """Options the lock rejects inside Locust: no acquisition at all proves nothing."""
    results = tmp_path / "results"
    r = bench("run", "--impl", "test.slowed", "--lock-params", '{"delay_s": -1}', "--duration", "2",
              "--users", "2", "--no-report", "--results-dir", str(results))  # fmt: skip
    assert r.returncode == 1, r.stderr  # a case without evidence fails the run, naming it
    assert any(
        ln.startswith("lockbench: case test.slowed__flash-sale has no verdict")
        for ln in r.stderr.splitlines()
    )
    assert r.stderr.splitlines()[-1].startswith("lockbench: wall time")  # the last line: where the time went
    run = _only_run(results)
    row = pd.read_csv(run / "cases.csv").iloc[0]
    assert row["acquisitions"] == 0 and row["verdict"] == "unknown"
    assert "no client even tried to acquire" in row["verdict_reason"]
    assert (run / "logs" / "test.slowed__flash-sale.log").read_text().strip()
