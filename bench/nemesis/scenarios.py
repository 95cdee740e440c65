"""The safety scenarios ``bench matrix`` runs: one table, one row per scenario.

A row says which workload runs, which server fault (if any) strikes, the options that
make the scenario's event happen quickly and surely, which backends and impls it applies
to, and when the case has its evidence (a ``workloads.checks.stop_rules.StopRule``), so that a
case ends seconds after its event instead of after a fixed duration. New fault kinds (the
partition faults, say) are new rows here, with their expected outcomes in
``bench/matrix/expectations.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from bench.measure.levels import DEFAULT_TARGET, EvidenceTarget
from bench.nemesis import client_faults, failover, members, partitions, redlock_arms, restart
from bench.nemesis.kind import SERVER_BACKENDS
from workloads.checks.stop_rules import StopRule

__all__ = ["SERVER_BACKENDS", "Scenario", "scenarios_at"]


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
    #: only for impls on several independent masters (RedLock and its kind): the restart arms
    multi_server: bool = False
    #: what strikes (bench/measure/strikes.py): "server" (a fault thread), "pause", "crash",
    #: "long-hold" (every hold outlives the lease), or "" (the control: nothing strikes)
    strike: str = ""
    #: seconds one strike may take, heal and the grants after it included (sizes the case's cap)
    per_strike_s: float = 5.0
    #: backend -> seconds a strike may take there instead, where its locks grant far slower
    per_strike_on: dict[str, float] = field(default_factory=dict)
    #: at most this many strikes in one case; more come from further trials of the case
    max_strikes: int = 1000
    #: False where every acquisition is itself a strike (long-cs): the target has no n then
    counts_grants: bool = True
    #: needs network namespaces (root): partitions
    needs_root: bool = False
    #: the strike is a hold outliving the lock's lease: a lock without one (no TTL) cannot be struck
    needs_lease: bool = False
    #: backend -> why the fault cannot reach a lock there: its cells are "n/a" with the reason
    unreachable: dict[str, str] = field(default_factory=dict)
    #: the fault is a client clock: it reaches only locks that read it (``Lock.reads_clock``)
    needs_clock: bool = False
    #: ``--lock-params`` per backend (e.g. a shorter ZooKeeper session for partitions)
    lock_params: dict[str, dict[str, Any]] = field(default_factory=dict)

    def target(self, level: EvidenceTarget) -> EvidenceTarget:
        """The evidence this scenario's survived cell needs at ``level``."""
        return level if self.counts_grants else EvidenceTarget(level.strikes, 0)

    def trials(self, level: EvidenceTarget) -> int:
        """Cases (trials) the scenario needs to bring ``level.strikes`` strikes."""
        if not self.strike:
            return 1
        return math.ceil(level.strikes / min(level.strikes, self.max_strikes))

    def at(self, level: EvidenceTarget) -> Scenario:
        """This scenario sized for ``level``: strikes per case, grants between them, stop rule, cap."""
        if not self.strike:
            return self
        trials = self.trials(level)
        k = math.ceil(level.strikes / trials)
        n = math.ceil(self.target(level).acquisitions / trials)
        gap = math.ceil(n / k * GRANTS_BETWEEN_SHARE) if n else 0
        settings = {**self.settings, "duration": self.settings.get("duration", 10.0) + k * self.per_strike_s}
        options = dict(self.options)
        stop = replace(self.stop, count=k, after_first=n)
        if self.strike == "skew":
            # every grant to a skewed client while another waits is a strike: n grants bring k
            stop = replace(self.stop, acquisitions=max(self.stop.acquisitions, n + 60))
            settings["duration"] = self.settings.get("duration", 10.0) + n / 40
        elif self.strike == "server":
            settings.update(strikes=k, grants_between=gap)
        elif self.strike == "pause" and n:
            # pause often enough for k pauses within the n grants (world: only worker 0 of 2 pauses),
            # and no more often: a lock that holds through a pause serves nobody meanwhile
            every = math.ceil(n / k / (2 if options.get("pause_kind") == "world" else 1))
            options["pause_every"] = max(int(options.get("pause_every", 1)), every)
        elif self.strike == "crash":
            options.update(crashes=k, crash_gap=gap)
            settings["processes"] = max(int(settings.get("processes", 2)), k + 1)
        return replace(self, settings=settings, options=options, stop=stop)

    def cap_on(self, backend: str) -> float | None:
        """A sized case's cap (``duration``, as :meth:`at` builds it) on ``backend``, with that backend's
        seconds a strike (``per_strike_on``) for ``per_strike_s``; None where it has none of its own."""
        slower = self.per_strike_on.get(backend)
        if slower is None or not self.strike or "duration" not in self.settings:
            return None
        return self.settings["duration"] + self.stop.count * (slower - self.per_strike_s)

    def applies_to(self, impl_id: str, backend: str, servers: int, has_lease: bool = True) -> bool:
        if self.needs_lease and not has_lease:
            return False
        if self.backends is not None and backend not in self.backends:
            return False
        if (self.impls is not None and impl_id not in self.impls) or impl_id in self.exclude:
            return False
        if self.multi_server and servers < 5:
            return False
        return not (self.single_server and servers > 1)


#: The share of a case's n grants the service must make between two strikes (the rest come after
#: the last one). A strike is decided while its holder holds on (the regrant wait); the grants
#: after it show the lock works again. Spreading all n over the k gaps made a slow lock's case
#: k x (n/k grants) long: at 10 grants/s a ZooKeeper or etcd case paid 10 s a strike for it.
GRANTS_BETWEEN_SHARE = 0.2
#: Fewer clients than ``bench run``: the matrix asks "does it break", not "how fast".
USERS = 6
#: After a server fault: acquisitions that show the lock works again, or how long to wait for them.
#: The wait is a floor only: the matrix sizes it per lock from its own timeout (3x its lease or
#: session, at least 10 s: bench/measure/strikes.py ``recovery_bound_s``), so no fixed wait decides "stuck".
AFTER_FAULT = {"acquisitions": 5, "or_after_s": 10.0}
#: Where a partition means something (the round-2 partition script chose these): a single
#: server has no leader and no minority, so only the client cut applies to it; RedLock has no leader.
_CLUSTERED = ("redis.redlock", "zookeeper.sequential", "etcd.lease")
_PARTITION_CLIENT = (
    "redis.set-nx-px-lua", "postgres.advisory", "postgres.for-update", "postgres.unique-insert",
    "memcached.add", *_CLUSTERED,
)  # fmt: skip
#: Purchases a second per buyer in a server-fault or partition case: six buyers make at most 60
#: grants a second, n = 1,000 in under 20 s, while a fast lock flat out made 300 a second in
#: each case of a group and kept the generator busy, not the lock (flash_sale.py ``--pace``).
PACE = 10.0
#: Purchases a second per buyer in the rows that name it: a Sentinel failover, a killed ensemble
#: member or leader, a partition, whose strikes take 10.5-12 s (RedLock's delayed restart arm, 13 s,
#: keeps PACE: not measured with it). Such a case lasts its k strikes whatever its grants,
#: and the standard level needs only n / (k x 10.5 s) = 9.5 grants a second (1,000 after the
#: first of 10 strikes). At PACE the 13 failover cases side by side made 2,200-4,300 grants each
#: (about 28 a second), about 1.45 cores of the 2 between them, and all 13 came out generator-bound
#: (X, shard 2/4 of the standard matrix, ddf91a1, 2026-12-06). At 4 a buyer a case makes at most 24
#: a second, 2.5x what its evidence needs; a strike still finds every other buyer waiting, since
#: its holder keeps the lock through it. A lock slower than that is not slowed further.
SLOW_STRIKE_PACE = 4.0
#: Purchases a second per buyer of the workers that do not pause, where worker 0's whole process
#: pauses (lease-expiry-world, session-pause; worker 0 runs flat out, since its sections set when its
#: next pause comes: workloads/lease_expiry.py). Such a case lasts its k pauses, and flat out the
#: other worker made most of the grants: in X (shard 4/4, ddf91a1) 1,300-2,800 a case (worker 0
#: about 500 of them) where n = 1,000 is needed, and 16 of their 20 cases came out generator-bound,
#: beside the restart groups they starved (7 more). At 8 its three buyers make at most 24 a second.
#: Measured (redis.set-nx-px and zookeeper.kazoo, both scenarios, 2 lanes, 2026-12-06): world
#: cases 33 s with 1,140 grants (flat out 28-30 s, 2,700-3,000), session-pause 50 s with 1,220
#: (27-44 s, 2,820-2,890); the same colours; the two-lane matrix 94 s (flat out 93 s). At 6 the
#: cases waited for n past their k (35 and 54 s); pacing worker 0 too (tried first) made them 60%
#: longer, since worker 0 reached its pauses late.
PAUSE_PACE = 8.0
#: Seconds a server-fault or partition case may run beyond its strikes (its cap is this plus k
#: times ``per_strike_s``; the stop rule ends it as soon as k and n are in). A slow lock needs
#: them for its n = 1,000 grants: PostgreSQL's unique-insert and ZooKeeper's ephemeral lock
#: made 5-10 grants a second in a loaded group, and a cap of 95 s left their cells thin.
SLOW_LOCK_S = 60.0
#: Server-fault scenarios: what they share.
_SERVER = {"strike": "server"}

#: The scenarios as written (one strike each); :func:`scenarios_at` sizes them for an evidence level.
BASE_SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            name="flash-sale",
            workload="flash-sale",
            summary="no fault: contended buyers, 1 ms critical sections (the control row)",
            fencing=False,
            # 600 grants: about 2 s for a Redis lock. At 60 the cases lasted 0.16-0.84 s, 15-80
            # samples of the loop-lag probe, and the process's own user spawn (up to ~285 ms of
            # late wake-ups) made 4-5 of them a shard "generator-bound" with nothing beside them
            stop=StopRule("start", acquisitions=600),
            settings={"duration": 10.0},
        ),
        Scenario(
            name="long-cs",
            needs_lease=True,
            strike="long-hold",
            per_strike_s=1.4,
            counts_grants=False,
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
            needs_lease=True,
            strike="pause",
            # the cap, 15 s + k x 1.5 s. At 3 s a strike (45 s) Redis's group ran to the cap
            # (52 s against 31-33 s: redis.pottery-redlock, the slowest, sets the group's end), so
            # 1.5 s stays for the others. etcd writes every grant through a fsync and granted 430-560
            # a case in 30 s beside other lanes (R4, 3 lanes, and B4, 4 lanes, 2026-12-06; 705 once),
            # where the stop rule needs about 1,100 (k pauses, one every 100 grants, and n = 1,000
            # after the first): its cells came out thin (k=8-10, n=810) or their control unproven, in
            # three matrices of four. 6.5 s a strike caps it at 80 s, enough at 14 grants a second;
            # a quicker group still ends on its stop rule.
            per_strike_s=1.5,
            per_strike_on={"etcd": 6.5},
            workload="lease-expiry",
            summary="a holder's task pauses 2 s under a 1 s lease (its process, watchdogs included, runs on)",
            stop=StopRule("pause", acquisitions=5, or_after_s=2.5),
            settings={"ttl": 1.0, "duration": 15.0},
            options={"pause": 2.0, "pause_every": 10, "pause_kind": "task", "cs": "5ms"},
        ),
        Scenario(
            name="lease-expiry-world",
            needs_lease=True,
            strike="pause",
            per_strike_s=3.5,
            workload="lease-expiry",
            summary="a holder's whole process stops 2 s under a 1 s lease (a GC pause: watchdogs stop too)",
            stop=StopRule("pause", acquisitions=5, or_after_s=2.5),
            settings={"ttl": 1.0, "duration": 15.0, "processes": 2},
            # every 30th section: the first pause comes within a second, and the case has its
            # evidence before worker 0 stops the world again (a blocked worker delays the stop)
            options={"pause": 2.0, "pause_every": 30, "pause_kind": "world", "cs": "5ms", "pace": PAUSE_PACE},
        ),
        Scenario(
            name=client_faults.SESSION_PAUSE,
            strike="pause",
            per_strike_s=6.0,
            workload="lease-expiry",
            # A ZooKeeper session is a lease the client library renews: a holder whose whole process
            # stops past it loses its ephemeral node on the servers while it believes it holds the lock.
            summary="a holder's whole process stops 4 s under a 2 s ZooKeeper session (a GC pause: the "
            "session's heartbeats stop too)",
            stop=StopRule("pause", acquisitions=5, or_after_s=4.5),
            settings={"ttl": 1.0, "duration": 20.0, "processes": 2},
            # every 10th section: ZooKeeper's locks grant tens a second, and a group of 10 cases with two
            # processes each (the standard run) left every case but one without a pause at every 30th
            options={"pause": 4.0, "pause_every": 10, "pause_kind": "world", "cs": "5ms", "pace": PAUSE_PACE},
            lock_params={"zookeeper": {"session_timeout": 2}},
            backends=("zookeeper",),
        ),
        Scenario(
            name=client_faults.CRASH,
            strike="crash",
            per_strike_s=4.0,
            max_strikes=5,
            workload="crash",
            # A lock counts as stuck when nobody got it within 3x the time its own timeout needs
            # to free a dead holder (at least 3 s). Waiters give up after 1 s, so the history goes
            # on past the bound even when nobody gets the lock: "stuck" is told from "not yet".
            summary="a holder's process is killed (SIGKILL) inside its critical section; 1 s lease",
            fencing=False,
            stop=StopRule("crash", acquisitions=5, or_after_s=4.5, stall_after_any=True),
            settings={"ttl": 1.0, "duration": 15.0, "processes": 2, "acquire_timeout": 1.0},
            # the stuck bound comes from each lock's own timeout (bench.run.command.with_recovery_bound);
            # ZooKeeper's session is 3 s here, as the leases are 1 s, so a strike costs seconds
            options={"crash_after": 10, "cs": "5ms"},
            lock_params={"zookeeper": {"session_timeout": 3}},
        ),
        Scenario(
            name=restart.RESTART,
            **_SERVER,
            per_strike_s=7.5,  # the holder keeps the lock up to 3 s after the action (REGRANT_WAIT_S)
            workload="flash-sale",
            summary="the lock server is killed (SIGKILL) and restarted while a lock is held",
            fault=f"{restart.RESTART}@held",
            stop=StopRule("fault", **AFTER_FAULT),
            options={"pace": PACE},
            settings={"duration": SLOW_LOCK_S},
            backends=SERVER_BACKENDS,
            # a lock on five masters is struck by its arms (restart-bare, -aof, -delayed) instead: a
            # plain restart of "some master" says nothing about which of its votes it took
            single_server=True,
        ),
        Scenario(
            name=failover.FAILOVER,
            **_SERVER,
            per_strike_s=10.5,  # the holder keeps the lock up to 3 s after the action (REGRANT_WAIT_S)
            workload="flash-sale",
            summary="Redis master killed with the holder's lock not yet replicated; Sentinel promotes the replica",
            fault=f"{failover.FAILOVER}@held",
            stop=StopRule("fault", **AFTER_FAULT),
            options={"pace": SLOW_STRIKE_PACE},
            settings={"duration": SLOW_LOCK_S},
            backends=("redis",),
            # python-redis-lock's blocking connection pool takes a plain redis:// URL, not Sentinel's
            exclude=("redis.python-redis-lock",),
            single_server=True,
        ),
        Scenario(
            name=members.KILL_MEMBER,
            **_SERVER,
            per_strike_s=10.5,  # the holder keeps the lock up to 3 s after the action (REGRANT_WAIT_S)
            workload="flash-sale",
            summary="one member of a 3-node ensemble is killed while a lock is held",
            fault=f"{members.KILL_MEMBER}@held",
            stop=StopRule("fault", **AFTER_FAULT),
            options={"pace": SLOW_STRIKE_PACE},
            settings={"duration": SLOW_LOCK_S},
            backends=("zookeeper", "etcd"),
        ),
        Scenario(
            name=members.KILL_LEADER,
            **_SERVER,
            per_strike_s=12.0,
            workload="flash-sale",
            summary="the leader of a 3-node ensemble is killed while a lock is held",
            fault=f"{members.KILL_LEADER}@held",
            stop=StopRule("fault", **AFTER_FAULT),
            options={"pace": SLOW_STRIKE_PACE},
            settings={"duration": SLOW_LOCK_S},
            backends=("zookeeper", "etcd"),
        ),
        *(
            Scenario(
                name=kind,
                workload="flash-sale",
                summary=summary,
                fault=f"{kind}@held",
                stop=StopRule("fault", **AFTER_FAULT),
                # each strike: the cut lasts 8 s (bench/nemesis/partitions.py), longer than the 2 s
                # leases and 3 s ZooKeeper sessions here, so the other side can move on before the heal
                options={"pace": SLOW_STRIKE_PACE},
                settings={"duration": SLOW_LOCK_S, "ttl": 2.0, "processes": 2},
                lock_params={"zookeeper": {"session_timeout": 3}},
                impls=impls,
                unreachable=unreachable,
                **_SERVER,
                per_strike_s=12.0,
                needs_root=True,
            )
            for kind, summary, impls, unreachable in (
                (
                    partitions.PARTITION_CLIENT,
                    "the holder's client host is cut off from every lock server for 8 s (the resource stays "
                    "reachable); 2 s leases, 3 s ZooKeeper sessions",
                    _PARTITION_CLIENT,
                    {},
                ),
                (
                    partitions.PARTITION_LEADER,
                    "the leader (Redis: Sentinel's master) and the holder's client are cut off from the rest",
                    ("redis.set-nx-px-lua", "zookeeper.sequential", "etcd.lease"),
                    {},
                ),
                (
                    partitions.PARTITION_NODE,
                    "one server node (a follower; RedLock: one of 5 masters) is cut off from everyone",
                    _CLUSTERED,
                    dict.fromkeys(
                        ("zookeeper", "etcd"),
                        "the cut follower is one no client talks to (clients take member 0 first) and the "
                        "ensemble keeps its quorum: the fault cannot reach the lock",
                    ),
                ),
                (
                    partitions.PARTITION_MAJORITY,
                    "a minority of the server nodes and the holder's client are cut off from the majority",
                    _CLUSTERED,
                    {},
                ),
            )
        ),
        *(
            Scenario(
                name=kind,
                **_SERVER,
                # the restart, the holder's wait (half its 4 s lease), the grants after; delayed: 4.5 s down
                per_strike_s=9.0 if kind != redlock_arms.RESTART_DELAYED else 13.0,
                workload="flash-sale",
                summary=summary,
                fault=f"{kind}@held",
                fencing=False,
                stop=StopRule("fault", **AFTER_FAULT),
                options={"pace": PACE},
                settings={"duration": 20.0, "ttl": 4.0},
                # every lock on five Redis masters, a user's own included (Lock.servers = 5)
                backends=("redis",),
                multi_server=True,
            )
            for kind, summary in (
                (
                    redlock_arms.RESTART_BARE,
                    "the holder owns exactly 3 of 5 masters; one of them is killed and restarted at "
                    "once without persistence (Kleppmann 2016)",
                ),
                (
                    redlock_arms.RESTART_AOF,
                    "as restart-bare, the masters with appendonly yes and appendfsync everysec, "
                    "killed with SIGKILL",
                ),
                (
                    redlock_arms.RESTART_DELAYED,
                    "as restart-bare, the killed master kept down longer than the lease (4 s) "
                    "before it starts again (the Redis page's delayed restart)",
                ),
            )
        ),
        Scenario(
            name=client_faults.CLOCK_SKEW,
            workload="flash-sale",
            summary="half the clients' lock clocks run 30 s ahead (the machine clock is untouched)",
            strike="skew",
            per_strike_s=0.0,
            stop=StopRule("start", acquisitions=60),
            settings={"duration": 10.0, "clock_skew": 30.0, "skewed_clients": 0.5},
            # every lock that reads the client clock; RedLock times its validity with a monotonic
            # clock and was green here on 529 "strikes" that could not touch it: now n/a
            needs_clock=True,
        ),
    )
}


def scenarios_at(level: EvidenceTarget) -> dict[str, Scenario]:
    """Every scenario sized for ``level``: strikes per case, trials, stop rules, caps."""
    return {name: scenario.at(level) for name, scenario in BASE_SCENARIOS.items()}


#: The scenarios at the default evidence level (``--evidence standard``).
SCENARIOS: dict[str, Scenario] = scenarios_at(DEFAULT_TARGET)


def scenario_names() -> list[str]:
    return list(SCENARIOS)
