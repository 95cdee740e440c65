"""Adapters for Redis locks people already use: redis-py's Lock, python-redis-lock, pottery's Redlock.

Each adapter drives the library through its public API, as an application would, and
only translates: our ``acquire(timeout)`` to the library's blocking call, the library's
exceptions to ours, and its result to a :class:`~lockimpls.base.Lease`. What a library
lacks is declared in ``capabilities`` rather than faked: none of the three hands out a
fencing token (``token`` is always None) and none is reentrant.

Each grant uses a new library lock object with a fresh owner value, kept in
``lease.extra["lib"]`` for its release; a lease that did not come from this client
(a forged one) is released through a library object bearing the lease's owner value,
so the library's own owner check decides.

The libraries are imported when an adapter is first built, so a missing library only
hurts its own id (and importing pottery, which patches ``json.dumps`` to know its
containers, happens only in a process that runs ``redis.pottery-redlock``).
"""

from __future__ import annotations

import math
import os
import random
import threading
import time
from collections.abc import Sequence
from typing import Any

import redis
import redis.lock
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
)
from lockimpls.redis_conn import (
    CONNECT_TIMEOUT,
    MAX_CONNECTIONS,
    SOCKET_TIMEOUT,
    RedisCall,
    _Pool,
    client_for,
    redact_url,
)
from lockimpls.redlock import quorum_owns

KEY_PREFIX = "lockbench:adapter:"


def _import(module: str, package: str) -> Any:
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:
        raise LockConfigError(
            f"this impl needs the {package} package: pip install {package} ({exc})"
        ) from None


class _Adapter(Lock):
    """Common checks and error translation of the adapters."""

    backend = "redis"
    params = {}  # noqa: RUF012 - reads no --lock-params (PythonRedisLock: auto_renewal)

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        if not self.urls:
            raise LockConfigError(f"{self.id} needs a Redis URL (--redis-url)")
        if self.options.ttl <= 0:
            raise LockConfigError(f"{self.id}: ttl must be positive, got {self.options.ttl}")
        self.url = self.urls[0]
        self.key = f"{KEY_PREFIX}{name}"

    def _call(self, what: str, url: str | None = None) -> RedisCall:
        return RedisCall(f"{self.id} {what} of {self.name!r}", url or self.url)

    def _timeout(self, timeout: float | None) -> LockTimeout:
        return LockTimeout(f"{self.id}: {self.name!r} not acquired within {timeout or 0:.3f}s")


class RedisPyLock(_Adapter):
    """redis-py's own ``redis.lock.Lock``: SET NX PX, Lua compare-and-delete release, sleep-and-retry.

    Why it is here: it ships with the client everybody already has, so it is what most
    Python code on Redis uses. It is the textbook single-server lock (like
    ``redis.set-nx-px-lua``): the lease expires under a holder whose critical section
    outlives it. It polls every ``sleep`` seconds; the adapter passes
    ``options.retry_interval`` (the library's own default is 0.1 s).

    The wait loop is the adapter's, not the library's: each attempt is the library's own
    non-blocking ``Lock.acquire`` (its SET NX PX with the grant's token, the same token on
    every attempt), and between attempts the adapter waits ``sleep`` seconds through
    ``_between_attempts``, where a harness may end the wait. Kept from redis-py 8.1's loop:
    the attempt comes first, and the loop gives up without sleeping when the next attempt
    would start after the timeout (``monotonic() + sleep > stop_trying_at``).
    """

    id = "redis.redis-py"
    summary = "redis-py's redis.lock.Lock (SET NX PX, Lua release, polling)"
    capabilities = Capabilities(
        ttl=True,
        fencing=False,
        wait="poll",
        notes="no fencing token; the lease expires under a holder whose critical section outlives it",
    )

    def _lib(self, owner: str | None = None) -> redis.lock.Lock:
        lock = redis.lock.Lock(
            client_for(self.url),
            self.key,
            timeout=self.options.ttl,
            sleep=self.options.retry_interval,
            thread_local=False,
        )
        if owner is not None:
            lock.local.token = owner.encode()
        return lock

    def acquire(self, timeout: float | None = None) -> Lease:
        lib, owner = self._lib(), new_owner_id(self.options.owner_prefix)
        sleep = self.options.retry_interval
        stop_trying_at = None if timeout is None else time.monotonic() + timeout
        while True:
            started = time.monotonic_ns()
            with self._call("acquire"):
                ok = lib.acquire(blocking=False, token=owner)
            if ok:
                break
            if stop_trying_at is not None and time.monotonic() + sleep > stop_trying_at:
                raise self._timeout(timeout)
            self._between_attempts(sleep)
        lease = self._new_lease(owner, ttl=self.options.ttl, since_ns=started)
        lease.extra["lib"] = lib
        return lease

    def owns(self, lease: Lease) -> bool | None:
        """redis-py's own ``Lock.owned()``: the key still holds this grant's token."""
        lib = lease.extra.get("lib") or self._lib(lease.owner)
        with self._call("probe"):
            return bool(lib.owned())

    def _release(self, lease: Lease) -> bool:
        lib = lease.extra.get("lib") or self._lib(lease.owner)
        try:
            with self._call("release"):
                lib.release()
        except redis.exceptions.LockError:  # LockNotOwnedError: expired or someone else's
            return False
        return True


_blocking_clients: dict[tuple[int, str, float], redis.Redis] = {}
_blocking_guard = threading.Lock()


def _blocking_client(url: str, block_s: float) -> redis.Redis:
    """A client whose reply timeout outlasts a BLPOP of ``block_s`` seconds (per process)."""
    socket_timeout = SOCKET_TIMEOUT + block_s
    key = (os.getpid(), url, socket_timeout)
    with _blocking_guard:
        client = _blocking_clients.get(key)
        if client is None:
            for stale in [k for k in _blocking_clients if k[0] != key[0]]:
                del _blocking_clients[stale]
            try:
                pool = _Pool.from_url(
                    url,
                    max_connections=MAX_CONNECTIONS,
                    timeout=socket_timeout,
                    socket_connect_timeout=CONNECT_TIMEOUT,
                    socket_timeout=socket_timeout,
                    health_check_interval=0,
                    retry=Retry(NoBackoff(), 0),
                )
            except (ValueError, TypeError) as exc:
                raise LockConfigError(f"invalid Redis URL {redact_url(url)}: {exc}") from None
            client = _blocking_clients[key] = redis.Redis(connection_pool=pool)
        return client


class PythonRedisLock(_Adapter):
    """python-redis-lock's ``redis_lock.Lock``: SET NX EX, waiters block in BLPOP on a signal list.

    Why it is here: a popular lock whose waiters do not poll: a release pushes one
    element onto ``lock-signal:<name>`` and one blocked waiter's BLPOP takes it. Its
    expiry and timeouts are whole seconds, so the adapter rounds ``options.ttl`` and
    the acquire timeout up to whole seconds (the lease deadline reflects the rounded
    expiry), and waits longer than a timeout the library refuses (above the expiry) in
    several calls. A waiter woken by the signal that loses the race blocks again for a
    full timeout, so an acquire may overrun its timeout by up to a second or more.
    ``options.params["auto_renewal"]`` turns on the library's renewal thread.
    """

    id = "redis.python-redis-lock"
    summary = "python-redis-lock (SET NX EX, BLPOP on a signal list, whole seconds)"
    capabilities = Capabilities(
        ttl=True,
        fencing=False,
        wait="notify",
        notes="no fencing token; expiry and timeouts in whole seconds (rounded up); the lease "
        "expires under a holder whose critical section outlives it (unless auto_renewal)",
    )

    params = {"auto_renewal": ParamSpec(bool, "run the library's lock renewal thread")}  # noqa: RUF012

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self._mod = _import("redis_lock", "python-redis-lock")
        self.expire = max(1, math.ceil(self.options.ttl))
        self.auto_renewal = bool(self.options.params.get("auto_renewal", False))

    def _lib(self, client: redis.Redis, owner: str | None = None) -> Any:
        return self._mod.Lock(client, self.key, expire=self.expire, id=owner, auto_renewal=self.auto_renewal)

    def acquire(self, timeout: float | None = None) -> Lease:
        owner = new_owner_id(self.options.owner_prefix)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            chunk = None if left is None else max(1, math.ceil(left))
            if chunk is not None and not self.auto_renewal:
                chunk = min(chunk, self.expire)  # the library refuses a timeout above its expiry
            client = _blocking_client(self.url, float(chunk or self.expire))
            lib = self._lib(client, owner)
            started = time.monotonic_ns()
            with self._call("acquire"):
                ok = (
                    lib.acquire(blocking=False) if timeout == 0 else lib.acquire(blocking=True, timeout=chunk)
                )
            if ok:
                lease = self._new_lease(owner, ttl=self.expire, since_ns=started)
                lease.extra["lib"] = lib
                return lease
            if deadline is not None and time.monotonic() >= deadline:
                raise self._timeout(timeout)

    def owns(self, lease: Lease) -> bool | None:
        """The library's ``get_owner_id()``: the key still names this grant's id."""
        lib = lease.extra.get("lib") or self._lib(client_for(self.url), lease.owner)
        with self._call("probe"):
            owner = lib.get_owner_id()
        if isinstance(owner, bytes):
            owner = owner.decode(errors="replace")
        return owner == lease.owner

    def _release(self, lease: Lease) -> bool:
        lib = lease.extra.get("lib") or self._lib(client_for(self.url), lease.owner)
        try:
            with self._call("release"):
                lib.release()
        except self._mod.NotAcquired:
            return False
        return True


class PotteryRedlock(_Adapter):
    """pottery's ``Redlock``: RedLock over the given masters with a thread pool per call.

    Why it is here: the maintained Python RedLock, to set beside ``redis.redlock``. It
    asks every master through a new ``ThreadPoolExecutor`` per attempt (greenlets under
    gevent), returns once a quorum answered, and retries after a random pause of up to
    0.2 s (its fixed ``_RETRY_DELAY``, left as the library ships it). It wants the same
    five masters as ``redis.redlock``.

    The wait loop is the adapter's, not the library's: each attempt is the library's own
    non-blocking ``Redlock.acquire`` (a new uuid, the SETs fanned out, the quorum and validity
    check, the attempt's keys released when it fails, ``QuorumIsImpossible`` when too many
    masters fail), and the pause between attempts goes through ``_between_attempts``, where a
    harness may end the wait. Kept from pottery 3.0's loop: the pause is
    ``random.uniform(0, _RETRY_DELAY)``, the attempt comes first, and the loop stops when the
    time since the start has reached the timeout after a pause (so a wait may overrun its
    timeout by up to one pause). Not kept: its log line of the time spent enqueued. A failed
    attempt whose quorum came too late may leave the release of its own keys in flight on a
    background greenlet (pottery's ``BailOutExecutor``); that release cannot grant anything.
    """

    @staticmethod
    def quorum_key(name: str) -> str:
        """The key pottery's Redlock takes on each master for lock ``name`` (its own 'redlock:' prefix)."""
        return f"redlock:{KEY_PREFIX}{name}"

    id = "redis.pottery-redlock"
    servers = 5
    summary = "pottery.Redlock (RedLock, thread pool fan-out, random retry up to 200 ms)"
    capabilities = Capabilities(
        ttl=True,
        fencing=False,
        wait="poll",
        notes="no fencing token; RedLock's timing assumptions (pause, clock jump, restart "
        "without persistence break it); retries up to 200 ms apart",
    )

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self._mod = _import("pottery", "pottery")

    def _lib(self, owner: str | None = None) -> Any:
        lock = self._mod.Redlock(
            key=self.key,
            masters=[client_for(u) for u in self.urls],
            auto_release_time=self.options.ttl,
            raise_on_redis_errors=True,
        )
        if owner is not None:
            lock._uuid = owner
        return lock

    def acquire(self, timeout: float | None = None) -> Lease:
        lib = self._lib()
        start = time.monotonic()
        while True:
            started = time.monotonic_ns()
            try:
                with self._call("acquire"):
                    ok = lib.acquire(blocking=False)
            except self._mod.QuorumIsImpossible as exc:
                raise BackendUnavailable(
                    f"{self.id}: too many masters failed for {self.name!r} ({exc})"
                ) from None
            if ok:
                break
            if timeout == 0:
                raise self._timeout(timeout)
            self._between_attempts(random.uniform(0, self._mod.Redlock._RETRY_DELAY))  # noqa: S311
            if timeout is not None and time.monotonic() - start >= timeout:
                raise self._timeout(timeout)
        lease = self._new_lease(lib._uuid, ttl=self.options.ttl, since_ns=started)
        lease.extra["lib"] = lib
        return lease

    def _silent_masters(self) -> int:
        """How many masters do not answer a PING now."""
        silent = 0
        for url in self.urls:
            try:
                client_for(url).ping()
            except (redis.RedisError, OSError):
                silent += 1
        return silent

    def owns(self, lease: Lease) -> bool | None:
        """A quorum of masters still holds this grant's id: True; too few even counting the masters
        that did not answer: False; otherwise None. Not pottery's ``locked()``, which says 0 as soon
        as it cannot *confirm* a quorum (a master down) though nobody else could win one either."""
        key = self.quorum_key(self.name)
        mine = silent = 0
        for url in self.urls:
            try:
                value = client_for(url).get(key)
            except (redis.RedisError, OSError):
                silent += 1
                continue
            mine += value in (lease.owner.encode(), lease.owner)
        return quorum_owns(mine, silent, len(self.urls))

    def _release(self, lease: Lease) -> bool:
        lib = lease.extra.get("lib") or self._lib(lease.owner)
        try:
            with self._call("release"):
                lib.release()
        except self._mod.ReleaseUnlockedLock:
            # pottery says so whenever it cannot delete on a quorum, a master that is down included:
            # then whether the holder still owned the lock is unknown, not "no"
            silent = self._silent_masters()
            if silent:
                raise LockOutcomeUnknown(
                    f"{self.id}: release of {self.name!r} reached no quorum with {silent} masters down"
                ) from None
            return False
        except self._mod.QuorumIsImpossible as exc:
            raise BackendUnavailable(
                f"{self.id}: too many masters failed releasing {self.name!r} ({exc})"
            ) from None
        return True
