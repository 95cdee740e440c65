"""What a lock can be struck by (reach), and the Hypothesis strategy that draws its schedules.

Why Hypothesis: it draws from a seed (``hypothesis.seed``: the same seed and the same selection
give the same schedules, which ``--plan`` prints), and it shrinks a failing draw towards the
strategy's simplest value: fewer events (lists shrink by deleting), weaker kinds (a choice
shrinks towards the first of :data:`~bench.explore.schedule.KIND_ORDER`), shorter pauses and
earlier times (integers shrink towards their lower bound). Times and pauses are drawn in tenths
of a second, so a shrunk schedule reads ``+0.3s``, not ``+0.2999s``.

Reach: a kind is drawn for a lock only where it can touch what the lock's grant rests on, by the
nemesis room's own declarations (:mod:`bench.nemesis.kinds`: each kind's ``backends`` and
``topology``) and the lock's (a lease for the pauses, as the matrix's lease scenarios ask):
holder pauses on a lock with a lease (a world pause also on ZooKeeper, whose session is a lease
its client renews: the ``session-pause`` kind); a restart on a plain server (Redis, PostgreSQL,
memcached, and ZooKeeper or etcd when ``--faults restart`` asks for one; RedLock's masters, the
one holding the holder's key); its persistence arm ``restart-aof`` on Redis (asked for); member
and leader kills on a 3-node ZooKeeper or etcd ensemble; a failover on Redis behind Sentinel
(asked for). One topology per exploration: the servers bench starts once and keeps up across
every schedule, so ``--faults`` that need two topologies are refused with the way out. Kinds the
nemesis has that explore cannot play yet (:data:`NOT_YET`) are refused by name with the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from hypothesis import strategies as st

from bench.errors import UserError
from bench.explore.schedule import HOLDER_KINDS, KIND_ORDER, WORLD_PAUSE, Event, Schedule
from bench.nemesis.client_faults import SESSION_PAUSE
from bench.nemesis.kind import ENSEMBLES
from bench.nemesis.kinds import ALL_KINDS, SERVER_KINDS

#: The lease every explored lock gets (``--ttl``, s): short enough that a pause of a few seconds
#: outlasts it, long enough that a holder released one regrant wait after its last server event
#: never outlives it on its own (events at most AT_MAX_S after the claim, then REGRANT_S).
TTL_S = 5.0
#: Latest event time after the claim (s).
AT_MAX_S = 1.5
#: Pauses: from PAUSE_MIN_S to PAUSE_SPAN times what the lock's grant rests on (its lease, or a
#: ZooKeeper session's timeout: kazoo's default is 10 s), so a pause can outlast either.
PAUSE_MIN_S = 0.5
PAUSE_SPAN = 1.6
PAUSE_MAX_S = PAUSE_SPAN * TTL_S
#: Most events in a schedule (each kind at most once).
MAX_EVENTS = 4


@dataclass(frozen=True)
class Reach:
    """The event kinds that reach one lock, and the server topology they need (None: a plain server).

    Why kept together: the servers are started once for the topology, and every schedule drawn
    for the lock must be playable on them.
    """

    impl: str
    backend: str
    kinds: tuple[str, ...]
    topology: str | None
    servers: int = 1
    #: the longest pause drawn (s)
    pause_max_s: float = PAUSE_MAX_S


#: Server events explore plays -> the nemesis kind whose declarations (backends, topology) decide reach.
SERVER_EVENTS = ("restart-aof", "kill-member", "restart", "kill-leader", "failover")
#: Kinds the nemesis has that explore does not draw yet, and why (said when ``--faults`` names one).
NOT_YET = {
    "crash": "the holder would have to die on bench's word after handing over its recording "
    "(workloads/flash_sale.py obeys pauses only)",
    "clock-skew": "a clock jump would have to reach the holder's lock clock mid-hold "
    "(workloads/flash_sale.py obeys pauses only)",
    **{
        k: "partitions need the network-namespace test hosts, which explore's servers do not run on yet"
        for k in ("partition-client", "partition-node", "partition-leader", "partition-majority")
    },
}
#: The kind a ``--faults`` word names in the nemesis room when explore names it otherwise.
_SAME_AS = {"clock-jump": "clock-skew", "session-pause": "world-pause"}


def _topology(kind: str, backend: str) -> str | None:
    """The server topology ``kind`` needs on ``backend`` (None: a plain server), from its declaration."""
    declared = SERVER_KINDS[kind].topology
    return declared.get(backend) if isinstance(declared, dict) else declared


def _holder_kinds(cls: type, backend: str) -> list[str]:
    """The holder pauses that reach a lock: a pause can only outlast a lease (or a ZooKeeper session)."""
    if cls.capabilities.ttl:
        return [k for k in HOLDER_KINDS if backend in ALL_KINDS[k].backends]
    if backend in ALL_KINDS[SESSION_PAUSE].backends:
        return [WORLD_PAUSE]  # the session is the lease, and only a stopped process stops its heartbeats
    return []


def _server_kinds(backend: str, servers: int) -> list[str]:
    """The server events whose kind can strike ``backend`` (a failover only a single Redis master)."""
    kinds = [k for k in SERVER_EVENTS if backend in SERVER_KINDS[k].backends]
    return [k for k in kinds if not (k == "failover" and servers > 1)]


def reach(impl: str, faults: list[str] | None = None) -> Reach:
    """The kinds that reach ``impl`` (those of ``faults`` when given); UserError for a bad choice."""
    from lockimpls.registry import resolve

    try:
        cls = resolve(impl)
    except Exception as exc:  # noqa: BLE001 - an unknown impl is bad input, said in one line
        raise UserError(str(exc).splitlines()[0] if str(exc) else f"unknown impl {impl!r}") from None
    backend = str(cls.backend)
    servers = int(getattr(cls, "servers", 1) or 1)
    wanted = list(dict.fromkeys(_SAME_AS.get(k, k) for k in faults or []))
    for k in wanted:
        if k in NOT_YET:
            raise UserError(f"--faults {k}: bench explore does not draw it yet: {NOT_YET[k]}")
        if k not in KIND_ORDER:
            raise UserError(f"--faults: unknown kind {k!r}; kinds are {', '.join(KIND_ORDER)}")
    holder = _holder_kinds(cls, backend)
    server = _server_kinds(backend, servers)
    reaching = [k for k in KIND_ORDER if k in holder or k in server]
    if wanted and not [k for k in wanted if k in reaching]:
        raise UserError(
            f"--faults {','.join(wanted)}: none of them reaches {impl} (kinds that do: "
            f"{', '.join(reaching) or 'none'})"
        )
    asked = [k for k in wanted if k in server]
    needed = {_topology(k, backend) for k in asked}
    if len(needed) > 1:
        named = "; ".join(f"{k}: {_topology(k, backend) or 'a plain server'}" for k in asked)
        raise UserError(
            f"--faults {','.join(asked)} need different servers for {impl} ({named}); explore them one at a time"
        )
    # no server event asked for: the topology a matrix strikes this backend on most (ensembles: members
    # and leaders; Redis: a plain master without persistence)
    topology = needed.pop() if asked else ENSEMBLES.get(backend)
    kinds = [
        k for k in reaching
        if (k in holder or _topology(k, backend) == topology) and (not wanted or k in wanted)
    ]  # fmt: skip
    if not kinds:
        raise UserError(f"nothing bench explore draws reaches {impl}: {_why_none(cls)}")
    pause_max = PAUSE_MAX_S
    if backend == "zookeeper":
        from lockimpls.zk_conn import DEFAULT_SESSION_TIMEOUT

        pause_max = max(pause_max, PAUSE_SPAN * DEFAULT_SESSION_TIMEOUT)
    return Reach(impl, backend, tuple(kinds), topology, servers, pause_max)


def reach_for(schedule: Schedule) -> Reach:
    """The reach a replay of ``schedule`` plays on: its events' kinds, on the servers it was found on.

    UserError when one of its events cannot reach the lock (a file written by hand, or for another lock).
    """
    wanted = sorted({e.kind for e in schedule.events}, key=KIND_ORDER.index)
    r = reach(schedule.impl, wanted or None)
    missing = [k for k in wanted if k not in r.kinds]
    if missing:
        raise UserError(
            f"{', '.join(missing)} cannot reach {schedule.impl} here (kinds that do: {', '.join(r.kinds)})"
        )
    if not any(k in SERVER_EVENTS for k in wanted) and schedule.topology != r.topology:
        r = replace(r, topology=schedule.topology)  # only pauses: the servers it was found on all the same
    return r


def _why_none(cls: type) -> str:
    lease = "it has no lease a pause could outlast"
    return f"{lease}, and bench has no server of its to break" if cls.backend == "file" else lease


def _tenths(low: float, high: float) -> st.SearchStrategy[float]:
    return st.integers(round(low * 10), round(high * 10)).map(lambda t: t / 10)


def event_strategy(kinds: tuple[str, ...], pause_max_s: float = PAUSE_MAX_S) -> st.SearchStrategy[Event]:
    """One event of one of ``kinds``: a time after the claim, and a pause's length for a holder event."""

    def of(kind: str) -> st.SearchStrategy[Event]:
        params: st.SearchStrategy[dict[str, float]] = (
            _tenths(PAUSE_MIN_S, pause_max_s).map(lambda s: {"seconds": s})
            if kind in HOLDER_KINDS
            else st.just({})
        )
        return st.builds(Event, st.just(kind), _tenths(0.0, AT_MAX_S), params)

    return st.sampled_from(kinds).flatmap(of)


def events_strategy(
    kinds: tuple[str, ...], max_events: int = MAX_EVENTS, pause_max_s: float = PAUSE_MAX_S
) -> st.SearchStrategy[list[Event]]:
    """A schedule's events: one to ``max_events``, each kind at most once (a member killed twice is a quorum lost)."""
    return st.lists(
        event_strategy(kinds, pause_max_s),
        min_size=1,
        max_size=min(max_events, len(kinds)),
        unique_by=lambda e: e.kind,
    )


def schedule_for(reach_: Reach, events: list[Event], seed: int | None, settings: dict[str, Any],
                 lock_params: dict[str, Any], fencing: str) -> Schedule:  # fmt: skip
    """The schedule of ``events`` against the reached lock, with everything a replay needs."""
    return Schedule(
        impl=reach_.impl, backend=reach_.backend, events=list(events), settings=dict(settings),
        lock_params=dict(lock_params), fencing=fencing, seed=seed, topology=reach_.topology,
    )  # fmt: skip
