"""Canary locks: locks built to fail, the positive controls of ``bench matrix``.

A survived cell claims that an experiment which could have broken the lock did not. Where
no lock of the catalog is known to fail under a scenario (a ZooKeeper or etcd member kill,
an etcd restart), that claim needs a lock that must fail whenever the fault really touched
the service the holders depend on. The canary is such a lock: a catalog lock that, when
its server cannot be reached or answers with an error, *assumes the lock is free* and
grants it ("fail open", a mistake real code makes). So a fault that made the holder's
service unreachable to the waiters hands the lock to a second client while the first still
holds it, and the checkers see the overlap. A fault the clients never noticed (a member
nobody talked to) leaves the canary standing: the scenario *did not bite*.

Canaries are never ranked: they are not in the catalog (``registry.CANARIES``), and
``bench list`` marks them.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from lockimpls.base import BackendUnavailable, Lease, Lock, LockOutcomeUnknown, LockTimeout

#: A canary waits in slices this long, looking for an outage between them (seconds).
SLICE_S = 0.1


def fail_open(base: type[Lock], backend: str) -> type[Lock]:
    """A subclass of ``base`` that grants the lock whenever ``base`` cannot reach its server."""

    class FailOpen(base):  # type: ignore[valid-type, misc]
        __doc__ = f"""{base.__name__} that assumes the lock is free when its server fails (a canary).

        Why: a positive control must fail when a fault really cut the holders off from the
        service; this lock does exactly that, and nothing else differs from {base.__name__}.
        """

        id = f"canary.fail-open-{backend}"
        canary = True

        def acquire(self, timeout: float | None = None) -> Lease:
            # Waits in slices so that an outage seen while waiting opens the lock: a ZooKeeper
            # waiter parked on a watch gets no error when its connection drops, only a state
            # change (SUSPENDED) of its session, which the session counts.
            outages = self._outages()
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                step = SLICE_S if left is None else max(0.0, min(SLICE_S, left))
                try:
                    return super().acquire(step)
                except LockTimeout:
                    if self._outages() > outages:
                        return self._open_lease()
                    if left is not None and left <= SLICE_S:
                        raise
                except (BackendUnavailable, LockOutcomeUnknown, OSError):
                    return self._open_lease()

        def _outages(self) -> int:
            counters = getattr(getattr(self, "session", None), "counters", None) or {}
            return int(counters.get("suspensions", 0)) + int(counters.get("sessions_lost", 0))

        def _open_lease(self) -> Lease:
            now = time.monotonic_ns()
            return Lease(self.name, f"fail-open-{uuid.uuid4().hex[:8]}", None, now, None)

        def release(self, lease: Lease) -> bool:
            if lease.owner.startswith("fail-open-"):
                return False
            try:
                return super().release(lease)
            except (BackendUnavailable, LockOutcomeUnknown, OSError):
                return False

    FailOpen.__name__ = FailOpen.__qualname__ = f"FailOpen{base.__name__}"
    return FailOpen


def _make(module: str, cls: str, backend: str) -> Any:
    import importlib

    return fail_open(getattr(importlib.import_module(module), cls), backend)


def __getattr__(name: str) -> Any:
    """``lockimpls.canary:FailOpenEtcd`` and friends, built on first use."""
    table = {
        "FailOpenRedis": ("lockimpls.redis_locks", "SetNxPxLua", "redis"),
        "FailOpenPostgres": ("lockimpls.postgres_locks", "Advisory", "postgres"),
        "FailOpenEtcd": ("lockimpls.etcd_locks", "EtcdLease", "etcd"),
        "FailOpenZookeeper": ("lockimpls.zk_locks", "Sequential", "zookeeper"),
        "FailOpenMemcached": ("lockimpls.memcached_locks", "MemcachedAdd", "memcached"),
    }
    if name in table:
        made = _make(*table[name])
        globals()[name] = made
        return made
    raise AttributeError(name)
