"""Member and leader kills: one node of a 3-node ZooKeeper or etcd ensemble dies while a lock is held.

The others keep quorum, so the service never stops for a member kill; a leader kill leaves the
ensemble without a leader until it elects one (the window's service time says when). Clients
take the members in order (member 0 first), so a member kill on member 0 reaches every holder's
session. Neither breaks a catalog lock: their control is the fail-open canary, which grants
itself the lock whenever its client sees the service fail.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench.nemesis.kind import ENSEMBLES, FaultKind, noop
from bench.nemesis.window import FaultWindow

KILL_MEMBER = "kill-member"
KILL_LEADER = "kill-leader"

_CANARIES = {"etcd": "canary.fail-open-etcd", "zookeeper": "canary.fail-open-zookeeper"}


def leader_again(nemesis: Any, timeout_s: float = 30.0) -> int:
    """When the ensemble had a leader again after a leader kill (monotonic ns; 0: not seen in time)."""
    end = time.monotonic() + timeout_s
    while not nemesis.cancelled() and time.monotonic() < end:
        try:
            if nemesis.server.leader() is not None:
                return time.monotonic_ns()
        except Exception:  # noqa: BLE001 - a member that cannot answer yet: ask again
            pass
        time.sleep(0.02)
    return 0


def _strike(kind: str) -> Callable[[Any, Callable[[], bool]], FaultWindow | None]:
    def strike(nemesis: Any, trigger: Callable[[], bool]) -> FaultWindow | None:
        if not trigger():
            return None
        start = time.monotonic_ns()
        if noop():
            time.sleep(0.05)
            return FaultWindow(kind, start, time.monotonic_ns(), "no-op (test fault: nothing was done)")
        service_ns = 0
        if kind == KILL_LEADER:
            detail = nemesis.server.kill_leader()
            service_ns = leader_again(nemesis)
        else:
            detail = nemesis.server.kill_member()  # the others keep quorum: the service never stopped
        return FaultWindow(kind, start, time.monotonic_ns(), detail, {}, service_ns)

    return strike


KILL_MEMBER_KIND = FaultKind(
    name=KILL_MEMBER,
    reach="the member the holder's client talks to (clients take member 0 first)",
    precondition="the holder claimed the strike and held the lock when the member died",
    backends=tuple(ENSEMBLES),
    topology="ensemble",
    regrant_wait_s=3.0,
    hold_for_s=10.0,
    heals=True,
    heals_beside_hold=True,
    controls={KILL_MEMBER: _CANARIES},
    strike=_strike(KILL_MEMBER),
)
KILL_LEADER_KIND = FaultKind(
    name=KILL_LEADER,
    reach="the ensemble's leader, which every write of the lock goes through",
    precondition="the holder claimed the strike and held the lock when the leader died",
    backends=tuple(ENSEMBLES),
    topology="ensemble",
    regrant_wait_s=4.0,
    hold_for_s=12.0,
    heals=True,
    heals_beside_hold=True,
    controls={KILL_LEADER: _CANARIES},
    strike=_strike(KILL_LEADER),
)
KINDS = (KILL_MEMBER_KIND, KILL_LEADER_KIND)
