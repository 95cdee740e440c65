"""What every fault kind declares: where it applies, what it must reach, when a strike counts, its
control, and (for a server fault) how it strikes. Pure declarations; the strikes live beside them.

Why one shape: a fault that cannot touch a lock must never be counted as a strike on it, and a
green needs a control that failed under the same strikes. Each kind says, in its own module of
``bench/nemesis/``, what it must reach in a lock (``reach``), when one of its strikes could have
broken a holder (``precondition``), which lock must fail under it on each backend (``controls``,
per matrix scenario), and, for a server fault, the action itself (``strike``). A kind's name is
spelled once, in its module; everything else takes it from there (:mod:`bench.nemesis.kinds`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: The backends whose lock server bench can break (file locks have none).
SERVER_BACKENDS = ("redis", "postgres", "etcd", "memcached", "zookeeper")
#: The backends bench runs as a 3-node ensemble for member and leader faults.
ENSEMBLES = {"zookeeper": "ensemble", "etcd": "ensemble"}


@dataclass(frozen=True)
class FaultKind:
    """One kind of fault: its declarations, and its strike where bench's fault thread makes it.

    ``strike(nemesis, trigger)`` (server faults only) waits for ``trigger()`` (a holder inside,
    or a time), breaks the topology and returns the :class:`~bench.nemesis.window.FaultWindow`
    (None when the trigger never came). Workload faults (pauses, crashes, long holds, a skewed
    clock) are made by the clients themselves: they declare, but do not strike.
    """

    name: str
    reach: str
    precondition: str
    backends: tuple[str, ...] = SERVER_BACKENDS
    #: the server topology it needs: one for every backend, one per backend, or None (a plain server)
    topology: str | dict[str, str] | None = None
    #: after the action, how long at most the holder keeps the lock before bench lets it go (s)
    regrant_wait_s: float = 3.0
    #: how long a signalling holder keeps its lock at most while the fault runs (s)
    hold_for_s: float = 12.0
    #: the topology needs healing after a strike (a killed member back, a failed-over master back)
    heals: bool = False
    #: the heal may start as soon as the action is over, beside the holder's wait, instead of after
    #: it: a killed ensemble member that rejoins is the ensemble's own business (its protocol syncs
    #: it before it serves); a Sentinel's old master restarted before every sentinel agrees on the
    #: new one could take writes as a second fault inside the window, so failover heals after it
    heals_beside_hold: bool = False
    #: matrix scenario -> backend -> the control impl (a lock that must fail there)
    controls: dict[str, dict[str, str]] = field(default_factory=dict)
    strike: Callable[[Any, Callable[[], bool]], Any] | None = None


def namespace(label: str) -> str:
    """The lock-name prefix of group member ``label`` (``--lock-namespace``): its keys contain ``:m<label>:``."""
    return f"m{label}:"


#: Test-only: with this variable set to 1 a server fault's action does nothing (a fault that cannot bite).
NOOP_ENV = "LOCKBENCH_TEST_NOOP_FAULT"


def noop() -> bool:
    """Is the test-only fault that breaks nothing asked for? (tests/test_strike_preconditions.py)"""
    import os

    return os.environ.get(NOOP_ENV) == "1"
