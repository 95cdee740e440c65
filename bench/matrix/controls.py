"""Positive controls: for each scenario, a lock that must fail under it, run beside the others.

A survived cell is a claim that an experiment which could have broken the lock did not.
The claim holds only if the experiment could break a lock at all: a restart that hit no
holder's server, a member kill of a member nobody talked to, a pause shorter than every
lease prove nothing. So each scenario runs, in the same lane, on the same servers and (for
server faults, in the same group) under the same strikes, a *control*: a catalog lock the
catalog says violates there (``redis.set-nx-px`` under a restart), a lock that must get
stuck (``redis.setnx-del`` after a crash), or, where no catalog lock fails, a canary
(``lockimpls/canary.py``: fails open when it cannot reach its server).

If the control survived, the scenario *did not bite*: no cell it tested may be green
(``dashboards/cells.py``), and ``bench matrix`` exits 1. Partitions run as groups since
round 6, so their controls share the cut: a catalog lock that fails there, or the canary
(its buyers on the cut holder's host lose the servers and grant themselves the lock). A
partition-node cut on ZooKeeper or etcd cannot reach a lock (it isolates a follower no client
talks to): those cells are n/a with that reason (bench/nemesis/scenarios.py ``unreachable``).

No control vouches from elsewhere: a row takes its own group's control or none, and a cell
with no failed control beside it is grey, "unproven: no control" (dashboards/cells.py).
"""

from __future__ import annotations

from typing import Any

from bench.measure.stalls import failed_under_stall
from bench.nemesis import kinds

#: scenario -> backend -> the control impl (a lock that must fail there), each declared by its
#: fault kind in bench/nemesis/ beside its reach and its strike
CONTROLS: dict[str, dict[str, str]] = kinds.controls()


def control_for(scenario: str, backend: str) -> str | None:
    """The control impl of ``scenario`` on ``backend`` (None: the scenario has none there)."""
    return CONTROLS.get(scenario, {}).get(backend)


def _number(row: dict[str, Any], column: str) -> float:
    value = row.get(column)
    try:
        number = float(value) if value is not None else 0.0
    except (TypeError, ValueError):
        return 0.0
    return number if number == number else 0.0


def _yes(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def failed(row: dict[str, Any]) -> bool:
    """Did the control fail as it must, because of the strikes it shared with the cells beside it?

    A violation counts only when it is tied to a strike (the first one the case placed in time
    came at or after its first counted strike, or a violation's own holds contain a strike:
    ``violation_after_strike``, :func:`bench.run.judge.struck_hold_violated`) and no stall of the
    load generator could explain it (``stall_reason`` empty). A lock nobody could take again
    after a crash or a server fault (stuck) is tied to its strike by definition. A violation
    before any strike, or under a stall, proves the scenario nothing.
    """
    if _number(row, "strikes") <= 0:
        return False
    if _number(row, "stuck_locks") > 0 or _number(row, "unrecovered_strikes") > 0:
        return True
    if row.get("verdict") != "invalid" or failed_under_stall(row):
        return False
    return _yes(row.get("violation_after_strike"))


def _why_not(rows: list[dict[str, Any]]) -> str:
    """Why an invalid control does not count as failed ("" when none was invalid)."""
    for r in rows:
        if r.get("verdict") != "invalid":
            continue
        if _number(r, "strikes") <= 0:
            return "its violation came with no strike"
        if failed_under_stall(r):
            return "its violation came under a stall"
        return "its violation came before any strike"
    return ""


def outcome(rows: list[dict[str, Any]], impl: str) -> str:
    """One phrase for what the control did in ``rows`` (its cases): failed / survived / unknown / not run."""
    if not rows:
        return f"not run ({impl})"
    strikes = sum(int(_number(r, "strikes")) for r in rows)
    if any(failed(r) for r in rows):
        return f"failed ({impl}, {strikes} strikes)"
    untied = _why_not(rows)
    if untied:
        return f"unproven ({impl}): {untied}"
    if any(r.get("verdict") == "unknown" for r in rows):
        why = next((str(r.get("verdict_reason")) for r in rows if r.get("verdict_reason")), "")
        return f"unknown ({impl}): {why}" if why else f"unknown ({impl})"
    return f"survived ({impl}, {strikes} strikes)"


def _text(row: dict[str, Any], column: str) -> str:
    """A text cell, "" when empty (rows read back from cases.csv carry NaN there)."""
    value = row.get(column)
    return value if isinstance(value, str) else ""


def annotate(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Give every row of a scenario that has a control its ``control_outcome``; returns scenario -> header text.

    A grouped row (``group_id``) takes the control of its own group, under the same strikes,
    and nothing else: no fallback to another group, lane, trial or merged shard. A row with no
    control beside it (a lone case, a group that lost its control) gets ``not run``: its cell
    is grey, "unproven: no control" (dashboards/cells.py).
    """
    by_group: dict[str, list[dict[str, Any]]] = {}
    by_scenario: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        impl = str(r.get("impl") or "")
        if impl and impl == _text(r, "control_impl"):
            if _text(r, "group_id"):
                by_group.setdefault(_text(r, "group_id"), []).append(r)
            by_scenario.setdefault((str(r.get("matrix_scenario")), str(r.get("backend"))), []).append(r)
    headers: dict[str, list[str]] = {}
    for r in rows:
        control = _text(r, "control_impl")
        if not control:
            continue
        # the control of this row's own group only: a control elsewhere saw other strikes
        if str(r.get("impl") or "") == control:
            mine = [r]
        else:
            mine = by_group.get(_text(r, "group_id"), []) if _text(r, "group_id") else []
        r["control_outcome"] = outcome(mine, str(control))
    for (scenario, _backend), controls in by_scenario.items():
        impl = str(controls[0].get("impl"))
        headers.setdefault(scenario, []).append(outcome(controls, impl))
    return {s: "; ".join(sorted(set(v))) for s, v in headers.items()}
