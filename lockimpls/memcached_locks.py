"""memcached locks (seed 003 names memcached as a lock engine): ``add`` with an expiry.

``add`` stores a key only when it does not exist, atomically, so the first client to
add ``lockbench:<name>`` holds the lock; the expiry frees the lock of a client that died.
Waiting is polling (memcached has no way to notify), every ``retry_interval``.

Two ways to let go, measured side by side:

- ``memcached.add`` releases with a plain ``delete``, as the seed's simple version does.
  After its key expired and someone else took the lock, that delete removes the other
  client's lock (the flaw seed 003 describes for Redis, step 8 of its picture).
- ``memcached.add-cas`` releases with ``gets`` (value + CAS id), compares the value with
  its owner id, and deletes with ``cas`` carrying an expiry of -1 (stored already expired,
  i.e. deleted) only if nobody touched the key since the ``gets``: an atomic
  compare-and-delete, so it never removes someone else's lock.

Both still break mutual exclusion when the critical section outlives the expiry (no
lease renewal, no fencing by default). memcached counts expiry in whole seconds on a
clock that ticks once a second, so a key added with expiry N lives between N-1 and N
seconds: the lease's client-side deadline is N-1 seconds (``ttl`` rounded up first).

With ``fencing=True`` a grant also INCRs ``lockbench:<name>:fence`` (one more round trip);
the counter lives in memcached, so a restart or an eviction resets it.

Options (``LockOptions.params``): ``connect_timeout``, ``request_timeout``, ``max_idle``
(idle connections kept per process).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import select
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

from pymemcache.client.base import Client
from pymemcache.exceptions import MemcacheClientError, MemcacheError, MemcacheServerError

from lockimpls.base import (
    BackendUnavailable,
    Capabilities,
    Lease,
    Lock,
    LockConfigError,
    LockOptions,
    LockOutcomeUnknown,
    ParamSpec,
    new_owner_id,
    seconds,
)

#: Seconds to wait for a TCP connect (an unreachable server fails fast).
CONNECT_TIMEOUT = 2.0
#: Seconds to wait for one reply before the outcome is declared unknown.
REQUEST_TIMEOUT = 5.0
#: Idle connections kept per (process, server); more are opened when needed.
MAX_IDLE = 128

#: memcached keys: at most 250 bytes, no spaces or control characters.
_MAX_KEY = 250


def parse_server(urls: Sequence[str]) -> tuple[str, int]:
    """(host, port) of the one memcached server in ``urls`` (``memcached://host:port``)."""
    servers = [p.strip() for u in urls for p in str(u).split(",") if p.strip()]
    if len(servers) != 1:
        raise LockConfigError(
            f"memcached locks use exactly one server, got {len(servers)}: {', '.join(servers)}"
        )
    url = servers[0]
    try:
        parts = urlsplit(url if "://" in url else f"memcached://{url}")
        port = parts.port or 11211
    except ValueError as exc:
        raise LockConfigError(f"invalid memcached URL {url!r}: {exc}") from None
    if parts.scheme != "memcached" or not parts.hostname:
        raise LockConfigError(f"invalid memcached URL {url!r}: use memcached://host:port")
    return parts.hostname, port


def lock_key(name: str) -> str:
    """The memcached key of lock ``name`` (hashed when the name is not a valid key)."""
    key = f"lockbench:{name}"
    if len(key) + 6 > _MAX_KEY or any(not (0x21 <= ord(c) < 0x7F) for c in key):
        key = "lockbench:h:" + hashlib.sha1(name.encode()).hexdigest()
    return key


class _Pool:
    """Idle pymemcache clients of one process for one server.

    Why not pymemcache's PooledClient: a fresh connection is checked with ``version``
    before any lock command goes out, so "server unreachable" (nothing sent) and "answer
    lost" (maybe applied) never get confused.
    """

    def __init__(
        self, server: tuple[str, int], connect_timeout: float, timeout: float, max_idle: int
    ) -> None:
        self.server = server
        self.connect_timeout = connect_timeout
        self.timeout = timeout
        self.max_idle = max_idle
        self._idle: list[Client] = []
        self._mutex = threading.Lock()

    def get(self) -> Client:
        while True:
            with self._mutex:
                idle = self._idle.pop() if self._idle else None
            if idle is None:
                break
            # An idle socket that is readable was closed by the server (restart, idle
            # timeout): reusing it would turn "never sent" into "answer lost".
            if idle.sock is not None and not select.select([idle.sock], [], [], 0)[0]:
                return idle
            idle.close()
        client = Client(
            self.server,
            connect_timeout=self.connect_timeout,
            timeout=self.timeout,
            no_delay=True,
            default_noreply=False,
        )
        try:
            client.version()
        except (MemcacheError, OSError) as exc:
            client.close()
            host, port = self.server
            raise BackendUnavailable(f"memcached at {host}:{port} unreachable ({exc})") from exc
        return client

    def put(self, client: Client) -> None:
        with self._mutex:
            if len(self._idle) < self.max_idle:
                self._idle.append(client)
                return
        client.close()

    def close(self) -> None:
        with self._mutex:
            idle, self._idle = self._idle, []
        for client in idle:
            client.close()


_pools: dict[tuple, _Pool] = {}


def pool_for(server: tuple[str, int], connect_timeout: float, timeout: float, max_idle: int) -> _Pool:
    """The shared pool of this process for ``server`` (never reused across a fork)."""
    pid = os.getpid()
    key = (pid, server, connect_timeout, timeout, max_idle)
    pool = _pools.get(key)
    if pool is None:
        for stale in [k for k in _pools if k[0] != pid]:
            del _pools[stale]  # the parent's sockets: never touch them in a child
        pool = _pools.setdefault(key, _Pool(server, connect_timeout, timeout, max_idle))
    return pool


def close_clients() -> None:
    """Close this process's connections (tests and short-lived tools)."""
    pid = os.getpid()
    for key in [k for k in _pools if k[0] == pid]:
        _pools.pop(key).close()


class _MemcachedLock(Lock):
    """``add`` with expiry to acquire; subclasses decide how to release."""

    backend = "memcached"

    @classmethod
    def recovery_after_crash(cls, ttl: float, params: dict[str, Any]) -> tuple[float | None, str]:
        """memcached counts expiry in whole seconds, so a lease ends up to 1 s after its TTL."""
        return float(ttl) + 1.0, "the TTL (memcached's clock ticks once a second)"

    params = {  # noqa: RUF012
        "connect_timeout": seconds("seconds a connect may take (default 2)", high=600),
        "request_timeout": seconds("seconds one request may take (default 5)", high=600),
        "max_idle": ParamSpec(int, "idle connections kept per process (default 128)", 0, 100_000),
    }

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        params = self.options.params
        self.server = parse_server(self.urls)
        self._pool_args = (
            self.server,
            float(params.get("connect_timeout", CONNECT_TIMEOUT)),
            float(params.get("request_timeout", REQUEST_TIMEOUT)),
            int(params.get("max_idle", MAX_IDLE)),
        )
        self.key = lock_key(name)
        self.fence_key = self.key + ":fence"
        self.expire = max(1, math.ceil(self.options.ttl))
        self._handed_out: set[str] = set()
        self._stats = {"attempts": 0, "busy": 0}

    def stats(self) -> dict[str, int]:
        """attempts (adds sent) and busy (adds refused because the lock was held)."""
        return dict(self._stats)

    @contextlib.contextmanager
    def _call(self, what: str, changes_state: bool) -> Iterator[Client]:
        """A connection for one command; errors become the lock errors of ``lockimpls.base``."""
        pool = pool_for(*self._pool_args)
        client = pool.get()
        where = f"{self.id} {what} {self.name!r}"
        try:
            yield client
        except MemcacheClientError as exc:
            pool.put(client)
            raise LockConfigError(f"{where}: memcached refused the request ({exc})") from exc
        except MemcacheServerError as exc:
            client.close()
            raise BackendUnavailable(f"{where}: server error, nothing stored ({exc})") from exc
        except (MemcacheError, OSError) as exc:
            client.close()
            if changes_state:
                raise LockOutcomeUnknown(f"{where}: sent, answer lost ({exc})") from exc
            raise BackendUnavailable(f"{where}: no answer ({exc})") from exc
        else:
            pool.put(client)

    def _try_acquire(self) -> Lease | None:
        owner = new_owner_id(self.options.owner_prefix)
        self._stats["attempts"] += 1
        # the key's expiry runs from the add, so the client's deadline does too (as the Redis locks'):
        # a process paused after the add and before the lease is made has lost that time already
        started = time.monotonic_ns()
        with self._call("add", changes_state=True) as mc:
            stored = mc.add(self.key, owner.encode(), expire=self.expire, noreply=False)
        if not stored:
            self._stats["busy"] += 1
            return None
        self._handed_out.add(owner)
        try:
            token = self._next_token() if self.options.fencing else None
        except BackendUnavailable as exc:
            raise LockOutcomeUnknown(
                f"{self.id}: {self.name!r} added, fencing counter unreachable ({exc})"
            ) from exc
        return self._new_lease(owner, token=token, ttl=self.expire - 1, since_ns=started)

    def owns(self, lease: Lease) -> bool | None:
        """The key still holds this grant's owner id (a read; an expired or taken-over key does not)."""
        with self._call("probe", changes_state=False) as mc:
            return mc.get(self.key) == lease.owner.encode()

    def _next_token(self) -> int:
        with self._call("fence", changes_state=True) as mc:
            value = mc.incr(self.fence_key, 1)
            if value is None:
                mc.add(self.fence_key, b"0", expire=0, noreply=False)
                value = mc.incr(self.fence_key, 1)
        if value is None:
            raise LockOutcomeUnknown(f"{self.id}: fencing counter of {self.name!r} vanished")
        return int(value)

    def _expired(self, lease: Lease) -> bool:
        return lease.deadline_ns is not None and time.monotonic_ns() >= lease.deadline_ns


class MemcachedAdd(_MemcachedLock):
    """add + delete, as the seed writes it: release may delete someone else's lock.

    Why keep an unsafe algorithm: it is what many codebases do, and the benchmark must
    show how it breaks (release after expiry frees the next holder's lock) next to the
    safe variant, not just state it.
    """

    id = "memcached.add"
    summary = "add with expiry; release = delete (deletes another's lock after expiry)"
    capabilities = Capabilities(
        ttl=True,
        fencing=True,
        notes="unsafe release: a plain delete removes whoever's lock is there; expiry has "
        "1 s granularity (a key lives expire-1..expire s); fencing counter only with fencing=True",
    )

    def _release(self, lease: Lease) -> bool:
        with self._call("delete", changes_state=True) as mc:
            deleted = mc.delete(self.key, noreply=False)
        mine = lease.owner in self._handed_out
        self._handed_out.discard(lease.owner)
        # The delete cannot tell whose key it removed; past the deadline it was not ours.
        return bool(deleted) and mine and not self._expired(lease)


class MemcachedAddCas(_MemcachedLock):
    """add to acquire; release = gets, compare owner, cas with expiry -1 (compare-and-delete).

    Why cas rather than a get-then-delete: between a get and a delete the key can expire
    and be taken by someone else; a cas fails when the key changed since the gets, so
    the release never removes another client's lock.
    """

    id = "memcached.add-cas"
    summary = "add with expiry; release = gets + owner check + cas delete (safe)"
    capabilities = Capabilities(
        ttl=True,
        fencing=True,
        notes="release deletes only its own key (gets/cas); expiry has 1 s granularity "
        "(a key lives expire-1..expire s); fencing counter only with fencing=True",
    )

    def _release(self, lease: Lease) -> bool:
        self._handed_out.discard(lease.owner)
        with self._call("gets", changes_state=False) as mc:
            value, cas = mc.gets(self.key)
        if value is None or value != lease.owner.encode():
            return False
        with self._call("cas-delete", changes_state=True) as mc:
            # Stored with a negative expiry the item is expired at once: a delete guarded by cas.
            done = mc.cas(self.key, value, cas, expire=-1, noreply=False)
        return bool(done)
