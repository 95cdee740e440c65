"""The safety scenarios ``bench matrix`` runs: one table, one row per scenario.

A row says which workload runs, which server fault (if any) strikes, the options that
make the scenario's event happen quickly and surely, which backends and impls it applies
to, and when the case has its evidence (a ``workloads.checks.stop_rules.StopRule``), so that a
case ends seconds after its event instead of after a fixed duration. New fault kinds (the
partition faults, say) are new rows here, with their expected outcomes in
``bench/matrix/expectations.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from workloads.checks.stop_rules import StopRule

#: Backends with a lock server that a fault can restart (file locks have none).
SERVER_BACKENDS = ("redis", "postgres", "etcd", "memcached", "zookeeper")


@dataclass(frozen=True)
class Scenario:
    """One safety scenario of the matrix and how to run it in as few seconds as it needs.

    ``settings`` override ``RunSettings`` fields (users, processes, ttl, acquire_timeout,
    clock_skew, skewed_clients, duration: a cap, the stop rule ends the case sooner);
    ``options`` override workload options (cs, pause, pause_kind, crash_after ...).
    ``backends`` / ``impls`` limit where it applies (None: everywhere), ``exclude`` names
    impls it cannot run (with the reason beside the row); ``single_server``
    excludes impls that need several servers (RedLock), for faults on one server's topology.
    """

    name: str
    workload: str
    summary: str
    stop: StopRule
    fault: str | None = None
    fencing: bool = True
    settings: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    backends: tuple[str, ...] | None = None
    impls: tuple[str, ...] | None = None
    exclude: tuple[str, ...] = ()
    single_server: bool = False

    def applies_to(self, impl_id: str, backend: str, servers: int) -> bool:
        if self.backends is not None and backend not in self.backends:
            return False
        if (self.impls is not None and impl_id not in self.impls) or impl_id in self.exclude:
            return False
        return not (self.single_server and servers > 1)


#: Fewer clients than ``bench run``: the matrix asks "does it break", not "how fast".
USERS = 6
#: After a server fault: acquisitions that show the lock works again, or how long to wait for them.
AFTER_FAULT = {"acquisitions": 5, "or_after_s": 5.0}

SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="flash-sale",
            workload="flash-sale",
            summary="no fault: contended buyers, 1 ms critical sections (the control row)",
            fencing=False,
            stop=StopRule("start", acquisitions=60),
            settings={"duration": 10.0},
        ),
        Scenario(
            name="long-cs",
            workload="long-cs",
            # Every critical section (1.1-1.3 s) outlasts the 0.5 s lease, and the 1 s that
            # locks with whole-second expiry round it up to: the event comes with every hold.
            summary="critical sections of 1.1-1.3 s under a 0.5 s lease",
            stop=StopRule("long-hold", count=2, long_hold_s=1.05),
            settings={"ttl": 0.5, "duration": 15.0},
            options={"cs": "uniform:1.1s:1.3s"},
        ),
        Scenario(
            name="lease-expiry-task",
            workload="lease-expiry",
            summary="a holder's task pauses 2 s under a 1 s lease (its process, watchdogs included, runs on)",
            stop=StopRule("pause", acquisitions=5, or_after_s=2.5),
            settings={"ttl": 1.0, "duration": 15.0},
            options={"pause": 2.0, "pause_every": 10, "pause_kind": "task", "cs": "5ms"},
        ),
        Scenario(
            name="lease-expiry-world",
            workload="lease-expiry",
            summary="a holder's whole process stops 2 s under a 1 s lease (a GC pause: watchdogs stop too)",
            stop=StopRule("pause", acquisitions=5, or_after_s=2.5),
            settings={"ttl": 1.0, "duration": 15.0, "processes": 2},
            # every 30th section: the first pause comes within a second, and the case has its
            # evidence before worker 0 stops the world again (a blocked worker delays the stop)
            options={"pause": 2.0, "pause_every": 30, "pause_kind": "world", "cs": "5ms"},
        ),
        Scenario(
            name="crash",
            workload="crash",
            # A lock counts as stuck 3 s after its holder died (3x the 1 s lease). Waiters
            # give up after 1 s, so the history goes on past the bound even when nobody
            # gets the lock, and the checker can tell "stuck" from "not yet".
            summary="a holder's process is killed (SIGKILL) inside its critical section; 1 s lease",
            fencing=False,
            stop=StopRule("crash", acquisitions=5, or_after_s=4.5),
            settings={"ttl": 1.0, "duration": 15.0, "processes": 2, "acquire_timeout": 1.0},
            options={"crash_after": 10, "stuck_bound": 3.0, "cs": "5ms"},
        ),
        Scenario(
            name="restart",
            workload="flash-sale",
            summary="the lock server is killed (SIGKILL) and restarted while a lock is held",
            fault="restart@held",
            stop=StopRule("fault", **AFTER_FAULT),
            settings={"duration": 20.0},
            backends=SERVER_BACKENDS,
        ),
        Scenario(
            name="failover",
            workload="flash-sale",
            summary="Redis master killed with the holder's lock not yet replicated; Sentinel promotes the replica",
            fault="failover@held",
            stop=StopRule("fault", **AFTER_FAULT),
            settings={"duration": 25.0},
            backends=("redis",),
            # python-redis-lock's blocking connection pool takes a plain redis:// URL, not Sentinel's
            exclude=("redis.python-redis-lock",),
            single_server=True,
        ),
        Scenario(
            name="kill-member",
            workload="flash-sale",
            summary="one member of a 3-node ensemble is killed while a lock is held",
            fault="kill-member@held",
            stop=StopRule("fault", **AFTER_FAULT),
            settings={"duration": 20.0},
            backends=("zookeeper", "etcd"),
        ),
        Scenario(
            name="kill-leader",
            workload="flash-sale",
            summary="the leader of a 3-node ensemble is killed while a lock is held",
            fault="kill-leader@held",
            stop=StopRule("fault", **AFTER_FAULT),
            settings={"duration": 25.0},
            backends=("zookeeper", "etcd"),
        ),
        Scenario(
            name="clock-skew",
            workload="flash-sale",
            summary="half the clients' lock clocks run 30 s ahead (the machine clock is untouched)",
            stop=StopRule("start", acquisitions=60),
            settings={"duration": 10.0, "clock_skew": 30.0, "skewed_clients": 0.5},
            impls=("redis.setnx-getset", "redis.redlock"),
        ),
    )
}


def scenario_names() -> list[str]:
    return list(SCENARIOS)
