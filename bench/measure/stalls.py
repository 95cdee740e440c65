"""When a stall of the load generator decides nothing: one rule for the matrix, its re-runs and the gate.

Why its own module: bench/run/judge.py writes ``stall_reason`` on a failed case, and three readers
(bench/matrix's re-run, expectations and controls, bench/gate) must read it alike; this imports
nothing, so the light ones stay light.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: A stall could explain a violation when one generator process's loop stopped for at least this
#: share of the lease (or session) the lock rests on, its stalls overlapping the lease before the
#: violation added up (bench/run/judge.py ``stall_reason``): a holder frozen
#: that long may have outlived its lease, or its watchdog may have missed a renewal (every third
#: of the lease), through the generator and not the scenario's fault. Below it, a stall cannot
#: matter: 6 ms of loop lag against a 1 s lease once drew a failure "found under a stall".
STALL_SHARE = 0.3


def failed_under_stall(row: Mapping[str, Any]) -> bool:
    """Is this case row a failure that a stall of the load generator could explain?

    Such a row is neither red nor green: the matrix re-runs it once and then draws it
    "stalled", the catalog comparison skips it, a control does not count it, and the gate
    says "not enough data".
    """
    stall = row.get("stall_reason")
    verdict = row.get("verdict")
    return (
        isinstance(verdict, str)
        and verdict.strip().lower() == "invalid"
        and isinstance(stall, str)
        and stall.strip() not in ("", "nan")
    )
