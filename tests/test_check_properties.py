"""One known-bad and one known-good history per property module of workloads/checks/.

Each module judges one property (docs/architecture.md, "Checkers"); these tests import the
checker from its own module, so a module that stops judging its property fails here.
"""

from __future__ import annotations

import pytest

from tests.test_checkers import history, hold, holds_history
from tests.test_fencing_order import grants
from workloads.checks import common, exclusion, fencing, recovery, stock, witness

S = 1_000_000_000


def test_common_holds_end_at_release_or_death() -> None:
    h = common.holds(
        holds_history(
            hold("1-u0", 100, 200), hold("2-u0", 300, None), extra=(("2-u0", 9, "crash", "info", "L", 400),)
        )
    )
    assert list(h["end_ns"]) == [200, 400] and list(h["open"]) == [False, True]


@pytest.mark.parametrize(("spec", "status"), [((150, 250), "invalid"), ((200, 300), "valid")])
def test_exclusion(spec: tuple[int, int], status: str) -> None:
    r = exclusion.check_overlaps(holds_history(hold("a", 100, 200), hold("b", *spec)))
    assert r.status == status


@pytest.mark.parametrize(("value", "status"), [(2, "invalid"), (1, "valid")])
def test_witness(value: int, status: str) -> None:
    r = witness.check_witness(history(("a", 1, "witness", "ok", "L", 10, None, value)))
    assert r.status == status


# 5 ordered of 10: stock 7 lost two decrements (two holders wrote); stock 3 holds 2 units no
# order accounts for, which no holders' interleaving produces (the harness's fault: unknown)
@pytest.mark.parametrize(("stock_left", "status"), [(7, "invalid"), (5, "valid"), (3, "unknown")])
def test_stock(stock_left: int, status: str) -> None:
    state = {"items": {"i": {"initial": 10, "stock": stock_left, "orders_units": 5}}}
    assert stock.check_stock(state).status == status


@pytest.mark.parametrize(("second_token", "status"), [(5, "invalid"), (10, "valid")])
def test_fencing_order(second_token: int, status: str) -> None:
    r = fencing.check_fencing_order(grants(("a", 100, 200, 9), ("b", 300, 400, second_token)))
    assert r.status == status


@pytest.mark.parametrize(("regrant_s", "stuck"), [(9, 1), (3, 0)])
def test_recovery_of_a_killed_holder(regrant_s: int, stuck: int) -> None:
    h = holds_history(
        hold("1-u0", 1 * S, None),
        hold("2-u0", regrant_s * S, (regrant_s + 1) * S),
        extra=(("1-u0", 99, "crash", "info", "L", 2 * S),),
    )
    assert recovery.check_crashes(h, {"stuck_bound_s": 5}).counters["stuck_locks"] == stuck


@pytest.mark.parametrize(("granted", "unrecovered"), [(False, 1), (True, 0)])
def test_recovery_after_a_server_fault(granted: bool, unrecovered: int) -> None:
    ev = [("bench", 1, "fault", "invoke", "restart", 1 * S), ("bench", 1, "fault", "ok", "restart", 2 * S)]
    if granted:
        ev.append(("2-u0", 0, "acquire", "ok", "L", 3 * S))
    cols = recovery.server_recovery_columns(history(*ev))
    assert cols["unrecovered_strikes"] == unrecovered
