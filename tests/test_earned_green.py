"""A green must be earned: repeated strikes, evidence per case and per cell, partitions, dead servers.

The pure rules first (a cell under its target is never green, evidence adds up over trials and
fencing variants, scenarios are sized for an evidence level, partitions are grey without
root), then real runs: a fault that cannot strike, a fault that strikes k times each after a
grant, a lock server killed during a matrix case, a partition scenario as root, and recovery
as a time (a ZooKeeper lock is not stuck after a crash; ``redis.setnx-del`` is, with its bound).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console

from bench.matrix.plan import plan_lanes, plan_matrix
from bench.matrix.tables import print_summary
from bench.measure import strikes
from bench.nemesis.scenarios import scenarios_at
from dashboards.grid import cell_for
from tests.helpers import MARK_ENV, bench, bench_popen, marked_processes, run_exit_code

STANDARD = strikes.LEVELS["standard"]


def _row(**kw: object) -> dict:
    base = {
        "case": "c", "impl": "x.lock", "matrix_scenario": "restart", "verdict": "valid", "fencing": "observe",
        "strikes": 10, "acquisitions_after_strike": 1000, "evidence_target_k": 10, "evidence_target_n": 1000,
        "overlapping_holds": 0, "stuck_locks": 0, "acquisitions": 1200,
        "control_outcome": "failed (x.control, 10 strikes)",
    }  # fmt: skip
    return {**base, **kw}


# the rule ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rows", "cls"),
    [
        ([_row()], "good"),
        ([_row(strikes=9)], "thin"),
        ([_row(acquisitions_after_strike=999)], "thin"),
        ([_row(strikes=1, acquisitions_after_strike=5)], "thin"),
        ([_row(strikes=0, acquisitions_after_strike=0, verdict="unknown")], "nottested"),
        ([_row(verdict="invalid", overlapping_holds=3)], "bad"),
        ([_row(stuck_locks=1, verdict="valid", stuck_bound_s=9.0)], "stuck"),
        ([_row(strikes=4, verdict="unknown")], "unknown"),
        # fenced and unfenced runs of one scenario in separate trials (their own strikes): evidence adds up
        ([_row(strikes=5, acquisitions_after_strike=500), _row(strikes=5, acquisitions_after_strike=500,
                                                              fencing="enforce")], "good"),
        # ... but in one group they took the same 5 strikes: k is 5, not 10
        ([_row(strikes=5, acquisitions_after_strike=500, group_id="g", fault="restart@held"),
          _row(strikes=5, acquisitions_after_strike=500, fencing="enforce", group_id="g", fault="restart@held")],
         "thin"),
        # a lock that failed while fencing refused a stale write and kept the data right
        ([_row(verdict="invalid", overlapping_holds=3, data_safe=False),
          _row(verdict="invalid", overlapping_holds=2, fencing="enforce", data_safe=True,
               stale_writes_refused=2)], "warn"),
        # ... amber needs fencing at work: no stale write refused, the data survived by luck
        ([_row(verdict="invalid", overlapping_holds=3, data_safe=False),
          _row(verdict="invalid", overlapping_holds=2, fencing="enforce", data_safe=True)], "bad"),
        # a green needs its own control beside it, failed
        ([_row(control_outcome="")], "nottested"),
        ([_row(control_outcome="survived (x.control, 10 strikes)")], "nottested"),
        ([_row(control_outcome="unproven (x.control): its violation came under a stall")], "nottested"),
        # a failure a generator stall could explain is undecided, never red
        ([_row(verdict="invalid", overlapping_holds=1, stall_reason="a Locust process stalled 2 s")], "unknown"),
    ],
)  # fmt: skip
def test_a_cell_is_green_only_on_its_target_evidence(rows: list[dict], cls: str) -> None:
    assert cell_for(rows).cls == cls


def test_one_witnessed_violation_fails_the_cell_whatever_the_evidence() -> None:
    rows = [
        _row(strikes=100, acquisitions_after_strike=100_000),
        _row(verdict="invalid", overlapping_holds=1),
    ]
    assert cell_for(rows).cls == "bad"


def test_a_case_grade_follows_its_strikes_and_grants() -> None:
    assert strikes.grade(_row(), STANDARD, fault_case=True) == "earned"
    assert strikes.grade(_row(strikes=3), STANDARD, fault_case=True) == "thin"
    assert strikes.grade(_row(strikes=0), STANDARD, fault_case=True) == "not-struck"
    assert strikes.grade(_row(verdict="invalid"), STANDARD, fault_case=True) == "failed"
    assert strikes.grade(_row(), STANDARD, fault_case=False) == ""
    assert strikes.columns(pd.DataFrame(), strikes.strike_times(pd.DataFrame(), "crash", 1.0, False)) == {
        "strikes": 0, "acquisitions_after_strike": 0, "strike_failure_bound": None, "race_rate_bound": None,
        "strikes_missed": 0, "strikes_missed_reason": "",
    }  # fmt: skip


def test_strikes_and_grants_after_them_come_from_the_history() -> None:
    events = [
        ("a", 1, "acquire", "ok", "L", 100), ("bench", 0, "fault", "invoke", "restart", 150),
        ("bench", 0, "fault", "ok", "restart", 160), ("b", 1, "acquire", "ok", "L", 200),
        ("bench", 1, "fault", "invoke", "restart", 250), ("bench", 1, "fault", "ok", "restart", 260),
        ("a", 2, "acquire", "ok", "L", 300), ("b", 2, "acquire", "ok", "L", 400),
    ]  # fmt: skip
    history = pd.DataFrame(events, columns=["client", "seq", "op", "type", "lock", "t_ns"])
    times = strikes.strike_times(history, "flash-sale", None, server_fault=True)
    assert list(times) == [150, 250]
    cols = strikes.columns(history, times)
    assert cols["strikes"] == 2 and cols["acquisitions_after_strike"] == 3
    # 3/k and 3/n are bounds on probabilities: under three events they say nothing, which is 1
    assert cols["strike_failure_bound"] == 1.0 and cols["race_rate_bound"] == 1.0
    assert strikes.columns(history, np.arange(6))["strike_failure_bound"] == pytest.approx(0.5)


def test_scenarios_are_sized_for_the_evidence_level() -> None:
    standard, quick = scenarios_at(STANDARD), scenarios_at(strikes.LEVELS["quick"])
    restart = standard["restart"]
    # a fifth of n between strikes (GRANTS_BETWEEN_SHARE), the rest after the last
    assert restart.settings["strikes"] == 10 and restart.settings["grants_between"] == 20
    assert restart.stop.count == 10 and restart.stop.after_first == 1000
    assert quick["restart"].settings["strikes"] == 3
    # one process dies per crash: more crashes than a case holds run as trials
    crash = standard["crash"]
    assert crash.trials(STANDARD) == 2 and crash.options["crashes"] == 5 and crash.settings["processes"] == 6
    # long-cs: every acquisition is itself a strike, so its target has no separate n
    assert standard["long-cs"].target(STANDARD).acquisitions == 0 and standard["long-cs"].stop.count == 10
    # pauses spread so that k of them fall within the n grants
    assert standard["lease-expiry-task"].options["pause_every"] == 100
    assert standard["lease-expiry-world"].options["pause_every"] == 50


def test_partitions_are_grey_without_root_and_planned_on_test_hosts_with_it() -> None:
    not_run: list[dict] = []
    cases, skipped = plan_matrix([], ["redis.set-nx-px-lua"], [], set(), root=False, not_run=not_run)
    assert {c.matrix_scenario for c in cases}.isdisjoint({"partition-client", "partition-leader"})
    assert {(n["scenario"], n["word"]) for n in not_run if n["word"] != "n/a"} == {
        ("partition-client", "needs root"), ("partition-leader", "needs root"),
    }  # fmt: skip
    assert any("needs root" in s for s in skipped)
    cases, _ = plan_matrix([], ["redis.set-nx-px-lua"], ["partition-client"], set(), root=True)
    lanes = plan_lanes(cases, set())
    assert cases and all(lane.hosts for lane in lanes)


def test_the_terminal_summary_prints_every_cell_uncut_at_80_columns() -> None:
    rows = [
        _row(
            case=f"{impl}__{s}", impl=impl, matrix_scenario=s, expected_outcome="", contradicts_catalog=False
        )
        for impl in ("redis.set-nx-px-lua", "zookeeper.sequential")
        for s in ("flash-sale", "long-cs", "restart", "crash", "kill-leader", "partition-majority")
    ]
    rows[1].update(verdict="invalid", overlapping_holds=2)
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    print_summary(rows, console, [{"impl": "zookeeper.sequential", "scenario": "partition-client",
                                   "word": "needs root"}])  # fmt: skip
    out = console.export_text()
    grid = [ln for ln in out.splitlines() if ln.startswith(("redis.set-nx-px-lua ", "zookeeper.sequential "))]
    assert len(grid) == 2 and all(len(ln) <= 80 for ln in grid), out
    assert grid[0].split()[1:3] == ["S", "F"] and grid[1].split()[-1] == "-", out
    assert "cells: S 11, t 0, F 1, f 0, X 0, ? 0, - 1" in out


# real runs ------------------------------------------------------------------------------------


def _cases(results: Path) -> pd.DataFrame:
    run = next(p for p in results.iterdir() if p.is_dir())
    return pd.read_csv(run / "cases.csv")


@pytest.mark.server
def test_a_fault_that_cannot_strike_is_unknown_and_fails_the_run(tmp_path: Path) -> None:
    # a strike timed after the case's end is refused before anything starts
    r = bench("run", "--impl", "redis.set-nx-px-lua", "--fault", "restart@600s", "--duration", "4",
              "--users", "4", "--no-report", "--results-dir", str(tmp_path / "early"))  # fmt: skip
    assert r.returncode == 2 and "after the case ends" in r.stderr and not (tmp_path / "early").exists()
    # one that waits for a holder nobody ever becomes (the buyers never start) never strikes
    r = bench("run", "--impl", "tests.unstarted_locks:NeverStarts", "--fault", "restart@held", "--duration",
              "4", "--users", "4", "--no-report", "--results-dir", str(tmp_path / "r"))  # fmt: skip
    assert r.returncode == 1, r.stderr
    row = _cases(tmp_path / "r").iloc[0]
    assert row["verdict"] == "unknown" and row["evidence"] == "not-struck" and row["strikes"] == 0
    assert "has no verdict" in r.stderr


@pytest.mark.server
def test_a_repeated_fault_strikes_k_times_each_on_a_grant_after_the_heal(tmp_path: Path) -> None:
    r = bench("run", "--impl", "redis.set-nx-px-lua", "--fault", "restart", "--strikes", "3", "--evidence",
              "quick", "--users", "4", "--duration", "12", "--fencing", "enforce", "--no-report",
              "--results-dir", str(tmp_path / "r"))  # fmt: skip
    run = next(p for p in (tmp_path / "r").iterdir() if p.is_dir())
    assert r.returncode == run_exit_code(run), r.stderr
    row = _cases(tmp_path / "r").iloc[0]
    assert row["strikes"] == 3 and row["evidence_target"] == "k >= 3 and n >= 300"
    assert row["acquisitions_after_strike"] >= 200  # 100 purchases granted between strikes, at least
    run = next(p for p in (tmp_path / "r").iterdir() if p.is_dir())
    history = pd.read_parquet(next((run / "history").glob("*.parquet")))
    windows = (
        history[(history["op"] == "fault") & (history["type"] == "invoke")]["t_ns"].sort_values().tolist()
    )
    heals = history[(history["op"] == "fault") & (history["type"] == "ok")]["t_ns"].sort_values().tolist()
    grants = history[(history["op"] == "acquire") & (history["type"] == "ok")]["t_ns"]
    assert len(windows) == 3
    for healed, nxt in zip(heals, windows[1:], strict=False):
        assert ((grants > healed) & (grants < nxt)).sum() >= 1  # the service granted again before the next
    claims = history[(history["op"] == "fault-hold") & (history["type"] == "invoke")]
    assert len(claims) == 3


@pytest.mark.server
def test_a_lock_server_killed_during_a_matrix_case_makes_it_unknown(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    proc = bench_popen(
        "matrix", "--impl", "redis.set-nx-px-lua", "--scenario", "lease-expiry-task", "--evidence", "quick",
        "--no-report", "--no-warm", "--results-dir", str(tmp_path / "r"), env={MARK_ENV: mark},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        victim = None
        while victim is None and time.monotonic() < deadline and proc.poll() is None:
            mine = marked_processes([mark])
            if any("locust" in cmd for *_, cmd in mine):  # the case's load is on: kill its lock server
                for entry in Path("/proc").iterdir():
                    try:
                        cmd = (entry / "cmdline").read_bytes()
                        cwd = os.readlink(entry / "cwd")
                    except OSError:
                        continue
                    # redis-server rewrites its environment (process title): found by its folder, which
                    # lies in this bench's scratch (/tmp/lockbench-run-<pid>-*): the lock's, not the resource's
                    if b"redis-server" in cmd and f"lockbench-run-{proc.pid}-" in cwd and "redis-lock" in cwd:
                        victim = int(entry.name)
            time.sleep(0.2)
        assert victim is not None, "no lock server found"
        time.sleep(1.0)
        os.kill(victim, signal.SIGKILL)
        proc.wait(180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    rows = _cases(tmp_path / "r")
    assert len(rows) >= 1
    first = rows.iloc[0]
    assert first["verdict"] in ("unknown", "invalid"), first.to_dict()
    if first["verdict"] == "unknown":
        assert "died" in str(first["verdict_reason"]) or "server" in str(first["verdict_reason"])


@pytest.mark.server
def test_a_partition_scenario_runs_on_test_hosts_as_root(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("partitions need root (network namespaces): the matrix shows them grey, tested above")
    r = bench("matrix", "--impl", "redis.set-nx-px-lua", "--scenario", "partition-client", "--strikes", "1",
              "--evidence", "quick", "--no-report", "--results-dir", str(tmp_path / "r"), timeout=400)  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = _cases(tmp_path / "r")
    assert set(rows["fencing"]) == {"observe", "enforce"}
    assert (rows["strikes"] >= 1).all(), rows[["case", "verdict", "verdict_reason"]]
    # a 2 s lease under an 8 s cut: the catalog's expectation, and what happens
    assert set(rows["observed_outcome"]) == {"violates"} and not rows["contradicts_catalog"].any()
    meta = json.loads(
        next(p for p in (tmp_path / "r").iterdir() if p.is_dir()).joinpath("run.json").read_text()
    )
    assert meta["params"]["not_run"] == []


# recovery is a time, not a verdict (issue 26) -----------------------------------------------


@pytest.mark.server
def test_a_zookeeper_lock_with_a_2s_session_recovers_after_a_crash(tmp_path: Path) -> None:
    r = bench("run", "--impl", "zookeeper.sequential", "--workload", "crash", "--lock-params",
              '{"session_timeout": 2}', "--users", "4", "--duration", "12", "--no-report",
              "--results-dir", str(tmp_path / "r"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    zk = _cases(tmp_path / "r").iloc[0]
    assert zk["stuck_locks"] == 0 and zk["verdict"] == "valid", zk.to_dict()
    assert zk["recovery_by"] == "the session timeout" and zk["recovery_expected_s"] == 2
    assert zk["stuck_bound_s"] == 6.0 and 1000 <= zk["recovery_ms_p50"] <= 6000


@pytest.mark.server
def test_setnx_del_stays_stuck_after_a_crash_with_its_bound_shown(tmp_path: Path) -> None:
    r = bench("run", "--impl", "redis.setnx-del", "--workload", "crash", "--users", "4", "--duration", "8",
              "--no-report", "--results-dir", str(tmp_path / "r"))  # fmt: skip
    assert r.returncode == 0, r.stderr
    stuck = _cases(tmp_path / "r").iloc[0]
    assert stuck["stuck_locks"] == 1 and stuck["stuck_bound_s"] == 3.0, stuck.to_dict()
    assert str(stuck["recovery_by"]).startswith("no expiry")
    # stuck is liveness, not safety: the lock never let two holders in
    assert stuck["overlapping_holds"] == 0 and stuck["verdict"] == "valid"
    assert "stuck" in r.stdout + r.stderr


# issue 38: what a plan guarantees every cell ---------------------------------------------------


def test_every_group_of_every_scenario_carries_its_own_control() -> None:
    """No cell leans on a control elsewhere: each group of the full plan holds the scenario's control."""
    from bench.matrix.controls import control_for
    from bench.matrix.plan import form_groups

    cases, _ = plan_matrix(
        ["redis", "postgres", "etcd", "zookeeper", "memcached", "file"], [], [], set(), root=True
    )
    for lane in plan_lanes(cases, set()):
        for unit in form_groups(lane):
            scenario, backend = unit[0].matrix_scenario, unit[0].backend
            if scenario == "flash-sale":
                continue
            control = control_for(scenario, backend)
            assert control, f"{scenario} on {backend} has no control"
            assert any(c.impl == control for c in unit), f"a {scenario} group on {backend} lacks {control}"


def test_stuck_after_a_server_fault_waits_the_lock_s_own_bound() -> None:
    """No fixed wait decides "stuck": 3x the lock's own timeout, at least 10 s."""
    from workloads.checks.stop_rules import StopRule

    cases, _ = plan_matrix(["etcd", "zookeeper", "postgres"], [], ["restart"], set(), root=False)
    bounds = {c.impl: c.params.get("recovery_bound_s") for c in cases if c.role == "subject"}
    assert bounds["postgres.advisory"] == 10.0  # its sessions end at once: the floor
    assert bounds["etcd.lease"] == 30.0  # a 10 s lease, three times
    for c in cases:
        rule = StopRule.from_json(c.settings.stop_rule)
        assert rule is not None and rule.or_after_s == c.params["recovery_bound_s"]


def test_zookeeper_locks_are_paused_past_their_session() -> None:
    cases, _ = plan_matrix(["zookeeper"], [], ["session-pause"], set(), root=False)
    subjects = {c.impl for c in cases if c.role == "subject"}
    assert {"zookeeper.sequential", "zookeeper.kazoo"} <= subjects
    assert all(c.settings.lock_params.get("session_timeout") == 2 for c in cases)


def test_the_fault_free_row_of_a_matrix_is_no_safety_claim() -> None:
    row = {**_row(), "matrix_scenario": "flash-sale", "evidence_target_k": None, "strikes": 0}
    cell = cell_for([row])
    assert cell.cls == "baseline" and cell.word == "no fault"


def test_a_fault_case_that_struck_fewer_times_than_asked_says_why() -> None:
    rows = [{"case": "c", "fault": "restart@held", "strikes": 1, "acquisitions": 16, "duration_s": 40.0,
             "strikes_missed": 0}]  # fmt: skip
    assert strikes.shortfall(rows, 10) == ["c: 1 of 10 strikes in 40 s: 16 grants; raise --duration"]
    assert strikes.shortfall(rows, 1) == []


def test_a_fault_case_lost_to_its_servers_is_unknown_not_did_not_strike() -> None:
    lost = _row(strikes=0, acquisitions_after_strike=0, verdict="unknown",
                verdict_reason="no evidence: server redis-lock died during the case (logs/servers/redis#0/redis-lock.died-1.log)")  # fmt: skip
    cell = cell_for([lost])
    assert cell.cls == "unknown" and cell.word == "unknown"
    never = _row(strikes=0, acquisitions_after_strike=0, verdict="unknown",
                 verdict_reason="restart@held did not strike (no holder claimed it in time): not tested")  # fmt: skip
    assert cell_for([never]).word == "did not strike"


def test_every_case_of_the_full_plan_has_its_own_id() -> None:
    """A control copied into the groups of two lanes of one backend kept one id ("__g2") in both, and
    bench merge refused the shards holding them; ids are unique across the whole plan."""
    from bench.matrix.plan import form_groups

    cases, _ = plan_matrix(
        ["redis", "postgres", "etcd", "zookeeper", "memcached", "file"], [], [], set(), root=True
    )
    ids = [c.case_id for lane in plan_lanes(cases, set()) for unit in form_groups(lane) for c in unit]
    assert len(ids) == len(set(ids))


def test_a_stale_read_refused_is_fencing_at_work() -> None:
    """Enforced, a cut-off holder's stale token is refused at its read, before any write: amber."""
    rows = [_row(verdict="invalid", overlapping_holds=3, data_safe=False),
            _row(verdict="invalid", overlapping_holds=2, fencing="enforce", data_safe=True, stale_reads=10,
                 stale_writes_refused=0)]  # fmt: skip
    assert cell_for(rows).cls == "warn"
