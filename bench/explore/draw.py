"""What a lock can be struck by (reach), and the Hypothesis strategy that draws its schedules.

Why Hypothesis: it draws from a seed (``hypothesis.seed``: the same seed and the same selection
give the same schedules, which ``--plan`` prints), and it shrinks a failing draw towards the
strategy's simplest value: fewer events (lists shrink by deleting), weaker kinds (a choice
shrinks towards the first of :data:`~bench.explore.schedule.KIND_ORDER`), shorter pauses and
earlier times (integers shrink towards their lower bound). Times and pauses are drawn in tenths
of a second, so a shrunk schedule reads ``+0.3s``, not ``+0.2999s``.

Reach: a kind is drawn for a lock only where it can touch what the lock's grant rests on, as the
matrix decides it (``FaultKind.backends`` and ``topology``): holder pauses everywhere; a restart
on a plain server (Redis, PostgreSQL, memcached; RedLock's masters, the one holding the holder's
key); member and leader kills on a 3-node ZooKeeper or etcd ensemble; a failover only on Redis
behind Sentinel (asked with ``--faults failover``). One topology per exploration: the servers
bench starts once and keeps up across every schedule. Partitions are not drawn yet (they need
the network-namespace test hosts).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from bench.errors import UserError
from bench.explore.schedule import HOLDER_KINDS, KIND_ORDER, Event, Schedule
from bench.nemesis.kind import ENSEMBLES
from bench.nemesis.kinds import SERVER_KINDS

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


def reach(impl: str, faults: list[str] | None = None) -> Reach:
    """The kinds that reach ``impl`` (those of ``faults`` when given); UserError for a bad choice."""
    from lockimpls.registry import resolve

    try:
        cls = resolve(impl)
    except Exception as exc:  # noqa: BLE001 - an unknown impl is bad input, said in one line
        raise UserError(str(exc).splitlines()[0] if str(exc) else f"unknown impl {impl!r}") from None
    backend = str(cls.backend)
    servers = int(getattr(cls, "servers", 1) or 1)
    wanted = list(faults or [])
    unknown = [k for k in wanted if k not in KIND_ORDER]
    if unknown:
        raise UserError(f"--faults: unknown kind {unknown[0]!r}; kinds are {', '.join(KIND_ORDER)}")
    if backend in ENSEMBLES:
        topology: str | None = ENSEMBLES[backend]
        server = ["kill-member", "kill-leader"]
    elif backend == "redis" and "failover" in wanted and servers == 1:
        topology, server = "sentinel", ["failover"]
    elif backend in SERVER_KINDS["restart"].backends:
        topology, server = None, ["restart"]
    else:
        topology, server = None, []  # a file lock: nothing of bench's to break but its holder
    server = [name for name in server if backend in SERVER_KINDS[name].backends]
    kinds = [k for k in KIND_ORDER if k in (*HOLDER_KINDS, *server) and (not wanted or k in wanted)]
    if wanted and not kinds:
        raise UserError(
            f"--faults {','.join(wanted)}: none of them reaches {impl} (kinds that do: "
            f"{', '.join(k for k in KIND_ORDER if k in (*HOLDER_KINDS, *server))})"
        )
    pause_max = PAUSE_MAX_S
    if backend == "zookeeper":
        from lockimpls.zk_conn import DEFAULT_SESSION_TIMEOUT

        pause_max = max(pause_max, PAUSE_SPAN * DEFAULT_SESSION_TIMEOUT)
    return Reach(impl, backend, tuple(kinds), topology, servers, pause_max)


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
