"""A case's Locust processes, and the servers they talk to, ahead of the harness in the machine's CPU queue.

Since round 30 a raised Locust process also runs in the real-time class (SCHED_FIFO at the lowest
priority, :func:`raise_realtime`), where the kernel lets it: a nice value only weighs a process
against the others in the normal class, so a woken loop still waited for a running server or case
to use up its slice. A real-time process runs as soon as it wakes, ahead of the whole normal class,
and, all raised processes having the same priority, none preempts another: each runs until it
blocks. Beside three half-busy burners at nice -5, a loop waking every 50 ms woke over 2 ms late
18.2% of the time at nice 0, 16.2% at nice -5 (0.89x) and never in SCHED_FIFO (0x); p99 5.2, 3.8
and 0.11 ms (benchmarks/realtime_wakeups.py, 3 rounds of 20 s, load 0.92 at the start,
2026-12-07). The servers whose every thread blocks
between requests (Redis, Sentinel, memcached, PostgreSQL: ``ServerProcess.realtime``) join them,
so that the cases' processes do not starve them: with Redis left in the normal class, a crash case
of ``redis.reentrant`` (six processes woken together by each unlock message) ran 36 s instead of
10 s, its acquires' median 2.5 ms against 0.3-0.5. etcd and ZooKeeper stay in the normal class at
the nice value: in SCHED_FIFO etcd's Go runtime spins its idle threads and the ZooKeeper JVM
compiles and collects for seconds, and either held both cores until the harness (normal class)
could not answer its own lanes (load average 41-55; shard 4/4 lost 117 of 120 cases). A process
that never blocks would hold a core; the kernel still gives the normal class 5% of each second
(``kernel.sched_rt_runtime_us``). ``LOCKBENCH_REALTIME=0`` keeps everything in the normal class.

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
import threading


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


#: ``LOCKBENCH_REALTIME=0`` keeps raised processes in the normal class, at their nice (a measurement knob).
REALTIME_ENV = "LOCKBENCH_REALTIME"
#: The real-time priority (SCHED_FIFO, 1-99) of a raised process: the lowest. Every raised process
#: has the same one, so none preempts another; each runs until it blocks, and all of them wake ahead
#: of every process in the normal class (the harness, the servers left there).
REALTIME_PRIORITY = 1


def realtime_wanted() -> bool:
    """Whether raised processes go real-time (the knob; whether the kernel lets them is tried)."""
    return os.environ.get(REALTIME_ENV, "1") != "0"


def raise_realtime(pid: int) -> bool:
    """Put every thread of process ``pid`` (0: the calling thread) in SCHED_FIFO at :data:`REALTIME_PRIORITY`.

    Threads and processes it starts later inherit the class. True when every thread still there took
    it; False when the knob is off, the process is gone, or the kernel refused (no CAP_SYS_NICE, or a
    cgroup without real-time runtime).
    """
    if not realtime_wanted():
        return False
    try:
        tids = [0] if pid == 0 else [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return False
    param = os.sched_param(REALTIME_PRIORITY)
    took = False
    for tid in tids:
        try:
            os.sched_setscheduler(tid, os.SCHED_FIFO, param)
        except ProcessLookupError:
            continue  # that thread ended meanwhile
        except OSError:
            return False  # refused: refused for every thread
        took = True
    return took


def raise_generator(pid: int, nice: int) -> None:
    """A case's Locust process (``pid``, 0: this one) raised: its session at ``nice``, and real-time
    where the kernel lets it. Set before Locust forks its workers or starts threads: they inherit it."""
    raise_priority(pid, nice)
    raise_realtime(pid)


def can_run_realtime() -> bool:
    """Whether this process may put processes in SCHED_FIFO: tried on a thread of its own that then ends."""
    if not realtime_wanted():
        return False
    took: list[bool] = []

    def probe() -> None:
        took.append(raise_realtime(0))  # this thread only; it ends at once

    thread = threading.Thread(target=probe, name="lockbench-realtime-probe")
    thread.start()
    thread.join()
    return bool(took and took[0])


#: The kernel's CFS/EEVDF weight of each nice value from -20 to 19 (kernel/sched/core.c
#: ``sched_prio_to_weight``): one step is about 1.25 times the CPU share.
_WEIGHTS = (
    88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916,
    9548, 7620, 6100, 4904, 3906, 3121, 2501, 1991, 1586, 1277,
    1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
    110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
)  # fmt: skip

#: ``LOCKBENCH_GROUP_WEIGHT=0`` leaves a shared group process at the nice of one case (a measurement knob).
GROUP_WEIGHT_ENV = "LOCKBENCH_GROUP_WEIGHT"


def shared_nice(nice: int, cases: int) -> int:
    """The nice value that gives one process of ``cases`` cases the CPU weight of ``cases`` sessions at ``nice``.

    Why: with autogroup each session is one entity in the CPU queue, so ``cases`` cases in
    processes of their own weighed ``cases`` times what one process running them all weighs;
    beside the same neighbours the shared process then woke late where they had not (etcd's
    lease-expiry-task group of five: loops late 39-40% shared, 6% apart, in two matrices). At
    most -20; ``nice`` itself for one case or with ``LOCKBENCH_GROUP_WEIGHT=0``.
    """
    if cases <= 1 or os.environ.get(GROUP_WEIGHT_ENV, "1") == "0":
        return nice
    want = _WEIGHTS[max(-20, min(19, nice)) + 20] * cases
    return min(range(-20, 20), key=lambda n: (abs(_WEIGHTS[n + 20] - want), -n))
