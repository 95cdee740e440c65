"""Which units of a matrix may run side by side: lane slots the units take, heavy ones two.

Why: lanes fill the machine, but a heavy unit crowded by others makes its generator late, and a
generator-bound case decides nothing. Measured on the 2-core machine, full standard matrix:

- At 2 lanes (c7a4b1f) every group that came out generator-bound had run beside another heavy
  unit, and each measured 0 bound alone on a lane: ZooKeeper ensemble kill-member (12 of 12) and
  kill-leader (6 of 12) beside Redis crash groups and lease-expiry-world; ZooKeeper
  session-pause (4 of 4) beside etcd ensemble kills; PostgreSQL's restart group of 12 (12 of
  12) beside the Redis Sentinel failover group of 13; Redis lease-expiry-world (4 of 8) beside
  ZooKeeper kill-leader.
- At 3 lanes with heavy units kept apart only from each other (29a0d0a, four shards), heavy units
  came out bound beside two light ones: ZooKeeper session-pause 4 of 4 beside etcd
  lease-expiry-task and a partition lane, lease-expiry-world 14 of 24 beside crash groups and a
  ZooKeeper ensemble on test hosts, ZooKeeper ensemble kills 18 of 24 beside an etcd ensemble
  partitioned on test hosts (and Redis's long-cs and lease-expiry-task groups beside both, 14 of
  16). The same kills beside a one-server partition lane and a Redis restart: 0 of 6. Light
  units beside light ones stayed unbound (crash groups, restarts of five, one-server partitions,
  long critical sections, lease expiry by task).
- With a heavy unit taking two of 3 slots (b67158a, shard 1), ZooKeeper's ensemble member kills
  were still 5 of 6 generator-bound beside one partition lane, and 6 of 6 beside etcd's light
  units, of which lease-expiry-task came out 3 of 5 bound too; alone on a lane they measured 0
  of 12 (round 11). Restarting one of three JVMs on two cores takes the machine: they run alone.

- At 5 lanes with a heavy unit taking two of 5 slots (X5, 2026-12-05, shards 2 and 3 of the
  full standard matrix), 57 of 205 cases came out generator-bound, against 2 of 205 at 3 lanes:
  etcd's ensemble kills 5 of 5 beside three light units, and in the partition shard the Sentinel
  failover (13 of 13) beside four partition lanes on test hosts, which were bound too (20 of 21).
  The machine was 1.2-1.34 cores busy, against 0.96-1.03 at 3 lanes: on two cores the
  generators are late before the machine is busier. That is why ``--lanes auto`` gives a 2-core
  machine 3 lanes, not more (``LANE_CPU``, machine.py).

- With every case's Locust raised above the servers (machine.py ``generator_nice``, root), a heavy
  unit two slots of 5 lanes did not hold over the full matrix (figures at machine.py
  ``GENERATOR_NICE``), so the rule below stands. ZooKeeper's
  ensemble kills treated as heavy, raised (a shard at 5 lanes, a test run beside it for its first
  3 minutes, load average 0.53 at the start): 15 of their 24 cases generator-bound (member kills
  12 of 12), and 12 of the 46 others; they still run alone.
- The same at 3 lanes, heavy (one light unit beside them), raised (2026-12-06, shard 1 of the full
  standard matrix on 61a735b with ``_ALONE`` empty, load 0.48 at the start): the machine 1.58
  cores busy, but 23 of their 24 cases generator-bound (loops late 22% of the time, against 8-13%
  alone in R4) beside etcd's and the file's crash groups and Redis's partitions; they run alone.

So each lane running a unit takes a slot, a heavy unit all slots but one (at least two), and the
lanes have as many slots as lanes: whatever the lanes, a heavy unit runs beside one light unit
(:data:`BESIDE_HEAVY`), never beside two, and never beside another heavy one (at most :data:`MAX_HEAVY` at a time, whatever the slots); ZooKeeper's
ensemble member and leader kills take every slot (:data:`ALONE`). A unit is heavy when
it runs on an ensemble of three servers (member kills, partitions of a leader or a majority),
pauses a session's process for seconds, fails over Sentinel, pauses a whole Locust process
(lease-expiry-world), restarts a server under a group of :data:`BIG_GROUP` cases or more, or cuts
a partition under more than :data:`BIG_GROUP` Locust processes. A lane whose next unit does not fit runs a later one of its own
that does (a lane clears the lock state between units), and waits only when none fits; while a
lane waits, the others start only what leaves it room once the heavy unit running now ends, so
a heavy unit is not kept waiting to the end by light ones coming one after another.

With the cases' Locust real-time (round 30, :func:`limits`) the rule is looser: two heavy units
at once, or one beside two light ones, and ZooKeeper's ensemble kills count as heavy.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from typing import Any

LIGHT = 1
HEAVY = 2
#: Takes every slot, however many there are: nothing runs beside it.
ALONE = 1_000
#: What :meth:`Admission.occupancy` tells apart: a unit running alone, a heavy unit, light units only, nothing.
OCCUPANCY = ("alone", "heavy", "light", "nothing")
#: Heavy units (and units run alone) running at once, at most, with generators in the normal class
#: (at a nice value). ``LOCKBENCH_MAX_HEAVY`` overrides it (a measurement knob, as
#: ``LOCKBENCH_GROUP_MAX`` is): :func:`limits`.
MAX_HEAVY = 1
#: Light units a heavy unit may run beside, however many lanes: at 3 lanes (a heavy unit two slots
#: of 3) one light unit beside it left it unbound; at 5 lanes with a heavy unit taking two slots,
#: three light units beside etcd's ensemble kills made 17 of 114 cases generator-bound (X5, 2026-12-05).
#: Two beside it at 4 lanes, raised generators (B4, 2026-12-06, four shards, loads 0.04-1.43 at
#: their starts): 444, 461, 571 and 547 s (2,023 s against 2,222 at 3 lanes) at 1.16, 1.59, 1.38
#: and 1.46 cores busy (1.40 in all), but 41 of 346 cases generator-bound: the Sentinel failover 13
#: of 13 beside two crash groups (12 Locust processes each, "light"), and two etcd cells thin.
BESIDE_HEAVY = 1  # LOCKBENCH_BESIDE_HEAVY overrides it (a measurement knob too)
#: With the generators in the real-time class (workloads/harness/priority.py) a woken loop runs at
#: once, so two heavy units may run together, or one beside two light ones (four lanes: a heavy
#: unit two slots). The same rule in the normal class (K, shard 4/4, 2026-12-07, load 0.89 at the
#: start): 550 s at 1.64 cores busy, 37 of 120 cases generator-bound; real-time (RT1, load 1.02):
#: 550 s at 1.52, none bound. Full-matrix figures: docs/architecture.md "What makes the loops late".
REALTIME_MAX_HEAVY = 2
REALTIME_BESIDE_HEAVY = 2
#: And ZooKeeper's ensemble kills (:data:`ALONE`) count as heavy there: shard 1/4 (its three lanes:
#: those kills and two of one-server partitions) took 339 s at 1.03 cores busy with none of 28
#: cases bound, against 437 s at 0.74 with the kills alone (E1 and F2, round 30, loads 0.90 and
#: 0.44 at the starts), every cell the same.
#: ``LOCKBENCH_HEAVY_PAIRS=1``: two heavy units may run at once when nothing else runs beside them,
#: and light units wait while a heavy one could join the one running (a measurement knob). With
#: groups in shared processes (P, 2026-12-07, loads 0.18 and 0.85 at the starts): shard 4 took 668 s
#: against 609 at 1.01 cores busy, 15 of 120 bound against 10 (the light units waited: 231 s of
#: light-only time against 150), shard 2 501 s against 538 at 0.72, 1 bound against 0. Not the default.
HEAVY_PAIRS = os.environ.get("LOCKBENCH_HEAVY_PAIRS", "0") == "1"
#: A restart under a group of this many cases or more is heavy (12 Locust processes reconnecting),
#: and so is a partition group running more Locust processes than this, each on a test host of its
#: own: PostgreSQL's partition-client group (7 cases, 14 processes) beside the Sentinel failover
#: came out 2 of 7 generator-bound in W (loops late 16%), 7 of 7 in Y (33%) and X5 (62%), 2026-12-05.
BIG_GROUP = 8


def limits(realtime: bool) -> tuple[int, int, bool]:
    """(heavy units at once, light units beside a heavy one, whether units that run alone count as
    heavy) for generators real-time or not. ``LOCKBENCH_MAX_HEAVY``, ``LOCKBENCH_BESIDE_HEAVY`` and
    ``LOCKBENCH_ALONE_AS_HEAVY`` (1 or 0) override each."""
    max_heavy = REALTIME_MAX_HEAVY if realtime else MAX_HEAVY
    beside = REALTIME_BESIDE_HEAVY if realtime else BESIDE_HEAVY
    alone_as_heavy = os.environ.get("LOCKBENCH_ALONE_AS_HEAVY", "")
    return (
        int(os.environ.get("LOCKBENCH_MAX_HEAVY", "") or max_heavy),
        int(os.environ.get("LOCKBENCH_BESIDE_HEAVY", "") or beside),
        realtime if alone_as_heavy not in ("0", "1") else alone_as_heavy == "1",
    )


_HEAVY_SCENARIOS = frozenset(
    {"kill-member", "kill-leader", "session-pause", "failover", "lease-expiry-world"}
)
#: (backend, scenario) that run alone: a JVM of three restarted on two cores.
_ALONE = frozenset({("zookeeper", "kill-member"), ("zookeeper", "kill-leader")})


def unit_weight(unit: Sequence[Any]) -> int:
    """The lane slots a unit (a lone case or a group: cases with ``matrix_scenario``) takes."""
    if not unit:
        return 0
    first = unit[0]
    scenario = first.matrix_scenario
    if (first.backend, scenario) in _ALONE:
        return ALONE
    if scenario in _HEAVY_SCENARIOS or (scenario == "restart" and len(unit) >= BIG_GROUP):
        return HEAVY
    if first.fault is not None and first.fault.topology(first.backend) == "ensemble":
        return HEAVY  # three servers of its own (three JVMs for ZooKeeper), whatever the strike
    if first.fault is not None and first.fault.is_partition and _processes(unit) > BIG_GROUP:
        return HEAVY  # a Locust process a test host: PostgreSQL's partition-client group runs 14
    return LIGHT


def _processes(unit: Sequence[Any]) -> int:
    """The Locust processes a unit runs at once."""
    return sum(c.settings.processes for c in unit)


class Admission:
    """The slots the lanes of one matrix share: a unit starts only when its weight fits.

    Why a class: lanes are threads; one condition variable lets a finishing unit wake the lanes
    that wait, and ``waited_s`` says in run.json what keeping heavy units apart cost.
    """

    def __init__(
        self,
        slots: int,
        max_heavy: int = MAX_HEAVY,
        beside_heavy: int | None = BESIDE_HEAVY,
        heavy_pairs: bool = HEAVY_PAIRS,
        alone_as_heavy: bool = False,
    ) -> None:
        self.slots = max(1, slots)
        #: units that run alone (:data:`ALONE`) count as heavy ones instead
        self.alone_as_heavy = alone_as_heavy
        self.max_heavy = max_heavy
        #: a second heavy unit may join a first when no light unit runs, and none joins the pair
        self.heavy_pairs = heavy_pairs
        #: light units a heavy one may run beside (None: a heavy unit simply takes HEAVY slots)
        self.beside_heavy = beside_heavy
        self.used = 0
        #: heavy units running, and the slots they hold
        self.heavy = 0
        self.heavy_slots = 0
        self.waited_s = 0.0
        #: units running alone right now (:data:`ALONE`)
        self.alone = 0
        #: seconds spent with a unit alone, a heavy unit (and a light one beside), light units only,
        #: nothing: what set the matrix's wall, beside how busy the machine was
        self.spent = dict.fromkeys(OCCUPANCY, 0.0)
        self._since = time.monotonic()
        #: what each waiting lane needs (the fewest slots of its units), by lane
        self._needs: dict[int, int] = {}
        self._cond = threading.Condition()

    def _tick(self) -> None:
        """Add the time since the last change to what was running then (the caller holds the lock)."""
        now = time.monotonic()
        state = "alone" if self.alone else "heavy" if self.heavy else "light" if self.used else "nothing"
        self.spent[state] += now - self._since
        self._since = now

    def occupancy(self) -> dict[str, float]:
        """Seconds so far with a unit running alone, a heavy unit, light units only, and nothing."""
        with self._cond:
            self._tick()
            return {f"{k}_s": round(v, 1) for k, v in self.spent.items()}

    def _slots_of(self, weight: int) -> int:
        """The slots a unit of ``weight`` holds: a heavy one all but :data:`BESIDE_HEAVY` (at least two),
        so that whatever the lanes it runs beside as many light units as measured safe at 3 lanes."""
        if weight == HEAVY and self.beside_heavy is not None:
            return min(max(HEAVY, self.slots - self.beside_heavy), self.slots)
        return min(weight, self.slots)

    def fits(self, weight: int) -> bool:
        if self.heavy_pairs and weight < ALONE and not self.alone:
            light_used = self.used - self.heavy_slots
            if weight >= HEAVY and self.heavy == 1 and self.max_heavy <= 1:
                return light_used == 0
            if weight < HEAVY and self.heavy >= 2:
                return False
        if weight >= HEAVY and self.heavy >= self.max_heavy:
            return False
        # a unit as heavy as every slot, or heavier, runs only when nothing else does
        return self.used + self._slots_of(weight) <= self.slots or self.used == 0

    def _leaves_room(self, weight: int) -> bool:
        """Whether a unit of ``weight`` may start while lanes wait: only if the neediest waiter still
        fits once the heavy units running now end (light ones may join a heavy one, no more)."""
        if not self._needs:
            return True
        need = max(self._needs.values())
        if self.heavy_pairs and self.heavy == 1 and not self.alone and need >= HEAVY:
            return False  # the waiting heavy unit joins the running one as soon as the light ones end
        light_used = self.used - self.heavy_slots
        return weight < HEAVY and light_used + weight + need <= self.slots

    def _weight(self, unit: Sequence[Any]) -> int:
        weight = unit_weight(unit)
        return HEAVY if weight == ALONE and self.alone_as_heavy else weight

    def take(self, units: Sequence[Sequence[Any]], cancel: threading.Event) -> int | None:
        """The index of the first of ``units`` that fits now, its slots taken; waits while none fits.

        None when ``cancel`` is set while waiting.
        """
        t0 = time.monotonic()
        me = threading.get_ident()
        with self._cond:
            try:
                while True:
                    waiting = me in self._needs
                    for i, unit in enumerate(units):
                        weight = self._weight(unit)
                        if self.fits(weight) and (waiting or self._leaves_room(weight)):
                            self._tick()
                            self.used += self._slots_of(weight)
                            self.alone += weight >= ALONE
                            if weight >= HEAVY:
                                self.heavy += 1
                                self.heavy_slots += self._slots_of(weight)
                            self.waited_s += time.monotonic() - t0
                            return i
                    if cancel.is_set():
                        return None
                    self._needs[me] = min((self._slots_of(self._weight(u)) for u in units), default=0)
                    self._cond.wait(timeout=0.5)
            finally:
                if self._needs.pop(me, None) is not None:
                    self._cond.notify_all()

    def give_back(self, unit: Sequence[Any]) -> None:
        """The unit ended: its slots are free for the lanes that wait."""
        weight = self._weight(unit)
        with self._cond:
            self._tick()
            self.used = max(0, self.used - self._slots_of(weight))
            self.alone = max(0, self.alone - (weight >= ALONE))
            if weight >= HEAVY:
                self.heavy = max(0, self.heavy - 1)
                self.heavy_slots = max(0, self.heavy_slots - self._slots_of(weight))
            self._cond.notify_all()
