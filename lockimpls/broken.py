"""Locks that are wrong on purpose, so the checkers can be shown to catch them (test-only)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from lockimpls.base import (
    Capabilities,
    Lease,
    Lock,
    LockConfigError,
    LockOptions,
    ParamSpec,
    new_owner_id,
)


class NoMutex(Lock):
    """A "lock" that grants every acquire at once and excludes nobody.

    It exists only to prove that the checkers catch a broken lock: a workload run with it
    must come out ``invalid`` (overlapping holds, oversold stock, lost updates). It talks
    to no server, so it is never in a backend's list of impls (``registry.TEST_ONLY``).
    """

    id = "test.no-mutex"
    backend = "test"
    summary = "grants every acquire immediately; no mutual exclusion (test only)"
    params = {}  # noqa: RUF012
    capabilities = Capabilities(ttl=False, fencing=False, wait="poll", notes="no mutual exclusion at all")

    def _try_acquire(self) -> Lease:
        return self._new_lease(new_owner_id(self.options.owner_prefix))

    def _release(self, lease: Lease) -> bool:
        return True


class Slowed(Lock):
    """Another impl made slower on purpose, so the CI gate can be shown to catch a slowdown.

    ``options.params``: ``inner`` (a Redis impl id, default ``redis.set-nx-px-lua``),
    ``delay_s`` (seconds, default 0) and ``delay_mode``: ``busy`` (default) spins for the
    delay without yielding, like slower client code would; ``sleep`` sleeps, like a slower
    server round trip (under gevent that also lets every other client of the process run
    first, so even 0.1 ms costs far more than 0.1 ms). The delay comes after the inner
    lock was granted, inside ``acquire``: it lengthens the acquire latency and the time the
    lock is held. With ``delay_s`` 0 it is the inner lock plus one call, for A/A runs.
    """

    id = "test.slowed"
    backend = "redis"
    summary = "wraps a Redis impl and sleeps delay_s after every grant (test only)"
    #: delay_s has no declared range on purpose: the tests give it -1 to see a lock that
    #: refuses its options inside Locust (the constructor checks 0 <= delay_s < 10)
    params = {  # noqa: RUF012
        "inner": ParamSpec(str, "the Redis impl id to slow down"),
        "delay_s": ParamSpec(float, "seconds added after every grant, 0..10"),
        "delay_mode": ParamSpec(str, "busy or sleep", choices=("busy", "sleep")),
    }
    capabilities = Capabilities(ttl=True, fencing=False, wait="poll", notes="a Redis impl, slowed on purpose")

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        from lockimpls.registry import resolve

        super().__init__(name, urls, options)
        params = dict(self.options.params)
        inner_id = str(params.pop("inner", "redis.set-nx-px-lua"))
        try:
            self.delay_s = float(params.pop("delay_s", 0.0))
        except (TypeError, ValueError):
            raise LockConfigError("test.slowed: delay_s must be a number of seconds") from None
        if not 0 <= self.delay_s < 10:
            raise LockConfigError(f"test.slowed: delay_s must be in [0, 10) seconds, got {self.delay_s:g}")
        self.delay_mode = str(params.pop("delay_mode", "busy"))
        if self.delay_mode not in ("busy", "sleep"):
            raise LockConfigError(f"test.slowed: delay_mode must be busy or sleep, got {self.delay_mode!r}")
        inner_cls = resolve(inner_id)
        if getattr(inner_cls, "backend", "") != self.backend or inner_cls is Slowed:
            raise LockConfigError(f"test.slowed: inner must be a Redis impl, got {inner_id!r}")
        self.inner = inner_cls(name, urls, replace(self.options, params=params))

    def acquire(self, timeout: float | None = None) -> Lease:
        lease = self.inner.acquire(timeout)
        if self.delay_s and self.delay_mode == "sleep":
            time.sleep(self.delay_s)
        elif self.delay_s:
            end = time.perf_counter() + self.delay_s
            while time.perf_counter() < end:
                pass
        return lease

    def _release(self, lease: Lease) -> bool:
        return self.inner.release(lease)

    def stats(self) -> dict[str, int]:
        return self.inner.stats()

    def close(self) -> None:
        self.inner.close()
