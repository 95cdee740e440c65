"""A plug-in lock (``module:Class``) that forgets its holder's lock in a restart, and whose client
is slow to come back: the hole "a lost lock is invisible unless a waiter takes it in time".

:class:`SlowReconnectLock` is ``redis.set-nx-px-lua`` as a user would write it (SET NX PX,
compare-and-delete release, no persistence on the server, so a restart forgets every key),
with one difference: after a connection error its *acquire* path backs off for
:data:`BACKOFF_S` before it tries again, as pools with a reconnect backoff do. So after a
restart no waiter is granted the lock for seconds, longer than the harness keeps the struck
holder, and no overlap can be seen. The holder's own release still says "not owned": that
is the lost lock the ownership checker must call a failure. It has no ``owns`` of its own
(a plug-in written before the probe existed), so only the release can tell.
"""

from __future__ import annotations

import time
import uuid

import redis

from lockimpls.base import BackendUnavailable, Capabilities, Lease, Lock

RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
#: Twice bench's longest regrant wait (REGRANT_WAIT_S, 3 s): no waiter comes back within it.
BACKOFF_S = 6.0


class SlowReconnectLock(Lock):
    """SET NX PX with a 6 s reconnect backoff on acquire; why: a lost lock no waiter can witness."""

    id = "test.slow-reconnect"
    backend = "redis"
    capabilities = Capabilities(ttl=True, fencing=False)
    params = {}  # noqa: RUF012

    _down_until = 0.0  # per process: the backoff after a connection error

    def _client(self) -> redis.Redis:
        return redis.Redis.from_url(self.urls[0], socket_connect_timeout=1, socket_timeout=2)

    def _try_acquire(self) -> Lease | None:
        if time.monotonic() < SlowReconnectLock._down_until:
            return None
        owner = uuid.uuid4().hex
        try:
            ok = self._client().set(f"slow:{self.name}", owner, nx=True, px=int(self.options.ttl * 1000))
        except redis.ConnectionError as exc:
            SlowReconnectLock._down_until = time.monotonic() + BACKOFF_S
            raise BackendUnavailable(str(exc)) from exc
        return self._new_lease(owner, ttl=self.options.ttl) if ok else None

    def _release(self, lease: Lease) -> bool:
        for _ in range(20):  # the release reconnects at once: its answer is what the test reads
            try:
                return self._client().eval(RELEASE, 1, f"slow:{self.name}", lease.owner) == 1
            except redis.ConnectionError:
                time.sleep(0.1)
        raise BackendUnavailable("release: Redis did not come back")
