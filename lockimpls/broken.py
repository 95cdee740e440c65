"""Locks that are wrong on purpose, so the checkers can be shown to catch them (test-only)."""

from __future__ import annotations

from lockimpls.base import Capabilities, Lease, Lock, new_owner_id


class NoMutex(Lock):
    """A "lock" that grants every acquire at once and excludes nobody.

    It exists only to prove that the checkers catch a broken lock: a workload run with it
    must come out ``invalid`` (overlapping holds, oversold stock, lost updates). It talks
    to no server, so it is never in a backend's list of impls (``registry.TEST_ONLY``).
    """

    id = "test.no-mutex"
    backend = "test"
    summary = "grants every acquire immediately; no mutual exclusion (test only)"
    capabilities = Capabilities(ttl=False, fencing=False, wait="poll", notes="no mutual exclusion at all")

    def _try_acquire(self) -> Lease:
        return self._new_lease(new_owner_id(self.options.owner_prefix))

    def _release(self, lease: Lease) -> bool:
        return True
