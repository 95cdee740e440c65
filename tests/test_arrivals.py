"""The open model: arrival schedules, latency from the intended arrival, buyers who give up."""

from __future__ import annotations

import json
import math
import random
import signal
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.errors import UserError
from bench.gate.rules import parse_rule
from bench.measure import fidelity
from bench.measure.arrival_metrics import arrival_summary, order_inversions, visits
from bench.run.command import plan_open_model
from tests.helpers import bench
from workloads.harness.arrivals import ArrivalSpec, parse_arrivals
from workloads.harness.distributions import SpecError
from workloads.harness.recording import UNFINISHED, decode_histogram, history_frame

MS = 1_000_000


# parsing -------------------------------------------------------------------------------------


def test_forms_parse() -> None:
    assert parse_arrivals("constant:200") == ArrivalSpec("constant", 200.0)
    assert parse_arrivals("poisson:500/s") == ArrivalSpec("poisson", 500.0)
    assert parse_arrivals("spike:5000@1s") == ArrivalSpec("spike", 5000.0, 1.0, 1.0)
    assert parse_arrivals("spike:100@500ms:2s") == ArrivalSpec("spike", 100.0, 0.5, 2.0)


@pytest.mark.parametrize(
    "bad", ["", "constant", "constant:0", "steady:5", "poisson:-1", "spike:5000", "spike:5000@1"]
)
def test_bad_forms_name_the_grammar(bad: str) -> None:
    with pytest.raises(SpecError, match="spike:5000@1s"):
        parse_arrivals(bad)


# the schedule keeps its rate -----------------------------------------------------------------


def _count_in_window(times: list[float], lo: float, hi: float) -> int:
    a = np.asarray(times)
    return int(((a >= lo) & (a < hi)).sum())


@pytest.mark.parametrize("shares", [1, 3])
def test_poisson_keeps_its_rate_across_shares(shares: int) -> None:
    spec = parse_arrivals("poisson:2000")
    times: list[float] = []
    for k in range(shares):
        times += _take_until(spec.schedule(k, shares, random.Random(k)), 10.0)
    times.sort()
    # expected count from the recorded span, not from a clock: rate x (last - first)
    span = times[-1] - times[0]
    expected = 2000 * span
    assert abs(len(times) - 1 - expected) < 4 * math.sqrt(expected)
    # and in any one-second window, within 5 sigma of the rate
    for lo in range(1, 9):
        n = _count_in_window(times, lo, lo + 1)
        assert abs(n - 2000) < 5 * math.sqrt(2000), (lo, n)


def _take_until(gen: Iterator[float], until: float) -> list[float]:
    out = []
    for t in gen:
        if t >= until:
            break
        out.append(t)
    return out


def test_constant_and_spike_shares_rebuild_the_exact_schedule() -> None:
    for text in ("constant:300", "spike:1000@1s"):
        spec = parse_arrivals(text)
        whole = _take_until(spec.schedule(), 4.0)
        dealt = sorted(t for k in range(4) for t in _take_until(spec.schedule(k, 4), 4.0))
        assert dealt == whole
        # every window holds what the cumulative rate says, within one arrival
        for lo, hi in ((0.0, 0.5), (0.5, 1.0), (1.0, 1.5), (2.0, 4.0)):
            expected = spec.expected(hi) - spec.expected(lo)
            assert abs(_count_in_window(whole, lo, hi) - expected) <= 1.0, (text, lo, hi)
    spike = parse_arrivals("spike:1000@1s")
    assert spike.rate_at(1.0) == 1000 and spike.rate_at(0.5) == 500
    assert len(list(spike.schedule())) == pytest.approx(spike.total, abs=1)  # a spike ends


# latency counts from arrival ------------------------------------------------------------------


def _visit(
    client: str, seq: int, lock: str, arrive: int, start: int, events: list, end: tuple
) -> list[tuple]:
    """A buyer's events: arrive invoke at the intended time (value = start lag), then ``events``."""
    rows = [(client, seq, "arrive", "invoke", lock, arrive, None, start - arrive, None)]
    rows += [
        (client, seq + i + 1, op, typ, lock, t, None, v, err) for i, (op, typ, t, v, err) in enumerate(events)
    ]
    rows.append((client, seq, "arrive", end[0], lock, end[1], None, None, end[2]))
    return rows


def _served(acq: int, bought_at: int, units: int = 1) -> list:
    return [
        ("acquire", "invoke", acq - 1, None, None),
        ("acquire", "ok", acq, None, None),
        ("purchase", "ok", bought_at, units, None),
        ("release", "invoke", bought_at + 1, None, None),
        ("release", "ok", bought_at + 2, 1, None),
    ]


def synthetic_history() -> pd.DataFrame:
    lock = "flash-sale:item-0"
    ev: list[tuple] = []
    # A arrives at 0 ms, starts 2 ms late, buys at 10 ms: 10 ms from arrival, 8 ms from start
    ev += _visit("1-u0", 0, lock, 0, 2 * MS, _served(4 * MS, 10 * MS), ("ok", 11 * MS, None))
    # B arrives at 5 ms, starts at 5 ms, waits, gives up at 45 ms (patience): acquire times out
    ev += _visit(
        "1-u1", 0, lock, 5 * MS, 5 * MS, [("acquire", "invoke", 5 * MS, None, None),
                                          ("acquire", "fail", 45 * MS, None, "timeout")],
        ("fail", 45 * MS, "gave-up"),
    )  # fmt: skip
    # C arrives at 6 ms, starts on time, is granted at 20 ms while B still waits: an inversion;
    # buys the last 2 units at 30 ms: 24 ms from arrival and from start
    ev += _visit("1-u2", 0, lock, 6 * MS, 6 * MS, _served(20 * MS, 30 * MS, 2), ("ok", 31 * MS, None))
    # D finds the in-flight cap full
    ev += _visit("1-u3", 0, lock, 7 * MS, 7 * MS, [], ("fail", 7 * MS, "rejected"))
    # A's slot serves E later (same client, later seqs): sold out
    ev += _visit("1-u0", 5, lock, 50 * MS, 50 * MS, _served(51 * MS, 52 * MS, 0), ("ok", 53 * MS, None))
    return history_frame(ev)


def test_latency_counts_from_the_intended_arrival() -> None:
    final_state = {"items": {"item-0": {"initial": 3, "stock": 0, "orders_units": 3}}}
    cols, hists = arrival_summary(synthetic_history(), final_state)
    arrival = decode_histogram(hists["arrival"])
    start = decode_histogram(hists["arrival_start"])
    assert arrival.get_total_count() == start.get_total_count() == 2  # served buyers only
    assert arrival.get_min_value() == pytest.approx(10_000, rel=1e-3)  # A: 10 ms from arrival
    assert start.get_min_value() == pytest.approx(8_000, rel=1e-3)  # A: 8 ms from its start
    assert arrival.get_max_value() == pytest.approx(24_000, rel=1e-3)  # C
    assert cols["arrival_p99_us"] == pytest.approx(24_000, rel=1e-3)
    assert cols["arrival_start_p50_us"] == pytest.approx(8_000, rel=1e-3)
    assert cols["arrival_schedule_lag_p99_us"] == pytest.approx(2_000, rel=1e-3)
    assert (cols["arrival_count"], cols["arrival_served"], cols["arrival_sold_out"]) == (5, 2, 1)
    assert (cols["arrival_gave_up"], cols["arrival_failed"], cols["arrival_rejected_in_flight"]) == (1, 0, 1)
    assert cols["arrival_order_inversions"] == 1  # C overtook B
    assert cols["arrival_order_inversion_frac"] == pytest.approx(1 / 3)
    assert cols["arrival_sellout_s"] == pytest.approx(0.030)  # C took the last unit at 30 ms


def test_a_closed_loop_history_has_no_arrival_columns() -> None:
    h = synthetic_history()
    assert visits(h[h["op"] != "arrive"]).empty
    assert arrival_summary(h[h["op"] != "arrive"], None) == ({}, {})


def test_schedule_lag_over_1ms_is_generator_bound() -> None:
    """The rule that runs (bench/measure/fidelity.py ``judge_bound``), fed by the lag this module measures."""
    cols, _ = arrival_summary(synthetic_history(), None)
    assert cols["arrival_schedule_lag_p99_us"] == pytest.approx(2_000, rel=1e-3)  # A started 2 ms late
    bound, reason = fidelity.judge_bound(None, None, None, True, cols["arrival_schedule_lag_p99_us"])
    assert bound is True and reason.startswith("arrivals ran late: schedule lag p99 2 ms > 1 ms")
    on_time = fidelity.judge_bound(None, None, None, True, 900.0)
    assert on_time == (False, "")
    # it never clears another reason: a bound hold and late arrivals are both said
    solo = fidelity.Solo(hold_p50_us=1_000.0, acquire_p50_us=100.0, acquisitions=100)
    bound, reason = fidelity.judge_bound(3_000.0, solo, None, True, 1_500.0)
    assert bound and "schedule lag p99 1.5 ms" in reason and "hold inflated 3.0x" in reason


def test_every_arrival_counts_those_who_gave_up_at_their_patience() -> None:
    """Served-only p99 hides the buyers a lock lost; the every-arrival p99 counts them, censored."""
    cols, hists = arrival_summary(synthetic_history(), None, patience_s=0.040)
    every = decode_histogram(hists["arrival_all"])
    assert every.get_total_count() == 5  # served, sold out, gave up, rejected: every arrival
    # B gave up and D was turned away: both at the 40 ms patience, "at least"
    assert cols["arrival_censored"] == 2
    assert cols["arrival_all_p99_us"] == pytest.approx(40_000, rel=1e-3)
    assert cols["arrival_all_p99_censored"] is True
    assert cols["arrival_p99_us"] == pytest.approx(24_000, rel=1e-3)  # served only, beside it
    assert cols["arrival_all_p50_us"] < 40_000 and cols["arrival_all_p50_censored"] is False


def test_a_lock_that_loses_buyers_does_not_look_faster() -> None:
    """Two runs of one schedule: the second lock serves only the quick buyer and loses the rest."""
    lock = "flash-sale:item-0"
    fast_but_lossy = history_frame(
        _visit("1-u0", 0, lock, 0, 0, _served(1 * MS, 2 * MS), ("ok", 3 * MS, None))
        + _visit("1-u1", 0, lock, 1 * MS, 1 * MS, [("acquire", "invoke", MS, None, None),
                 ("acquire", "fail", 41 * MS, None, "timeout")], ("fail", 41 * MS, "gave-up"))
    )  # fmt: skip
    slow_but_serving = history_frame(
        _visit("1-u0", 0, lock, 0, 0, _served(1 * MS, 2 * MS), ("ok", 3 * MS, None))
        + _visit("1-u1", 0, lock, 1 * MS, 1 * MS, _served(20 * MS, 31 * MS), ("ok", 32 * MS, None))
    )
    lossy, _ = arrival_summary(fast_but_lossy, None, patience_s=0.040)
    serving, _ = arrival_summary(slow_but_serving, None, patience_s=0.040)
    assert lossy["arrival_p99_us"] < serving["arrival_p99_us"]  # served-only: the lossy lock "wins"
    assert lossy["arrival_all_p99_us"] > serving["arrival_all_p99_us"]  # every arrival: it does not
    assert parse_rule("arrival.p99:+10%").info.column == "arrival_all_p99_us"


def test_a_visit_the_harness_closed_is_unfinished() -> None:
    lock = "flash-sale:item-0"
    h = history_frame(
        _visit("1-u0", 0, lock, 0, 0, [("acquire", "invoke", MS, None, None)],
               ("info", 9 * MS, UNFINISHED + "no completion arrived before the case ended"))
    )  # fmt: skip
    cols, _ = arrival_summary(h, None, patience_s=2.0)
    assert cols["arrival_unfinished"] == 1 and cols["arrival_failed"] == 0 and cols["arrival_censored"] == 1


def test_inversions_across_hosts_within_the_clock_bound_are_uncertain() -> None:
    lock = "flash-sale:item-0"
    # h1's buyer arrives 1 us before h2's and still waits when h2's is granted
    h = history_frame(
        _visit("h1/1-u0", 0, lock, 0, 0, [("acquire", "invoke", 0, None, None),
               ("acquire", "fail", 50 * MS, None, "timeout")], ("fail", 50 * MS, "gave-up"))
        + _visit("h2/2-u0", 0, lock, 1_000, 1_000, _served(10 * MS, 11 * MS), ("ok", 12 * MS, None))
    )  # fmt: skip
    v = visits(h)
    assert order_inversions(v) == (1, 0)
    assert order_inversions(v, {"h1": 100, "h2": 100}) == (1, 0)  # 1 us apart, bounds of 0.1 us: certain
    assert order_inversions(v, {"h1": 5_000, "h2": 5_000}) == (0, 1)  # either may have come first
    assert order_inversions(v, {"h1": 100, "h2": None}) == (0, 1)  # no offset estimate for h2


# planning and gate -----------------------------------------------------------------------------


def test_planning_validates_the_open_model() -> None:
    infos = plan_open_model(["flash-sale"], "spike:5000@1s", 2.0, 50, set())
    assert infos["flash-sale"].name == "flash-sale-open"
    assert infos["flash-sale"].options["arrivals"] == "--arrivals"
    with pytest.raises(UserError, match="does not apply to workload lock-pairs"):
        plan_open_model(["lock-pairs"], "constant:5", 2.0, 50, set())
    with pytest.raises(UserError, match="--patience only apply with --arrivals"):
        plan_open_model(["flash-sale"], None, 1.0, 50, {"patience"})
    with pytest.raises(UserError, match="--users does not apply with --arrivals"):
        plan_open_model(["flash-sale"], "constant:5", 1.0, 50, {"users"})
    with pytest.raises(UserError, match="--max-in-flight must be a whole number from 1"):
        plan_open_model(["flash-sale"], "constant:5", 1.0, 0, set())


def test_a_bad_spec_is_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from bench.cli.app import main

    argv = [
        "run",
        "--impl",
        "redis.set-nx-px-lua",
        "--arrivals",
        "spike:5000",
        "--results-dir",
        str(tmp_path),
    ]
    previous = signal.getsignal(signal.SIGTERM)  # main() installs its own handler
    try:
        with pytest.raises(SystemExit) as exit_:
            main(argv)
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1
    assert err.startswith("bench: error: bad --arrivals 'spike:5000'") and "spike:5000@1s" in err
    assert not any(tmp_path.iterdir())


def test_gate_knows_the_arrival_metrics() -> None:
    assert parse_rule("arrival.p99:+10%").info.column == "arrival_all_p99_us"  # every arrival
    assert parse_rule("arrival-served.p99:+10%").info.column == "arrival_p99_us"
    assert parse_rule("arrival-start.p50:+200us").info.column == "arrival_start_p50_us"
    assert parse_rule("arrival.gave-up:+5").info.optional
    with pytest.raises(UserError, match="gets worse upwards"):
        parse_rule("arrival.p99:-10%")


# against a real Redis ------------------------------------------------------------------------


@pytest.mark.slow
def test_open_run_keeps_its_rate_and_impatient_buyers_give_up(tmp_path: Path) -> None:
    """Two processes, 100 arrivals/s, 20 ms critical sections and 5 ms of patience."""
    r = bench(
        "run", "--impl", "redis.set-nx-px-lua", "--arrivals", "constant:100", "--processes", "2",
        "--duration", "3", "--cs", "20ms", "--patience", "0.005", "--max-in-flight", "20",
        "--results-dir", str(tmp_path / "results"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    (run,) = [p for p in (tmp_path / "results").iterdir() if p.is_dir()]
    row = pd.read_csv(run / "cases.csv").iloc[0]
    history = pd.read_parquet(run / "history" / f"{row['case']}.parquet")
    arrive = history[(history["op"] == "arrive") & (history["type"] == "invoke")]
    hist = json.loads((run / "hist" / f"{row['case']}.json").read_text())
    assert len(hist["workers"]) == 2 and hist["recording_complete"] and len(arrive) > 10
    # the rate: each process schedules 50/s from its own start; its arrivals, counted over its
    # recorded schedule span (intended times), match that rate: none was lost or added
    for _, mine in arrive.groupby(arrive["client"].str.split("-u").str[0]):
        span_s = (mine["t_ns"].max() - mine["t_ns"].min()) / 1e9
        assert span_s > 0.3  # a worker that joined late (a busy machine) has a shorter schedule
        assert abs(len(mine) - 1 - 50 * span_s) <= 2, (len(mine), span_s)
        gaps = np.diff(np.sort(mine["t_ns"].to_numpy()))
        assert np.allclose(gaps, 20 * MS, atol=1000)  # evenly spaced: constant:100 over 2 processes
    # impatient buyers gave up: recorded as such, their acquire a timeout, the lock judged valid
    assert row["arrival_gave_up"] > 0 and row["arrival_served"] > 0
    assert row["arrival_failed"] == 0 and row["verdict"] == "valid" and row["overlapping_holds"] == 0
    v = visits(history)
    gave_up = v[v["outcome"] == "gave_up"]
    assert (gave_up["acquire_type"] == "fail").all()
    assert not (history["type"] == "info").any()
    assert decode_histogram(hist["histograms"]["arrival"]).get_total_count() == row["arrival_served"]
    served = v[v["outcome"] == "served"]
    assert (
        (served["purchase_ns"] - served["intended_ns"]) >= (served["purchase_ns"] - served["start_ns"])
    ).all()
    assert 'id="arrivals"' in (run / "report.html").read_text()
