"""The contract every Lock must keep, as reusable checks; each backend's tests call these.

Each check takes a ``make(name, **option_overrides) -> Lock`` factory so the same
assertions run against every algorithm on its real server.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable

from lockimpls.base import Lease, Lock, LockTimeout

Factory = Callable[..., Lock]


def fresh_name(prefix: str = "contract") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def check_acquire_release(make: Factory) -> None:
    """A free lock is granted; release reports ownership; the lock is free afterwards."""
    name = fresh_name()
    a = make(name)
    lease = a.acquire(timeout=2)
    assert isinstance(lease, Lease)
    assert lease.name == name and lease.owner
    assert a.release(lease) is True
    b = make(name)
    lease2 = b.acquire(timeout=2)
    assert b.release(lease2) is True


def check_exclusive_and_timeout(make: Factory) -> None:
    """While one client holds the lock, another's acquire times out (a LockTimeout)."""
    name = fresh_name()
    a, b = make(name), make(name)
    lease = a.acquire(timeout=2)
    try:
        assert b.try_acquire() is None
        started = time.monotonic()
        try:
            b.acquire(timeout=0.2)
        except LockTimeout:
            pass
        else:
            raise AssertionError("acquire of a held lock must raise LockTimeout")
        assert time.monotonic() - started >= 0.1, "acquire gave up before its timeout"
    finally:
        assert a.release(lease) is True
    lease_b = b.acquire(timeout=2)
    assert b.release(lease_b) is True


def check_release_by_non_owner(make: Factory) -> None:
    """A lease of a lock the caller does not hold does not free the holder's lock."""
    name = fresh_name()
    a, b = make(name), make(name)
    lease = a.acquire(timeout=2)
    forged = Lease(name, "someone-else", None, time.monotonic_ns(), None)
    assert b.release(forged) is False
    assert make(name).try_acquire() is None, "a non-owner's release freed the lock"
    assert a.release(lease) is True


def check_mutual_exclusion(make: Factory, threads: int = 6, rounds: int = 25) -> None:
    """Threads hammering one lock never see another thread inside (critical section << lease)."""
    name = fresh_name()
    inside = 0
    worst = 0
    guard = threading.Lock()
    errors: list[BaseException] = []

    def worker() -> None:
        nonlocal inside, worst
        lock = make(name)
        try:
            for _ in range(rounds):
                lease = lock.acquire(timeout=20)
                with guard:
                    inside += 1
                    worst = max(worst, inside)
                time.sleep(0.0005)
                with guard:
                    inside -= 1
                assert lock.release(lease) is True
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    assert worst == 1, f"{worst} holders inside the critical section at once"


def check_ownership_probe(make: Factory) -> None:
    """``owns`` says True while the lease holds the lock and False once it let go (None: cannot tell).

    A lock that answers must answer right: a probe that says "owned" after the release would
    hide every lost lock; one that says "lost" while held would invent them.
    """
    name = fresh_name()
    a = make(name)
    lease = a.acquire(timeout=2)
    held = a.owns(lease)
    assert held in (True, None), f"{type(a).__name__}.owns says {held!r} while it holds the lock"
    assert a.release(lease) is True
    after = a.owns(lease)
    if held is True:
        assert after is False, f"{type(a).__name__}.owns says {after!r} after the release"
    b = make(name)
    other = b.acquire(timeout=2)
    if held is True:
        assert a.owns(lease) is False, "a released lease owns a lock another client holds"
    b.release(other)


def check_all(make: Factory) -> None:
    check_acquire_release(make)
    check_ownership_probe(make)
    check_exclusive_and_timeout(make)
    check_release_by_non_owner(make)
    check_mutual_exclusion(make)
