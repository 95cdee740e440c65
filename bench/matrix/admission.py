"""Which units of a matrix may run side by side: a weight per unit, and a budget the lanes share.

Why: lanes fill the machine, but two heavy units meeting on two cores make each other's
generator late, and a generator-bound case decides nothing. In the full standard matrix on
c7a4b1f (four shards, ``--lanes 2``, 2 cores) every group that came out generator-bound had run
beside another heavy unit, and each of them measured 0 bound alone on a lane:

- ZooKeeper ensemble kill-member (12 of 12) and kill-leader (6 of 12) beside Redis crash groups
  and lease-expiry-world;
- ZooKeeper session-pause (4 of 4) beside etcd ensemble kills;
- PostgreSQL restart, a group of 12 (12 of 12), beside the Redis Sentinel failover group of 13;
- Redis lease-expiry-world (4 of 8) beside ZooKeeper kill-leader.

Crash groups beside crash groups, beside lease-expiry-world or beside a restart of five, and any
unit beside fault-free or partition cases, stayed unbound. So a unit weighs
:data:`HEAVY` when its strikes restart a JVM ensemble member, pause a session's process for
seconds, or restart a server under a group of :data:`BIG_GROUP` cases or more; :data:`MEDIUM`
when it restarts a server for fewer, kills and respawns Locust processes, or pauses its whole
world; nothing otherwise (fault-free, long critical sections, lease expiry by task, partitions). The lanes share a
budget of :data:`BUDGET`: one heavy unit runs beside weightless ones only, two medium ones may
meet. A lane whose next unit does not fit runs a later one of its own that does (a lane's units
are independent: it clears the lock state between them), and waits only when none fits.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

#: What the running units may weigh together.
BUDGET = 2
HEAVY = 2
MEDIUM = 1
#: A medium group of this many cases or more is heavy (a restart of 12 reconnects 12 Locust processes).
BIG_GROUP = 8

_HEAVY_SCENARIOS = frozenset({"kill-member", "kill-leader", "session-pause", "failover"})
_MEDIUM_SCENARIOS = frozenset({"crash", "lease-expiry-world", "restart"})


def unit_weight(unit: Sequence[Any]) -> int:
    """What a unit (a lone case or a group, cases with ``matrix_scenario``) weighs against the budget."""
    if not unit:
        return 0
    scenario = unit[0].matrix_scenario
    if scenario in _HEAVY_SCENARIOS:
        return HEAVY
    if scenario in _MEDIUM_SCENARIOS:
        return HEAVY if len(unit) >= BIG_GROUP else MEDIUM
    return 0


class Admission:
    """The budget the lanes of one matrix share: a unit starts only when its weight fits.

    Why a class: lanes are threads; one condition variable lets a finishing unit wake the lanes
    that wait, and ``waited_s`` says in run.json what keeping heavy units apart cost.
    """

    def __init__(self, budget: int = BUDGET) -> None:
        self.budget = budget
        self.used = 0
        self.waited_s = 0.0
        self._waiters = 0
        self._cond = threading.Condition()

    def fits(self, weight: int) -> bool:
        # a unit heavier than the whole budget still runs, alone among weighted units
        return self.used + weight <= self.budget or self.used == 0

    def take(self, units: Sequence[Sequence[Any]], cancel: threading.Event) -> int | None:
        """The index of the first of ``units`` that fits now, its weight taken; waits while none fits.

        While a lane waits, the others start only weightless units, so crash groups coming one
        after another in other lanes cannot keep a heavy unit waiting to the end of the matrix.
        None when ``cancel`` is set while waiting.
        """
        t0 = time.monotonic()
        waiting = False
        with self._cond:
            try:
                while True:
                    for i, unit in enumerate(units):
                        weight = unit_weight(unit)
                        if self.fits(weight) and (weight == 0 or waiting or not self._waiters):
                            self.used += weight
                            self.waited_s += time.monotonic() - t0
                            return i
                    if cancel.is_set():
                        return None
                    if not waiting:
                        waiting = True
                        self._waiters += 1
                    self._cond.wait(timeout=0.5)
            finally:
                if waiting:
                    self._waiters -= 1
                    self._cond.notify_all()

    def give_back(self, unit: Sequence[Any]) -> None:
        """The unit ended: its weight is free for the lanes that wait."""
        with self._cond:
            self.used = max(0, self.used - unit_weight(unit))
            self._cond.notify_all()
