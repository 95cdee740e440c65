"""The lanes' shared budget: heavy units never meet, a lane runs a later unit that fits, nobody starves."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

from bench.matrix.admission import BIG_GROUP, HEAVY, MEDIUM, Admission, unit_weight


def _unit(scenario: str, n: int = 4) -> list[SimpleNamespace]:
    return [SimpleNamespace(matrix_scenario=scenario) for _ in range(n)]


def test_weights_follow_what_was_measured_to_collide() -> None:
    assert unit_weight(_unit("kill-member", 6)) == HEAVY
    assert unit_weight(_unit("session-pause", 4)) == HEAVY
    assert unit_weight(_unit("failover", 13)) == HEAVY
    assert unit_weight(_unit("restart", 12)) == HEAVY  # PostgreSQL's restart group of 12
    assert unit_weight(_unit("restart", BIG_GROUP - 1)) == MEDIUM
    assert unit_weight(_unit("crash", 2)) == MEDIUM
    assert unit_weight(_unit("lease-expiry-world", 4)) == MEDIUM
    assert unit_weight(_unit("flash-sale", 1)) == 0
    assert unit_weight(_unit("partition-client", 7)) == 0
    assert unit_weight([]) == 0


def _lanes(admission: Admission, lanes: list[list[list[SimpleNamespace]]], hold_s: float) -> list[tuple]:
    """Run each lane's units in threads through ``admission``; the (start, end, weight, lane) of each."""
    ran: list[tuple] = []
    lock = threading.Lock()
    cancel = threading.Event()

    def lane(i: int, units: list[list[SimpleNamespace]]) -> None:
        pending = list(units)
        while pending:
            at = admission.take(pending, cancel)
            assert at is not None
            unit = pending.pop(at)
            t0 = time.monotonic()
            time.sleep(hold_s)
            with lock:
                ran.append((t0, time.monotonic(), unit_weight(unit), i, unit[0].matrix_scenario))
            admission.give_back(unit)

    threads = [threading.Thread(target=lane, args=(i, u)) for i, u in enumerate(lanes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return ran


def _heavy_overlaps(ran: list[tuple]) -> int:
    heavy = [r for r in ran if r[2] == HEAVY]
    return sum(1 for a in heavy for b in ran if a is not b and b[2] > 0 and a[0] < b[1] and b[0] < a[1])


LANES = [
    [_unit("kill-member"), _unit("flash-sale", 1), _unit("kill-leader")],
    [_unit("crash", 2), _unit("crash", 2), _unit("long-cs")],
    [_unit("session-pause"), _unit("partition-client")],
]


def test_a_heavy_unit_meets_no_other_weighted_unit() -> None:
    ran = _lanes(Admission(), LANES, hold_s=0.05)
    assert len(ran) == 8  # every unit ran: nobody starved
    assert _heavy_overlaps(ran) == 0


def test_without_the_budget_they_would_have_met() -> None:
    """The same lanes with room for everything: the heavy units meet, so the test above can fail."""
    ran = _lanes(Admission(budget=100), LANES, hold_s=0.05)
    assert _heavy_overlaps(ran) > 0


def test_a_lane_runs_its_next_unit_that_fits_instead_of_waiting() -> None:
    admission = Admission()
    cancel = threading.Event()
    other = _unit("kill-leader")
    assert admission.take([other], cancel) == 0  # another lane's heavy unit is running
    mine = [_unit("crash", 2), _unit("long-cs")]
    assert admission.take(mine, cancel) == 1  # the crash group waits; the fault-free one goes
    cancel.set()
    assert admission.take([_unit("crash", 2)], cancel) is None  # nothing fits and the run stops
    admission.give_back(other)
    assert admission.take([_unit("crash", 2)], threading.Event()) == 0


def test_a_unit_heavier_than_the_budget_still_runs_alone() -> None:
    admission = Admission(budget=1)
    assert admission.take([_unit("failover", 13)], threading.Event()) == 0


def test_a_waiting_heavy_unit_is_not_overtaken_by_weighted_ones() -> None:
    admission = Admission()
    crash = admission.take([_unit("crash", 2)], threading.Event())  # lane 1 runs a crash group
    assert crash == 0
    got: list[int | None] = []
    waiter = threading.Thread(
        target=lambda: got.append(admission.take([_unit("kill-member")], threading.Event()))
    )
    waiter.start()
    time.sleep(0.2)  # the heavy unit waits for the crash group
    cancel = threading.Event()
    cancel.set()
    # lane 3's next crash group would fit the budget (1 + 1), but it would keep the heavy unit waiting
    assert admission.take([_unit("crash", 2)], cancel) is None
    assert admission.take([_unit("crash", 2), _unit("long-cs")], cancel) == 1  # weightless ones go on
    admission.give_back(_unit("crash", 2))
    waiter.join(timeout=5)
    assert got == [0]
