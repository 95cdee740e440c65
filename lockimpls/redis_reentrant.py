"""Redisson's reentrant lock in Python (seeds 000 and 002): hash per lock, watchdog, pub/sub wake-up.

The lock is a Redis hash at ``lockbench:reentrant:<name>`` whose single field is the
owner (this client's id plus the thread or greenlet id) and whose value is the hold
count. Everything that touches it is one Lua script, as in Redisson:

- acquire: create the hash (count 1) or, when the owner already holds it, increment;
  either way set the expiry; otherwise return the remaining PTTL;
- release: decrement; at zero delete the hash and PUBLISH an unlock message on the
  lock's channel; above zero refresh the expiry;
- renew (the watchdog): PEXPIRE only while the owner still holds the hash.

``try_lock(wait, lease)`` follows seed 002's tryLock: one attempt; if the lock is held,
subscribe to its channel and then loop "attempt, sleep until an unlock message or the
lock's remaining TTL (whichever comes first, bounded by the time left)". There is no
fixed polling interval. With ``lease`` the lock expires after it, with no watchdog;
without it (``lock()`` in Redisson) the watchdog keeps the expiry at ``options.ttl``
(Redisson's lockWatchdogTimeout), renewing every third of it until release, or until a
renewal finds the hash gone (the lease is then marked ``lost``).

Subscriptions go through one connection per process and server (:class:`Subscriber`),
multiplexing every channel, as Redisson's pub/sub connection does: waiting costs no
connection per waiter. An unlock message wakes one waiter of the process (Redisson
releases one permit of the entry's semaphore), so a release does not start a herd.

The watchdog and the subscriber's reader are ``threading`` threads created at run time:
under Locust (gevent monkey-patched) they are greenlets, in plain Python real threads.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import redis

from lockimpls.base import (
    BackendUnavailable,
    Capabilities,
    Lease,
    Lock,
    LockConfigError,
    LockError,
    LockOptions,
    LockTimeout,
    new_owner_id,
    seconds,
)
from lockimpls.redis_conn import CONNECT_TIMEOUT, RedisCall, client_for, redact_url, script_for

KEY_PREFIX = "lockbench:reentrant:"

#: Redisson's LockPubSub.UNLOCK_MESSAGE.
UNLOCK_MESSAGE = 0

#: KEYS[1] lock hash, KEYS[2] fence counter; ARGV[1] lease ms, ARGV[2] owner, ARGV[3] '1' for a token.
#: Granted: {hold count, fencing token or 0}. Held by another owner: its PTTL (an integer).
ACQUIRE_LUA = """
if redis.call('exists', KEYS[1]) == 0 then
    redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    local token = 0
    if ARGV[3] == '1' then
        token = redis.call('incr', KEYS[2])
    end
    return {1, token}
end
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    local count = redis.call('hincrby', KEYS[1], ARGV[2], 1)
    redis.call('pexpire', KEYS[1], ARGV[1])
    return {count, 0}
end
return redis.call('pttl', KEYS[1])
"""

#: KEYS[1] lock hash, KEYS[2] channel; ARGV[1] unlock message, ARGV[2] lease ms, ARGV[3] owner.
#: -1: not held by this owner; n > 0: still held n times; 0: freed (and published).
RELEASE_LUA = """
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then
    return -1
end
local count = redis.call('hincrby', KEYS[1], ARGV[3], -1)
if count > 0 then
    redis.call('pexpire', KEYS[1], ARGV[2])
    return count
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], ARGV[1])
return 0
"""

#: KEYS[1] lock hash; ARGV[1] lease ms, ARGV[2] owner. 1: renewed, 0: the owner lost the lock.
RENEW_LUA = """
if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
    redis.call('pexpire', KEYS[1], ARGV[1])
    return 1
end
return 0
"""


def lock_key(name: str) -> str:
    """The Redis hash holding reentrant lock ``name``."""
    return f"{KEY_PREFIX}{name}"


def channel_name(name: str) -> str:
    """The pub/sub channel on which lock ``name`` announces its release."""
    return f"{KEY_PREFIX}{name}:channel"


# --- pub/sub: one connection per process and server ---------------------------------------


class _Waiters:
    """The waiters of one channel in this process: refcount, subscription state, permits."""

    def __init__(self, target: int) -> None:
        self.refs = 0
        self.target = target  # how many SUBSCRIBE confirmations mean "ours was processed"
        self.ready = threading.Event()
        self.permits = threading.Semaphore(0)


class _SubscriberClosed(Exception):
    pass


class Subscriber:
    """One pub/sub connection of this process to one server, shared by every waiter.

    Why one: a connection per waiting client (50 users, 50 connections, each subscribed
    and unsubscribed per acquire) is what Redisson avoids with its shared subscription
    connection. Waiters :meth:`join` a channel (the first one sends SUBSCRIBE and every
    joiner waits for its confirmation, so no unlock published after the join is missed),
    sleep on the channel's semaphore, and :meth:`leave` it (the last one sends
    UNSUBSCRIBE). A reader thread turns each unlock message into one permit. If the
    connection breaks, every waiter is woken and the next joiner gets a new subscriber.
    """

    #: The reader closes the connection after this long without any channel.
    IDLE_CLOSE_S = 10.0

    def __init__(self, url: str) -> None:
        self.url = url
        self._guard = threading.Lock()
        self._channels: dict[bytes, _Waiters] = {}
        self._sent: dict[bytes, int] = {}
        self._confirmed: dict[bytes, int] = {}
        self._conn: redis.connection.AbstractConnection | None = None
        self._reader: threading.Thread | None = None
        self.closed = False
        self.messages = 0

    def _connect(self) -> redis.connection.AbstractConnection:
        pool = client_for(self.url).connection_pool
        kwargs = dict(pool.connection_kwargs)
        # RESP2 keeps pub/sub replies plain arrays; the reader waits without a socket timeout.
        kwargs.update(protocol=2, socket_timeout=None, socket_connect_timeout=CONNECT_TIMEOUT)
        conn = pool.connection_class(**kwargs)
        try:
            conn.connect()
        except redis.AuthenticationError as exc:
            raise LockConfigError(
                f"subscribe on {redact_url(self.url)}: authentication failed, check the URL's credentials"
            ) from exc
        except (redis.RedisError, OSError) as exc:
            raise BackendUnavailable(
                f"subscribe on {redact_url(self.url)}: server unreachable ({exc})"
            ) from exc
        return conn

    def join(self, channel: bytes) -> _Waiters:
        """Count this waiter in on ``channel``, subscribing if it is the first; raises when closed."""
        with self._guard:
            if self.closed:
                raise _SubscriberClosed()
            waiters = self._channels.get(channel)
            if waiters is None:
                if self._conn is None:
                    self._conn = self._connect()
                sent = self._sent.get(channel, 0) + 1
                try:
                    self._conn.send_command("SUBSCRIBE", channel)
                except (redis.RedisError, OSError):
                    self._break()
                    raise _SubscriberClosed() from None
                self._sent[channel] = sent
                waiters = self._channels[channel] = _Waiters(sent)
                if self._reader is None:
                    self._reader = threading.Thread(
                        target=self._read, name=f"lockbench-subscriber-{os.getpid()}", daemon=True
                    )
                    self._reader.start()
            waiters.refs += 1
            return waiters

    def leave(self, channel: bytes, waiters: _Waiters) -> None:
        """Count this waiter out; the last one of the channel unsubscribes."""
        with self._guard:
            waiters.refs -= 1
            if waiters.refs > 0 or self._channels.get(channel) is not waiters:
                return
            del self._channels[channel]
            if self.closed or self._conn is None:
                return
            try:
                self._conn.send_command("UNSUBSCRIBE", channel)
            except (redis.RedisError, OSError):
                self._break()

    def _read(self) -> None:
        idle_since: float | None = None
        try:
            while True:
                conn = self._conn
                if conn is None:
                    return
                if not conn.can_read(timeout=1.0):
                    with self._guard:
                        if self._channels or any(
                            self._sent[c] != self._confirmed.get(c, 0) for c in self._sent
                        ):
                            idle_since = None
                            continue
                        idle_since = idle_since or time.monotonic()
                        if time.monotonic() - idle_since >= self.IDLE_CLOSE_S:
                            self._close_locked()
                            return
                    continue
                self._dispatch(conn.read_response())
        except Exception:  # noqa: BLE001 - whatever stops the reader must wake the waiters
            with self._guard:
                if not self.closed:
                    self._break()

    def _dispatch(self, reply: object) -> None:
        if not isinstance(reply, list) or len(reply) < 3:
            return
        kind, channel = reply[0], reply[1]
        with self._guard:
            waiters = self._channels.get(channel)
            if kind == b"message":
                self.messages += 1
                if waiters is not None:
                    waiters.permits.release()
            elif kind == b"subscribe":
                confirmed = self._confirmed[channel] = self._confirmed.get(channel, 0) + 1
                if waiters is not None and confirmed >= waiters.target:
                    waiters.ready.set()
            elif (
                kind == b"unsubscribe"
                and waiters is None
                and self._confirmed.get(channel, 0) == self._sent.get(channel, 0)
            ):
                self._sent.pop(channel, None)
                self._confirmed.pop(channel, None)

    def _break(self) -> None:
        """The connection failed: wake everybody (their next attempt tells them why) and close."""
        for waiters in self._channels.values():
            waiters.ready.set()
            for _ in range(max(1, waiters.refs)):
                waiters.permits.release()
        self._close_locked()

    def _close_locked(self) -> None:
        self.closed = True
        with _subscribers_guard:
            if _subscribers.get((os.getpid(), self.url)) is self:
                del _subscribers[(os.getpid(), self.url)]
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(redis.RedisError, OSError):
                conn.disconnect()

    def close(self) -> None:
        """Close the connection; the reader thread ends at its next wake-up."""
        with self._guard:
            self._break()


_subscribers: dict[tuple[int, str], Subscriber] = {}
_subscribers_guard = threading.Lock()


def subscriber_for(url: str) -> Subscriber:
    """This process's subscriber for ``url`` (a new one after a fork or after it closed)."""
    key = (os.getpid(), url)
    with _subscribers_guard:
        sub = _subscribers.get(key)
        if sub is None or sub.closed:
            sub = _subscribers[key] = Subscriber(url)
        return sub


def close_subscribers() -> None:
    """Close this process's subscribers (tests; Locust workers just exit)."""
    for key, sub in list(_subscribers.items()):
        if key[0] == os.getpid():
            sub.close()


# --- the lock ---------------------------------------------------------------------------


@dataclass
class _Hold:
    """This client's view of one owner's hold: count, token, lease length, watchdog, leases."""

    count: int
    token: int | None
    lease_ms: int
    leases: list[Lease] = field(default_factory=list)
    watchdog: _Watchdog | None = None


class _Watchdog:
    """Renews one hold every third of the watchdog timeout until stopped or the hold is lost.

    Why a thread per hold: it is what Redisson's renewal timer does per lock entry, and
    under gevent a thread is a greenlet. ``stop`` waits for a renewal in flight, so no
    renewal is ever sent after ``release`` returned.
    """

    def __init__(self, lock: ReentrantLock, owner: str, hold: _Hold) -> None:
        self.lock = lock
        self.owner = owner
        self.hold = hold
        self.interval = hold.lease_ms / 3000.0
        self._wake = threading.Event()
        self._guard = threading.Lock()
        self._stopped = False
        self.thread = threading.Thread(target=self._run, name=f"lockbench-watchdog-{lock.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        with self._guard:
            self._stopped = True
        self._wake.set()

    def _run(self) -> None:
        while not self._wake.wait(self.interval):
            with self._guard:
                if self._stopped:
                    return
                started = time.monotonic_ns()
                try:
                    renewed = self.lock._renew(self.owner, self.hold.lease_ms)
                except (LockError, redis.RedisError, OSError):
                    self.lock._count("renew_errors")
                    continue  # a transient error is not a loss; the next tick tries again
                if not renewed:
                    self.lock._count("lost")
                    for lease in self.hold.leases:
                        lease.lost = True
                    self._stopped = True
                    return
                self.lock._count("renewals")
                for lease in self.hold.leases:
                    lease.deadline_ns = started + self.hold.lease_ms * 1_000_000


class ReentrantLock(Lock):
    """Seeds 000/002: Redisson's RLock, reentrant, renewed by a watchdog, waiters woken by pub/sub.

    Why it is here: the most used Java lock on Redis, and the one that answers the
    two complaints about SET NX PX (a critical section outliving the TTL, and polling).
    Safe while the watchdog is alive and the server keeps its data; a client paused
    longer than the watchdog timeout (GC, SIGSTOP) loses the lock to another client while
    it still believes it holds it, and a failover or a restart without persistence
    forgets every lock. Fencing tokens (``options.fencing``) come from ``INCR`` on a side
    key at the first grant of a hold, in the same script.

    ``options.params``: ``lease`` (seconds) gives every acquire a fixed lease and no
    watchdog (Redisson's ``tryLock(wait, lease)``); without it the watchdog keeps the
    hash alive with ``options.ttl`` as the watchdog timeout.
    """

    id = "redis.reentrant"
    backend = "redis"
    summary = (
        "Redisson RLock: owner->count hash by Lua, watchdog renewal, pub/sub wake-up, tryLock(wait, lease)"
    )
    capabilities = Capabilities(
        ttl=True,
        fencing=True,
        reentrant=True,
        wait="notify",
        notes="safe while the watchdog runs; a pause longer than the watchdog timeout (or a given "
        "lease) lets another client in; a restart without persistence forgets the lock",
    )

    params = {"lease": seconds("a fixed lease per acquire, no watchdog", high=86_400)}  # noqa: RUF012

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        if not self.urls:
            raise LockConfigError(f"{self.id} needs a Redis URL (--redis-url)")
        if self.options.ttl <= 0:
            raise LockConfigError(f"{self.id}: ttl must be positive, got {self.options.ttl}")
        lease = self.options.params.get("lease")
        if lease is not None and float(lease) <= 0:
            raise LockConfigError(f"{self.id}: lease must be positive seconds, got {lease!r}")
        self.lease = None if lease is None else float(lease)
        self.url = self.urls[0]
        self.key = lock_key(name)
        self.fence_key = f"{self.key}:fence"
        self.channel = channel_name(name).encode()
        self.watchdog_ms = max(3, round(self.options.ttl * 1000))
        self._client_id = new_owner_id(self.options.owner_prefix)
        self._holds: dict[str, _Hold] = {}
        self._stats: dict[str, int] = {}

    # Redisson API ---------------------------------------------------------------------
    def owner(self) -> str:
        """The hash field of the calling thread or greenlet: this client's id plus its ident."""
        return f"{self._client_id}:{threading.get_ident()}"

    def try_lock(self, wait: float | None = None, lease: float | None = None) -> Lease | None:
        """Seed 002's tryLock: a Lease, or None when ``wait`` seconds passed (None: wait forever).

        ``lease`` (seconds) makes the hold expire after it with no watchdog; None starts
        the watchdog at the first grant.
        """
        owner = self.owner()
        lease_ms = self.watchdog_ms if lease is None else max(1, round(lease * 1000))
        deadline = None if wait is None else time.monotonic() + wait
        granted, pttl = self._attempt(owner, lease_ms, lease is None)
        if granted is not None:
            return granted
        if deadline is not None and time.monotonic() >= deadline:
            return None
        while True:
            sub = subscriber_for(self.url)
            try:
                waiters = sub.join(self.channel)
            except _SubscriberClosed:
                continue
            self._count("subscribes")
            try:
                # The last attempt failed and none is in flight (the SUBSCRIBE belongs to the
                # shared subscriber): both waits may be ended there, see _between_attempts.
                if not self._between_attempts(
                    None if deadline is None else max(0.0, deadline - time.monotonic()), waiters.ready.wait
                ):
                    return None  # the subscription was not confirmed in time (Redisson: acquireFailed)
                while not sub.closed:
                    granted, pttl = self._attempt(owner, lease_ms, lease is None)
                    if granted is not None:
                        return granted
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        return None
                    sleep = pttl / 1000.0 if pttl >= 0 else left
                    if left is not None and (sleep is None or sleep > left):
                        sleep = left
                    self._count("waits")
                    if self._between_attempts(sleep, waiters.permits.acquire):
                        self._count("woken_by_message")
                    else:
                        self._count("woken_by_timeout")
            finally:
                sub.leave(self.channel, waiters)

    def hold_count(self) -> int:
        """How many times the calling thread holds the lock, read from the server (0: not)."""
        with RedisCall(f"{self.id} hold count of {self.name!r}", self.url):
            raw = client_for(self.url).hget(self.key, self.owner())
        return int(raw or 0)

    # Lock interface -------------------------------------------------------------------
    def acquire(self, timeout: float | None = None) -> Lease:
        """Wait up to ``timeout`` seconds (None: forever, 0: one attempt) as ``try_lock`` does."""
        lease = self.try_lock(timeout, self.lease)
        if lease is None:
            raise LockTimeout(f"{self.id}: {self.name!r} not acquired within {timeout or 0:.3f}s")
        return lease

    def owns(self, lease: Lease) -> bool | None:
        """The hash still counts this owner (a read: the watchdog may have lost it under a pause)."""
        with RedisCall(f"{self.id} probe of {self.name!r}", self.url):
            return bool(client_for(self.url).hexists(self.key, lease.owner))

    def _release(self, lease: Lease) -> bool:
        hold = self._holds.get(lease.owner)
        lease_ms = hold.lease_ms if hold is not None else self.watchdog_ms
        with RedisCall(f"{self.id} release of {self.name!r}", self.url):
            left = script_for(self.url, RELEASE_LUA)(
                keys=[self.key, self.channel], args=[UNLOCK_MESSAGE, lease_ms, lease.owner]
            )
        left = int(left)
        if hold is not None:
            if lease in hold.leases:
                hold.leases.remove(lease)
            hold.count = max(0, left)
            if left <= 0:
                self._drop(lease.owner)
        return left >= 0

    def stats(self) -> dict[str, int]:
        return dict(self._stats)

    def close(self) -> None:
        for owner in list(self._holds):
            self._drop(owner)

    # internals ------------------------------------------------------------------------
    def _count(self, name: str, n: int = 1) -> None:
        self._stats[name] = self._stats.get(name, 0) + n

    def _attempt(self, owner: str, lease_ms: int, watchdog: bool) -> tuple[Lease | None, int]:
        """One run of the acquire script: (lease, 0) when granted, (None, PTTL) when held."""
        started = time.monotonic_ns()
        self._count("attempts")
        fencing = "1" if self.options.fencing else "0"
        with RedisCall(f"{self.id} acquire of {self.name!r}", self.url):
            reply = script_for(self.url, ACQUIRE_LUA)(
                keys=[self.key, self.fence_key], args=[lease_ms, owner, fencing]
            )
        if not isinstance(reply, list):
            return None, int(reply)
        count, token = int(reply[0]), int(reply[1])
        hold = self._holds.get(owner)
        if count == 1 or hold is None:
            if hold is not None:
                self._drop(owner)  # the previous hold expired under us; this is a new one
            hold = self._holds[owner] = _Hold(count, token if self.options.fencing else None, lease_ms)
            if watchdog:
                hold.watchdog = _Watchdog(self, owner, hold)
                hold.watchdog.start()
        else:
            hold.count = count
            self._count("reentries")
        lease = self._new_lease(owner, hold.token)
        lease.deadline_ns = started + lease_ms * 1_000_000
        lease.extra["count"] = count
        hold.leases.append(lease)
        return lease, 0

    def _renew(self, owner: str, lease_ms: int) -> bool:
        with RedisCall(f"{self.id} renew of {self.name!r}", self.url):
            return int(script_for(self.url, RENEW_LUA)(keys=[self.key], args=[lease_ms, owner])) == 1

    def _drop(self, owner: str) -> None:
        hold = self._holds.pop(owner, None)
        if hold is not None and hold.watchdog is not None:
            hold.watchdog.stop()
