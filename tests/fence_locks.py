"""Plug-in locks (``module:Class``) that differ only in where their fencing tokens come from.

All three are the same exclusive lock (SET NX PX, compare-and-delete release), so mutual
exclusion never fails; what differs is the token handed out with each grant:

- :class:`CounterTokenLock`: ``INCR`` of a per-lock counter, the correct source;
- :class:`RandomTokenLock`: a random number, as some locks use an owner nonce;
- :class:`BackwardsTokenLock`: a counter that counts down, a source that goes backwards.

The fencing-order checker must find the last two invalid under ``--fencing enforce`` and
``observe`` and the first valid; with ``--fencing off`` the last two keep a valid verdict
but show their out-of-order grants (tests/test_fencing_order.py).
"""

from __future__ import annotations

import random
from functools import cached_property

import redis

from lockimpls.base import Capabilities, Lease, Lock, new_owner_id

RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"
#: Highest token the countdown hands out; it never reaches 0 in a test run.
COUNTDOWN_FROM = 1_000_000_000


class _TokenLock(Lock):
    """SET NX PX with a token from :meth:`_token`; why: only the token source varies between subclasses."""

    backend = "redis"
    capabilities = Capabilities(ttl=True, fencing=True)

    @cached_property
    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.urls[0])

    def _token(self) -> int:
        raise NotImplementedError

    def _try_acquire(self) -> Lease | None:
        owner = new_owner_id()
        if not self.redis.set(f"fence-test:{self.name}", owner, nx=True, px=int(self.options.ttl * 1000)):
            return None
        # a token with every grant, asked for or not (as locks whose token comes with the grant,
        # e.g. a revision): with --fencing off the checker still judges the token promise
        return self._new_lease(owner, token=self._token(), ttl=self.options.ttl)

    def _release(self, lease: Lease) -> bool:
        return self.redis.eval(RELEASE, 1, f"fence-test:{self.name}", lease.owner) == 1


class CounterTokenLock(_TokenLock):
    """Tokens from INCR: strictly increasing in grant order (correct)."""

    id = "test.fence-counter"

    def _token(self) -> int:
        return int(self.redis.incr(f"fence-test:{self.name}:fence"))


class RandomTokenLock(_TokenLock):
    """Tokens from a random source: no order at all (broken fencing)."""

    id = "test.fence-random"

    def _token(self) -> int:
        return random.randrange(1, 2**31)


class BackwardsTokenLock(_TokenLock):
    """Tokens from a countdown: every grant lower than the one before (broken fencing)."""

    id = "test.fence-backwards"

    def _token(self) -> int:
        return COUNTDOWN_FROM - int(self.redis.incr(f"fence-test:{self.name}:fence"))
