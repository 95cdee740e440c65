"""Fencing tokens in grant order (issue 21): the checker on known histories, then real plug-in locks.

The rule (Hazelcast FencedLock as Jepsen checks it; SyncGuard's contract tests): per lock,
each grant's token is strictly above every earlier grant's, and a reentrant hold keeps its
token. A write the resource refused from a holder that overlapped nobody means the tokens
are wrong, not that fencing worked.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import bench
from tests.test_checkers import history
from workloads.checks.core import check_fencing, check_fencing_order, check_flash_sale, holds
from workloads.checks.reentrant import check_reentrant_tokens

FENCE_LOCKS = "tests.fence_locks"


def grants(*spec: tuple[str, int, int, int], lock: str = "L") -> pd.DataFrame:
    """Holds as (client, start, end, token): acquire ok at start with the token, release invoke at end."""
    ev = []
    for n, (client, start, end, token) in enumerate(spec):
        ev += [
            (client, 2 * n, "acquire", "ok", lock, start, token),
            (client, 2 * n + 1, "release", "invoke", lock, end),
        ]
    return history(*ev)


def test_increasing_tokens_are_valid() -> None:
    r = check_fencing_order(grants(("a", 100, 200, 1), ("b", 300, 400, 2), ("a", 500, 600, 7)))
    assert r.status == "valid" and r.counters == {"fencing_order_violations": 0}


def test_a_token_below_an_earlier_grant_is_invalid() -> None:
    # random tokens: 50 after 90, and 60 is below 90 too (every earlier grant, not just the last)
    r = check_fencing_order(grants(("a", 100, 200, 90), ("b", 300, 400, 50), ("c", 500, 600, 60)))
    assert r.status == "invalid" and r.counters["fencing_order_violations"] == 2
    assert r.detail.startswith("fencing tokens out of grant order: 2 grants")


def test_a_repeated_token_is_invalid() -> None:
    r = check_fencing_order(grants(("a", 100, 200, 5), ("b", 300, 400, 5)))
    assert r.counters["fencing_order_violations"] == 1


def test_overlapping_holds_are_not_ordered_by_this_checker() -> None:
    # b was granted while a still held (a lease expired): which grant came first is the lock's
    # business; the overlap checker judges it. c came after both and is above both.
    r = check_fencing_order(grants(("a", 100, 400, 9), ("b", 300, 500, 3), ("c", 600, 700, 10)))
    assert r.status == "valid"


def _seen_after_a_pause(*, still: bool, earlier_end: int = 900) -> pd.DataFrame:
    """p1-u0 is granted token 10 at about 110 and sees it only at 2160, after p1-u1's pause (150-2150);
    meanwhile p2-u0 holds token 50 (500 to ``earlier_end``). ``still``: nothing else of p1 runs."""
    ev = [
        ("p1-u0", 1, "acquire", "invoke", "L", 100),
        ("p1-u1", 2, "pause", "invoke", "L", 150),
        ("p2-u0", 3, "acquire", "ok", "L", 500, 50),
        ("p2-u0", 4, "release", "invoke", "L", earlier_end),
        ("p1-u1", 2, "pause", "ok", "L", 2150),
        ("p1-u0", 1, "acquire", "ok", "L", 2160, 10),
        ("p1-u0", 5, "release", "invoke", "L", 2200),
    ]
    if not still:  # a task's pause: the process's other users run on and see their grants when made
        ev.append(("p1-u2", 6, "acquire", "invoke", "L2", 1000))
    return history(*sorted(ev, key=lambda e: e[5]))


def test_a_grant_seen_after_its_process_stood_still_may_have_come_first() -> None:
    # token 10 was handed out before the pause, 50 during it: tokens in grant order
    r = check_fencing_order(_seen_after_a_pause(still=True))
    assert r.status == "valid" and r.counters == {"fencing_order_violations": 0}, r.detail


def test_a_grant_seen_late_while_its_process_ran_on_is_out_of_order() -> None:
    r = check_fencing_order(_seen_after_a_pause(still=False))
    assert r.status == "invalid" and r.counters["fencing_order_violations"] == 1


def test_a_grant_over_before_the_paused_grant_was_asked_for_still_orders_it() -> None:
    ev = [
        ("p2-u0", 1, "acquire", "ok", "L", 20, 50),
        ("p2-u0", 2, "release", "invoke", "L", 60),
        ("p1-u0", 3, "acquire", "invoke", "L", 100),
        ("p1-u1", 4, "pause", "invoke", "L", 150),
        ("p1-u1", 4, "pause", "ok", "L", 2150),
        ("p1-u0", 3, "acquire", "ok", "L", 2160, 10),
        ("p1-u0", 5, "release", "invoke", "L", 2200),
    ]
    r = check_fencing_order(history(*ev))
    assert r.status == "invalid" and r.counters["fencing_order_violations"] == 1


def _seen_late_behind_a_busy_process(*, sent: int | None) -> pd.DataFrame:
    """p1-u0 asks at 100 and sees token 1990 only at 1540 (its process busy); its winning request
    went out at ``sent``. p2-u0's whole hold with token 1991 falls in between (500 to 900)."""
    ev = [
        ("p1-u0", 1, "acquire", "invoke", "L", 100),
        ("p2-u0", 2, "acquire", "ok", "L", 500, 1991, None, None, 450),
        ("p2-u0", 3, "release", "invoke", "L", 900),
        ("p1-u0", 1, "acquire", "ok", "L", 1540, 1990, None, None, sent),
        ("p1-u0", 4, "release", "invoke", "L", 1600),
    ]
    return history(*ev)


def test_a_grant_seen_late_behind_a_busy_process_may_have_come_first() -> None:
    # Y, 2026-12-06 (memcached.add): the add that won went out before 1991's grant, so the lock may
    # have granted 1990 first; the hold that ended before the ok does not order them
    r = check_fencing_order(_seen_late_behind_a_busy_process(sent=110))
    assert r.status == "valid" and r.counters == {"fencing_order_violations": 0}, r.detail


def test_a_grant_whose_winning_request_went_out_after_an_earlier_hold_is_out_of_order() -> None:
    # the winning request was sent after 1991's hold had ended: 1990 certainly came later
    r = check_fencing_order(_seen_late_behind_a_busy_process(sent=1000))
    assert r.status == "invalid" and r.counters["fencing_order_violations"] == 1, r.detail
    # and without the send recorded (an old history, a lock with its own wait) the ok places it
    r = check_fencing_order(_seen_late_behind_a_busy_process(sent=None))
    assert r.status == "invalid" and r.counters["fencing_order_violations"] == 1, r.detail


def test_grants_on_different_locks_are_ordered_separately() -> None:
    ev = pd.concat([grants(("a", 100, 200, 9), lock="L1"), grants(("b", 300, 400, 1), lock="L2")])
    assert check_fencing_order(ev.sort_values("t_ns").reset_index(drop=True)).status == "valid"


def test_order_across_hosts_within_the_clock_bound_cannot_be_told() -> None:
    # h2's grant began 5 ns after h1's release: within the 10 + 10 ns bound, it may have been first
    ev = grants(("h1/1-u0", 100, 200, 9), ("h2/2-u0", 205, 300, 3))
    r = check_fencing_order(ev, uncertainty_ns={"h1": 10, "h2": 10})
    assert r.status == "unknown" and r.counters["uncertain_fencing_order"] == 1
    far = grants(("h1/1-u0", 100, 200, 9), ("h2/2-u0", 500, 600, 3))
    assert check_fencing_order(far, uncertainty_ns={"h1": 10, "h2": 10}).status == "invalid"
    # a worker without an offset estimate: its timestamps decide, so the case cannot be judged
    r = check_fencing_order(far, uncertainty_ns={"h1": 10, "h2": None})
    assert r.status == "unknown" and r.counters["fencing_order_violations"] == 0


def test_a_reentrant_hold_keeps_its_token() -> None:
    ev = history(
        ("a", 0, "acquire", "ok", "L", 100, 4),
        ("a", 1, "acquire", "ok", "L", 110, 4),
        ("a", 2, "release", "invoke", "L", 120),
        ("a", 3, "release", "invoke", "L", 200),
        ("b", 0, "acquire", "ok", "L", 300, 5),
        ("b", 1, "acquire", "ok", "L", 310, 6),  # a new token on reentry
        ("b", 2, "release", "invoke", "L", 320),
        ("b", 3, "release", "invoke", "L", 400),
    )
    r = check_reentrant_tokens(holds(ev))
    assert r.status == "invalid" and r.counters == {"reentrant_token_changes": 1}
    assert check_reentrant_tokens(holds(ev[ev["client"] == "a"])).status == "valid"
    assert check_fencing_order(ev).status == "valid"  # outer grants 4 then 5: in order


def _enforced(refused: list[list]) -> dict:
    return {
        "items": {"item-0": {"initial": 10, "stock": 10, "orders_units": 0, "orders_count": 0}},
        "fencing": {"mode": "enforce", "stale_writes": len(refused), "stale_reads": 0, "refused": refused},
    }


def test_a_refused_write_of_a_holder_alone_is_fencing_broken() -> None:
    ev = grants(("1-u0", 100, 200, 9), ("1-u1", 300, 400, 5), lock="flash-sale:item-0")
    r = check_fencing(_enforced([["item-0", 5, "1-u1", "w"]]), ev, holds(ev))
    assert r.status == "invalid" and r.counters["legit_writes_refused"] == 1
    assert "fencing is broken" in r.detail


def test_a_refused_write_of_a_stale_holder_is_fencing_working() -> None:
    # 1-u0's lease ran out while it worked; 1-u1 got the lock (token 10); 1-u0's late write is refused
    ev = grants(("1-u0", 100, 400, 9), ("1-u1", 300, 500, 10), lock="flash-sale:item-0")
    r = check_fencing(_enforced([["item-0", 9, "1-u0", "w"]]), ev, holds(ev))
    assert r.status == "valid" and r.counters["legit_writes_refused"] == 0
    assert r.counters["stale_writes_refused"] == 1


def test_refusals_from_the_history_when_the_resource_kept_no_log() -> None:
    ev = pd.concat(
        [
            grants(("1-u0", 100, 200, 9), ("1-u1", 300, 400, 5), lock="flash-sale:item-0"),
            history(("1-u1", 9, "purchase", "fail", "flash-sale:item-0", 350, None, None, "stale")),
        ]
    ).sort_values("t_ns", kind="stable")
    state = _enforced([])
    del state["fencing"]["refused"]
    assert check_fencing(state, ev, holds(ev)).counters["legit_writes_refused"] == 1


def test_flash_sale_verdict_with_tokens_out_of_order_is_invalid_with_the_reason() -> None:
    ev = grants(("1-u0", 100, 200, 9), ("1-u1", 300, 400, 5), lock="flash-sale:item-0")
    v = check_flash_sale(ev, _enforced([]))
    assert v.status == "invalid" and v.counters["fencing_order_violations"] == 1
    assert any(r.detail.startswith("fencing tokens out of grant order: 1 grants") for r in v.results)


# real plug-in locks under --fencing enforce -------------------------------------------------------


@pytest.mark.server
@pytest.mark.slow
def test_plug_in_token_sources_under_fencing_enforce(tmp_path: Path) -> None:
    """Random and backwards tokens are invalid; a counter from INCR stays valid (same lock otherwise)."""
    results = tmp_path / "results"
    impls = [f"{FENCE_LOCKS}:{c}" for c in ("CounterTokenLock", "RandomTokenLock", "BackwardsTokenLock")]
    r = bench("run", *[a for i in impls for a in ("--impl", i)], "--fencing", "enforce", "--duration", "3",
              "--users", "6", "--cs", "1ms", "--no-report", "--results-dir", str(results))  # fmt: skip
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1, r.stderr[-3000:]
    rows = pd.read_csv(runs[0] / "cases.csv").set_index("impl")
    counter, rand, back = (rows.loc[i] for i in impls)
    assert counter["verdict"] == "valid", counter.get("verdict_reason")
    assert counter["fencing_order_violations"] == 0 and counter["legit_writes_refused"] == 0
    for row in (rand, back):
        assert row["verdict"] == "invalid"
        assert row["overlapping_holds"] == 0  # the lock itself held
        assert row["fencing_order_violations"] > 0
        assert "fencing tokens out of grant order" in str(row["verdict_reason"])
    assert back["legit_writes_refused"] > 0  # every write after the first grant is refused
    assert bool(rand["data_safe"]) is False and bool(back["data_safe"]) is False


@pytest.mark.server
@pytest.mark.slow
def test_random_tokens_with_fencing_off_are_shown_and_break_the_fencing_column(tmp_path: Path) -> None:
    """--fencing off: the lock still hands out tokens; their order is a finding, not a verdict (issue 32)."""
    results = tmp_path / "results"
    rand = f"{FENCE_LOCKS}:RandomTokenLock"
    counter = f"{FENCE_LOCKS}:CounterTokenLock"
    r = bench("run", "--impl", rand, "--impl", counter, "--fencing", "off", "--duration", "3",
              "--users", "6", "--cs", "1ms", "--results-dir", str(results))  # fmt: skip
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1, r.stderr[-3000:]
    rows = pd.read_csv(runs[0] / "cases.csv").set_index("impl")
    assert rows.loc[rand, "fencing"] == "off"
    assert rows.loc[rand, "fencing_order_violations"] > 0  # shown in cases.csv
    assert rows.loc[rand, "verdict"] == "valid"  # mutual exclusion held: the verdict is the lock's
    assert rows.loc[counter, "fencing_order_violations"] == 0
    page = (runs[0] / "report.html").read_text()

    # the decision table's fencing-tokens column: broken for the random tokens, with the count
    def fencing_cell(impl: str) -> str:
        row = page.index(f'<tr data-row="{impl}" id="detail-')
        return re.search(r'<td data-col="fencing"[^>]*>(.*?)</td>', page[row:], re.S).group(1)

    assert "broken" in fencing_cell(rand) and "tokens out of grant order" in fencing_cell(rand)
    assert "broken" not in fencing_cell(counter)


@pytest.mark.server
@pytest.mark.slow
def test_random_tokens_under_observe_and_enforce_stay_invalid(tmp_path: Path) -> None:
    results = tmp_path / "results"
    rand = f"{FENCE_LOCKS}:RandomTokenLock"
    r = bench("run", "--impl", rand, "--fencing", "both", "--duration", "3", "--users", "6", "--cs", "1ms",
              "--no-report", "--results-dir", str(results))  # fmt: skip
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1, r.stderr[-3000:]
    rows = pd.read_csv(runs[0] / "cases.csv")
    assert set(rows["fencing"]) == {"observe", "enforce"}
    assert (rows["verdict"] == "invalid").all() and (rows["fencing_order_violations"] > 0).all()


def test_a_remote_workers_send_moves_onto_the_masters_clock_with_its_time() -> None:
    """The master shifts a remote worker's events onto its own clock (locust_glue): the send of the
    winning request is on the worker's clock too, so it must move by the same amount, or a grant
    would be placed seconds from its ok."""
    from workloads.harness.recording import shift_times

    ok = ["w1/p1-u0", 1, "acquire", "ok", "L", 5_000, 7, None, None, 4_200]
    shift_times(ok, -1_000)
    assert (ok[5], ok[9]) == (4_000, 3_200)
    unsent = ["w1/p1-u0", 2, "release", "invoke", "L", 6_000, None, None, None, None]
    shift_times(unsent, 500)
    assert (unsent[5], unsent[9]) == (6_500, None)
    older = ["p1-u0", 3, "acquire", "invoke", "L", 100, None, None, None]  # recorded before sent_ns
    shift_times(older, 50)
    assert older[5] == 150 and len(older) == 9
