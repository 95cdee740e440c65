"""Workers on other hosts: clock offsets, uncertain overlaps, lost workers, test hosts.

The pure parts (offset estimate, uncertain classification) run on synthetic data. The
rest runs real ``bench run --master-bind`` masters with real ``bench worker`` processes
in their own working directories against real Redis servers, first on loopback, then on
network-namespace test hosts.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import pytest
import redis

from infra.ports import free_port
from tests.bench_forkserver import ENABLE_ENV
from tests.helpers import bench_popen
from workloads.checks.core import check_flash_sale, check_overlaps
from workloads.harness.clock_offsets import Sample, combine, estimate
from workloads.harness.recording import HISTORY_COLUMNS, history_frame
from workloads.harness.worker_env import CLOCK_SHIFT_ENV

ROOT = Path(__file__).resolve().parent.parent
SHIFT_NS = 25_000_000  # a worker whose clock reads 25 ms ahead: longer than a hold


# offset estimate (pure) ----------------------------------------------------------------------


def test_estimate_keeps_the_sample_with_the_smallest_round_trip() -> None:
    true_offset = 1_000_000
    samples = [
        Sample(0, 300 + true_offset + 250, 900),  # rtt 900, answer taken late in the trip
        Sample(1000, 1040 + true_offset, 1100),  # rtt 100: the tightest
        Sample(5000, 5000 + true_offset + 10, 5000 + 400),
    ]
    est = estimate(samples)
    assert est is not None
    assert est.rtt_ns == 100 and est.uncertainty_ns == 50 and est.samples == 3
    assert abs(est.offset_ns - true_offset) <= est.uncertainty_ns
    assert estimate([]) is None


def test_combine_widens_the_bound_by_the_drift_seen_at_the_end() -> None:
    start = estimate([Sample(0, 5_000, 100)])  # offset 4_950, bound 50
    end = estimate([Sample(10_000, 15_300, 10_200)])  # offset 5_200, bound 100
    assert start is not None and end is not None
    got = combine(start, end)
    assert got["offset_ns"] == start.offset_ns
    assert got["drift_ns"] == 250
    assert got["uncertainty_ns"] == 350  # |drift| + the end's own bound
    # a failed end measurement is said, not zeroed: the drift and so the bound are unknown
    unmeasured = combine(start, None)
    assert unmeasured["uncertainty_ns"] is None and unmeasured["drift_ns"] is None
    assert "end-of-run clock measurement failed" in unmeasured["reason"]


# uncertain overlaps (pure) -------------------------------------------------------------------


def _hist(*holds: tuple[str, int, int]) -> pd.DataFrame:
    events = []
    for n, (client, start, end) in enumerate(holds):
        events += [
            (client, n, "acquire", "invoke", "L", start - 10),
            (client, n, "acquire", "ok", "L", start),
            (client, n + 100, "release", "invoke", "L", end),
            (client, n + 100, "release", "ok", "L", end + 10),
        ]
    return history_frame(e + (None,) * (len(HISTORY_COLUMNS) - len(e)) for e in events)


BOUNDS = {"hostA": 100_000, "hostB": 100_000}  # 100 us each: 200 us between them


def test_overlap_within_the_clock_bound_of_two_hosts_is_uncertain() -> None:
    h = _hist(("hostA/1-u0", 0, 1_000_000), ("hostB/2-u0", 950_000, 2_000_000))  # 50 us overlap
    r = check_overlaps(h, uncertainty_ns=BOUNDS)
    assert r.status == "unknown"
    assert r.counters["uncertain_overlaps"] == 1 and r.counters["overlapping_holds"] == 0


def test_overlap_beyond_the_clock_bound_is_a_violation() -> None:
    h = _hist(("hostA/1-u0", 0, 1_000_000), ("hostB/2-u0", 500_000, 2_000_000))  # 500 us overlap
    r = check_overlaps(h, uncertainty_ns=BOUNDS)
    assert r.status == "invalid"
    assert r.counters["overlapping_holds"] == 1 and r.counters["uncertain_overlaps"] == 0


def test_same_worker_shares_one_clock_so_any_overlap_is_a_violation() -> None:
    h = _hist(("hostA/1-u0", 0, 1_000_000), ("hostA/1-u1", 950_000, 2_000_000))
    r = check_overlaps(h, uncertainty_ns=BOUNDS)
    assert r.status == "invalid" and r.counters["uncertain_overlaps"] == 0


def test_disjoint_holds_of_two_hosts_are_valid_and_one_clock_means_no_uncertainty() -> None:
    apart = _hist(("hostA/1-u0", 0, 1_000_000), ("hostB/2-u0", 1_050_000, 2_000_000))
    r = check_overlaps(apart, uncertainty_ns=BOUNDS)
    assert r.status == "valid" and r.counters["uncertain_overlaps"] == 0
    close = _hist(("a", 0, 1_000_000), ("b", 950_000, 2_000_000))
    assert check_overlaps(close).status == "invalid"  # a single host: no clock excuse


def test_flash_sale_verdict_reads_the_bounds_from_the_final_state() -> None:
    h = _hist(("hostA/1-u0", 0, 1_000_000), ("hostB/2-u0", 950_000, 2_000_000))
    state = {"items": {"item-0": {"initial": 10, "stock": 9, "orders_units": 1}}}
    assert check_flash_sale(h, state).status == "invalid"  # no bounds: a plain overlap
    verdict = check_flash_sale(h, {**state, "clock_uncertainty_ns": BOUNDS})
    assert verdict.status == "unknown"
    assert verdict.counters["uncertain_overlaps"] == 1


# real masters and workers on loopback -----------------------------------------------------------


def _bench(*args: str) -> list[str]:
    return [sys.executable, "-m", "bench", *args]


def _start_worker(cwd: Path, port: int, name: str, shift_ns: int = 0, env: dict | None = None) -> Any:
    cwd.mkdir(parents=True, exist_ok=True)
    env = {**(env or {}), **({CLOCK_SHIFT_ENV: str(shift_ns)} if shift_ns else {})}
    return bench_popen(
        "worker", "--master", f"127.0.0.1:{port}", "--name", name, cwd=cwd, env=env, stderr=subprocess.STDOUT
    )


def _run_master(tmp: Path, port: int, workers: int, redis_url: str, resource_url: str, *extra: str) -> Any:
    master = tmp / "master"
    master.mkdir()
    return bench_popen(
        "run", "--duration", "2", "--users", "6", "--master-bind", f"127.0.0.1:{port}",
        "--expect-workers", str(workers), "--redis-url", redis_url, "--resource-url", resource_url,
        "--results-dir", str(master / "results"), "--no-report", *extra,
        cwd=master,
    )  # fmt: skip


def _stop(procs: list[Any]) -> None:
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(10)


def _run_dir(tmp: Path) -> Path:
    (run,) = (tmp / "master" / "results").iterdir()
    return run


def test_workers_elsewhere_merge_and_undo_a_shifted_clock(
    redis_url: str, resource_server: object, tmp_path: Path
) -> None:
    port = free_port()
    workers = [
        # alpha spawns its warm Locust as the product does (its own child, exec'd), so its tree shows it
        _start_worker(tmp_path / "w1", port, "alpha", env={ENABLE_ENV: "bench"}),
        _start_worker(tmp_path / "w2", port, "beta", shift_ns=SHIFT_NS),
    ]
    seen: set[tuple[str, str]] = set()  # (a process's command line, its parent's) under alpha
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            with contextlib.suppress(psutil.Error):
                for p in psutil.Process(workers[0].pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        seen.add((" ".join(p.cmdline()), " ".join(p.parent().cmdline())))
            time.sleep(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        master = _run_master(
            tmp_path, port, 2, redis_url, resource_server.url,  # type: ignore[attr-defined]
            "--impl", "redis.set-nx-px-lua",
        )  # fmt: skip
        _, err = master.communicate(timeout=150)
        assert master.returncode == 0, err
        for w in workers:  # the master's last case told them the run is over
            out, _ = w.communicate(timeout=30)
            assert w.returncode == 0 and "the run is over" in out, out
    finally:
        done.set()
        _stop(workers)
    # the case's Locust worker was forked from the worker's warm process, not started cold
    warm = "workloads.harness.warm_locust"
    assert any(warm in cmd and warm in parent for cmd, parent in seen), seen
    assert not any("locust --worker" in cmd for cmd, _ in seen), seen
    run = _run_dir(tmp_path)
    meta = json.loads((run / "run.json").read_text())
    offsets = meta["clock_offsets"]
    assert set(offsets) == {"alpha", "beta"}
    for name, true_offset in (("alpha", 0), ("beta", SHIFT_NS)):
        o = offsets[name]
        assert abs(o["offset_ns"] - true_offset) <= o["uncertainty_ns"], (name, o)
        assert o["host"] == name
    (row,) = pd.read_csv(run / "cases.csv").to_dict("records")
    (case,) = meta["cases"]
    rec = json.loads((run / "hist" / f"{case}.json").read_text())
    history = pd.read_parquet(run / "history" / f"{case}.parquet")
    assert rec["recording_complete"], rec["recording_problems"]
    _assert_workers_rows_are_their_totals(rec, history)
    hosts = history["client"].str.split("/").str[0]
    assert set(hosts[~_master_stalls(history)]) == {"alpha", "beta"}
    # shifted back onto the master's clock, the correct lock's holds never overlap ...
    assert row["verdict"] == "valid" and row["overlapping_holds"] == 0 and row["uncertain_overlaps"] == 0
    # ... while on beta's own clock they would: the shift was needed, and undone
    raw = history.assign(t_ns=history["t_ns"] + (hosts == "beta") * offsets["beta"]["offset_ns"])
    assert (
        check_overlaps(
            raw.sort_values("t_ns"), uncertainty_ns=rec["final_state"]["clock_uncertainty_ns"]
        ).counters["overlapping_holds"]
        > 0
    )
    # nothing was written where the workers ran: the recording travelled over the channel
    for w in ("w1", "w2"):
        assert list((tmp_path / w).iterdir()) == []


def _master_stalls(history: pd.DataFrame) -> pd.Series:
    """The master's own loop stalls (client ``loop:<pid>``): in the history, in no worker's totals."""
    return history["client"].str.startswith("loop:")


def _assert_workers_rows_are_their_totals(rec: dict, history: pd.DataFrame) -> None:
    master = _master_stalls(history)
    assert set(history.loc[master, "op"]) <= {"stall"}
    assert rec["merged_totals"]["events"] == len(history)
    assert int((~master).sum()) == sum(w["events"] for w in rec["workers"].values())


@pytest.mark.parametrize(
    ("how", "reason"),
    [("kill", "worker gone was lost mid-case (no heartbeat)"), ("stop", "worker gone left mid-case")],
)
def test_a_worker_lost_mid_case_makes_the_case_unknown(
    redis_url: str, resource_server: object, tmp_path: Path, how: str, reason: str
) -> None:
    resource = redis.Redis.from_url(resource_server.url)  # type: ignore[attr-defined]
    resource.flushall()
    port = free_port()
    workers = [_start_worker(tmp_path / "w1", port, "stays"), _start_worker(tmp_path / "w2", port, "gone")]
    try:
        master = _run_master(
            tmp_path, port, 2, redis_url, resource_server.url,  # type: ignore[attr-defined]
            "--impl", "redis.set-nx-px-lua", "--duration", "5",
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while resource.llen("lockbench:res:orders:item-0") < 20:  # the load is under way
            assert time.monotonic() < deadline and master.poll() is None, "the load never started"
            time.sleep(0.1)
        if how == "kill":  # the host goes away: bench worker and its Locust process at once
            doomed = [
                workers[1].pid,
                *(c.pid for c in psutil.Process(workers[1].pid).children(recursive=True)),
            ]
            for pid in doomed:
                os.kill(pid, signal.SIGKILL)
        else:  # stopped cleanly: its recording arrives, but its clients quit before the case ended
            workers[1].terminate()
        _, err = master.communicate(timeout=150)
    finally:
        _stop(workers)
        resource.close()
    (row,) = pd.read_csv(_run_dir(tmp_path) / "cases.csv").to_dict("records")
    assert row["verdict"] == "unknown", err
    assert reason in row["verdict_reason"]


# test hosts: network namespaces on this machine ------------------------------------------------


def _netns_or_skip() -> None:
    from infra import testhosts

    try:
        testhosts.check_available()
    except testhosts.NetnsUnavailable as exc:
        pytest.skip(f"network namespaces unavailable: {exc}")


def _run_namespaces(pid: int) -> list[str]:
    netns = Path("/run/netns")
    return sorted(n for n in os.listdir(netns) if n.startswith(f"lb{pid}x")) if netns.exists() else []


def _bench_on_test_hosts(tmp: Path, *args: str) -> Any:
    return bench_popen(
        "run", "--test-hosts", *args, "--results-dir", str(tmp / "results"), "--no-report", cwd=tmp
    )


@pytest.mark.server
def test_run_on_test_hosts_crosses_hosts_and_merges_every_recording(tmp_path: Path) -> None:
    _netns_or_skip()
    proc = _bench_on_test_hosts(
        tmp_path, "2", "--impl", "redis.set-nx-px-lua", "--duration", "2", "--users", "6"
    )
    _, err = proc.communicate(timeout=150)
    assert proc.returncode == 0, err
    assert _run_namespaces(proc.pid) == []  # torn down
    (run,) = (tmp_path / "results").iterdir()
    meta = json.loads((run / "run.json").read_text())
    roles = meta["test_hosts"]
    assert sorted(roles.values()) == ["master", "redis-lock", "resource", "worker-1", "worker-2"]
    lock_addr = meta["endpoints"]["redis"]["urls"][0].split("://")[1].split(":")[0]
    assert roles[lock_addr] == "redis-lock"  # the lock server lives on a host of its own
    assert set(meta["clock_offsets"]) == {"worker-1", "worker-2"}
    for o in meta["clock_offsets"].values():
        assert 0 < o["uncertainty_ns"] < 1_000_000_000
        assert abs(o["offset_ns"]) <= o["uncertainty_ns"]  # one machine: the true offset is 0
    (case,) = meta["cases"]
    rec = json.loads((run / "hist" / f"{case}.json").read_text())
    history = pd.read_parquet(run / "history" / f"{case}.parquet")
    assert rec["recording_complete"], rec["recording_problems"]
    _assert_workers_rows_are_their_totals(rec, history)
    master = _master_stalls(history)
    assert set(history.loc[~master, "client"].str.split("/").str[0]) == {"worker-1", "worker-2"}
    (row,) = pd.read_csv(run / "cases.csv").to_dict("records")
    assert row["verdict"] == "valid" and row["acquisitions"] > 0
    assert row["uncertain_overlaps"] == 0 and row["witness_violations"] == 0


@pytest.mark.server
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_test_hosts_are_torn_down_on_ctrl_c_and_kill(tmp_path: Path, sig: int) -> None:
    _netns_or_skip()
    from infra.testhosts import pids_in

    proc = _bench_on_test_hosts(
        tmp_path, "1", "--impl", "redis.set-nx-px-lua", "--duration", "30", "--users", "2"
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # wait for the load: a Locust master in the master host's namespace
            names = _run_namespaces(proc.pid)
            inside = {p for n in names for p in pids_in(n)}
            if any("locust" in " ".join(_cmdline(p)) for p in inside) and len(names) >= 5:
                break
            assert time.monotonic() < deadline and proc.poll() is None, (
                proc.stderr.read() if proc.stderr else ""
            )
            time.sleep(0.2)
        time.sleep(1)
        inside = {p for n in _run_namespaces(proc.pid) for p in pids_in(n)} - {proc.pid}
        proc.send_signal(sig)
        assert proc.wait(60) == (130 if sig == signal.SIGINT else -signal.SIGKILL)
        deadline = time.monotonic() + 10
        while (_run_namespaces(proc.pid) or any(psutil.pid_exists(p) for p in inside)) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
        assert _run_namespaces(proc.pid) == []
        assert [p for p in inside if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"] == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _cmdline(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return []


# bad input: one line, exit 2 ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["worker", "--master", "master.example:http"], "--master must be HOST[:PORT]"),
        (
            ["run", "--impl", "redis.set-nx-px-lua", "--expect-workers", "2"],
            "--expect-workers needs --master-bind",
        ),
        (["run", "--impl", "redis.set-nx-px-lua", "--master-bind", "127.0.0.1:5557"], "--expect-workers N"),
        (
            ["run", "--impl", "redis.set-nx-px-lua", "--master-bind", "10.9.9.9", "--expect-workers", "2"],
            "cannot reach servers started here on 127.0.0.1",
        ),
        (
            [
                "run",
                "--impl",
                "redis.set-nx-px-lua",
                "--test-hosts",
                "2",
                "--redis-url",
                "redis://127.0.0.1:1/0",
            ],
            "drop the server URLs",
        ),
    ],
)
def test_bad_scale_out_input_is_one_line(args: list[str], needle: str, capsys: pytest.CaptureFixture) -> None:
    from bench.cli.app import main

    handler = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(args)
    finally:
        signal.signal(signal.SIGTERM, handler)
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2
    assert len(err) == 1 and err[0].startswith("bench: error:") and needle in err[0], err


def test_without_namespace_rights_test_hosts_stop_with_one_line(tmp_path: Path) -> None:
    _netns_or_skip()
    if not Path("/usr/bin/setpriv").exists():
        pytest.skip("setpriv (util-linux) is needed to drop CAP_NET_ADMIN for this test")
    proc = subprocess.run(
        ["setpriv", "--bounding-set=-net_admin,-sys_admin", "--inh-caps=-net_admin,-sys_admin",
         *_bench("run", "--test-hosts", "1", "--impl", "redis.set-nx-px-lua", "--results-dir", str(tmp_path))],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("bench: error:")]
    assert len(errors) == 1 and "namespaces" in errors[0] and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())  # no results folder: nothing ran
