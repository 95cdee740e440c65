"""What this machine has spare: load averages, CPU ticks, and how many lanes to run side by side.

Why its own module: the matrix reads the machine at its start (how many lanes fit) and at its end
(how busy it was), and both must read it the same way.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path

from workloads.harness.priority import can_raise, can_run_realtime

#: What one lane keeps busy, in cores, at its busiest. Measured on the 2-core machine over the full
#: standard matrix at ``--lanes 2`` (c7a4b1f, four shards, loads 0.3-1.9 at their starts): the
#: machine was 0.62, 0.85, 1.23 and 1.08 cores busy, 0.31-0.62 a lane. The highest is used, so a
#: quiet 2-core machine runs three lanes; the admission budget (admission.py) keeps heavy units apart.
#: At 3 lanes (W, d6ededd) a lane kept 0.25-0.35 of a core busy on average, yet 0.6 stays: at 5
#: lanes the generators were late in 28% of the cases with the machine only 1.2-1.34 busy
#: (admission.py, X5). A lane's bursts, not its average, decide how many fit. At 4 lanes with a heavy
#: unit holding all slots but one (L4, 750ebba, 2026-12-05, load 2.31 and 0.29 at the starts)
#: shards 2 and 3 took 540 and 687 s (3 lanes: 528 and 579) at 0.87 and 0.84 cores busy (1.03,
#: 0.96), 1 and 2 cases bound: heavy units run one at a time beside one light unit, so a fourth
#: lane only waits (admission waits 666 and 1,037 s; shard 3's longest lane, redis#1, 333 s idle
#: against 224 s at 3). The heavy units, not the lanes, set a shard's time.
LANE_CPU = 0.6
#: What one lane keeps busy with its generators in the real-time class: 0.45, so that a quiet 2-core
#: machine (up to 0.2 cores busy: the bench process itself reads 0.01-0.1 while it plans) runs four
#: lanes, the two heavy units or one beside two light ones that admission.py lets meet there (RT1,
#: shard 4/4 at 4 lanes, 2026-12-07: 1.52 cores busy, none of 120 cases bound). At 0.5 a shard
#: that read 0.01 busy got three.
REALTIME_LANE_CPU = 0.45
#: Never more lanes side by side than this, whatever the machine has spare.
MAX_AUTO_LANES = 4
#: Raised generators (:data:`GENERATOR_NICE`) did not buy more lanes. At 5 lanes, a heavy unit two
#: slots, shard 2/4 had 2 of 93 cases generator-bound (1.45 cores busy, 401 s against 505 at 3), but
#: the full matrix did not hold it: two runs of shard 3 had 10 and 38 of 113 bound (1.25 and 1.41
#: busy; the second saturated, 1.8-2.0 busy for its first 4 minutes under Redis's failover,
#: long-cs and lease-expiry groups at once), and etcd's fail-open control granted before any strike
#: once (two cells undecided). 6 lanes: 9 of 93 bound. So the lanes stay at 0.6 of a core.
#: The nice value of every case's Locust session and every server in a matrix, where this process may
#: raise it (root): workloads/harness/priority.py says why and what it changed.
GENERATOR_NICE = -5
#: How long the busy cores are sampled before choosing the lanes.
SAMPLE_S = 1.0


def load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (the matrix's figures are read beside them)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def cpu_ticks() -> tuple[int, int, int] | None:
    """(busy, total, steal) CPU ticks of the whole machine so far (/proc/stat), None where unreadable.

    Busy counts steal (time the hypervisor gave this machine's cores to others): a stolen core is
    no spare core for a lane. Steal is also given apart, because it is no work of the matrix.
    """
    try:
        fields = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    steal = fields[7] if len(fields) > 7 else 0
    return sum(fields) - idle, sum(fields), steal


def busy_cores(start: tuple[int, ...] | None, end: tuple[int, ...] | None) -> float | None:
    """Mean cores busy between two :func:`cpu_ticks` readings (the matrix, its servers, anything else, steal)."""
    return _cores(start, end, 0)


def steal_cores(start: tuple[int, ...] | None, end: tuple[int, ...] | None) -> float | None:
    """Mean cores the hypervisor took between two :func:`cpu_ticks` readings (part of :func:`busy_cores`).

    Why: a full matrix on this 2-core VM once ran with 0.43 cores stolen (shard 1/4, 2026-12-06,
    against 0.02 in the same shard that morning): 1.6 cores "busy", 505 s instead of 390, every
    case generator-bound. A run's figures mean nothing about the suite when a fifth of the
    machine was someone else's; run.json says how much was.
    """
    return _cores(start, end, 2)


def _cores(start: tuple[int, ...] | None, end: tuple[int, ...] | None, field: int) -> float | None:
    """Mean cores that ticks ``field`` of two :func:`cpu_ticks` readings took (None: not both read)."""
    if start is None or end is None or end[1] <= start[1] or min(len(start), len(end)) <= field:
        return None
    return round((end[field] - start[field]) / (end[1] - start[1]) * (os.cpu_count() or 1), 2)


def busy_now(seconds: float = SAMPLE_S) -> float | None:
    """Cores busy over the next ``seconds`` (anything running here), None where /proc/stat is unreadable."""
    start = cpu_ticks()
    time.sleep(seconds)
    return busy_cores(start, cpu_ticks())


@dataclass(frozen=True)
class GeneratorPriority:
    """Where a matrix's cases' Locust processes (and its servers) stand in the CPU queue.

    Why one value: the nice value, the real-time class, the lanes that fit and the admission rule
    go together; a matrix decides them once, before it starts, and run.json says which it ran at.
    """

    #: the nice value of every case's Locust session and every server (None: left as they are)
    nice: int | None
    #: whether the cases' Locust processes, and the servers that may (infra/process.py), run in the
    #: real-time class (workloads/harness/priority.py)
    realtime: bool
    why: str

    @property
    def lane_cpu(self) -> float:
        return REALTIME_LANE_CPU if self.realtime else LANE_CPU


def generator_priority() -> GeneratorPriority:
    """How this machine lets the matrix raise its generators: real-time, a nice value, or neither."""
    if not can_raise():
        return GeneratorPriority(
            None, False, "cases' Locust at the servers' priority (raising it needs root)"
        )
    if can_run_realtime():
        return GeneratorPriority(
            GENERATOR_NICE,
            True,
            f"cases' Locust real-time (SCHED_FIFO), Redis, memcached and PostgreSQL too, "
            f"etcd and ZooKeeper at nice {GENERATOR_NICE}",
        )
    return GeneratorPriority(GENERATOR_NICE, False, f"cases' Locust and servers at nice {GENERATOR_NICE}")


def auto_lanes(
    cores: int | None = None, busy: float | None = None, lane_cpu: float = LANE_CPU
) -> tuple[int, str]:
    """How many lanes to run side by side here, and why: the cores spare now, at ``lane_cpu`` a lane.

    The spare cores are measured (a second of /proc/stat), not taken from the load average: a
    shard that starts as the one before it ends would see that one's load for minutes and run
    on one lane. Where /proc/stat cannot be read, the 1-minute load average stands in.
    A starved lane makes sessions expire and holders stall, so never more lanes than fit.
    """
    cores = cores or os.cpu_count() or 1
    source = "busy now"
    if busy is None:
        busy = busy_now()
    if busy is None:
        source = "load average"
        try:
            busy = os.getloadavg()[0]
        except OSError:
            busy = 0.0
    spare = max(0.0, cores - busy)
    lanes = max(1, min(MAX_AUTO_LANES, math.floor(spare / lane_cpu + 1e-9)))
    return lanes, f"{cores} cores, {busy:.2f} {source}: {spare:.1f} spare, {lane_cpu:g} a lane"
