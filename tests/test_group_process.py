"""A matrix group's cases in one Locust process (workloads/harness/group_locust.py), each still its own case."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd

from bench.matrix.machine import GENERATOR_NICE
from bench.matrix.plan import form_groups, plan_lanes, plan_matrix
from bench.measure.analysis import steady_window
from bench.run.group import shares_a_process
from tests.helpers import bench
from workloads.harness.priority import can_raise, shared_nice

RESTART_GROUP = ("matrix", "--impl", "redis.set-nx-px-lua", "--impl", "redis.reentrant",
                 "--scenario", "restart", "--evidence", "quick", "--lanes", "1")  # fmt: skip


def _run(tmp_path: Path, env: dict[str, str] | None = None) -> tuple[Path, pd.DataFrame]:
    r = bench(*RESTART_GROUP, "--results-dir", str(tmp_path), env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return run, pd.read_csv(run / "cases.csv").set_index("case")


def test_a_restart_groups_cases_share_one_process_and_keep_their_own_recordings(tmp_path: Path) -> None:
    run, cases = _run(tmp_path)
    assert len(cases) == 5 and set(cases["group_size"]) == {5}
    pids, namespaces = set(), set()
    for case in cases.index:
        hist = json.loads((run / "hist" / f"{case}.json").read_text())
        (pid,) = hist["workers"]  # one process ran the case...
        assert hist["workers"][pid]["cases_in_process"] == 5  # ...and the four others
        if can_raise():  # the one process weighs in the CPU queue as the five it replaces
            assert hist["workers"][pid]["nice"] == shared_nice(GENERATOR_NICE, 5) < GENERATOR_NICE
        pids.add(pid)
        history = pd.read_parquet(run / "history" / f"{case}.parquet")
        locks = {n for n in history["lock"].dropna().astype(str) if ":flash-sale:" in n}
        (name,) = locks  # every grant in this case's history is on this case's own lock
        namespaces.add(name.split(":", 1)[0])
        # and its clients are its own: the six buyers it started (u-numbered per case), beside the
        # marks of bench's strikes and of the loop's stalls
        buyers = {c for c in history["client"].astype(str) if c != "bench" and not c.startswith("loop:")}
        assert len(buyers) == 6, buyers
        assert hist["merged_totals"]["acquire_ok"] == int(cases.loc[case, "acquisitions"])
    assert len(pids) == 1 and len(namespaces) == 5
    # the catalog's answer for a restart without persistence: every lock of the group violates
    assert set(cases["verdict"]) == {"invalid"} and not cases["contradicts_catalog"].any()
    assert (cases["strikes"] >= 3).all() and (cases["acquisitions_after_strike"] >= 300).all()
    # the process's CPU was the group's: no case claims it as its own
    assert cases["client_cpu_ms_per_acq"].isna().all()
    assert cases["loop_lag_late_share"].notna().all()


def test_the_same_group_in_a_process_per_case_gives_the_same_cells(tmp_path: Path) -> None:
    shared_run, shared = _run(tmp_path / "shared")
    env = {**os.environ, "LOCKBENCH_GROUP_PROCESS": "0"}
    apart_run, apart = _run(tmp_path / "apart", env=env)
    pids = {
        pid
        for case in apart.index
        for pid in json.loads((apart_run / "hist" / f"{case}.json").read_text())["workers"]
    }
    assert len(pids) == 5  # the measurement knob: every case its own Locust process again
    if can_raise():
        nices = {
            w["nice"]
            for case in apart.index
            for w in json.loads((apart_run / "hist" / f"{case}.json").read_text())["workers"].values()
        }
        assert nices == {GENERATOR_NICE}
    assert apart["client_cpu_ms_per_acq"].notna().all()
    cols = ["verdict", "expected_outcome", "contradicts_catalog", "observed_outcome"]
    assert shared[cols].sort_index().equals(apart[cols].sort_index())


def test_only_groups_whose_workload_leaves_the_process_running_share_one() -> None:
    cases, _ = plan_matrix(
        [], ["redis.set-nx-px-lua"], ["restart", "crash", "lease-expiry-world", "lease-expiry-task"],
        fixed_servers=set(), root=False,
    )  # fmt: skip
    units = [unit for lane in plan_lanes(cases, fixed_servers=set()) for unit in form_groups(lane)]
    by_scenario = {unit[0].matrix_scenario: shares_a_process(unit) for unit in units if len(unit) > 1}
    # a crash kills its process and a world pause stops it: either would strike every case beside
    assert by_scenario == {
        "restart": True, "crash": False, "lease-expiry-world": False, "lease-expiry-task": True,
    }  # fmt: skip


def test_a_loop_stall_mark_does_not_open_the_steady_window() -> None:
    ms = 1_000_000
    rows = [("1-u1", 0), ("1-u2", 1 * ms), ("1-u1", 100 * ms), ("loop:1", 60 * ms), ("1-u2", 200 * ms)]
    history = pd.DataFrame({"client": [c for c, _ in rows], "t_ns": [t for _, t in rows]})
    # the stall came mid-case; the last buyer's first operation (1 ms) opens the window
    assert steady_window(history) == (1 * ms, 200 * ms)
