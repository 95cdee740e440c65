"""Fidelity: is a case's figure the lock's or the load generator's? (bench/measure/fidelity.py)

The flag logic is tested on histograms with a known inflation (pure, fast); the planning
of solo calibrations and ``--processes auto`` without servers; then two real runs, one
overloaded on purpose (flagged) and one with a single client (not flagged), and the gate
on a generator-bound figure.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bench.errors import UserError
from bench.measure import fidelity
from bench.measure.analysis import percentiles
from bench.run.case import CALIBRATION_S, SOLO_ACQUISITIONS, Case, RunSettings, with_calibration
from bench.run.command import resolve_processes
from tests.helpers import bench
from tests.test_gate import gate, noisy, write_run
from workloads.checks.stop_rules import StopRule
from workloads.harness.catalog import WORKLOADS
from workloads.harness.recording import new_histogram


def hold_row(values_us: list[int], acquisitions: int = 1000, handoff_us: float = 500.0) -> dict:
    """A case row whose hold p50 comes from an HDR histogram of ``values_us``, as the runner's does."""
    hist = new_histogram()
    for v in values_us:
        hist.record_value(v)
    return {
        "acquisitions": acquisitions,
        "hold_p50_us": percentiles(hist)["p50"],
        "handoff_p50_us": handoff_us,
        "handoff_mean_us": handoff_us,
    }


SOLO = fidelity.Solo(hold_p50_us=3000.0, acquire_p50_us=200.0, acquisitions=500, hold_mean_us=3000.0)
WORKERS = {"1": {"cpu_share": 0.5, "cpu_s": 2.0}, "2": {"cpu_share": 0.6, "cpu_s": 3.0}}


def test_a_hold_inflated_4x_is_generator_bound_with_the_numbers_in_the_reason() -> None:
    row = hold_row([12_000] * 90 + [3_000] * 10)  # contended hold p50 = 4x the solo hold
    cols = fidelity.columns(row, SOLO, True, WORKERS, {"attempts": 9000}, server_cpu_s=0.25)
    assert cols["hold_inflation"] == pytest.approx(4.0, rel=0.01)
    assert cols["generator_bound"] is True
    reason = cols["generator_bound_reason"]
    assert "hold inflated 4.0x over solo 3 ms" in reason and fidelity.BOUND_MEANING in reason
    assert cols["solo_hold_p50_us"] == 3000.0
    assert cols["client_cpu_ms_per_acq"] == pytest.approx(5.0)  # (2 + 3) s / 1000 acquisitions
    assert cols["polls_per_acq"] == pytest.approx(9.0)
    assert cols["server_cpu_us_per_acq"] == pytest.approx(250.0)
    assert cols["model_acq_s"] == pytest.approx(1e6 / (3000 + 500))  # mean solo hold + mean handoff


def test_a_hold_near_its_solo_value_is_not_bound_and_the_threshold_itself_passes() -> None:
    near = fidelity.columns(hold_row([3_300] * 100), SOLO, True, WORKERS, {}, None)
    assert near["hold_inflation"] == pytest.approx(1.1, rel=0.01)
    assert (near["generator_bound"], near["generator_bound_reason"]) == (False, "")
    at = fidelity.judge_bound(3000.0 * fidelity.INFLATION_THRESHOLD, SOLO, 0.99, True)
    assert at == (False, "")  # above, not at: and CPU alone does not flag a calibrated case
    above = fidelity.judge_bound(3000.0 * fidelity.INFLATION_THRESHOLD * 1.01, SOLO, 0.1, True)
    assert above[0] is True
    # counters that were not recorded are missing figures, never zeros
    assert near["polls_per_acq"] != near["polls_per_acq"]
    assert near["server_cpu_us_per_acq"] != near["server_cpu_us_per_acq"]


def test_without_calibration_the_loop_lag_decides_and_without_it_nothing_is_measured() -> None:
    late = {"1": {"cpu_share": 0.5, "cpu_s": 4.0, "loop_lag_p50_us": 3_000.0, "loop_lag_p99_us": 40_000.0,
                  "loop_lag_late_share": 0.6, "loop_lag_wakes": 900}}  # fmt: skip
    row = {**hold_row([50_000] * 10), "users": 50}
    cols = fidelity.columns(row, None, False, late, {}, None)
    assert cols["generator_bound"] is True
    assert cols["generator_bound_reason"].startswith(
        "a Locust process's loop ran over 2 ms late 60% of the time"
    )
    assert cols["hold_inflation"] != cols["hold_inflation"] and cols["model_acq_s"] != cols["model_acq_s"]
    on_time = {"1": {**late["1"], "loop_lag_late_share": 0.0, "loop_lag_p99_us": 300.0}}
    assert fidelity.columns(row, None, False, on_time, {}, None)["generator_bound"] is False
    # a busy CPU without probe figures is no answer: not measured, never "no"
    busy = {"1": {"cpu_share": 0.95, "cpu_s": 7.6}}
    unknown = fidelity.columns(row, None, False, busy, {}, None)
    assert unknown["generator_bound"] is None
    assert unknown["generator_bound_reason"].startswith("not measured: no loop-lag figures")


def test_late_arrivals_of_an_open_model_are_generator_bound() -> None:
    row = {**hold_row([3_000] * 10), "arrival_schedule_lag_p99_us": 4_000.0}
    cols = fidelity.columns(row, SOLO, True, WORKERS, {}, None)
    assert cols["generator_bound"] is True and "schedule lag p99 4 ms" in cols["generator_bound_reason"]
    on_time = fidelity.columns({**row, "arrival_schedule_lag_p99_us": 300.0}, SOLO, True, WORKERS, {}, None)
    assert on_time["generator_bound"] is False


def _case(impl: str, workload: str, fencing: str = "off", trial: int = 0, duration: float = 8.0) -> Case:
    return Case(impl=impl, backend="redis", workload=WORKLOADS[workload], trial=trial, fencing=fencing,
                settings=RunSettings(users=50, processes=2, duration=duration))  # fmt: skip


def test_each_impl_is_calibrated_once_just_before_its_first_case() -> None:
    cases = [
        _case("redis.a", "flash-sale", "observe"), _case("redis.a", "flash-sale", "enforce"),
        _case("redis.b", "flash-sale", "observe", duration=2.0), _case("redis.a", "crash"),
        _case("redis.a", "flash-sale", "observe", trial=1),
    ]  # fmt: skip
    plan = with_calibration(cases)
    labels = [(c.impl, c.workload.name, c.fencing, c.solo) for c in plan]
    assert labels == [
        ("redis.a", "flash-sale", "observe", True), ("redis.a", "flash-sale", "observe", False),
        ("redis.a", "flash-sale", "enforce", True), ("redis.a", "flash-sale", "enforce", False),
        ("redis.b", "flash-sale", "observe", True), ("redis.b", "flash-sale", "observe", False),
        ("redis.a", "crash", "off", False),  # a fault workload has no calibration
        ("redis.a", "flash-sale", "observe", False),  # trial 2 reuses trial 1's calibration
    ]  # fmt: skip
    solo = plan[0]
    assert (solo.settings.users, solo.settings.processes, solo.settings.duration) == (1, 1, CALIBRATION_S)
    # it ends as soon as its hold p50 has enough samples, not after its whole duration
    assert StopRule.from_json(solo.settings.stop_rule) == StopRule("start", acquisitions=SOLO_ACQUISITIONS)
    assert not plan[1].settings.stop_rule  # the case itself runs its duration
    assert plan[4].settings.duration == 2.0  # never longer than the case
    assert solo.case_id.endswith("__solo") and solo.case_id != plan[1].case_id


def test_processes_auto_is_one_worker_per_core_when_there_is_more_than_one_client(monkeypatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert [resolve_processes("auto", u) for u in (1, 2, 50)] == [1, 2, 2]
    monkeypatch.setattr("os.cpu_count", lambda: 64)
    assert resolve_processes("auto", 50) == 8 and resolve_processes("auto", 3) == 3
    assert resolve_processes("1", 50) == 1 and resolve_processes(3, 50) == 3
    with pytest.raises(UserError, match="whole number or auto"):
        resolve_processes("many", 50)


def test_gate_says_not_enough_data_on_a_generator_bound_figure(tmp_path: Path) -> None:
    reason = "hold inflated 4.2x over solo 3.1 ms (threshold 2x): " + fidelity.BOUND_MEANING
    base = write_run(tmp_path, "a", {"redis.x": {"throughput_acq_s": noisy(1000, seed=1),
                                                 "generator_bound": [False] * 5}})  # fmt: skip
    # a clear slowdown that would be a regression, but the candidate measured the generator
    cand = write_run(tmp_path, "b", {"redis.x": {"throughput_acq_s": noisy(500, seed=2),
                                                 "generator_bound": [True] * 5,
                                                 "generator_bound_reason": [reason] * 5}})  # fmt: skip
    r = gate(base, cand, "--rule", "throughput:-10%", "--json")
    assert r.returncode == 2, r.stdout + r.stderr
    rows = {row["metric"]: row for row in json.loads(r.stdout)["rows"]}
    assert rows["throughput"]["verdict"] == "not enough data"
    assert "candidate is generator-bound in 5 of 5" in rows["throughput"]["note"]
    assert "4.2x" in rows["throughput"]["note"]
    assert rows["violations"]["verdict"] == "pass"
    # an improvement measured on a bound baseline is no pass either
    assert gate(cand, base, "--rule", "throughput:-10%").returncode == 2
    # safety is judged as before: a new violation in a bound run is still a regression
    unsafe = write_run(tmp_path, "c", {"redis.x": {"throughput_acq_s": noisy(500, seed=3),
                                                   "generator_bound": [True] * 5,
                                                   "overlapping_holds": [0, 0, 2, 0, 0],
                                                   # a violation beside "valid" is damage (resultsio)
                                                   "verdict": ["valid", "valid", "invalid", "valid", "valid"]}})  # fmt: skip
    assert gate(base, unsafe, "--rule", "throughput:-10%").returncode == 1


def _run(tmp_path: Path, *args: str) -> tuple[pd.Series, dict]:
    r = bench("run", "--impl", "redis.set-nx-px-lua", "--no-report", "--results-dir", str(tmp_path), *args)
    assert r.returncode == 0, r.stderr
    run = Path(r.stdout.strip())
    cases = pd.read_csv(run / "cases.csv")
    assert len(cases) == 1  # the solo calibration is not a case
    return cases.iloc[0], json.loads((run / "run.json").read_text())


@pytest.mark.server
@pytest.mark.slow
def test_an_overloaded_generator_is_flagged(tmp_path: Path) -> None:
    # 300 clients in one process polling every millisecond: 300 polls per millisecond are far
    # more than one gevent loop runs, so every client (the holder too) queues behind the others.
    # (40 clients no longer did that on a quiet machine: the hold stayed under 2x its solo.)
    row, meta = _run(tmp_path, "--users", "300", "--retry-interval", "0.001",
                     "--processes", "1", "--duration", "3")  # fmt: skip
    solo = meta["calibration"]["solo"]["redis.set-nx-px-lua"]
    assert solo["acquisitions"] > 0 and solo["hold_p50_us"] > 1000  # a 1 ms critical section inside
    assert row["generator_bound"] == True, row.to_dict()  # noqa: E712 - True, not just truthy
    assert "loop ran over 2 ms late" in row["generator_bound_reason"]  # the probe saw the queue
    assert row["loop_lag_processes"] == 1 and row["loop_lag_late_share"] > fidelity.LATE_SHARE_LIMIT
    assert row["polls_per_acq"] > 1 and row["client_cpu_ms_per_acq"] > 0
    assert row["server_cpu_us_per_acq"] > 0
    assert meta["calibration"]["server_cpu_sources"]["redis"].startswith("server: INFO cpu")
    floor = meta["calibration"]["floors"]["redis"]
    assert floor["op"] == "PING" and 0 < floor["p50_us"] < solo["hold_p50_us"]
    bound = meta["calibration"]["generator_bound"]
    assert [c["case"] for c in bound["cases"]] == [row["case"]] and "lower bound" in bound["meaning"]


@pytest.mark.server
@pytest.mark.slow
def test_a_single_client_is_not_flagged(tmp_path: Path) -> None:
    row, meta = _run(tmp_path, "--users", "1", "--duration", "3")
    assert row["processes"] == 1  # auto: no workers for one client
    assert row["generator_bound"] == False, row.to_dict()  # noqa: E712 - measured "no", not NaN
    assert row["loop_lag_processes"] == 1
    assert pd.isna(row["generator_bound_reason"]) or row["generator_bound_reason"] == ""
    assert row["hold_inflation"] <= fidelity.INFLATION_THRESHOLD
    assert row["model_acq_s"] > 0


@pytest.mark.slow
def test_calibrate_prints_floors_and_solo_holds(tmp_path: Path) -> None:
    # piped, bench calibrate follows COLUMNS (issue 33): wide enough for every column of the table
    r = bench(
        "calibrate", "--impl", "redis.set-nx-px-lua", "--duration", "2", cwd=None, env={"COLUMNS": "200"}
    )
    assert r.returncode == 0, r.stderr
    assert "PING" in r.stdout and "redis.set-nx-px-lua" in r.stdout and "solo hold p50 us" in r.stdout
    bad = bench("calibrate", "--impl", "redis.set-nx-px-lua", "--workload", "crash")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "no solo calibration" in bad.stderr


def test_an_impl_whose_calibration_failed_borrows_the_median_of_the_others() -> None:
    own = [fidelity.Solo(h, 100.0, 300) for h in (2800.0, 3000.0, 3800.0)]
    stand_in = fidelity.pooled([*own, fidelity.Solo(9999.0, 0.0, 0, borrowed_from="x")])
    assert stand_in is not None and stand_in.hold_p50_us == 3000.0
    assert fidelity.pooled([]) is None
    bound, reason = fidelity.judge_bound(12_000.0, stand_in, None, True)
    assert bound and "median of 3 other impls' solo holds" in reason
