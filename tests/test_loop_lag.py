"""The loop-lag probe and the one rule for generator-bound (issue 22).

The probe (workloads/harness/loop_lag.py) is checked on a gevent loop this test stalls on
purpose; the rule (bench/measure/fidelity.py) on synthetic lag and inflation; the three
states in the gate and the report on written results; the console's live rate on a
synthetic sequence; then two real runs: lock-pairs at 200 clients (bound, by the probe
in every Locust process) and one client (not bound).
"""

from __future__ import annotations

import io
import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from bench.measure import fidelity
from bench.run.progress import LiveProgress
from dashboards.compare import _bound_reason, _delta_cell
from dashboards.fidelity import bound_of
from tests.helpers import bench
from tests.test_gate import gate, noisy, write_run

SOLO = fidelity.Solo(hold_p50_us=3000.0, acquire_p50_us=200.0, acquisitions=500)


def _loop(late_share: float, p99_us: float = 2_000.0, processes: int = 2) -> fidelity.LoopLag:
    return fidelity.LoopLag(p50_us=100.0, p99_us=p99_us, late_share=late_share, processes=processes)


# --- the probe -----------------------------------------------------------------------------
def test_the_probe_counts_a_stalled_loop_as_late_for_as_long_as_it_stalled() -> None:
    import gevent
    from gevent import monkey

    from workloads.harness.loop_lag import LoopLagProbe

    probe = LoopLagProbe()
    assert probe.figures()["loop_lag_p99_us"] is None  # never started: no figures, not zeros
    probe.start()
    try:
        gevent.sleep(0.05)  # the probe wakes on time while the loop idles
        monkey.get_original("time", "sleep")(0.3)  # one greenlet holds the loop 300 ms
        gevent.sleep(0.02)
    finally:
        probe.stop()
    figures = probe.figures()
    assert figures["loop_lag_wakes"] >= 2
    # the first grid point inside the stall came at most one interval after it began, so its wake-up
    # was at least 300 ms - one interval - 10 ms late: a lower bound that a slow machine only raises
    least_us = 300_000 - probe.interval_s * 1e6 - 10_000
    assert figures["loop_lag_p99_us"] >= least_us or probe.hist.get_max_value() >= least_us
    assert probe.late_us >= least_us
    assert 0 < figures["loop_lag_late_share"] <= 1
    assert not probe.running


# --- the rule ------------------------------------------------------------------------------
def test_a_deliberate_stop_of_the_process_is_excused_and_an_unexcused_one_is_not() -> None:
    """lease-expiry's "world" pause stops the process on purpose: the experiment, not the generator.

    The same 300 ms stop is run twice on one probe's loop; told (``excuse``) it leaves no lag,
    no late time and no stall mark; untold it is 300 ms late and one stall.
    """
    import time

    import gevent
    from gevent import monkey

    from workloads.harness.loop_lag import LoopLagProbe

    blocking_sleep = monkey.get_original("time", "sleep")

    def stop_the_world(probe: LoopLagProbe, excuse: bool) -> tuple[dict, list[float]]:
        stalls: list[float] = []
        probe.on_stall = lambda _now, lag_us: stalls.append(lag_us)
        probe.start()
        try:
            gevent.sleep(0.02)
            began = time.monotonic_ns()
            blocking_sleep(0.3)
            if excuse:
                probe.excuse(time.monotonic_ns() - began)
            gevent.sleep(0.02)
        finally:
            probe.stop()
        return probe.figures(), stalls

    probe = LoopLagProbe()
    told, told_stalls = stop_the_world(probe, excuse=True)
    told_late = probe.late_us
    untold, untold_stalls = stop_the_world(probe, excuse=False)
    # told, none of the stop is late time; untold, it is at least what the last assert below asks.
    # Each late sample stands for a whole interval (50 ms), so a busy machine's one wake-up 2 ms
    # late around the stop reads as 50 000 us (a suite at load 4 did): the bound is the stop's
    stop_late_us = 300_000 - 2 * probe.interval_s * 1e6
    assert told_late < stop_late_us and told_stalls == [], told_late
    inside = round(0.3 / probe.interval_s)
    # told, the grid points inside the 300 ms stop (300 ms / the interval) are no samples at all; the
    # share over the 40 ms around it says nothing on a loaded machine (suites at load 5: 0.75 and 1.0)
    assert told["loop_lag_wakes"] + inside - 1 <= untold["loop_lag_wakes"], (told, untold)
    assert probe.late_us >= stop_late_us and len(untold_stalls) == 1
    assert untold["loop_lag_late_share"] > 0.5


def test_a_stall_after_the_load_window_closed_is_marked_but_not_counted() -> None:
    """The figures describe the load, not its teardown: a stop's stall after ``freeze`` leaves
    the late share as it was, and is still placed in time for the checkers (``on_stall``)."""
    import gevent
    from gevent import monkey

    from workloads.harness.loop_lag import LoopLagProbe

    blocking_sleep = monkey.get_original("time", "sleep")
    stalls: list[float] = []
    probe = LoopLagProbe()
    probe.on_stall = lambda _now, lag_us: stalls.append(lag_us)
    probe.start()
    try:
        gevent.sleep(0.1)
        probe.freeze()
        frozen = dict(probe.figures())
        blocking_sleep(0.2)  # the harness taking the case down
        gevent.sleep(0.03)
    finally:
        probe.stop()
    assert probe.figures() == frozen
    assert frozen["loop_lag_p99_us"] < 150_000  # the 200 ms stop is in neither figure
    least_us = 200_000 - probe.interval_s * 1e6 - 10_000  # the first grid point inside the stop, at worst
    assert len(stalls) == 1 and stalls[0] >= least_us
    # without the freeze the same stop is counted: the test can fail
    probe.start()
    try:
        gevent.sleep(0.1)
        blocking_sleep(0.2)
        gevent.sleep(0.03)
    finally:
        probe.stop()
    assert probe.figures()["loop_lag_p99_us"] >= least_us
    # counted in late samples, not the share: at 20 samples a second the 0.1 s before the freeze
    # holds two, and under a loaded suite both were late (share 1.0, which nothing can exceed)
    after = probe.figures()
    assert round(after["loop_lag_late_share"] * after["loop_lag_wakes"]) > round(
        frozen["loop_lag_late_share"] * frozen["loop_lag_wakes"]
    )


def test_the_rule_from_synthetic_lag_and_inflation() -> None:
    limit = fidelity.LATE_SHARE_LIMIT
    # a loop late beyond the limit binds a case, whatever the workload; the reason has the numbers
    bound, reason = fidelity.judge_bound(None, None, 0.4, False, loop=_loop(limit * 3, 150_000), users=200)
    assert bound is True
    assert f"{limit * 3:.0%} of the time" in reason and "lag p99 150 ms" in reason
    assert "0.40 of a core" in reason and reason.endswith(fidelity.BOUND_MEANING)
    # under the limit, measured: a "no", with no reason
    assert fidelity.judge_bound(None, None, 0.99, False, loop=_loop(limit / 2), users=200) == (False, "")
    # the CPU share alone decides nothing any more
    assert fidelity.judge_bound(None, None, 0.99, False, loop=_loop(0.0), users=200) == (False, "")
    # inflation binds on its own where a solo exists, even with an on-time loop
    bound, reason = fidelity.judge_bound(9_000.0, SOLO, None, True, loop=_loop(0.0), users=50)
    assert bound is True and "hold inflated 3.0x" in reason and "loop" not in reason
    # both signals: both said
    bound, reason = fidelity.judge_bound(9_000.0, SOLO, None, True, loop=_loop(0.5), users=50)
    assert "hold inflated" in reason and "50% of the time" in reason
    # a solo without inflation and no probe: measured, not bound
    assert fidelity.judge_bound(3_300.0, SOLO, None, True) == (False, "")


def test_a_lone_client_per_process_is_judged_by_its_solo_not_by_its_busy_loop() -> None:
    # one client running flat out keeps its own loop busy, which delays nobody else
    busy = _loop(0.4, 9_000, processes=1)
    assert fidelity.judge_bound(None, None, 0.7, False, loop=busy, users=1) == (False, "")
    assert fidelity.judge_bound(None, None, 0.7, False, loop=busy, users=2)[0] is True
    two = _loop(0.4, 9_000, processes=2)  # two processes of one client each
    assert fidelity.judge_bound(None, None, 0.7, False, loop=two, users=2) == (False, "")


def test_without_probe_figures_and_without_a_solo_the_case_is_not_measured() -> None:
    bound, reason = fidelity.judge_bound(50_000.0, None, 0.99, False)
    assert bound is None and reason.startswith(fidelity.NOT_MEASURED)
    assert "no solo calibration for this workload" in reason
    calibrated_but_failed = fidelity.judge_bound(50_000.0, None, None, True)
    assert calibrated_but_failed[0] is None and "no usable solo hold" in calibrated_but_failed[1]
    # what a row gets: None (NaN in cases.csv), never False
    cols = fidelity.columns(
        {"acquisitions": 100, "hold_p50_us": 500.0}, None, False, {"1": {"cpu_s": 1.0}}, {}, None
    )
    assert cols["generator_bound"] is None and cols["generator_bound_reason"].startswith("not measured: ")
    assert cols["loop_lag_processes"] == 0 and math.isnan(cols["loop_lag_p99_us"])


def test_the_columns_take_the_worst_process() -> None:
    workers = {
        "a": {"cpu_s": 1.0, "cpu_share": 0.3, "loop_lag_p50_us": 80.0, "loop_lag_p99_us": 900.0,
              "loop_lag_late_share": 0.01, "loop_lag_wakes": 3000},
        "b": {"cpu_s": 2.0, "cpu_share": 0.9, "loop_lag_p50_us": 5_000.0, "loop_lag_p99_us": 60_000.0,
              "loop_lag_late_share": 0.7, "loop_lag_wakes": 400},
        "c": {"cpu_s": 0.5, "loop_lag_p99_us": None, "loop_lag_wakes": 0},  # sent no probe figures
    }  # fmt: skip
    row = {"acquisitions": 1000, "hold_p50_us": 500.0, "users": 200}
    cols = fidelity.columns(row, None, False, workers, {}, None)
    assert (cols["loop_lag_p50_us"], cols["loop_lag_p99_us"]) == (5_000.0, 60_000.0)
    assert cols["loop_lag_late_share"] == 0.7 and cols["loop_lag_processes"] == 2
    assert cols["generator_bound"] is True and "70% of the time" in cols["generator_bound_reason"]


# --- what would fix it ----------------------------------------------------------------------
def test_the_last_line_sizes_the_processes_from_client_cpu_per_acquisition() -> None:
    rows = [
        {"case": "a", "generator_bound": True, "client_cpu_ms_per_acq": 0.25, "throughput_acq_s": 4000.0,
         "model_acq_s": float("nan"), "processes": 2},
        {"case": "b", "generator_bound": False, "client_cpu_ms_per_acq": 9.0, "throughput_acq_s": 9000.0},
        {"case": "c", "generator_bound": None},
    ]  # fmt: skip
    # 0.25 ms x 4000/s = one core; at half a core per process: 2, and it was bound with 2: 3
    here = fidelity.processes_needed(rows, cores_per_host=8)
    assert here is not None and (here.bound_cases, here.cases, here.processes, here.hosts) == (1, 3, 3, 1)
    assert fidelity.scale_out_line(here).endswith("rerun with --processes 3")
    small = fidelity.processes_needed(rows, cores_per_host=2)
    assert small is not None and (small.processes, small.hosts) == (3, 2)
    line = fidelity.scale_out_line(small)
    assert line.startswith("lockbench: 1 of 3 case(s) generator-bound")
    assert "`bench worker --master THIS_HOST:5557 --processes 2`" in line and "--expect-workers 4" in line
    assert fidelity.processes_needed([rows[1], rows[2]], 2) is None  # nothing bound: no line
    unsized = fidelity.processes_needed([{"case": "x", "generator_bound": True}], 2)
    assert unsized is not None and "no client CPU per acquisition" in fidelity.scale_out_line(unsized)


# --- three states downstream ----------------------------------------------------------------
def test_gate_says_not_enough_data_on_a_not_measured_figure(tmp_path: Path) -> None:
    why = "not measured: no loop-lag figures from the Locust processes and no solo calibration for this workload"
    base = write_run(tmp_path, "a", {"redis.x": {"throughput_acq_s": noisy(1000, seed=1),
                                                 "generator_bound": [False] * 5}})  # fmt: skip
    # a clear slowdown, measured without any fidelity figure: no verdict either way
    cand = write_run(tmp_path, "b", {"redis.x": {"throughput_acq_s": noisy(500, seed=2),
                                                 "generator_bound": [None] * 5,
                                                 "generator_bound_reason": [why] * 5}})  # fmt: skip
    r = gate(base, cand, "--rule", "throughput:-10%", "--json")
    assert r.returncode == 2, r.stdout + r.stderr
    rows = {row["metric"]: row for row in json.loads(r.stdout)["rows"]}
    assert rows["throughput"]["verdict"] == "not enough data"
    assert "fidelity was not measured in 5 of 5" in rows["throughput"]["note"]
    assert gate(cand, base, "--rule", "throughput:-10%").returncode == 2  # nor a pass the other way


def test_the_report_never_says_no_or_tints_for_a_not_measured_figure() -> None:
    why = "not measured: no loop-lag figures"
    mixed = pd.DataFrame({"generator_bound": [False, None], "generator_bound_reason": ["", why]})
    assert bound_of(mixed) == (None, why)  # one unmeasured trial: the group's answer is unknown
    assert bound_of(pd.DataFrame({"generator_bound": [False, True], "generator_bound_reason": ["", "x"]}))[0]
    assert bound_of(pd.DataFrame({"generator_bound": [False, False]}))[0] is False
    assert _bound_reason(mixed, "throughput_acq_s") == why
    assert _bound_reason(mixed, "server_cmds_per_acquire") == ""  # no client distorts it
    assert _bound_reason(pd.DataFrame({"x": [1]}), "throughput_acq_s") == ""  # a run from before the flag
    assert "worse" in _delta_cell([100.0], [50.0], -1) and "worse" not in _delta_cell([100.0], [50.0], 0)


# --- the console's live rate ----------------------------------------------------------------
def test_the_live_rate_is_smoothed_over_the_workers_report_rhythm() -> None:
    live = LiveProgress(Console(file=io.StringIO()), [])
    per_second = [0, 276, 0, 808, 0, 1014]  # what Locust's master counted each second
    total, shown = 0, []
    live.smoothed(0.0, 0)
    for t, n in enumerate(per_second, start=1):
        total += n
        shown.append(live.smoothed(float(t), total))
    assert all(rate > 0 for rate in shown[1:])  # never back to 0 between two reports
    settled = shown[3:]  # once the window spans a report or more
    assert max(settled) / min(settled) < 2.5  # the raw rate jumped between 0 and 1,014
    assert settled[-1] == pytest.approx(sum(per_second) / 5)  # the last 5 s: (276 + 808 + 1014) / 5
    assert live.smoothed(6.0, total) == settled[-1]  # a repeated sample changes nothing


# --- end to end ---------------------------------------------------------------------------------
def _lock_pairs(tmp_path: Path, users: int) -> tuple[pd.DataFrame, str]:
    r = bench(
        "run", "--impl", "redis.set-nx-px-lua", "--impl", "postgres.advisory", "--workload", "lock-pairs",
        "--users", str(users), "--duration", "3", "--no-report", "--results-dir", str(tmp_path),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    return pd.read_csv(Path(r.stdout.strip()) / "cases.csv"), r.stderr


@pytest.mark.server
@pytest.mark.slow
def test_lock_pairs_at_200_clients_is_bound_by_the_loop_lag_of_its_processes(tmp_path: Path) -> None:
    cases, console = _lock_pairs(tmp_path, 200)
    assert len(cases) == 2  # lock-pairs has no solo calibration: only the probe can tell
    for _, row in cases.iterrows():
        assert row["generator_bound"] == True, row.to_dict()  # noqa: E712 - True, not just truthy
        assert "loop ran over 2 ms late" in row["generator_bound_reason"]
        assert row["loop_lag_processes"] == row["processes"]  # every Locust process shipped its figures
        assert row["loop_lag_late_share"] > fidelity.LATE_SHARE_LIMIT
    last = console.strip().splitlines()
    line = next(x for x in last if "generator-bound" in x and x.startswith("lockbench: 2 of 2"))
    if "the machine was short of CPU" in line:  # a loaded machine: Locust's processes were not the limit
        assert re.search(r"load average up to [\d.]+ on \d+ cores", line) and "would not help" in line
    else:
        assert "--processes" in line or "bench worker" in line


@pytest.mark.server
@pytest.mark.slow
def test_one_client_is_not_bound(tmp_path: Path) -> None:
    cases, console = _lock_pairs(tmp_path, 1)
    for _, row in cases.iterrows():
        assert row["generator_bound"] == False, row.to_dict()  # noqa: E712 - measured: False, not NaN
        assert row["loop_lag_processes"] == 1 and row["loop_lag_p99_us"] > 0
    assert "generator-bound (" not in console


def test_the_last_line_names_the_real_bottleneck_and_quotes_the_measured_rate() -> None:
    """Issue 33 item 3: a loaded machine is not a generator that needs 14 processes and 7 hosts."""
    idle_locust = [
        {"case": f"c{i}", "generator_bound": True, "client_cpu_ms_per_acq": 9.0, "throughput_acq_s": 14.0,
         "model_acq_s": 122.0, "processes": 1}
        for i in range(9)
    ] + [{"case": "ok", "generator_bound": False}]  # fmt: skip
    busy = fidelity.MachineLoad(load_avg_max=9.0, cores=2, steal_share=0.0)
    line = fidelity.bottleneck_line(idle_locust, 2, busy)
    assert line is not None and line.startswith("lockbench: 9 of 10 case(s) generator-bound")
    assert "the machine was short of CPU, not Locust" in line and "load average up to 9.0 on 2 cores" in line
    assert "busiest process used 0.13 of a core" in line and "would not help" in line
    assert "--processes" not in line and "hosts of" not in line and "122" not in line
    stolen = fidelity.bottleneck_line(idle_locust, 2, fidelity.MachineLoad(1.0, 2, steal_share=0.3))
    assert stolen is not None and "30% of CPU stolen" in stolen
    quiet = fidelity.bottleneck_line(idle_locust, 2, fidelity.MachineLoad(0.6, 2))
    assert quiet is not None and "but not for CPU" in quiet and "--processes" not in quiet
    # Locust's own processes at their limit: processes are the fix, sized from the measured rate
    at_limit = [{"case": "a", "generator_bound": True, "client_cpu_ms_per_acq": 0.25, "throughput_acq_s": 4000.0,
                 "model_acq_s": 90_000.0, "processes": 2}]  # fmt: skip
    line = fidelity.bottleneck_line(at_limit, 8, busy)
    assert line is not None and "4,000 acq/s" in line and line.endswith("rerun with --processes 3")
    assert "90,000" not in line
    assert fidelity.bottleneck_line([{"case": "x", "generator_bound": False}], 2, busy) is None
