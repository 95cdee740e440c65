"""What the catalog says each impl does in each matrix scenario: survives, violates or stuck.

Drawn from ``DESIGN.md`` section 4 ("safe when" / "shows violations under") and the fault
table of the first round (README). ``bench matrix`` puts the expectation beside every
result and flags a result that contradicts it; a verdict of ``unknown`` proves nothing
and never contradicts.

Outcomes are about the lock: ``violates`` = two holders at once (or data damaged),
``stuck`` = nobody can take the lock for longer than the stuck bound, ``survives`` = the
checkers found nothing. With fencing on, a violating lock is still ``violates``; the
catalog adds that the fencing tokens keep the data safe (``data_safe`` expected True).
"" means the catalog says nothing that this scenario can check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.measure.stalls import failed_under_stall

OUTCOMES = ("survives", "violates", "stuck", "")

S, V, X = "survives", "violates", "stuck"


@dataclass(frozen=True)
class Expectation:
    """The catalog's claim for one impl in one scenario, and why."""

    outcome: str
    note: str = ""
    #: whether fencing tokens are expected to keep the data safe where the lock fails (False where
    #: the token counter is lost with the lock state: Redis without persistence, restarted or failed over)
    fencing_holds: bool = True


def _e(outcome: str, note: str = "", fencing_holds: bool = True) -> Expectation:
    return Expectation(outcome, note, fencing_holds)


# Shared claims, by what the lock rests on.
_NO_EXPIRY = "no expiry: the key stays until someone deletes it"
_LEASE = "the lease expires under the holder and a waiter takes the lock"
_SESSION = "held while the session lives (10 s timeout, longer than the fault)"
_CONNECTION = "held while the connection lives"
_STATE_LOST = "the server forgets every lock (no persistence) while the holder still works"
_TOKENS_LOST = (
    "; the fencing counter lives on the same Redis and is lost with it, so tokens go backwards and "
    "fencing cannot keep the data safe"
)

#: The RedLock restart arms (bench/nemesis/scenarios.py), each with its source.
_REDLOCK_ARMS = {
    "restart-bare": _e(
        V,
        "the holder owns exactly 3 of 5 masters and one of them forgets its key on a restart without "
        "persistence: 3 masters are free for a waiter while the holder holds (Kleppmann 2016, 'How to do "
        "distributed locking'; the Redis distributed-locks page, 'Safety arguments')",
    ),
    "restart-aof": _e(
        "",
        "with appendfsync everysec a machine crash may lose the last second of writes; a process crash "
        "(SIGKILL) loses nothing the kernel holds, so the catalog cannot say: the rate is reported (Redis "
        "page: 'fsync=always' is needed for safety across power loss)",
    ),
    "restart-delayed": _e(
        S,
        "the restarted master stays down longer than the lease, so the holder's keys expire before it "
        "can vote again (the Redis page's 'delayed restarts')",
    ),
}
_REDIS_LEASE: dict[str, Expectation] = {
    "long-cs": _e(V, _LEASE),
    "lease-expiry-task": _e(V, _LEASE),
    "lease-expiry-world": _e(V, _LEASE),
    "crash": _e(S, "the crashed holder's lease expires (about 1 s)"),
    "restart": _e(V, _STATE_LOST + _TOKENS_LOST, fencing_holds=False),
    "failover": _e(V, "the promoted replica never saw the holder's lock" + _TOKENS_LOST, fencing_holds=False),
}

#: impl -> scenario -> expectation; ``flash-sale`` (no fault) is "survives" for every impl.
CATALOG: dict[str, dict[str, Expectation]] = {
    "redis.setnx-del": {
        "long-cs": _e(S, _NO_EXPIRY),
        "lease-expiry-task": _e(S, _NO_EXPIRY),
        "lease-expiry-world": _e(S, _NO_EXPIRY),
        "crash": _e(X, "no expiry: a crashed holder's key blocks the lock forever"),
        "restart": _REDIS_LEASE["restart"],
        "failover": _REDIS_LEASE["failover"],
    },
    "redis.setnx-expire": {
        **_REDIS_LEASE,
        "crash": _e(S, "the crash comes after EXPIRE (inside the critical section), so the lease ends it"),
    },
    "redis.setnx-getset": {
        **_REDIS_LEASE,
        # the token is an INCR two round trips after the grant (PEXPIRE first): a client whose clock
        # runs ahead can take over in between and draw the smaller token, and the fence then refuses
        # the new holder (seen 2026-12-05: token 500 granted after 501, a legitimate write refused)
        "clock-skew": _e(
            V,
            "expiry is judged by client clocks: a client 30 s ahead takes over a valid lock; its fencing "
            "token is taken after the grant, so a takeover in between draws tokens out of grant order "
            "and fencing cannot be promised",
            fencing_holds=False,
        ),
    },
    "redis.set-nx-px": {
        **_REDIS_LEASE,
        "long-cs": _e(V, f"{_LEASE}; the GET-compare-DEL release can delete the next holder's key"),
    },
    "redis.set-nx-px-lua": dict(_REDIS_LEASE),
    "redis.reentrant": {
        **_REDIS_LEASE,
        "long-cs": _e(S, "the watchdog renews the lease while the holder's process runs"),
        "lease-expiry-task": _e(S, "the watchdog renews the lease while the holder's process runs"),
        "lease-expiry-world": _e(V, "a stop-the-world pause stops the watchdog too, past the lease"),
        "crash": _e(S, "the watchdog dies with the process and the lease expires"),
    },
    # RedLock: a plain restart is replaced by its arms, and clock-skew cannot reach it (validity is
    # elapsed time on a monotonic clock): both cells are n/a, so no catalog row stands for them
    "redis.redlock": {
        **{k: v for k, v in _REDIS_LEASE.items() if k not in ("failover", "restart")},
        **_REDLOCK_ARMS,
    },
    "redis.redis-py": dict(_REDIS_LEASE),
    "redis.python-redis-lock": {
        **{k: v for k, v in _REDIS_LEASE.items() if k != "failover"},
        "long-cs": _e(V, f"{_LEASE} (expiry rounded up to whole seconds: 1 s)"),
    },
    "redis.pottery-redlock": {
        **{k: v for k, v in _REDIS_LEASE.items() if k not in ("failover", "restart")},
        **_REDLOCK_ARMS,
    },
    "postgres.unique-insert": {
        "long-cs": _e(S, _NO_EXPIRY),
        "lease-expiry-task": _e(S, _NO_EXPIRY),
        "lease-expiry-world": _e(S, _NO_EXPIRY),
        "crash": _e(X, "a committed row with no expiry: a crashed holder blocks the lock forever"),
        "restart": _e(S, "committed rows survive the restart"),
    },
    "postgres.unique-insert-expiry": {
        "long-cs": _e(V, "a waiter takes over a row past its expires_at"),
        "lease-expiry-task": _e(V, "a waiter takes over a row past its expires_at"),
        "lease-expiry-world": _e(V, "a waiter takes over a row past its expires_at"),
        "crash": _e(S, "the crashed holder's row expires and is taken over"),
        "restart": _e(S, "committed rows survive the restart; the 10 s expiry outlasts it"),
    },
    "postgres.version": {
        "long-cs": _e(S, "optimistic row with no expiry"),
        "lease-expiry-task": _e(S, "optimistic row with no expiry"),
        "lease-expiry-world": _e(S, "optimistic row with no expiry"),
        "crash": _e(X, "no expiry: a crashed holder blocks the lock"),
        "restart": _e(S, "committed rows survive the restart"),
    },
    **{
        impl: {
            "long-cs": _e(S, _CONNECTION),
            "lease-expiry-task": _e(S, f"{_CONNECTION}; the server does not time out a 2 s pause"),
            "lease-expiry-world": _e(S, f"{_CONNECTION}; the server does not time out a 2 s pause"),
            "crash": _e(S, "the server ends the dead client's session and frees its lock"),
            "restart": _e(V, "sessions die with the server and their holders do not notice"),
        }
        for impl in ("postgres.for-update", "postgres.advisory", "postgres.advisory-xact")
    },
    **{
        impl: {
            "long-cs": _e(S, "keepalive renews the lease while the holder's process runs"),
            "lease-expiry-task": _e(S, "keepalive renews the lease while the holder's process runs"),
            "lease-expiry-world": _e(V, "a stop-the-world pause stops keepalive past the lease TTL"),
            "crash": _e(S, "keepalive dies with the process and the lease expires"),
            "restart": _e(S, "etcd keeps keys and leases on disk across a restart"),
            "kill-member": _e(S, "the cluster keeps its quorum"),
            "kill-leader": _e(S, "a new leader is elected; leases survive"),
        }
        for impl in ("etcd.lease", "etcd.lock-api")
    },
    **{
        impl: {
            "long-cs": _e(V, _LEASE),
            "lease-expiry-task": _e(V, _LEASE),
            "lease-expiry-world": _e(V, _LEASE),
            "crash": _e(
                "",
                "the lease expires, but memcached's expiry clock ticks once a second, so a 1 s lease can end "
                "within milliseconds: overlaps may show before anything crashes",
            ),
            "restart": _e(
                V,
                _STATE_LOST + "; the fencing counter lives in memcached too and is lost with it",
                fencing_holds=False,
            ),
        }
        for impl in ("memcached.add", "memcached.add-cas")
    },
    "file.flock": {
        "long-cs": _e(S, "the kernel holds the lock until the holder closes the file"),
        "lease-expiry-task": _e(S, "the kernel holds the lock until the holder closes the file"),
        "lease-expiry-world": _e(S, "the kernel holds the lock until the holder closes the file"),
        "crash": _e(S, "the kernel frees the lock when the holder's process dies"),
    },
    **{
        impl: {
            "long-cs": _e(S, _SESSION),
            "lease-expiry-task": _e(S, _SESSION),
            "lease-expiry-world": _e(S, f"{_SESSION}: 10 s outlasts the 2 s pause"),
            "crash": _e(
                S,
                "the dead client's nodes go when its session expires (3 s in the matrix): it recovers in "
                "about the session timeout, well inside its 9 s stuck bound",
            ),
            "restart": _e(
                "",
                "a session outlives a short restart only if its reconnect is answered, and here that is a "
                "race: ZooKeeper 3.8.0 (Debian's) can accept a connection while it starts and then neither "
                "answer nor close it (NPE in ZooKeeperServer.removeCnxn, ZOOKEEPER-5051), and kazoo waits "
                "session timeout / hosts for the Connect reply, the whole 10 s session with one server; the "
                "session then expires about half the time and the holder's probe finds its node gone (11 "
                "hung reconnects in 60 strikes, 5 sessions lost, fenced and unfenced alike)",
            ),
            "session-pause": _e(
                V,
                "a pause past the session timeout: the servers expire the session and delete the holder's "
                "node, a waiter is granted the lock, and the frozen holder wakes up believing it holds it",
            ),
            "kill-member": _e(S, "clients move to another member within the session timeout"),
            "kill-leader": _e(S, "the ensemble elects a leader within the session timeout"),
        }
        for impl in (
            "zookeeper.ephemeral",
            "zookeeper.sequential",
            "zookeeper.rwlock",
            "zookeeper.kazoo",
            "zookeeper.kazoo-rw",
        )
    },
}

# Partitions (matrix scenarios partition-*: 8 s cuts, 2 s leases, 3 s ZooKeeper sessions, the
# holder working 7 s through the cut). Fenced cases: the tokens keep the data safe.
_CUT_LEASE = (
    "the cut-off holder's lease runs out on the servers and a waiter takes the lock while the holder works on"
)
_PARTITIONS: dict[str, dict[str, Expectation]] = {
    "redis.set-nx-px-lua": {
        "partition-client": _e(V, _CUT_LEASE),
        "partition-leader": _e(
            V,
            "split brain: Sentinel promotes the replica; once the lease ends there, a waiter wins it too"
            + _TOKENS_LOST,
            fencing_holds=False,
        ),
    },
    "memcached.add": {"partition-client": _e(V, _CUT_LEASE)},
    **{
        impl: {
            "partition-client": _e(
                S,
                "the server keeps a cut client's session (and its lock) until TCP keepalives give up, "
                "far past the cut: nobody else gets in, the others wait",
            )
        }
        for impl in ("postgres.advisory", "postgres.for-update")
    },
    "postgres.unique-insert": {
        "partition-client": _e(S, "no expiry: the row stays until its holder deletes it after the heal")
    },
    # PostgreSQL's partition-client control (bench/nemesis/partitions.py): its row expires like a lease
    "postgres.unique-insert-expiry": {"partition-client": _e(V, _CUT_LEASE)},
    "redis.redlock": {
        "partition-client": _e(V, _CUT_LEASE),
        "partition-node": _e(
            V,
            "one master of 5 cut does not break the quorum, but the holder works 7 s through the cut on a "
            "2 s lease that RedLock never renews: the lease ends and a waiter wins 3 masters (matrix "
            "2026-12-01: violates; the cut itself is not the cause)",
        ),
        "partition-majority": _e(
            V, "the holder keeps 2 masters; once its keys expire on the other 3, a waiter wins them"
        ),
    },
    **{
        impl: {
            "partition-client": _e(V, "the cut-off client's session expires (3 s) and its node goes"),
            "partition-leader": _e(
                "",
                "the old leader loses quorum and drops its clients; whether the majority expires the holder's "
                "session before the holder's own client gives it up depends on timing: the catalog cannot "
                "say (matrix 2026-12-01, quick evidence: survived 5 strikes, fenced and unfenced)",
            ),
            "partition-majority": _e(V, "the holder's session expires on the majority side"),
        }
        for impl in ("zookeeper.sequential",)
    },
    "etcd.lease": {
        "partition-client": _e(V, "keepalives cannot reach the cluster: the 2 s lease expires"),
        "partition-leader": _e(V, "the majority elects a leader and expires the cut-off holder's lease"),
        "partition-majority": _e(V, "the majority expires the holder's lease"),
    },
}
for _impl, _claims in _PARTITIONS.items():
    CATALOG.setdefault(_impl, {}).update(_claims)

NO_FAULT = _e(S, "no fault injected: any violation here is a bug")


def expected(impl: str, scenario: str) -> Expectation:
    """The catalog's expectation for ``impl`` in matrix scenario ``scenario`` (outcome "" if none)."""
    if scenario == "flash-sale":
        return NO_FAULT
    return CATALOG.get(impl, {}).get(scenario, Expectation(""))


DAMAGE_COLUMNS = ("overlapping_holds", "witness_violations", "oversold_units", "lost_updates")


def _positive(row: dict[str, Any], key: str) -> bool:
    value = row.get(key)
    try:
        return value is not None and value == value and float(value) > 0
    except (TypeError, ValueError):
        return False


def observed_outcome(row: dict[str, Any]) -> str:
    """survives | violates | stuck | unknown, from a case row's verdict and counters."""
    verdict = row.get("verdict")
    if verdict == "unknown" or verdict not in ("valid", "invalid"):
        return "unknown"
    if failed_under_stall(row):
        return "unknown"  # a failure a generator stall could explain is compared with nothing
    if verdict == "valid":
        return "stuck" if _positive(row, "stuck_locks") else "survives"
    if any(_positive(row, k) for k in (*DAMAGE_COLUMNS, "stale_writes_accepted")):
        return "violates"
    if _positive(row, "stuck_locks"):
        return "stuck"
    return "violates"


def annotate(row: dict[str, Any], impl: str, scenario: str, fenced: bool) -> dict[str, Any]:
    """The matrix columns for one case row: expected_outcome, expected_note, contradicts_catalog.

    A fenced case also contradicts the catalog when its data was damaged: the tokens were
    meant to keep it safe even where the lock failed.
    """
    exp = expected(impl, scenario)
    seen = observed_outcome(row)
    contradicts = bool(exp.outcome) and seen != "unknown" and seen != exp.outcome
    note = exp.note
    if fenced and exp.outcome == V and exp.fencing_holds:
        note = f"{note}; fencing tokens keep the data safe" if note else "fencing tokens keep the data safe"
        if seen != "unknown" and not bool(row.get("data_safe", True)):
            contradicts = True
    return {"expected_outcome": exp.outcome, "expected_note": note, "contradicts_catalog": contradicts}
