"""A complete user-supplied lock: SET NX PX to acquire, a Lua compare-and-delete to release."""

from functools import cached_property

import redis

from lockimpls.base import Capabilities, Lease, Lock, new_owner_id

RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


class MyLock(Lock):
    """One Redis key per lock, with a lease; bench starts the server that ``backend`` names."""

    id = "redis.my-lock"
    backend = "redis"
    capabilities = Capabilities(ttl=True, fencing=False)

    @cached_property
    def redis(self) -> redis.Redis:  # one client per lock instance, made in the worker process
        return redis.Redis.from_url(self.urls[0])

    def _try_acquire(self) -> Lease | None:
        owner = new_owner_id()
        ok = self.redis.set(f"my-lock:{self.name}", owner, nx=True, px=int(self.options.ttl * 1000))
        return self._new_lease(owner, ttl=self.options.ttl) if ok else None

    def _release(self, lease: Lease) -> bool:
        return self.redis.eval(RELEASE, 1, f"my-lock:{self.name}", lease.owner) == 1
