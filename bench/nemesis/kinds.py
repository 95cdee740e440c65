"""Every fault kind, from its own module: the one place a kind's name maps to what it declares.

Server faults (bench's fault thread strikes them) and client faults (the workload makes them) are
both here, so a scenario, a control table or a report names a kind through this registry and
never spells it anew.
"""

from __future__ import annotations

from bench.nemesis import client_faults, failover, members, partitions, redlock_arms, restart
from bench.nemesis.kind import FaultKind

#: Server faults, ``--fault KIND``: bench's fault thread strikes them.
SERVER_KINDS: dict[str, FaultKind] = {
    k.name: k
    for k in (
        restart.KIND,
        failover.KIND,
        *members.KINDS,
        *partitions.PARTITION_KINDS,
        *redlock_arms.KINDS,
    )
}
#: Client faults: the workload's clients make them (held too long, paused, killed, a skewed clock).
CLIENT_KINDS: dict[str, FaultKind] = {k.name: k for k in client_faults.KINDS}
ALL_KINDS: dict[str, FaultKind] = {**SERVER_KINDS, **CLIENT_KINDS}


def controls() -> dict[str, dict[str, str]]:
    """matrix scenario -> backend -> its control impl, from every kind's own declaration."""
    out: dict[str, dict[str, str]] = {}
    for kind in ALL_KINDS.values():
        for scenario, table in kind.controls.items():
            out.setdefault(scenario, {}).update(table)
    return out
