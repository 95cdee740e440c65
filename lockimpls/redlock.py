"""RedLock (seeds 000 and 004): a majority of N independent Redis masters, with a validity time.

One attempt, as the RedLock description says:

1. read the monotonic clock;
2. send ``SET key value NX PX ttl`` to every master before reading any reply, so the
   masters work in parallel (a fan-out over one connection per master: no thread per
   request, and the same code is parallel under gevent and with plain threads);
3. read the replies, each bounded by a short per-request timeout so a dead master does
   not eat the lease;
4. validity = ttl - elapsed - drift, drift = ttl * 1 % + 2 ms; the lock is held when a
   quorum (N/2 + 1) granted it and validity is positive;
5. otherwise unlock (Lua compare-and-delete) on every master that may hold the value,
   sleep a random delay and try again until the acquire timeout.

A master that answered "not set" cannot hold this attempt's value, so the unlock after
a failed attempt goes to the masters that granted it or whose reply was lost; that is
the same as "unlock on all" with the no-ops left out.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from lockimpls.base import (
    BackendUnavailable,
    Capabilities,
    Lease,
    Lock,
    LockConfigError,
    LockOptions,
    LockOutcomeUnknown,
    LockTimeout,
    ParamSpec,
    new_owner_id,
    seconds,
)
from lockimpls.redis_conn import redact_url

KEY_PREFIX = "lockbench:redlock:"

#: Compare-and-delete, as in the RedLock description.
UNLOCK_LUA = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""

#: Clock drift allowance of the RedLock description: 1 % of the TTL plus 2 ms.
DRIFT_FACTOR = 0.01
DRIFT_FIXED_MS = 2

#: What became of one request: the master answered (``value``), could not be reached (nothing
#: applied), or the reply was lost (maybe applied).
ANSWERED, UNREACHABLE, LOST = "answered", "unreachable", "lost"

#: Idle connections kept per master and process (more are opened when needed, then closed).
MAX_IDLE = 256


def lock_key(name: str) -> str:
    """The key lock ``name`` takes on every master."""
    return f"{KEY_PREFIX}{name}"


class Master:
    """Connections of this process to one master: a stack of idle ones, no pool bookkeeping.

    Why not a redis-py pool: a fan-out touches every master per attempt, and the pool's
    queue, lock and "has the connection stale data?" poll per checkout cost more than the
    request itself. Connections whose reply was not read are closed, never given back.
    """

    def __init__(self, url: str, timeout: float) -> None:
        self.url = url
        self.timeout = timeout
        try:
            pool = redis.ConnectionPool.from_url(
                url,
                socket_connect_timeout=timeout,
                socket_timeout=timeout,
                health_check_interval=0,
                retry=Retry(NoBackoff(), 0),
            )
        except (ValueError, TypeError) as exc:
            raise LockConfigError(f"invalid Redis URL {redact_url(url)}: {exc}") from None
        self._class = pool.connection_class
        self._kwargs = pool.connection_kwargs
        self._idle: list[redis.connection.AbstractConnection] = []

    def take(self) -> redis.connection.AbstractConnection:
        """An idle connection, or a new one (raises redis/OS errors when it cannot connect)."""
        if self._idle:
            return self._idle.pop()
        conn = self._class(**self._kwargs)
        try:
            conn.connect()
        except redis.AuthenticationError:
            raise LockConfigError(
                f"RedLock master {redact_url(self.url)}: authentication failed, check the URL's credentials"
            ) from None
        return conn

    def give(self, conn: redis.connection.AbstractConnection) -> None:
        if len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.disconnect()

    def close(self) -> None:
        while self._idle:
            self._idle.pop().disconnect()


_masters: dict[tuple[int, str, float], Master] = {}
_masters_guard = threading.Lock()


def master_for(url: str, timeout: float) -> Master:
    """This process's :class:`Master` for ``url`` with per-request ``timeout`` (never across a fork)."""
    key = (os.getpid(), url, timeout)
    master = _masters.get(key)
    if master is None:
        with _masters_guard:
            for stale in [k for k in _masters if k[0] != key[0]]:
                del _masters[stale]  # made before a fork: the parent's sockets
            master = _masters.setdefault(key, Master(url, timeout))
    return master


def close_pools() -> None:
    """Disconnect this process's connections to the masters (tests)."""
    with _masters_guard:
        for key in [k for k in _masters if k[0] == os.getpid()]:
            _masters.pop(key).close()


@dataclass
class _Reply:
    status: str
    value: object = None
    error: str = ""


def quorum_owns(mine: int, silent: int, masters: int) -> bool | None:
    """Does a holder whose key ``mine`` masters hold (``silent`` did not answer) still own a quorum lock?

    True with a quorum; False when even the silent masters could not make one up (a restarted
    master came back empty); None otherwise: a master that is down may come back either way.
    """
    quorum = masters // 2 + 1
    if mine >= quorum:
        return True
    return False if mine + silent < quorum else None


def fan_out(masters: Sequence[Master], command: tuple, timeout: float) -> list[_Reply]:
    """Send ``command`` to every master, then read every reply; all bounded by ``timeout`` in total.

    Every request leaves before any reply is awaited, so the masters work at the same
    time and the whole costs about one round trip to the slowest live master.
    """
    deadline = time.monotonic() + timeout
    packed: list | None = None
    sent: list[tuple[Master, redis.connection.AbstractConnection] | _Reply] = []
    for master in masters:
        try:
            conn = master.take()
        except (redis.RedisError, OSError) as exc:
            sent.append(_Reply(UNREACHABLE, error=str(exc)))
            continue
        try:
            if packed is None:
                packed = conn.pack_command(*command)
            conn.send_packed_command(packed, check_health=False)
        except (redis.RedisError, OSError) as exc:
            conn.disconnect()
            sent.append(_Reply(LOST, error=str(exc)))
            continue
        sent.append((master, conn))
    replies: list[_Reply] = []
    for item in sent:
        if isinstance(item, _Reply):
            replies.append(item)
            continue
        master, conn = item
        try:
            value = conn.read_response(timeout=max(0.001, deadline - time.monotonic()))
        except (redis.ReadOnlyError, redis.BusyLoadingError) as exc:
            replies.append(_Reply(UNREACHABLE, error=str(exc)))  # refused, nothing applied
            master.give(conn)
        except redis.ResponseError as exc:
            replies.append(_Reply(ANSWERED, None, error=str(exc)))  # an error reply: not applied
            master.give(conn)
        except (redis.RedisError, OSError) as exc:
            conn.disconnect()  # read_response closed it already; an unread reply never comes back
            replies.append(_Reply(LOST, error=str(exc)))
        else:
            replies.append(_Reply(ANSWERED, value))
            master.give(conn)
    return replies


class RedLock(Lock):
    """Seeds 000/004: RedLock over N independent masters (5 by default), majority and validity time.

    Why it is here: Redis' own answer to "a single Redis is a single point of failure",
    and the lock whose safety is most argued about. Safe only while its timing
    assumptions hold: a client paused past the validity (GC, SIGSTOP), a clock that jumps
    on a master, or a master that restarts without persistence and forgets a key it
    granted, lets two clients hold a majority each. It has no fencing token: counters
    on independent masters do not make one order.

    ``options.params``: ``request_timeout`` (seconds per master, default ttl/20 within
    [5 ms, 500 ms]) and ``retry_delay`` (mean random pause between attempts, default
    ``options.retry_interval``). ``stats()`` counts attempts, acquisitions, the ones
    that reached quorum on their first attempt (``first_try_quorum``), split votes, and
    the sum of validity left at acquisition (``validity_left_ms_sum``).
    """

    @staticmethod
    def quorum_key(name: str) -> str:
        """The key lock ``name`` takes on each master (faults that arrange a vote need it)."""
        return lock_key(name)

    id = "redis.redlock"
    backend = "redis"
    servers = 5
    summary = "RedLock: SET NX PX on N masters in parallel, quorum N/2+1, validity = ttl - elapsed - drift"
    capabilities = Capabilities(
        ttl=True,
        fencing=False,
        wait="poll",
        notes="no fencing token; unsafe when a client pauses past the validity, a master's clock "
        "jumps, or a master restarts without persistence",
    )

    params = {  # noqa: RUF012
        "request_timeout": seconds(
            "seconds per master per request (default ttl/20 within 5..500 ms)", high=60
        ),
        "retry_delay": ParamSpec(float, "mean pause between attempts (default: --retry-interval)", 0, 60),
    }

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        if not self.urls:
            raise LockConfigError(f"{self.id} needs Redis URLs (--redis-url, one per master)")
        if self.options.ttl <= 0:
            raise LockConfigError(f"{self.id}: ttl must be positive, got {self.options.ttl}")
        params = self.options.params
        self.ttl_ms = max(1, round(self.options.ttl * 1000))
        default_timeout = min(0.5, max(0.005, self.options.ttl / 20))
        self.request_timeout = float(params.get("request_timeout", default_timeout))
        self.retry_delay = float(params.get("retry_delay", self.options.retry_interval))
        self.quorum = len(self.urls) // 2 + 1
        self.drift_ms = self.ttl_ms * DRIFT_FACTOR + DRIFT_FIXED_MS
        self.key = lock_key(name)
        self._stats: dict[str, int] = {}
        self._rng = random.Random()

    @property
    def masters(self) -> list[Master]:
        """This process's connections to the lock's masters."""
        return [master_for(url, self.request_timeout) for url in self.urls]

    def _count(self, name: str, n: int = 1) -> None:
        self._stats[name] = self._stats.get(name, 0) + n

    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    def acquire(self, timeout: float | None = None) -> Lease:
        """Attempt until ``timeout`` (None: forever, 0: once), with a random pause between attempts."""
        start = time.monotonic()
        first = True
        while True:
            lease = self._attempt(first)
            if lease is not None:
                return lease
            first = False
            pause = self._rng.uniform(0, 2 * self.retry_delay)
            if timeout is not None and time.monotonic() - start + pause > timeout:
                raise LockTimeout(f"{self.id}: {self.name!r} not acquired within {timeout:.3f}s")
            self._between_attempts(pause)  # the failed attempt's keys are unlocked: nothing in flight

    def _set_command(self, owner: str) -> tuple:
        """The command each master gets for one vote: ``SET key owner NX PX ttl``."""
        return ("SET", self.key, owner, "NX", "PX", self.ttl_ms)

    def _attempt(self, first: bool) -> Lease | None:
        owner = new_owner_id(self.options.owner_prefix)
        masters = self.masters
        self._count("attempts")
        started = time.monotonic_ns()
        replies = fan_out(masters, self._set_command(owner), self.request_timeout)
        elapsed_ms = (time.monotonic_ns() - started) / 1e6
        granted = sum(1 for r in replies if r.status == ANSWERED and r.value is not None)
        validity_ms = self.ttl_ms - elapsed_ms - self.drift_ms
        if granted >= self.quorum and validity_ms > 0:
            self._count("acquired")
            self._count("first_try_quorum", int(first))
            self._count("validity_left_ms_sum", int(validity_ms))
            lease = self._new_lease(owner)
            lease.deadline_ns = started + int(validity_ms * 1e6)
            lease.extra.update(votes=granted, validity_ms=validity_ms)
            return lease
        if granted >= self.quorum:
            self._count("validity_expired")
        elif granted:
            self._count("split_votes")
        maybe = [
            i
            for i, r in enumerate(replies)
            if r.status == LOST or (r.status == ANSWERED and r.value is not None)
        ]
        self._unlock([masters[i] for i in maybe], owner)
        unreachable = [r for r in replies if r.status == UNREACHABLE]
        if len(unreachable) > len(masters) - self.quorum:
            self._count("quorum_impossible")
            raise BackendUnavailable(
                f"{self.id}: only {len(masters) - len(unreachable)} of {len(masters)} masters reachable, "
                f"quorum is {self.quorum} ({unreachable[0].error})"
            )
        return None

    def _unlock(self, masters: Sequence[Master], owner: str) -> list[_Reply]:
        if not masters:
            return []
        return fan_out(masters, ("EVAL", UNLOCK_LUA, 1, self.key, owner), self.request_timeout)

    def owns(self, lease: Lease) -> bool | None:
        """A quorum of masters still holds this owner's key: True; so few that even the masters
        that did not answer cannot make a quorum: False (a restarted master came back empty, a
        failover lost the write); otherwise None (a master is down: it may come back either way)."""
        replies = fan_out(self.masters, ("GET", self.key), self.request_timeout)
        mine = sum(
            1 for r in replies if r.status == ANSWERED and r.value in (lease.owner.encode(), lease.owner)
        )
        silent = sum(1 for r in replies if r.status != ANSWERED)
        return quorum_owns(mine, silent, len(self.masters))

    def _release(self, lease: Lease) -> bool:
        replies = self._unlock(self.masters, lease.owner)
        deleted = sum(1 for r in replies if r.status == ANSWERED and r.value == 1)
        if deleted >= self.quorum:
            return True
        unanswered = sum(1 for r in replies if r.status in (LOST, UNREACHABLE))
        if unanswered == len(replies):
            raise BackendUnavailable(f"{self.id}: no master reachable to release {self.name!r}")
        if deleted + unanswered >= self.quorum:
            raise LockOutcomeUnknown(
                f"{self.id}: release of {self.name!r} deleted {deleted}, {unanswered} masters did not answer"
            )
        return False
