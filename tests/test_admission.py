"""The lanes' shared slots: a heavy unit meets at most one light one and never another heavy one,
a lane runs a later unit that fits, and nobody starves."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from bench.matrix.admission import ALONE, BIG_GROUP, HEAVY, LIGHT, Admission, limits, unit_weight


class _Fault:
    def __init__(self, topology: str | None, partition: bool = False) -> None:
        self._topology = topology
        self.is_partition = partition

    def topology(self, backend: str) -> str | None:
        return self._topology


def _unit(
    scenario: str, n: int = 4, topology: str | None = None, backend: str = "etcd", processes: int = 1
) -> list[SimpleNamespace]:
    partition = scenario.startswith("partition-")
    fault = _Fault(topology, partition) if topology or partition else None
    settings = SimpleNamespace(processes=processes)
    return [
        SimpleNamespace(matrix_scenario=scenario, backend=backend, fault=fault, settings=settings)
        for _ in range(n)
    ]


def test_weights_follow_what_was_measured_to_collide() -> None:
    assert unit_weight(_unit("kill-member", 6)) == HEAVY  # etcd's
    assert unit_weight(_unit("kill-member", 6, backend="zookeeper")) == ALONE  # three JVMs on two cores
    assert unit_weight(_unit("kill-leader", 6, backend="zookeeper")) == ALONE
    assert unit_weight(_unit("session-pause", 4)) == HEAVY
    assert unit_weight(_unit("failover", 13)) == HEAVY
    assert unit_weight(_unit("lease-expiry-world", 4)) == HEAVY
    assert unit_weight(_unit("restart", 12)) == HEAVY  # PostgreSQL's restart group of 12
    assert unit_weight(_unit("restart", BIG_GROUP - 1)) == LIGHT
    assert unit_weight(_unit("crash", 2)) == LIGHT
    assert unit_weight(_unit("flash-sale", 1)) == LIGHT
    # a Locust process a test host: PostgreSQL's seven partition-client cases run 14 (W, Y, X5)
    assert unit_weight(_unit("partition-client", 7, backend="postgres", processes=2)) == HEAVY
    assert unit_weight(_unit("partition-client", 3, backend="redis", processes=2)) == LIGHT
    assert unit_weight(_unit("partition-leader", 3, topology="ensemble")) == HEAVY  # three servers of its own
    assert unit_weight([]) == 0


def _lanes(admission: Admission, lanes: list[list[list[SimpleNamespace]]], hold_s: float) -> list[tuple]:
    """Run each lane's units in threads through ``admission``; (start, end, weight, lane, scenario) of each."""
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


def _most_beside_a_heavy(ran: list[tuple]) -> tuple[int, int]:
    """(the most units that ran beside one heavy unit at one moment, heavy units that met another)."""
    most = met = 0
    for a in (r for r in ran if r[2] == HEAVY):
        beside = [b for b in ran if b is not a and b[0] < a[1] and a[0] < b[1]]
        met += sum(1 for b in beside if b[2] == HEAVY)
        for b in beside:  # at b's start, who else was running beside a
            most = max(most, sum(1 for c in beside if c[0] <= b[0] < c[1]))
    return most, met


LANES = [
    [_unit("kill-member"), _unit("flash-sale", 1), _unit("kill-leader")],
    [_unit("crash", 2), _unit("lease-expiry-world"), _unit("long-cs")],
    [_unit("session-pause"), _unit("partition-client"), _unit("crash", 2)],
]


def test_a_heavy_unit_meets_at_most_one_light_one_and_no_heavy_one() -> None:
    ran = _lanes(Admission(3), LANES, hold_s=0.05)
    assert len(ran) == 9  # every unit ran: nobody starved
    assert _most_beside_a_heavy(ran) == (1, 0)


def test_at_five_lanes_light_units_fill_them_and_a_heavy_one_still_meets_one_at_most() -> None:
    """More lanes than 3 run more light units at once, never more beside a heavy unit."""
    lanes = [
        *LANES,
        [_unit("crash", 2), _unit("long-cs")],
        [_unit("partition-client"), _unit("flash-sale", 1)],
    ]
    ran = _lanes(Admission(5), lanes, hold_s=0.05)
    assert len(ran) == 13
    assert _most_beside_a_heavy(ran) == (1, 0)
    lights = [r for r in ran if r[2] == 1]
    together = max(sum(1 for b in lights if b[0] <= a[0] < b[1]) for a in lights)
    assert together >= 4  # light units alone do use the lanes


def test_without_the_slots_they_would_have_met() -> None:
    """The same lanes with room for everything: heavy units meet, so the test above can fail."""
    ran = _lanes(Admission(100, max_heavy=100, beside_heavy=None), LANES, hold_s=0.05)
    most, met = _most_beside_a_heavy(ran)
    assert met > 0 and most == 2


def test_real_time_generators_let_two_heavy_units_meet_or_one_beside_two_light_ones() -> None:
    """With the cases' Locust real-time (workloads/harness/priority.py) four lanes run two heavy
    units at once, or one beside two light ones; never three heavy ones, never three beside one."""
    assert limits(False) == (1, 1, False)
    assert limits(True) == (2, 2, True)  # ZooKeeper's ensemble kills count as heavy there
    lanes = [*LANES, [_unit("crash", 2), _unit("long-cs"), _unit("failover")]]
    max_heavy, beside, alone_as_heavy = limits(True)
    ran = _lanes(Admission(4, max_heavy, beside, alone_as_heavy=alone_as_heavy), lanes, hold_s=0.05)
    assert len(ran) == 12
    most, met = _most_beside_a_heavy(ran)
    assert met > 0 and most == 2
    heavy = [r for r in ran if r[2] == HEAVY]
    assert max(sum(1 for b in heavy if b[0] <= a[0] < b[1]) for a in heavy) == 2


def test_units_that_run_alone_may_count_as_heavy_ones() -> None:
    """``alone_as_heavy``: ZooKeeper's ensemble kills take a heavy unit's slots instead of every slot."""
    kills = _unit("kill-member", 6, backend="zookeeper")
    for alone_as_heavy, fits in ((False, False), (True, True)):
        admission = Admission(4, 2, 2, alone_as_heavy=alone_as_heavy)
        assert admission.take([_unit("failover", 13)], threading.Event()) == 0
        cancel = threading.Event()
        if not fits:
            cancel.set()  # it would wait: give up at once
        assert (admission.take([kills], cancel) == 0) is fits


def test_the_knobs_override_either_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKBENCH_MAX_HEAVY", "1")
    assert limits(True) == (1, 2, True)
    monkeypatch.setenv("LOCKBENCH_BESIDE_HEAVY", "3")
    monkeypatch.setenv("LOCKBENCH_ALONE_AS_HEAVY", "0")
    assert limits(False) == (1, 3, False)
    assert limits(True)[2] is False


def test_a_lane_runs_its_next_unit_that_fits_instead_of_waiting() -> None:
    admission = Admission(3)
    cancel = threading.Event()
    other = _unit("kill-leader")
    assert admission.take([other], cancel) == 0  # another lane's heavy unit is running
    mine = [_unit("session-pause"), _unit("long-cs")]
    assert admission.take(mine, cancel) == 1  # the heavy one waits; the light one goes
    cancel.set()
    assert admission.take([_unit("crash", 2)], cancel) is None  # no slot left, and the run stops
    admission.give_back(other)
    assert admission.take([_unit("crash", 2)], threading.Event()) == 0


def test_a_waiting_heavy_unit_is_not_overtaken_by_light_ones() -> None:
    admission = Admission(3)
    first, second = _unit("crash", 2), _unit("long-cs")
    assert admission.take([first], threading.Event()) == 0
    assert admission.take([second], threading.Event()) == 0  # two light units: one slot left
    got: list[int | None] = []
    waiter = threading.Thread(
        target=lambda: got.append(admission.take([_unit("kill-member")], threading.Event()))
    )
    waiter.start()
    time.sleep(0.2)  # the heavy unit waits for two free slots
    cancel = threading.Event()
    cancel.set()
    # a third light unit would fit the last slot, and keep the heavy one waiting behind it
    assert admission.take([_unit("crash", 2)], cancel) is None
    admission.give_back(first)
    waiter.join(timeout=5)
    assert got == [0]
    admission.give_back(second)
    # while a heavy unit runs, one light unit may join it (it leaves room for the next heavy one)
    assert admission.take([_unit("crash", 2)], threading.Event()) == 0


def test_a_unit_heavier_than_every_slot_still_runs_alone() -> None:
    admission = Admission(1)
    assert admission.take([_unit("failover", 13)], threading.Event()) == 0
    cancel = threading.Event()
    cancel.set()
    assert admission.take([_unit("long-cs")], cancel) is None


def test_zookeepers_member_kills_run_with_nothing_beside_them() -> None:
    lanes = [
        [_unit("long-cs"), _unit("kill-member", 6, backend="zookeeper"), _unit("crash", 2)],
        [_unit("crash", 2), _unit("crash", 2), _unit("long-cs")],
        [_unit("partition-client"), _unit("session-pause"), _unit("crash", 2)],
    ]
    ran = _lanes(Admission(3), lanes, hold_s=0.05)
    assert len(ran) == 9
    alone = next(r for r in ran if r[4] == "kill-member")
    assert not [r for r in ran if r is not alone and r[0] < alone[1] and alone[0] < r[1]]


def test_postgresqls_restarts_run_in_fours_and_so_are_no_heavy_unit() -> None:
    """A PostgreSQL restart reconnects every user through a fork of the server: its groups hold four
    cases (light), while Redis's restarts still share a strike eight at a time (heavy)."""
    from bench.matrix.plan import form_groups, plan_lanes, plan_matrix

    cases, _ = plan_matrix(["postgres", "redis"], [], ["restart"], set(), root=False)
    groups: dict[str, list[list]] = {}
    for lane in plan_lanes(cases, set()):
        for unit in form_groups(lane):
            groups.setdefault(unit[0].backend, []).append(unit)
    postgres, redis = groups["postgres"], groups["redis"]
    assert sum(len(u) for u in postgres) >= 12 and max(len(u) for u in postgres) == 4
    assert all(unit_weight(u) == LIGHT for u in postgres)
    assert max(len(u) for u in redis) == BIG_GROUP and unit_weight(max(redis, key=len)) == HEAVY


def test_occupancy_tells_what_ran_and_adds_up_to_the_whole_time() -> None:
    """run.json's ``occupancy``: a unit alone, a heavy unit, light units only, nothing; every moment once."""
    start = time.monotonic()
    admission = Admission(3)
    go = threading.Event()
    light, heavy, alone = (
        _unit("crash", 2),
        _unit("failover", 13),
        _unit("kill-member", 6, backend="zookeeper"),
    )
    assert admission.take([light], go) == 0
    time.sleep(0.02)  # light units only
    assert admission.take([heavy], go) == 0
    time.sleep(0.02)  # a heavy unit (beside the light one)
    admission.give_back(heavy)
    admission.give_back(light)
    time.sleep(0.02)  # nothing
    assert admission.take([alone], go) == 0
    time.sleep(0.02)  # a unit alone
    admission.give_back(alone)
    seconds = admission.occupancy()
    whole = time.monotonic() - start
    assert set(seconds) == {"alone_s", "heavy_s", "light_s", "nothing_s"}
    assert all(v > 0 for v in admission.spent.values()), admission.spent
    assert 0 <= whole - sum(admission.spent.values()) < 0.5, (whole, admission.spent)


def test_heavy_pairs_run_two_heavy_units_with_nothing_beside_them() -> None:
    """``LOCKBENCH_HEAVY_PAIRS``: two heavy units meet, but no light unit runs beside the pair."""
    ran = _lanes(Admission(3, heavy_pairs=True), LANES, hold_s=0.05)
    heavy = [r for r in ran if r[2] == HEAVY]
    pairs = [(a, b) for a in heavy for b in heavy if a is not b and a[0] < b[1] and b[0] < a[1]]
    assert pairs
    for a, b in pairs:
        both = (max(a[0], b[0]), min(a[1], b[1]))
        beside = [r for r in ran if r[2] < HEAVY and r[0] < both[1] and both[0] < r[1]]
        assert not beside
    assert max(sum(1 for b in heavy if b[0] <= a[0] < b[1]) for a in heavy) == 2
