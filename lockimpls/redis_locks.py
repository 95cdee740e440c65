"""The five seed Redis locks (seeds 000, 001, 003, 004), implemented as written, flaws included.

These are measured, not fixed: each class does exactly the commands its seed describes,
so the workloads can show where each one breaks (DESIGN.md section 4). Where a seed is
unsafe, the class docstring and ``capabilities.notes`` say how.

Common to all five:

- the lock lives at ``lockbench:lock:<name>``; with ``options.fencing`` every grant also
  takes a token from ``INCR lockbench:lock:<name>:fence`` (one more round trip, except in
  ``redis.set-nx-px-lua`` where grant and INCR are one script);
- every grant writes a fresh owner id, so two grants never share a value;
- the lease deadline is counted from the moment the attempt started (before the request
  left), so the client's deadline never falls after the server's expiry;
- errors go through :class:`lockimpls.redis_conn.RedisCall` (unreachable server ->
  BackendUnavailable, lost reply -> LockOutcomeUnknown);
- commands go through :func:`lockimpls.redis_conn.execute` (raw replies, no client-side
  machinery per command): a waiter polls every ``retry_interval``, so each poll's client
  cost is paid thousands of times a second.

Some steps are separate methods (``_step_setnx``, ``_release_check``...) so that tests can
drive a crash or an interleaving between two commands; the production path calls them in
order and nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import redis

from lockimpls.base import Capabilities, Lease, Lock, LockConfigError, LockOptions, new_owner_id
from lockimpls.redis_conn import RedisCall, client_for, evalsha, execute, script_for

KEY_PREFIX = "lockbench:lock:"

#: Grant and fencing token in one step: SET NX PX, and only if it was set, INCR the fence key.
ACQUIRE_FENCED_LUA = """
if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
    return redis.call('incr', KEYS[2])
end
return false
"""

#: Compare-and-delete: only the holder whose value is still in the key deletes it.
RELEASE_LUA = """
if redis.call('get', KEYS[1]) == ARGV[1] then
    return redis.call('del', KEYS[1])
end
return 0
"""


def lock_key(name: str) -> str:
    """The Redis key holding lock ``name``."""
    return f"{KEY_PREFIX}{name}"


class _RedisLock(Lock):
    """Shared plumbing of the single-server Redis locks (key names, client, fencing, leases)."""

    backend = "redis"
    params = {}  # noqa: RUF012 - reads no --lock-params

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        if not self.urls:
            raise LockConfigError(f"{self.id} needs a Redis URL (--redis-url)")
        if self.options.ttl <= 0:
            raise LockConfigError(f"{self.id}: ttl must be positive, got {self.options.ttl}")
        self.url = self.urls[0]
        self.key = lock_key(name)
        self.fence_key = f"{self.key}:fence"
        self.ttl_ms = max(1, round(self.options.ttl * 1000))
        self._owner = new_owner_id(self.options.owner_prefix)
        self._whats: dict[str, str] = {}

    @property
    def client(self) -> redis.Redis:
        """This process's client for the lock server (never one made before a fork)."""
        return client_for(self.url)

    def _call(self, what: str) -> RedisCall:
        label = self._whats.get(what)
        if label is None:
            label = self._whats[what] = f"{self.id} {what} of {self.name!r}"
        return RedisCall(label, self.url)

    def _fence(self) -> int | None:
        if not self.options.fencing:
            return None
        return int(execute(self.url, "INCR", self.fence_key))

    def _granted(self, token: int | None, started_ns: int, ttl: float | None) -> Lease:
        lease = self._new_lease(self._owner, token, ttl=ttl, since_ns=started_ns)
        self._owner = new_owner_id(self.options.owner_prefix)
        return lease

    def owns(self, lease: Lease) -> bool | None:
        """The key still holds this grant's value (the owner id; setnx-getset: its expiry time)."""
        expected = str(lease.extra["expires_at_ms"]) if "expires_at_ms" in lease.extra else lease.owner
        with self._call("probe"):
            return execute(self.url, "GET", self.key) == expected.encode()

    def _step_setnx(self, value: str | None = None) -> bool:
        """SETNX key value (the current owner id by default): True when this call set it."""
        return execute(self.url, "SETNX", self.key, self._owner if value is None else value) == 1

    def _step_set_nx_px(self) -> bool:
        """``SET key owner NX PX ttl``: True when this call took the lock (one atomic command)."""
        return execute(self.url, "SET", self.key, self._owner, "NX", "PX", self.ttl_ms) is not None

    def _acquire_by(
        self, take: Callable[[], bool], ttl: float | None, then: Callable[[], None] | None = None
    ) -> Lease | None:
        """One acquire attempt: ``take`` the key (the write that grants), ``then`` its follow-up, the token.

        The locks that differ only in the commands that take the key share this: the attempt
        counts as applied once ``take`` succeeded, so a failure in ``then`` or the token is
        an acquire whose outcome is unknown, not a refusal.
        """
        started = time.monotonic_ns()
        with self._call("acquire") as call:
            if not take():
                return None
            call.applied()
            if then is not None:
                then()
            token = self._fence()
        return self._granted(token, started, ttl)

    def _delete(self) -> bool:
        """Unconditional DEL: True when a key was there (whoever's it was)."""
        return execute(self.url, "DEL", self.key) == 1


class SetnxDel(_RedisLock):
    """Seed 001's simplest lock: ``SETNX key owner`` to acquire, ``DEL key`` to release.

    Why it is here: it is the first thing people write, and the baseline every other
    Redis lock improves on. Unsafe: there is no expiry, so a holder that crashes (or
    loses its connection before DEL) leaves the lock taken forever; and DEL is
    unconditional, so anyone's release frees the lock, including a non-owner's (it
    breaks the contract's ``check_release_by_non_owner`` by design). ``release`` returns
    whether DEL removed a key, not whether it was the caller's.
    """

    id = "redis.setnx-del"
    summary = "SETNX to acquire, unconditional DEL to release; no expiry"
    capabilities = Capabilities(
        ttl=False,
        fencing=True,
        wait="poll",
        notes="no expiry: a crashed holder blocks the lock forever; "
        "release is an unconditional DEL: a non-owner's release frees the lock",
    )

    def _try_acquire(self) -> Lease | None:
        return self._acquire_by(self._step_setnx, None)

    def _release(self, lease: Lease) -> bool:
        with self._call("release"):
            return self._delete()


class SetnxExpire(_RedisLock):
    """Seeds 001/004: ``SETNX key owner`` then ``EXPIRE key ttl`` as two commands; DEL releases.

    Why it is here: the usual first fix for SetnxDel's stuck lock. Unsafe: the two
    commands are not atomic, so a holder that dies between them leaves a key without a TTL
    (stuck forever, like SetnxDel); and DEL is unconditional, so a holder whose critical
    section outlived the TTL deletes the lock that another client acquired since. The TTL
    is set with PEXPIRE (milliseconds) so fractional ``options.ttl`` values are honoured.
    """

    id = "redis.setnx-expire"
    summary = "SETNX then PEXPIRE (two commands), unconditional DEL to release"
    capabilities = Capabilities(
        ttl=True,
        fencing=True,
        wait="poll",
        notes="crash between SETNX and EXPIRE leaves a lock without TTL (stuck forever); "
        "release is an unconditional DEL: after expiry it deletes another client's lock",
    )

    def _try_acquire(self) -> Lease | None:
        return self._acquire_by(self._step_setnx, self.options.ttl, then=self._step_expire)

    def _step_expire(self) -> None:
        execute(self.url, "PEXPIRE", self.key, self.ttl_ms)

    def _release(self, lease: Lease) -> bool:
        with self._call("release"):
            return self._delete()


def _parse_ms(raw: bytes | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


class SetnxGetset(_RedisLock):
    """Seed 001's last lock (also 000, 004): the value is the holder's expiry time, taken over by GETSET.

    Acquire: ``SETNX key (clock()+ttl in ms)``; on failure ``GET key``, and if that time is
    already past by this client's clock, ``GETSET key (new expiry)``: the caller wins only
    when GETSET returned the very value it read (nobody else took over in between). A
    winner then sets ``EXPIRE`` (PEXPIRE here) as the seed does. Release: ``DEL key``.

    Why it is here: it survives a crash between SETNX and EXPIRE without Lua. Unsafe:
    expiry is judged by client clocks, so a client whose clock runs ahead takes over a
    lock that is still valid for everyone else (``options.clock`` injects that skew); a
    loser's GETSET still overwrites the winner's expiry; and DEL is unconditional, so a
    holder that was taken over deletes its successor's lock.
    """

    id = "redis.setnx-getset"
    reads_clock = True  # the expiry time it writes and compares is the client's clock
    summary = "SETNX expiry-timestamp, GET + GETSET takeover by client clock, DEL to release"
    capabilities = Capabilities(
        ttl=True,
        fencing=True,
        wait="poll",
        notes="expiry judged by client clocks: a client whose clock is ahead takes over a valid lock; "
        "release is an unconditional DEL: deletes the lock of a client that took over",
    )

    def _try_acquire(self) -> Lease | None:
        started = time.monotonic_ns()
        now_ms = int(self.options.clock() * 1000)
        expires_ms = now_ms + self.ttl_ms
        value = str(expires_ms)
        with self._call("acquire") as call:
            if self._step_setnx(value):
                call.applied()
            else:
                seen = _parse_ms(execute(self.url, "GET", self.key))
                if seen is None or seen >= now_ms:
                    return None
                previous = _parse_ms(execute(self.url, "GETSET", self.key, value))
                call.applied()
                if previous != seen:
                    return None
            execute(self.url, "PEXPIRE", self.key, self.ttl_ms)
            token = self._fence()
        lease = self._granted(token, started, self.options.ttl)
        lease.extra["expires_at_ms"] = expires_ms
        return lease

    def owns(self, lease: Lease) -> bool | None:
        """False once the key holds another expiry time; the same time cannot tell (None).

        The value is a timestamp in ms, not an owner: two grants in the same millisecond
        write the same value, so a match proves nothing, while a mismatch proves the loss.
        """
        if super().owns(lease):
            return None
        return False

    def _release(self, lease: Lease) -> bool:
        with self._call("release"):
            return self._delete()


class SetNxPx(_RedisLock):
    """Seed 003: ``SET key uuid NX PX ttl``; release = ``GET``, compare with own uuid, then ``DEL``.

    Why it is here: one atomic command to acquire with expiry, the common modern pattern.
    Unsafe: the release check and the delete are two commands. When the lease expires
    between them (critical section longer than the TTL, or a pause) and another client
    acquires, the old holder's DEL deletes the new holder's lock.
    """

    id = "redis.set-nx-px"
    summary = "SET NX PX with a unique value; release = GET, compare, DEL (not atomic)"
    capabilities = Capabilities(
        ttl=True,
        fencing=True,
        wait="poll",
        notes="release is GET-compare-DEL in two commands: a lease expiring between them "
        "makes the old holder delete the new holder's lock",
    )

    def _try_acquire(self) -> Lease | None:
        return self._acquire_by(self._step_set_nx_px, self.options.ttl)

    def _release(self, lease: Lease) -> bool:
        with self._call("release"):
            if not self._release_check(lease):
                return False
            return self._delete()

    def _release_check(self, lease: Lease) -> bool:
        """First half of the release: does the key still hold this lease's owner id?"""
        return execute(self.url, "GET", self.key) == lease.owner.encode()


class SetNxPxLua(_RedisLock):
    """Seeds 003/001: ``SET key uuid NX PX ttl``; release by a Lua compare-and-delete script.

    Why it is here: the textbook single-server Redis lock (what redis-py's own Lock does).
    A release can no longer delete someone else's lock. Still unsafe when the critical
    section outlives the TTL or the holder pauses: the lock expires under the holder and
    another client enters while the first still believes it holds it (fencing tokens, with
    ``options.fencing``, let the resource refuse the late writer).
    """

    id = "redis.set-nx-px-lua"
    summary = "SET NX PX with a unique value; release by Lua compare-and-delete"
    capabilities = Capabilities(
        ttl=True,
        fencing=True,
        wait="poll",
        notes="safe release, but the lease still expires under a holder whose critical section "
        "outlives the TTL (long-cs, pause)",
    )

    def _try_acquire(self) -> Lease | None:
        started = time.monotonic_ns()
        with self._call("acquire"):
            if self.options.fencing:
                script = script_for(self.url, ACQUIRE_FENCED_LUA)
                token = evalsha(self.url, script, [self.key, self.fence_key], [self._owner, self.ttl_ms])
                if token is None:
                    return None
                token = int(token)
            else:
                if not self._step_set_nx_px():
                    return None
                token = None
        return self._granted(token, started, self.options.ttl)

    def _release(self, lease: Lease) -> bool:
        with self._call("release"):
            return evalsha(self.url, script_for(self.url, RELEASE_LUA), [self.key], [lease.owner]) == 1
