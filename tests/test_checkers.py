"""Checkers against hand-built histories whose verdict is known in advance."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from workloads.checks.core import (
    UNFINISHED,
    CheckResult,
    Verdict,
    check_flash_sale,
    check_overlaps,
    check_stock,
    check_unknown,
    check_witness,
    holds,
)
from workloads.harness.recording import HISTORY_COLUMNS, history_frame


def history(*events: tuple) -> pd.DataFrame:
    """Events as (client, seq, op, type, lock, t_ns[, token[, value[, error[, sent_ns]]]]) -> a history frame."""
    return history_frame(tuple(e) + (None,) * (len(HISTORY_COLUMNS) - len(e)) for e in events)


_seqs: dict[str, itertools.count] = {}


def hold(client: str, start: int, end: int | None, lock: str = "L", released: bool = True) -> list[tuple]:
    """The events of one hold: acquire invoke/ok at ``start``, release invoke at ``end`` (+ ok)."""
    seq = _seqs.setdefault(client, itertools.count())
    a = next(seq)
    ev = [(client, a, "acquire", "invoke", lock, start - 5), (client, a, "acquire", "ok", lock, start)]
    if end is not None:
        r = next(seq)
        ev.append((client, r, "release", "invoke", lock, end))
        if released:
            ev.append((client, r, "release", "ok", lock, end + 3, None, 1))
    return ev


def holds_history(*parts: list[tuple], extra: tuple = ()) -> pd.DataFrame:
    return history(*itertools.chain(*parts), *extra)


# holds -------------------------------------------------------------------------------------


def test_holds_pairs_acquire_ok_with_next_release_invoke() -> None:
    h = holds(holds_history(hold("a", 100, 200), hold("b", 210, 300), hold("a", 400, 500)))
    assert list(h["client"]) == ["a", "b", "a"]
    assert list(h["start_ns"]) == [100, 210, 400]
    assert list(h["end_ns"]) == [200, 300, 500]
    assert not h["open"].any()


def test_holds_open_until_end_of_history_when_never_released() -> None:
    h = holds(holds_history(hold("a", 100, None), hold("b", 150, 300)))
    a = h[h["client"] == "a"].iloc[0]
    assert bool(a["open"]) is True
    assert a["end_ns"] == 303  # the last event: b's release ok


def test_holds_nest_for_a_reentrant_client() -> None:
    ev = history(
        ("a", 0, "acquire", "ok", "L", 100),
        ("a", 1, "acquire", "ok", "L", 110),
        ("a", 2, "release", "invoke", "L", 120),
        ("a", 3, "release", "invoke", "L", 200),
    )
    h = holds(ev).sort_values("start_ns")
    assert list(h["end_ns"]) == [200, 120]
    assert list(h["depth"]) == [1, 2]


def test_holds_ignore_a_release_with_no_acquire() -> None:
    ev = history(
        ("a", 0, "acquire", "info", "L", 50),
        ("a", 1, "release", "invoke", "L", 60),
        ("a", 2, "acquire", "ok", "L", 100),
        ("a", 3, "release", "invoke", "L", 200),
    )
    h = holds(ev)
    assert list(h["start_ns"]) == [100]
    assert list(h["end_ns"]) == [200]
    assert list(h["depth"]) == [1]


def test_holds_keep_tokens_and_separate_locks() -> None:
    ev = history(
        ("a", 0, "acquire", "ok", "L1", 100, 7),
        ("a", 1, "acquire", "ok", "L2", 110, 9),
        ("a", 2, "release", "invoke", "L1", 150),
        ("a", 3, "release", "invoke", "L2", 160),
    )
    h = holds(ev).set_index("lock")
    assert h.loc["L1", "token"] == 7 and h.loc["L2", "token"] == 9
    assert h.loc["L1", "end_ns"] == 150 and h.loc["L2", "end_ns"] == 160
    assert (h["depth"] == 1).all()


def test_holds_of_empty_history() -> None:
    assert holds(history()).empty


# overlaps ----------------------------------------------------------------------------------


def test_overlapping_holds_of_two_clients_are_invalid() -> None:
    r = check_overlaps(holds_history(hold("a", 100, 200), hold("b", 150, 250)))
    assert r.status == "invalid"
    assert r.counters == {"overlapping_holds": 1, "max_concurrent_holders": 2}


def test_sequential_holds_are_valid() -> None:
    r = check_overlaps(holds_history(hold("a", 100, 200), hold("b", 300, 400), hold("a", 500, 600)))
    assert r.status == "valid"
    assert r.counters == {"overlapping_holds": 0, "max_concurrent_holders": 1}


def test_acquire_ok_right_after_release_invoke_is_not_an_overlap() -> None:
    r = check_overlaps(holds_history(hold("a", 100, 200), hold("b", 201, 300), hold("c", 300, 400)))
    assert r.counters["overlapping_holds"] == 0
    assert r.status == "valid"


def test_acquire_ok_just_before_release_invoke_is_an_overlap() -> None:
    r = check_overlaps(holds_history(hold("a", 100, 200), hold("b", 199, 300)))
    assert r.counters["overlapping_holds"] == 1


def test_reentrant_nesting_of_one_client_is_not_counted() -> None:
    ev = history(
        ("a", 0, "acquire", "ok", "L", 100),
        ("a", 1, "acquire", "ok", "L", 110),
        ("a", 2, "acquire", "ok", "L", 115),
        ("a", 3, "release", "invoke", "L", 120),
        ("a", 4, "release", "invoke", "L", 130),
        ("a", 5, "release", "invoke", "L", 200),
        ("b", 0, "acquire", "ok", "L", 210),
        ("b", 1, "release", "invoke", "L", 300),
    )
    r = check_overlaps(ev)
    assert r.status == "valid"
    assert r.counters == {"overlapping_holds": 0, "max_concurrent_holders": 1}


def test_other_client_inside_a_reentrant_outer_hold_is_counted() -> None:
    ev = history(
        ("a", 0, "acquire", "ok", "L", 100),
        ("a", 1, "acquire", "ok", "L", 110),
        ("a", 2, "release", "invoke", "L", 120),
        ("b", 0, "acquire", "ok", "L", 150),  # a still holds its outer hold
        ("b", 1, "release", "invoke", "L", 160),
        ("a", 3, "release", "invoke", "L", 200),
    )
    r = check_overlaps(ev)
    assert r.counters == {"overlapping_holds": 1, "max_concurrent_holders": 2}


def test_lost_workers_open_hold_is_open_not_an_overlap() -> None:
    """A hold whose process stopped recording (lost worker): later grants are unknown, not overlaps."""
    r = check_overlaps(holds_history(hold("9-u0", 100, None), hold("7-u0", 5_000, 6_000)))
    assert r.status == "unknown"
    assert r.counters == {"overlapping_holds": 0, "max_concurrent_holders": 1, "open_ended_overlaps": 1}
    assert "recording ended" in r.detail and "9-u0" in r.detail
    h = holds(holds_history(hold("9-u0", 100, None), hold("7-u0", 5_000, 6_000)))
    lost = h[h["client"] == "9-u0"].iloc[0]
    assert bool(lost["open_ended"]) and lost["seen_ns"] == 100


def test_open_hold_of_a_process_still_recording_overlaps() -> None:
    """The same open hold while its process kept recording (another user of it at 7000): invalid."""
    alive = history(("9-u1", 0, "acquire", "invoke", "M", 7_000))
    r = check_overlaps(
        holds_history(
            hold("9-u0", 100, None), hold("7-u0", 5_000, 6_000), extra=tuple(alive.itertuples(index=False))
        )
    )
    assert r.status == "invalid"
    assert r.counters["overlapping_holds"] == 1 and "open_ended_overlaps" not in r.counters


def test_harness_closed_operations_do_not_keep_a_lost_hold_alive() -> None:
    """The master's ``unfinished`` info completions are written at the end: not a sign of life."""
    closed = ("9-u0", 1, "purchase", "info", "L", 9_000, None, None, UNFINISHED + "no completion arrived")
    r = check_overlaps(holds_history(hold("9-u0", 100, None), hold("7-u0", 5_000, 6_000), extra=(closed,)))
    assert r.status == "unknown" and r.counters["overlapping_holds"] == 0


def test_lost_holder_inside_explains_one_witness_reading_not_two() -> None:
    ev = holds_history(
        hold("9-u0", 100, None),
        hold("7-u0", 5_000, 6_000),
        hold("7-u1", 7_000, 8_000),
        extra=(
            ("9-u0", 90, "witness", "ok", "L", 110, None, 1),  # entered, then its worker was lost
            ("7-u0", 90, "witness", "ok", "L", 5_010, None, 2),  # the dead entrant's count: cannot tell
        ),
    )
    h = holds(ev)
    r = check_witness(ev, h)
    assert r.status == "unknown" and r.counters["witness_violations"] == 0
    assert r.counters["uncertain_witness"] == 1
    worse = pd.concat([ev, history(("7-u1", 90, "witness", "ok", "L", 7_010, None, 3))], ignore_index=True)
    r = check_witness(worse, holds(worse))
    assert r.status == "invalid" and r.counters["witness_violations"] == 1  # a third one inside


def test_lost_worker_is_unknown_unless_the_resource_shows_damage() -> None:
    ev = holds_history(hold("9-u0", 100, None), hold("7-u0", 5_000, 6_000))
    assert check_flash_sale(ev, _state(phone=(10, 8, 2))).status == "unknown"
    oversold = check_flash_sale(ev, _state(phone=(10, -1, 11)))
    assert oversold.status == "invalid" and oversold.counters["overlapping_holds"] == 0


def test_different_locks_never_overlap() -> None:
    r = check_overlaps(holds_history(hold("a", 100, 200, lock="L1"), hold("b", 150, 250, lock="L2")))
    assert r.status == "valid"
    assert r.counters["max_concurrent_holders"] == 1


def test_three_holders_at_once_and_each_late_comer_counted() -> None:
    r = check_overlaps(holds_history(hold("a", 100, 400), hold("b", 150, 250), hold("c", 200, 300)))
    assert r.counters == {"overlapping_holds": 2, "max_concurrent_holders": 3}


def _big_history(n: int, late_every: int) -> pd.DataFrame:
    """n holds of 1 us, one every 1 us, on 8 locks in turn (500 clients); every
    ``late_every``-th hold (none when 0) releases 9.5 us late, inside the next hold of its lock."""
    i = np.arange(n, dtype=np.int64)
    client = (i % 500).astype(str)
    lock = np.char.add("L", (i % 8).astype(str))
    seq = (i // 500) * 2
    start = i * 1_000
    late = (i % late_every == 0) if late_every else np.zeros(n, dtype=bool)
    end = start + 900 + np.where(late, 8_600, 0)
    acq = pd.DataFrame(
        {"client": client, "seq": seq, "op": "acquire", "type": "ok", "lock": lock, "t_ns": start}
    )
    rel = pd.DataFrame(
        {"client": client, "seq": seq + 1, "op": "release", "type": "invoke", "lock": lock, "t_ns": end}
    )
    df = pd.concat([acq, rel], ignore_index=True)
    df["token"] = pd.array([None] * len(df), dtype="Int64")
    df["value"] = pd.array([None] * len(df), dtype="Int64")
    df["error"] = pd.array([None] * len(df), dtype="string")
    return df.sort_values("t_ns", kind="stable").reset_index(drop=True)


def test_overlaps_of_large_history_complete() -> None:
    n = 200_000
    clean = _big_history(n, late_every=0)
    assert len(holds(clean)) == n
    assert check_overlaps(clean).counters == {"overlapping_holds": 0, "max_concurrent_holders": 1}
    # the hold 8 later on the same lock (another client) starts inside each late one
    dirty = _big_history(n, late_every=1000)
    assert check_overlaps(dirty).counters == {"overlapping_holds": n // 1000, "max_concurrent_holders": 2}


# witness -----------------------------------------------------------------------------------


def test_witness_reading_two_is_invalid() -> None:
    ev = history(
        ("a", 1, "witness", "ok", "L", 110, None, 1),
        ("b", 1, "witness", "ok", "L", 120, None, 2),
        ("c", 1, "witness", "ok", "L", 130, None, 1),
    )
    r = check_witness(ev)
    assert r.status == "invalid"
    assert r.counters == {"witness_violations": 1, "witness_max": 2}


def test_witness_all_ones_is_valid() -> None:
    ev = history(("a", 1, "witness", "ok", "L", 110, None, 1), ("b", 1, "witness", "ok", "L", 220, None, 1))
    r = check_witness(ev)
    assert r.status == "valid"
    assert r.counters == {"witness_violations": 0, "witness_max": 1}


def test_witness_ignores_invokes_and_handles_none() -> None:
    ev = history(
        ("a", 1, "witness", "invoke", "L", 100), ("a", 1, "witness", "info", "L", 110, None, None, "x")
    )
    r = check_witness(ev)
    assert r.status == "valid"
    assert r.counters == {"witness_violations": 0, "witness_max": 0}


# stock -------------------------------------------------------------------------------------


def _state(**items: tuple[int, int, int]) -> dict:
    return {
        "items": {
            k: {"initial": i, "stock": s, "orders_units": u, "orders_count": u}
            for k, (i, s, u) in items.items()
        }
    }


def test_oversold_stock_is_invalid() -> None:
    r = check_stock(_state(phone=(100, -5, 105)))
    assert r.status == "invalid"
    assert r.counters == {"oversold_units": 5, "lost_updates": 0, "indeterminate_purchases": 0}


def test_lost_update_is_invalid() -> None:
    r = check_stock(_state(phone=(100, 90, 20)))
    assert r.status == "invalid"
    assert r.counters == {"oversold_units": 0, "lost_updates": 10, "indeterminate_purchases": 0}


def test_consistent_stock_is_valid() -> None:
    r = check_stock(_state(phone=(100, 0, 100), tv=(50, 20, 30)))
    assert r.status == "valid"
    assert r.counters == {"oversold_units": 0, "lost_updates": 0, "indeterminate_purchases": 0}


def test_stock_sums_over_items() -> None:
    r = check_stock(_state(phone=(100, 0, 103), tv=(50, 45, 10)))
    assert r.counters == {"oversold_units": 3, "lost_updates": 3 + 5, "indeterminate_purchases": 0}


def test_missing_final_state_is_unknown() -> None:
    assert check_stock(None).status == "unknown"
    assert check_stock({"items": {}}).status == "unknown"


# unknown outcomes and the combined verdict ---------------------------------------------------


def test_unknown_counts_info_acquires() -> None:
    ev = history(
        ("a", 0, "acquire", "invoke", "L", 100),
        ("a", 0, "acquire", "info", "L", 110, None, None, "LockOutcomeUnknown: lost reply"),
        ("b", 0, "acquire", "fail", "L", 120, None, None, "timeout"),
    )
    r = check_unknown(ev)
    assert r.status == "valid"
    assert r.counters == {"acquire_info": 1}
    assert "1" in r.detail


def test_verdict_combine_precedence() -> None:
    ok = CheckResult("x", "valid", {"a": 0}, "")
    unk = CheckResult("y", "unknown", {"b": 1}, "")
    bad = CheckResult("z", "invalid", {"c": 2}, "")
    assert Verdict.combine([ok]).status == "valid"
    assert Verdict.combine([ok, unk]).status == "unknown"
    assert Verdict.combine([unk, bad, ok]).status == "invalid"
    assert Verdict.combine([ok, unk, bad]).counters == {"a": 0, "b": 1, "c": 2}
    assert Verdict.combine([]).status == "valid"


def test_flash_sale_verdict() -> None:
    ev = holds_history(hold("a", 100, 200), hold("b", 300, 400))
    good = check_flash_sale(ev, _state(phone=(10, 8, 2)))
    assert good.status == "valid"
    assert {
        "overlapping_holds",
        "witness_violations",
        "oversold_units",
        "lost_updates",
        "acquire_info",
    } <= set(good.counters)
    assert [r.name for r in good.results] == [
        "overlaps",
        "ownership",
        "witness",
        "stock",
        "fencing",
        "unknown",
    ]
    bad = check_flash_sale(ev, _state(phone=(10, 9, 2)))
    assert bad.status == "invalid"
    assert bad.counters["lost_updates"] == 1
    assert check_flash_sale(ev, None).status == "unknown"


def _brute_force_overlaps(h: pd.DataFrame) -> tuple[int, int]:
    """Overlaps over the known part of each hold (a lost holder is known until its last event)."""
    rows = list(
        h[["client", "lock", "start_ns", "seen_ns"]]
        .rename(columns={"seen_ns": "end_ns"})
        .itertuples(index=False)
    )
    overlapping = sum(
        any(o.client != r.client and o.lock == r.lock and o.start_ns <= r.start_ns < o.end_ns for o in rows)
        for r in rows
    )
    best = 0
    for r in rows:
        holders = {o.client for o in rows if o.lock == r.lock and o.start_ns <= r.start_ns < o.end_ns}
        best = max(best, len(holders))
    return overlapping, best


def test_overlaps_agree_with_brute_force_on_random_histories() -> None:
    rng = np.random.default_rng(7)
    for _ in range(30):
        events: list[tuple] = []
        for c in range(int(rng.integers(1, 6))):
            t, seq = int(rng.integers(0, 50)), 0
            for _ in range(int(rng.integers(1, 6))):
                lock = f"L{int(rng.integers(0, 2))}"
                t += int(rng.integers(1, 30))
                events.append((f"c{c}", seq, "acquire", "ok", lock, t))
                t += int(rng.integers(1, 30))
                if rng.random() < 0.15:  # killed while holding
                    break
                events.append((f"c{c}", seq + 1, "release", "invoke", lock, t))
                seq += 2
        ev = history(*events)
        r = check_overlaps(ev)
        expected = _brute_force_overlaps(holds(ev))
        assert (r.counters["overlapping_holds"], r.counters["max_concurrent_holders"]) == expected


def test_holds_match_a_stack_on_random_nesting() -> None:
    rng = np.random.default_rng(3)
    for _ in range(30):
        events: list[tuple] = []
        expected: set[tuple] = set()
        t = 0
        for c in range(3):
            stack: dict[str, list[int]] = {"L0": [], "L1": []}
            for seq in range(int(rng.integers(1, 25))):
                lock = f"L{int(rng.integers(0, 2))}"
                t += int(rng.integers(1, 5))
                if rng.random() < 0.55:
                    events.append((f"c{c}", seq, "acquire", "ok", lock, t))
                    stack[lock].append(t)
                else:
                    events.append((f"c{c}", seq, "release", "invoke", lock, t))
                    if stack[lock]:  # a release with nothing held is ignored
                        depth = len(stack[lock])
                        expected.add((f"c{c}", lock, stack[lock].pop(), t, depth, False))
            for lock, opened in stack.items():
                for depth, s in enumerate(opened, start=1):
                    expected.add((f"c{c}", lock, s, None, depth, True))
        ev = history(*events)
        end = int(ev["t_ns"].max())
        got = {
            (r.client, r.lock, r.start_ns, None if r.open else r.end_ns, r.depth, bool(r.open))
            for r in holds(ev).itertuples(index=False)
        }
        assert got == expected
        assert (holds(ev).loc[lambda d: d["open"], "end_ns"] == end).all()
