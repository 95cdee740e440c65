"""The Lock interface every algorithm implements, its Lease, errors and capabilities.

A lock is built for one lock name on one backend. ``acquire`` either returns a
:class:`Lease` or raises: :class:`LockTimeout` when the caller knows it does not hold
the lock, :class:`LockOutcomeUnknown` when it cannot know (a request whose answer was
lost may still have been applied), :class:`BackendUnavailable` when the server cannot
be reached at all. ``release`` returns whether the caller still owned the lock when it
let go; a lease that already expired, or was taken over, returns False.

Subclasses implement ``_try_acquire`` (one attempt, no waiting) and ``_release``; the
template method ``acquire`` owns the waiting policy, so every polling lock waits the
same way and ``retry_interval`` means one thing across backends. Locks that are woken
by the server (pub/sub, watches, server-side queues) override ``acquire`` instead. Every
wait between two attempts, the template's or a lock's own, goes through
:meth:`Lock._between_attempts`.
"""

from __future__ import annotations

import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

WaitKind = Literal["poll", "notify", "server-queue"]

#: Default pause between two attempts of a polling lock, in seconds (10 ms).
#: Measured on 2 cores, 50 clients on one key, 1 ms critical section: at 1 ms the 49
#: waiters' polls (about 50k requests/s) starve the holder of CPU and throughput falls to
#: tens per second; at 10 ms the expected handoff gap with n waiters is still about
#: 10 ms / (n + 1), and the server and client stay out of a busy loop.
DEFAULT_RETRY_INTERVAL = 0.01

#: Default lease (time to live) of locks that have one, in seconds.
DEFAULT_TTL = 10.0


class Wake(Protocol):
    """Something a waiter can be woken by: ``threading.Event.wait`` or ``threading.Semaphore.acquire``."""

    def __call__(self, *, timeout: float | None) -> bool: ...


class LockError(Exception):
    """Root of every error a lock raises, so callers can catch lock trouble in one place."""


class LockTimeout(LockError):
    """acquire gave up: the caller certainly does not hold the lock (a ``fail``)."""


class LockOutcomeUnknown(LockError):
    """The server may or may not have applied the request (an ``info``, not a ``fail``)."""


class BackendUnavailable(LockError):
    """The lock server could not be reached; nothing was applied."""


class LockConfigError(LockError):
    """The lock was built with options it cannot honour (e.g. an unsupported URL)."""


@dataclass(frozen=True)
class Capabilities:
    """What an algorithm promises, so workloads run only where they make sense.

    ``wait`` says how a blocked acquirer learns the lock is free: ``poll`` (it asks
    again after ``retry_interval``), ``notify`` (the server or a channel wakes it) or
    ``server-queue`` (the server parks the request until it is granted).
    """

    ttl: bool
    fencing: bool
    reentrant: bool = False
    read_write: bool = False
    wait: WaitKind = "poll"
    multi_host: bool = True
    notes: str = ""


@dataclass
class Lease:
    """Proof of one successful acquire, handed back to ``release``.

    ``acquired_at_ns`` and ``deadline_ns`` are ``time.monotonic_ns()`` readings of the
    client: the deadline is when the client itself must assume the lock is gone (None
    for locks without a lease). ``token`` is the fencing token (None when the algorithm
    has none). ``lost`` is set by locks that learn they lost the lock while holding it.
    ``sent_ns`` is when the request that won was sent (None: not known): the server cannot have
    granted before it, so a checker may place the grant anywhere from there to the client's ok
    (a client that sees its grant late, behind a busy process, was still granted first).
    """

    name: str
    owner: str
    token: int | None
    acquired_at_ns: int
    deadline_ns: int | None
    lost: bool = False
    extra: dict = field(default_factory=dict)
    sent_ns: int | None = None

    def remaining(self) -> float | None:
        """Seconds left until the client-side deadline, None without a lease."""
        if self.deadline_ns is None:
            return None
        return (self.deadline_ns - time.monotonic_ns()) / 1e9


@dataclass(frozen=True)
class LockOptions:
    """Tuning shared by all algorithms; each uses the fields that apply to it.

    ``clock`` is the wall clock that algorithms trusting client time read (seconds since
    the epoch); faults replace it to inject skew. ``fencing`` asks for a fencing token at
    every grant when the algorithm can make one (it may cost a round trip, so it is off
    by default and the seed algorithm is measured as written).
    """

    ttl: float = DEFAULT_TTL
    retry_interval: float = DEFAULT_RETRY_INTERVAL
    fencing: bool = False
    clock: Callable[[], float] = time.time
    owner_prefix: str = ""
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ParamSpec:
    """One ``--lock-params`` key an impl reads: its type, its range or choices, what it does.

    Why declared: a key an impl does not read, or a value it cannot use, used to be
    accepted silently (or to fail after servers started, inside Locust). Each impl lists
    the keys it reads in ``Lock.params``; bench checks the user's JSON against them before
    anything starts (:func:`check_params`).
    """

    kind: type  # float, int, bool or str
    help: str = ""
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    open_low: bool = False

    def describe(self) -> str:
        """The allowed values in words: ``a number of seconds above 0, at most 60``."""
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        if self.kind is bool:
            return "true or false"
        if self.kind is str:
            return "a string"
        what = "a whole number" if self.kind is int else "a number"
        if self.low is not None and self.high is not None:
            low = f"above {self.low:g}" if self.open_low else f"from {self.low:g}"
            return f"{what} {low} to {self.high:g}"
        return what

    def check(self, value: object) -> bool:
        """True when ``value`` (as JSON gave it) is acceptable."""
        import math

        if self.choices:
            return isinstance(value, str) and value in self.choices
        if self.kind is bool:
            return isinstance(value, bool)
        if self.kind is str:
            return isinstance(value, str)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if self.kind is int and not float(value).is_integer():
            return False
        if not math.isfinite(float(value)):
            return False
        if self.low is not None and (value <= self.low if self.open_low else value < self.low):
            return False
        return self.high is None or value <= self.high


def seconds(help_text: str, low: float = 0.0, high: float = 3600.0) -> ParamSpec:
    """A positive number of seconds, the most common kind of lock parameter."""
    return ParamSpec(float, help_text, low, high, open_low=True)


def check_params(impl_id: str, cls: type, params: dict) -> None:
    """Raise LockConfigError naming impl, key and allowed values for a key ``cls`` does not take.

    A class without a ``params`` declaration (``None``: a user's own lock written before
    declarations existed) is not checked.
    """
    declared = getattr(cls, "params", None)
    if declared is None:
        return
    for key, value in params.items():
        spec = declared.get(key)
        if spec is None:
            takes = ", ".join(sorted(declared)) or "none"
            raise LockConfigError(f"--lock-params: {impl_id} takes no key {key!r} (it takes: {takes})")
        if not spec.check(value):
            raise LockConfigError(f"--lock-params: {impl_id} {key} must be {spec.describe()}, got {value!r}")


def new_owner_id(prefix: str = "") -> str:
    """A globally unique owner id: host pid plus a random part."""
    return f"{prefix}{os.getpid()}-{uuid.uuid4().hex[:12]}"


class Lock(ABC):
    """One named lock on one backend, used by one client at a time.

    Why a class per (algorithm, name): the algorithms keep per-holder state (the owner
    value written, a watchdog, a session) and the harness gives every simulated client
    its own instance, exactly as two processes would each have their own.
    """

    id: ClassVar[str] = ""
    backend: ClassVar[str] = ""
    capabilities: ClassVar[Capabilities]
    summary: ClassVar[str] = ""
    #: How many independent servers of its backend the algorithm wants (RedLock: 5).
    servers: ClassVar[int] = 1
    #: Does the algorithm read the client's wall clock (``options.clock``) to decide a grant? A
    #: clock fault reaches only such a lock; for the others (monotonic time, server time) the
    #: matrix's clock-skew cell is "n/a" with that reason, never a strike. The harness also counts
    #: the reads, so a lock that declares it and never reads is caught.
    reads_clock: ClassVar[bool] = False
    #: The ``--lock-params`` keys the algorithm reads (``None``: undeclared, not checked).
    params: ClassVar[dict[str, ParamSpec] | None] = None
    #: Attempts made by the polling template (``stats()["attempts"]``): polls per acquisition.
    _attempts: int = 0

    @classmethod
    def recovery_after_crash(cls, ttl: float, params: dict[str, Any]) -> tuple[float | None, str]:
        """(seconds, what frees it): how long after its holder dies the service frees the lock.

        None means nothing frees it (no expiry). ``bench`` derives the crash scenario's stuck
        bound from it (3x, at least a few seconds), so a lock that recovers in its own time
        is never called stuck and one that never recovers is. Default: the lease TTL for a
        lock with a lease, never for one without.
        """
        if cls.capabilities.ttl:
            return ttl, "the lease TTL"
        return None, "no expiry: nothing frees a dead holder's lock"

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        self.name = name
        self.urls = tuple(urls)
        self.options = options or LockOptions()

    # template method ---------------------------------------------------------------
    def acquire(self, timeout: float | None = None) -> Lease:
        """Wait up to ``timeout`` seconds (None: forever, 0: one attempt) for the lock."""
        start = time.monotonic()
        interval = self.options.retry_interval
        while True:
            self._attempts += 1
            sent = time.monotonic_ns()
            lease = self._try_acquire()
            if lease is not None:
                if lease.sent_ns is None:
                    lease.sent_ns = sent
                return lease
            if timeout is not None and time.monotonic() - start + interval > timeout:
                raise LockTimeout(f"{self.id}: {self.name!r} not acquired within {timeout:.3f}s")
            self._between_attempts(interval)

    def _between_attempts(self, seconds: float | None, wake: Wake | None = None) -> bool:
        """Wait ``seconds`` (None: until woken) between two attempts; True when ``wake`` woke it.

        Why one place: here the acquire's last attempt has failed and none of its requests is in
        flight, nor a grant pending for it (no queue entry, no parked request), so ending the wait
        leaves a definite outcome: not granted. A harness may end a wait here and nowhere else
        (``workloads.harness.locust_glue`` ends its case's waiters at the stop by this frame).
        The polling template waits here, and so must every lock with its own acquire loop, at the
        point where that holds; a wait that keeps a place in a queue must not. Not to be
        overridden: the harness knows this function's code. ``wake`` (called as
        ``wake(timeout=seconds)``) waits on a notification instead of sleeping.
        """
        if wake is not None:
            return bool(wake(timeout=seconds))
        if seconds is None:
            raise ValueError("_between_attempts: a sleep without wake needs seconds")
        time.sleep(seconds)
        return False

    def try_acquire(self) -> Lease | None:
        """One attempt without waiting: a Lease, or None when the lock is held."""
        try:
            return self.acquire(timeout=0)
        except LockTimeout:
            return None

    def release(self, lease: Lease) -> bool:
        """Let go of the lock; True when the caller still owned it at that moment."""
        return self._release(lease)

    def owns(self, lease: Lease) -> bool | None:
        """Does the holder of ``lease`` still own the lock now? None: this lock cannot tell.

        Why: a verdict must come from the lock's state, not from whether a waiter happened
        to be granted the lock in time. The harness asks this after every strike (a server
        restart, a failover, a cut) while the holder is still inside its critical section;
        False there is a lost lock, a failure of exclusion, whoever came in. It must not
        change the lock (a read only). The default, None, leaves the release result alone to
        say it (``release`` returns whether the caller still owned the lock); locks that can
        read their own state cheaply override it.
        """
        return None

    def stats(self) -> dict[str, int]:
        """Counters the algorithm keeps about itself (conflicts, retries, notifications).

        The harness sums them over all clients of a case into ``lockstat_<name>`` columns.
        The polling template counts ``attempts``; a subclass that adds counters merges
        ``super().stats()`` when it keeps the template.
        """
        return {"attempts": self._attempts} if self._attempts else {}

    def close(self) -> None:  # noqa: B027 - optional hook, most locks hold nothing per instance
        """Free per-instance resources (threads, sessions). Connections are shared."""

    # to implement -------------------------------------------------------------------
    def _try_acquire(self) -> Lease | None:
        raise NotImplementedError(f"{type(self).__name__} must implement _try_acquire or acquire")

    @abstractmethod
    def _release(self, lease: Lease) -> bool: ...

    # helpers for subclasses ----------------------------------------------------------
    def _new_lease(
        self, owner: str, token: int | None = None, ttl: float | None = None, since_ns: int | None = None
    ) -> Lease:
        """A Lease granted now; its deadline ``ttl`` seconds after ``since_ns`` (when the request that
        won was sent: the server's expiry ran from then, whatever came after) or else after now."""
        now = time.monotonic_ns()
        deadline = None if ttl is None else (now if since_ns is None else since_ns) + int(ttl * 1e9)
        return Lease(self.name, owner, token, now, deadline, sent_ns=since_ns)
