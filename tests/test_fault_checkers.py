"""Checkers of the fault workloads, each with a known-bad and a known-good history."""

from __future__ import annotations

from tests.test_checkers import history, hold, holds_history
from workloads.checks.core import check_crashes, check_fencing, check_overlaps, check_pauses, holds

S = 1_000_000_000  # one second in ns


def test_fencing_observe_counts_accepted_stale_writes_as_invalid() -> None:
    bad = check_fencing({"fencing": {"mode": "observe", "stale_writes": 3, "stale_reads": 1}})
    assert bad.status == "invalid" and bad.counters["stale_writes_accepted"] == 3
    good = check_fencing({"fencing": {"mode": "observe", "stale_writes": 0, "stale_reads": 0}})
    assert good.status == "valid" and good.counters["stale_writes_accepted"] == 0


def test_fencing_enforce_refusals_are_fencing_working() -> None:
    r = check_fencing({"fencing": {"mode": "enforce", "stale_writes": 4, "stale_reads": 2}})
    assert r.status == "valid"
    assert r.counters == {
        "stale_writes_accepted": 0,
        "stale_writes_refused": 4,
        "stale_reads": 2,
        "legit_writes_refused": 0,
    }


def test_fencing_off_has_no_counters() -> None:
    r = check_fencing({"fencing": {"mode": "off"}})
    assert r.status == "valid" and r.counters == {}
    assert check_fencing(None).counters == {}


def _crash(client: str, t: int, lock: str = "L") -> tuple:
    return (client, 99, "crash", "info", lock, t)


def test_crash_never_recovered_is_stuck() -> None:
    h = holds_history(hold("1-u0", 1 * S, None), hold("2-u0", 0, S // 2), extra=(_crash("1-u0", 2 * S),))
    end = history(("2-u0", 50, "acquire", "invoke", "L", 10 * S))  # the run went on for 10 s
    import pandas as pd

    r = check_crashes(pd.concat([h, end], ignore_index=True), {"stuck_bound_s": 5})
    # stuck is liveness, not safety: the verdict stays valid, the counter says stuck
    assert r.status == "valid" and r.counters["stuck_locks"] == 1 and r.counters["crashes"] == 1
    assert "stuck" in r.detail and "liveness" in r.detail


def test_crash_recovered_within_bound_is_fine_and_timed() -> None:
    h = holds_history(hold("1-u0", 1 * S, None), hold("2-u0", 3 * S, 4 * S), extra=(_crash("1-u0", 2 * S),))
    r = check_crashes(h, {"stuck_bound_s": 5})
    assert r.status == "valid" and r.counters["stuck_locks"] == 0
    assert r.counters["recovery_ms_p50"] == 1000.0


def test_crash_recovered_after_the_bound_is_stuck() -> None:
    h = holds_history(hold("1-u0", 1 * S, None), hold("2-u0", 9 * S, 10 * S), extra=(_crash("1-u0", 2 * S),))
    r = check_crashes(h, {"stuck_bound_s": 5})
    assert r.status == "valid" and r.counters["stuck_locks"] == 1 and r.counters["recovery_ms_p50"] == 7000.0


def test_a_crashed_process_holds_nothing_after_its_death() -> None:
    """The dead holder's open hold ends at the crash: a later holder does not overlap it."""
    h = holds_history(hold("1-u0", 1 * S, None), hold("2-u0", 3 * S, 4 * S), extra=(_crash("1-u3", 2 * S),))
    assert holds(h).set_index("client").loc["1-u0", "end_ns"] == 2 * S
    assert check_overlaps(h).counters["overlapping_holds"] == 0
    # without the crash event (a lost worker) the open hold is open-ended: unknown, not an overlap
    h2 = holds_history(hold("1-u0", 1 * S, None), hold("2-u0", 3 * S, 4 * S))
    r = check_overlaps(h2)
    assert (
        r.status == "unknown"
        and r.counters["overlapping_holds"] == 0
        and r.counters["open_ended_overlaps"] == 1
    )


def test_pauses_are_counted() -> None:
    h = history(("a", 1, "pause", "invoke", "L", 10), ("a", 1, "pause", "ok", "L", 20, None, 1500))
    r = check_pauses(h)
    assert r.counters == {"pauses": 1, "pause_ms_total": 1500}


def test_crash_too_close_to_the_end_is_unknown() -> None:
    """Not re-acquired, but the history ends before the stuck bound: neither stuck nor fine."""
    h = holds_history(hold("1-u0", 1 * S, None), hold("2-u0", 0, S // 2), extra=(_crash("1-u0", 2 * S),))
    r = check_crashes(h, {"stuck_bound_s": 5})
    assert r.status == "unknown" and r.counters["stuck_locks"] == 0


def test_crash_recovery_across_hosts_near_the_bound_is_undecided() -> None:
    """The kill on one worker's clock, the next grant on another's: within their bounds of the stuck bound."""
    h = holds_history(
        hold("h1/1-u0", 1 * S, None), hold("h2/2-u0", 6 * S + 1_000, 7 * S), extra=(_crash("h1/1-u0", 1 * S),)
    )
    exact = {"stuck_bound_s": 5, "clock_uncertainty_ns": {"h1": 100, "h2": 100}}
    sure = check_crashes(h, exact)  # 5 s + 1 us > 5 s + 200 ns: stuck for sure
    assert sure.status == "valid" and sure.counters["stuck_locks"] == 1
    loose = {"stuck_bound_s": 5, "clock_uncertainty_ns": {"h1": 5_000, "h2": 5_000}}
    assert check_crashes(h, loose).status == "unknown"
    unmeasured = {"stuck_bound_s": 5, "clock_uncertainty_ns": {"h1": 100, "h2": None}}
    r = check_crashes(h, unmeasured)
    assert r.status == "unknown" and r.counters["stuck_locks"] == 0


def test_reentrant_and_read_mostly_checkers_apply_clock_bounds() -> None:
    from workloads.checks.read_write import check_rw_overlaps
    from workloads.checks.reentrant import check_reentrant

    # two hosts, an apparent overlap of 50 ns: real with no bounds, uncertain with 100 ns bounds
    ev = holds_history(hold("h1/1-u0", 100, 1_000), hold("h2/2-u0", 950, 2_000))
    bounds = {"h1": 100, "h2": 100}
    assert check_rw_overlaps(ev).status == "invalid"
    rw = check_rw_overlaps(ev, bounds)
    assert (
        rw.status == "unknown"
        and rw.counters["uncertain_overlaps"] == 1
        and rw.counters["overlapping_holds"] == 0
    )
    assert check_rw_overlaps(ev, {"h1": 100, "h2": None}).status == "unknown"
    state = {"clock_uncertainty_ns": bounds}
    overlaps = next(r for r in check_reentrant(ev, state).results if r.name == "overlaps")
    assert overlaps.status == "unknown" and overlaps.counters["uncertain_overlaps"] == 1
    far = holds_history(hold("h1/1-u0", 100, 1_000), hold("h2/2-u0", 500, 2_000))
    assert check_rw_overlaps(far, bounds).status == "invalid"  # 500 ns of overlap > 200 ns
