"""Plug-in locks (``module:Class``) for bench explore's tests: a real Redis lock that breaks only
when two named events coincide, and one that is stuck after a restart without breaking exclusion.

:class:`RestartDuringStopLock` is SET NX PX on a real redis-server (no persistence: a restart
forgets every key) with two defences that make each single fault harmless:

- a long lease (:data:`LEASE_S`, past any pause bench explore draws), so a holder's pause alone
  never lets its key expire;
- a watchdog in the holder's process that puts the holder's key back after a restart, and a
  grace after the server starts (:data:`GRACE_S`, read from the server's own ``uptime``) in
  which no waiter is granted and the watchdog may still put the key back; past it, the key is
  gone for good.

So a restart alone is survived (the watchdog runs within the grace); a task pause with a
restart too (the process runs on); a world pause alone too (the lease outlasts it). Only a
*world pause* that covers a *restart* and its grace breaks it: the stopped watchdog misses the
grace, the holder's key is gone when its process resumes, and the ownership probe says "not
owned" while a waiter is granted the lock: a lost lock and an overlap, on a real server.

:class:`StuckAfterRestartLock` grants only while a marker key it writes at start-up exists; a
restart forgets the marker and nobody writes it again: nobody is granted the lock any more. It
answers no ownership question (``owns`` None) and its release always says "owned", so no
checker can call it unsafe: only explore's stuck rule (the lock's own recovery bound) can fail it.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Sequence
from functools import cached_property

import redis

from lockimpls.base import BackendUnavailable, Capabilities, Lease, Lock, LockOptions

RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
#: The server's uptime, whole seconds, read inside a script: the grace and the write it guards are
#: one step. Read apart (an INFO, then a SET), a restart between the two let a SET reach the new
#: server inside its grace, through redis-py's reconnect (the suite at load 5, 2026-12-06: a task
#: pause with a restart, each harmless alone, drawn as an overlap).
UPTIME = "local up = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)')) "
#: A waiter's SET NX PX, refused (-1) within the grace after the server started.
ACQUIRE = UPTIME + (
    "if up < tonumber(ARGV[3]) then return -1 end "
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0"
)
#: Within the grace only, the holder's key is put back if it is missing or already its own.
REASSERT = UPTIME + (
    "if up >= tonumber(ARGV[3]) then return 0 end "
    "local v = redis.call('get', KEYS[1]) "
    "if v == false then redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end "
    "if v == ARGV[1] then return 1 end return 0"
)
#: Past every pause bench explore draws for a lease of 5 s (8 s): a pause alone never lets it lapse.
LEASE_S = 30.0
#: Seconds after the server starts in which no waiter is granted, and the holder's watchdog may put
#: its key back (the server's ``uptime_in_seconds`` is whole seconds: below 2 is up to 2 s).
GRACE_S = 2
#: How often the holder's watchdog looks (s).
WATCH_S = 0.05


class _RedisPlugin(Lock):
    backend = "redis"
    params = {}  # noqa: RUF012

    @cached_property
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.urls[0], socket_connect_timeout=1, socket_timeout=2)

    def _key(self) -> str:
        return f"lockbench:coincidence:{self.name}"


class RestartDuringStopLock(_RedisPlugin):
    """SET NX PX with a long lease and a restart watchdog; why: it breaks only when a world pause covers a restart."""

    id = "test.restart-during-stop"
    capabilities = Capabilities(ttl=True, fencing=False)

    def _try_acquire(self) -> Lease | None:
        owner = uuid.uuid4().hex
        try:
            # -1: the grace after a start, when a holder may still put its key back; 0: taken
            ok = self.redis.eval(ACQUIRE, 1, self._key(), owner, int(LEASE_S * 1000), GRACE_S)
        except redis.ConnectionError as exc:
            raise BackendUnavailable(str(exc)) from exc
        if ok != 1:
            return None
        lease = self._new_lease(owner, ttl=LEASE_S)
        self._watch(lease)
        return lease

    def _watch(self, lease: Lease) -> None:
        """Put the holder's key back after a restart, while the server is within its grace."""
        done = threading.Event()
        self._watching = done

        def loop() -> None:
            while not done.wait(WATCH_S):
                try:
                    self.redis.eval(REASSERT, 1, self._key(), lease.owner, int(LEASE_S * 1000), GRACE_S)
                except redis.RedisError:
                    continue  # the server is down: look again

        threading.Thread(target=loop, daemon=True, name=f"watchdog-{self.name}").start()

    def _stop_watching(self) -> None:
        done = getattr(self, "_watching", None)
        if done is not None:
            done.set()

    def owns(self, lease: Lease) -> bool | None:
        try:
            return self.redis.get(self._key()) == lease.owner.encode()
        except redis.ConnectionError as exc:
            raise BackendUnavailable(str(exc)) from exc

    def _release(self, lease: Lease) -> bool:
        self._stop_watching()
        for _ in range(20):
            try:
                return self.redis.eval(RELEASE, 1, self._key(), lease.owner) == 1
            except redis.ConnectionError:
                time.sleep(0.1)
        raise BackendUnavailable("release: Redis did not come back")


class StuckAfterRestartLock(_RedisPlugin):
    """Grants only while its start-up marker exists; why: a lock a restart leaves stuck, and nothing else."""

    id = "test.stuck-after-restart"
    capabilities = Capabilities(ttl=True, fencing=False)

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        try:
            self.redis.set(f"{self._key()}:ready", "1")
        except redis.ConnectionError as exc:
            raise BackendUnavailable(str(exc)) from exc

    def _try_acquire(self) -> Lease | None:
        owner = uuid.uuid4().hex
        try:
            if not self.redis.exists(f"{self._key()}:ready"):
                return None  # forgotten in a restart, and nobody writes it again
            ok = self.redis.set(self._key(), owner, nx=True, px=int(self.options.ttl * 1000))
        except redis.ConnectionError as exc:
            raise BackendUnavailable(str(exc)) from exc
        return self._new_lease(owner, ttl=self.options.ttl) if ok else None

    def owns(self, lease: Lease) -> bool | None:
        return None  # cannot tell: only the stuck rule can fail this lock

    def _release(self, lease: Lease) -> bool:
        with contextlib.suppress(redis.ConnectionError):
            self.redis.eval(RELEASE, 1, self._key(), lease.owner)
        return True
