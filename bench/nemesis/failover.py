"""Redis failover: the master dies with the holder's lock not yet replicated; Sentinel promotes the replica.

The replica is paused before the trigger, so the holder's lock exists on the master only
(loopback replication is sub-millisecond otherwise): the promoted replica never saw it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench.nemesis.kind import FaultKind
from bench.nemesis.window import FaultWindow

FAILOVER = "failover"


def strike(nemesis: Any, trigger: Callable[[], bool]) -> FaultWindow | None:
    """Kill the master with the holder's write unreplicated; the window ends once a replica is promoted."""
    timings: dict[str, Any] = {}

    def hold() -> None:
        timings["triggered"] = trigger()
        timings["start"] = time.monotonic_ns()

    nemesis.server.lose_writes_failover(hold)
    if not timings.get("triggered"):
        return None
    return FaultWindow(
        FAILOVER, timings["start"], time.monotonic_ns(), "master killed with unreplicated writes"
    )


KIND = FaultKind(
    name=FAILOVER,
    reach="the master holding the holder's key, its write not yet on the replica",
    precondition="the holder claimed the strike and held the lock when the master died",
    backends=("redis",),
    topology="sentinel",
    regrant_wait_s=3.0,
    # a Sentinel election that fails is retried after twice the failover timeout (6 s); one took
    # 8.2 s on the shared machine, and a holder that had let go by then proved nothing
    hold_for_s=12.0,
    heals=True,
    controls={FAILOVER: {"redis": "redis.set-nx-px"}},
    strike=strike,
)
