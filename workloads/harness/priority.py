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

A nice value gives a process a larger share; it does not make a woken loop run sooner. So every
thread of a raised process also gets the scheduler's shortest slice (:data:`SLICE_NS`, Linux's
EEVDF scheduler, kernel 6.12 or later): a woken loop preempts a process with a longer slice and
waits at most a short slice behind an equal one.

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
import ctypes
import os
import platform
import struct

#: The CPU slice, in ns, of every raised process (Linux's EEVDF scheduler, kernel 6.12 or later):
#: the kernel's least. A process that wakes with a shorter slice than the one running preempts it,
#: and among equals the running one gives way after its slice, not the default 0.7-3 ms. Why: a
#: nice value shares the CPU, it does not make a woken loop run sooner, and "late" is a wake that
#: waited behind a running process. Measured (2026-12-06, 2-core VM, load 1.1 at the start): a
#: loop sleeping 50 ms beside two burners keeping 1.5 cores busy woke over 2 ms late 16.2% of the
#: time at the default slice, 7.3% at nice -5, 1.8% with this slice (400 wakes each, run side by
#: side); 3.0% when the burners had the same short slice (default beside them: 16.8%).
SLICE_NS = 100_000
#: sched_setattr / sched_getattr, per architecture (Python's os has neither)
_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}
_ATTR = struct.Struct("IIQiIQQQII")  # struct sched_attr, version 1 (56 bytes)


def raise_priority(pid: int, nice: int) -> bool:
    """Give process ``pid`` (0: this one) and its session's autogroup the nice value ``nice``, and
    every thread of it the short slice (:data:`SLICE_NS`).

    True when any took; False when none could (no CAP_SYS_NICE and no EEVDF, or the process is gone).
    """
    took = False
    with contextlib.suppress(OSError):
        with open(f"/proc/{pid or 'self'}/autogroup", "w") as f:
            f.write(str(nice))
        took = True
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, pid, nice)
        took = True
    return short_slice(pid) or took


def short_slice(pid: int = 0) -> bool:
    """Give every thread of ``pid`` (0: the calling thread) the scheduler slice :data:`SLICE_NS`,
    keeping its policy and nice; threads and processes it starts later inherit it.

    False where the kernel or architecture has no such call, or the process is gone. A kernel
    before 6.12 takes the call and ignores the slice.
    """
    calls = _SYSCALLS.get(platform.machine())
    if calls is None:
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return False
    tids = [0] if not pid else _threads(pid)
    took = False
    for tid in tids:
        buf = ctypes.create_string_buffer(_ATTR.size)
        if libc.syscall(calls[1], tid, buf, _ATTR.size, 0) != 0:
            continue
        _size, policy, _flags, nice, *_rest = _ATTR.unpack_from(buf)
        if policy != 0:  # SCHED_OTHER only: a real-time or batch thread keeps what it has
            continue
        attr = ctypes.create_string_buffer(
            _ATTR.pack(_ATTR.size, 0, 0, nice, 0, SLICE_NS, 0, 0, 0, 0), _ATTR.size
        )
        took = libc.syscall(calls[0], tid, attr, 0) == 0 or took
    return took


def slice_of(tid: int = 0) -> int | None:
    """The scheduler slice of thread ``tid`` (0: this one), in ns; None where it cannot be read."""
    calls = _SYSCALLS.get(platform.machine())
    if calls is None:
        return None
    buf = ctypes.create_string_buffer(_ATTR.size)
    if ctypes.CDLL(None, use_errno=True).syscall(calls[1], tid, buf, _ATTR.size, 0) != 0:
        return None
    return int(_ATTR.unpack_from(buf)[5])


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        return [pid]


def can_raise() -> bool:
    """Whether this process may lower a nice value (CAP_SYS_NICE in its effective set: root in a
    container may lack it)."""
    try:
        with open("/proc/self/status") as f:
            caps = next((line.split()[1] for line in f if line.startswith("CapEff:")), "0")
    except OSError:
        return False
    return bool(int(caps, 16) >> 23 & 1)  # CAP_SYS_NICE
