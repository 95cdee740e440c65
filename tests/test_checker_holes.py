"""The checkers' holes of issue 32, each on a synthetic history that today's checker judged wrong.

Every test here failed on main 687c1c0 and names the hole it closes: fencing-token order with
fencing off, equal tokens, same-worker clock tolerance, clock uncertainty read as "fencing
worked", failed buyers counted as fast, arrivals never launched, recovery timed before the
holder died, server-fault recovery timed from the wrong moment, and the model from medians.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from bench.measure import fidelity
from bench.measure.arrival_metrics import arrival_summary
from tests.test_arrivals import MS, _served, _visit
from tests.test_checkers import history, hold, holds_history
from tests.test_fencing_order import _enforced, grants
from workloads.checks.core import check_crashes, check_fencing, check_fencing_order, check_flash_sale, holds
from workloads.harness.recording import history_frame

S = 1_000_000_000


def _off(items: int = 1) -> dict:
    return {
        "items": {f"item-{i}": {"initial": 10, "stock": 10, "orders_units": 0} for i in range(items)},
        "fencing": {"mode": "off", "stale_writes": 0, "stale_reads": 0},
    }


# fencing order ---------------------------------------------------------------------------------


def test_fencing_off_still_checks_the_tokens_the_lock_handed_out() -> None:
    """A finding about the lock's token promise: counted and said, the exclusion verdict untouched."""
    ev = grants(("1-u0", 100, 200, 9), ("1-u1", 300, 400, 5), lock="flash-sale:item-0")
    v = check_flash_sale(ev, _off())
    assert v.counters["fencing_order_violations"] == 1
    assert v.status == "valid"  # nobody held twice: mutual exclusion held
    order = next(r for r in v.results if r.name == "fencing-order")
    assert "tokens unused" in order.detail and "out of grant order" in order.detail
    # the same history with the tokens in use is invalid, as before
    assert check_flash_sale(ev, _enforced([])).status == "invalid"


def test_fencing_off_without_tokens_says_nothing_about_them() -> None:
    ev = holds_history(
        hold("1-u0", 100, 200, lock="flash-sale:item-0"), hold("1-u1", 300, 400, lock="flash-sale:item-0")
    )
    v = check_flash_sale(ev, _off())
    assert v.status == "valid" and "fencing_order_violations" not in v.counters


def test_equal_tokens_of_two_grants_are_a_violation_whatever_the_clocks() -> None:
    # within the 10 + 10 ns bound either grant may have come first; with equal tokens both orders are wrong
    ev = grants(("h1/1-u0", 100, 200, 5), ("h2/2-u0", 205, 300, 5))
    r = check_fencing_order(ev, uncertainty_ns={"h1": 10, "h2": 10})
    assert r.status == "invalid" and r.counters["fencing_order_violations"] == 1
    # even overlapping grants: the resource cannot tell their holders apart
    both = grants(("1-u0", 100, 400, 7), ("1-u1", 300, 500, 7))
    assert check_fencing_order(both).counters["fencing_order_violations"] == 1


def test_grants_on_one_worker_share_one_clock() -> None:
    # two clients of one worker: no clock tolerance between them, so the order is certain
    ev = grants(("h1/1-u0", 100, 200, 9), ("h1/1-u1", 205, 300, 3))
    r = check_fencing_order(ev, uncertainty_ns={"h1": 10, "h2": 10})
    assert r.status == "invalid" and r.counters["fencing_order_violations"] == 1
    assert "uncertain_fencing_order" not in r.counters


def test_clock_uncertainty_is_unknown_never_fencing_worked() -> None:
    """A refusal whose holder may or may not have overlapped another is not evidence of anything."""
    ev = grants(("h1/1-u0", 100, 200, 9), ("h2/2-u0", 205, 300, 5), lock="flash-sale:item-0")
    state = _enforced([["item-0", 5, "h2/2-u0", "w"]])
    bounded = check_fencing(state, ev, holds(ev), {"h1": 10, "h2": 10})
    assert bounded.status == "unknown"
    assert bounded.counters["legit_writes_refused"] == 0 and bounded.counters["uncertain_writes_refused"] == 1
    one_clock = check_fencing(state, ev, holds(ev))
    assert one_clock.status == "invalid" and one_clock.counters["legit_writes_refused"] == 1
    # one worker: one clock, no tolerance: the holder was certainly alone
    same = grants(("h1/1-u0", 100, 200, 9), ("h1/1-u1", 205, 300, 5), lock="flash-sale:item-0")
    r = check_fencing(_enforced([["item-0", 5, "h1/1-u1", "w"]]), same, holds(same), {"h1": 10})
    assert r.status == "invalid" and r.counters["legit_writes_refused"] == 1


# open model ------------------------------------------------------------------------------------


def _failing_buyers(n: int) -> pd.DataFrame:
    lock = "flash-sale:item-0"
    ev: list[tuple] = []
    for i in range(n):
        steps = [
            ("acquire", "invoke", i * MS, None, None),
            ("acquire", "fail", i * MS + MS, None, "lock down"),
        ]
        ev += _visit(f"1-u{i}", 0, lock, i * MS, i * MS, steps, ("fail", i * MS + MS, "lock down"))
    return history_frame(ev)


def test_failed_buyers_are_censored_at_their_patience_not_counted_fast() -> None:
    cols, _ = arrival_summary(_failing_buyers(100), None, patience_s=0.4)
    assert cols["arrival_failed"] == 100 and cols["arrival_censored"] == 100
    assert cols["arrival_all_p99_us"] == pytest.approx(400_000, rel=1e-3)
    assert cols["arrival_all_p99_censored"] is True


def test_arrivals_never_launched_are_dropped_and_the_rate_was_not_held() -> None:
    lock = "flash-sale:item-0"
    ev = _visit("1-u0", 0, lock, 0, 0, _served(1 * MS, 2 * MS), ("ok", 3 * MS, None))
    for i in range(3):
        ev += _visit("1-s0", i, lock, (10 + i) * MS, (10 + i) * MS, [], ("fail", 20 * MS, "dropped"))
    cols, _ = arrival_summary(history_frame(ev), None, patience_s=0.4)
    assert cols["arrival_dropped"] == 3 and cols["arrival_failed"] == 0
    assert cols["arrival_all_p99_us"] == pytest.approx(400_000, rel=1e-3)  # censored at patience
    bound, reason = fidelity.judge_bound(None, None, None, True, 100.0, dropped=cols["arrival_dropped"])
    assert bound is True and "3 arrivals were never launched" in reason


# recovery --------------------------------------------------------------------------------------


def test_crash_recovery_counts_from_the_holders_death_not_its_last_words() -> None:
    # the crash is marked at 2 s; the process dies at 2.5 s (after sending its recording); the
    # lock is granted again at 2.6 s: it recovered in 100 ms, not 600 ms
    death = ("1-u0", 99, "crash", "ok", "L", 2 * S + S // 2)
    h = holds_history(
        hold("1-u0", 1 * S, None), hold("2-u0", 2 * S + 6 * S // 10, 3 * S),
        extra=(("1-u0", 99, "crash", "info", "L", 2 * S), death),
    )  # fmt: skip
    r = check_crashes(h, {"stuck_bound_s": 5})
    assert r.counters["recovery_ms_p50"] == pytest.approx(100.0)
    # and until its death it held: a grant between its last words and its death is an overlap
    early = holds_history(
        hold("1-u0", 1 * S, None), hold("2-u0", 2 * S + S // 10, 3 * S),
        extra=(("1-u0", 99, "crash", "info", "L", 2 * S), death),
    )  # fmt: skip
    h2 = holds(early)
    assert h2.loc[h2["client"] == "1-u0", "end_ns"].item() == 2 * S + S // 2
    from workloads.checks.core import check_overlaps

    assert check_overlaps(early).counters["overlapping_holds"] == 1


def _strike(n: int, start: int, end: int) -> list[tuple]:
    return [("bench", n, "fault", "invoke", "restart", start), ("bench", n, "fault", "ok", "restart", end)]


def test_server_fault_recovery_counts_from_the_service_back() -> None:
    from workloads.checks.recovery import server_recovery_columns

    ev = [
        *_strike(1, 1 * S, 2 * S),
        ("bench", 1, "service", "ok", "restart", 2 * S + 300 * MS),  # it answered 300 ms after the heal
        ("fh", 0, "fault-hold", "ok", "L", 1 * S + 100 * MS),  # the old measure's start
        ("2-u0", 0, "acquire", "ok", "L", 2 * S + 500 * MS, None),
    ]
    cols = server_recovery_columns(history(*ev))
    assert cols["service_back_ms_p50"] == pytest.approx(300.0)
    assert cols["recovery_ms_p50"] == pytest.approx(200.0)  # the next grant 200 ms after it answered
    assert cols["recovery_from"] == "service" and cols["unrecovered_strikes"] == 0
    # without the service row: from the heal's end
    no_row = history(*[e for e in ev if e[2] != "service"])
    cols = server_recovery_columns(no_row)
    assert cols["recovery_ms_p50"] == pytest.approx(500.0) and cols["recovery_from"] == "heal"
    assert math.isnan(cols["service_back_ms_p50"])


def test_a_strike_never_recovered_from_is_a_liveness_failure() -> None:
    from workloads.checks.recovery import check_server_recovery, server_recovery_columns

    ev = history(*_strike(1, 1 * S, 2 * S), ("2-u0", 0, "acquire", "invoke", "L", 3 * S))
    cols = server_recovery_columns(ev)
    assert cols["unrecovered_strikes"] == 1 and math.isnan(cols["recovery_ms_p50"])
    r = check_server_recovery(ev)
    assert r.counters["unrecovered_strikes"] == 1 and "never" in r.detail and "liveness" in r.detail


# the model -------------------------------------------------------------------------------------


def test_the_model_uses_means_or_is_not_stated() -> None:
    solo = fidelity.Solo(hold_p50_us=1_000.0, acquire_p50_us=100.0, acquisitions=500, hold_mean_us=1_200.0)
    row = {"acquisitions": 1000, "hold_p50_us": 1_100.0, "handoff_p50_us": 100.0, "handoff_mean_us": 800.0}
    cols = fidelity.columns(row, solo, True, {}, {}, None)
    assert cols["model_acq_s"] == pytest.approx(1e6 / (1_200.0 + 800.0))
    # without means (an old calibration): no model, rather than one from medians
    old = fidelity.Solo(hold_p50_us=1_000.0, acquire_p50_us=100.0, acquisitions=500)
    assert math.isnan(fidelity.columns(row, old, True, {}, {}, None)["model_acq_s"])
