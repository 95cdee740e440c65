"""A case's Locust processes, and the servers they talk to, ahead of the harness in the machine's CPU queue.

Why: on a shared 2-core machine a Locust process's loop runs late when it wakes behind other
processes (servers, the bench process, other cases' Locust), and a late loop makes the case
generator-bound and its holders look stalled. A process that sleeps most of its time and is
raised above the rest wakes first; it gives up no share of the CPU it does not ask for.
Measured on the 2-core machine (shard 2/4 of the standard matrix, 93 cases, 3 lanes, load
average 0.45 and 0.54 at the starts): 7 cases generator-bound at equal priority, none with the
cases' sessions at nice -5; the same colours in all 45 cells; etcd, ZooKeeper and Redis servers
used about the same CPU (0.26/0.11/0.07 cores against 0.23/0.11/0.07).

Each case's Locust runs in a session of its own (``setsid``). Linux schedules a session as one
group where autogroup is on (``kernel.sched_autogroup_enabled``), and a process's own nice then
weighs only against its session's other processes: so the session's autogroup nice is set, and
the process's own nice too (inherited by the workers Locust forks), which is what counts where
autogroup is off. Raising a priority needs CAP_SYS_NICE (root): without it nothing changes.

Tried and taken out (round 23): the scheduler's shortest slice (0.1 ms, Linux EEVDF's custom slice
through ``sched_setattr``) on every thread of the raised processes, so that a woken loop need not
wait out another's 1.4 ms slice. Beside two burners keeping 1.5 cores busy a 50 ms sleep loop woke
over 2 ms late 16.2% of the time at the default slice, 7.3% at nice -5 and 1.8% with the slice.
In the matrix it did the opposite: shard 4/4 of the standard matrix (705826b, 3 lanes, load 1.12 at
the start, steal 0.01) took 742 s at 1.52 cores busy with 38 of 120 cases generator-bound, against
660 s, 1.34 and 29 without it (X, ddf91a1, load 0.99; different runs, not a paired A/B): dozens of
raised Locust processes preempting each other every 0.1 ms cost more CPU than the waits saved.

The servers of a matrix are raised to the same value (bench/matrix/command.py, through
``infra.process.on_every_start``, so a fault's restart is raised too). With only the Locust
sessions raised, every server session lost the CPU queue to them: in shard 4/4 of the standard
matrix (L, 785948a, load average 0.98 at the start) etcd's keepalives took p50 20 ms, p99 363 ms,
at most 544 ms, against p99 17 ms run alone, and in K (the same shard, 0.60) 1 s leases ran out
while their renewals waited: a red the harness made. Beside four raised half-busy burners,
raising etcd too cut its renewal p99 from 44 to 21 ms.
"""

from __future__ import annotations

import contextlib
import os


def raise_priority(pid: int, nice: int) -> bool:
    """Give process ``pid`` (0: this one) and its session's autogroup the nice value ``nice``.

    True when either took; False when neither could (no CAP_SYS_NICE, or the process is gone).
    """
    took = False
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid or 'self'}/autogroup", "w") as f:
            f.write(str(nice))
        took = True
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, nice)
        took = True
    return took


def can_raise() -> bool:
    """Whether this process may lower a nice value (CAP_SYS_NICE in its effective set: root in a
    container may lack it)."""
    try:
        with open("/proc/self/status") as f:
            caps = next((line.split()[1] for line in f if line.startswith("CapEff:")), "0")
    except OSError:
        return False
    return bool(int(caps, 16) >> 23 & 1)  # CAP_SYS_NICE
