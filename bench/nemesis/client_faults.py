"""The faults a client makes to itself: a long hold, a paused task or process, a crash, a skewed clock.

bench's fault thread does not make these: the workload's clients do (workloads/long_cs.py,
lease_expiry.py, crash.py, and the lock clock ``--clock-skew`` hands a share of the clients).
Their strikes are recognised in the history (:mod:`bench.measure.strikes`); here each kind says
what it must reach in a lock, when one of its strikes counts, and the controls of its scenarios.
"""

from __future__ import annotations

from bench.nemesis.kind import FaultKind

LONG_HOLD = "long-hold"
TASK_PAUSE = "task-pause"
WORLD_PAUSE = "world-pause"
SESSION_PAUSE = "session-pause"
CRASH = "crash"
CLOCK_SKEW = "clock-skew"

_ALL = ("redis", "postgres", "etcd", "memcached", "zookeeper", "file")
#: lease locks whose lease nobody renews: the catalog's failures under a hold past the lease
_LEASE = {
    "redis": "redis.set-nx-px",
    "postgres": "postgres.unique-insert-expiry",
    "memcached": "memcached.add",
}

KINDS = (
    FaultKind(
        name=LONG_HOLD, backends=_ALL,
        reach="the lock's lease: a lock without one cannot be struck (n/a)",
        precondition="a hold longer than the lease",
        controls={"long-cs": {**_LEASE, "etcd": "canary.no-keepalive-etcd"}},
    ),
    FaultKind(
        name=TASK_PAUSE, backends=_ALL,
        reach="the lock's lease, while the holder's process (its watchdogs) runs on",
        precondition="the holder's task paused inside its critical section (a pause event in the history)",
        controls={"lease-expiry-task": {**_LEASE, "etcd": "canary.no-keepalive-etcd"}},
    ),
    FaultKind(
        name=WORLD_PAUSE, backends=_ALL,
        reach="the lock's lease and every renewal of it: the whole process stops",
        precondition="the holder's process stopped inside its critical section",
        controls={"lease-expiry-world": {**_LEASE, "etcd": "etcd.lease"}},
    ),
    FaultKind(
        name=SESSION_PAUSE, backends=("zookeeper",),
        reach="the ZooKeeper session the lock rests on: its heartbeats stop with the process",
        precondition="the holder's process stopped inside its critical section for longer than its session",
        controls={SESSION_PAUSE: {"zookeeper": "zookeeper.sequential"}},
    ),
    FaultKind(
        name=CRASH, backends=_ALL,
        reach="whatever frees a dead holder's lock: its lease, session, connection, or nothing",
        precondition="the holder's process was killed (SIGKILL) inside its critical section",
        # a lock that never frees a dead holder must get stuck: the catalog's where one exists, a
        # no-expiry canary where every catalog lock of the backend recovers in its own time
        controls={CRASH: {"redis": "redis.setnx-del", "postgres": "postgres.unique-insert",
                          **{b: f"canary.no-expiry-{b}" for b in ("etcd", "zookeeper", "memcached", "file")}}},
    ),
    FaultKind(
        name=CLOCK_SKEW, backends=_ALL,
        reach="the client clock the lock reads (Lock.reads_clock; the harness counts the reads): a lock "
        "that never reads it cannot be struck (n/a)",
        precondition="a skewed client was granted the lock while an unskewed one waited for it or held it",
        controls={CLOCK_SKEW: {"redis": "redis.setnx-getset"}},
    ),
)  # fmt: skip
