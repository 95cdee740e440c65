"""One cell function for every view of safety: the grid, the verdict matrix, the first screen.

A cell is what one impl x scenario says over its cases (trials, fenced and unfenced: the
same lock under the same fault). Why one function: the report once had two tables that
disagreed (a valid case green whatever its strikes in one, thin in the other; an invalid
case green in one when the counter that made it invalid was not in a list). Here the
colour follows the *verdict*, never a list of counters:

* any case ``invalid`` -> failed (red), whatever made it so (overlaps, witness, stock,
  fencing tokens out of grant order, legitimate writes refused). Only a failure where
  fencing (``enforce``) kept the data right is amber *failed, data safe*; an unfenced
  failure whose data happened to survive is red and says so;
* stuck (purple) is liveness: nobody got the lock again within its bound;
* ``unknown`` is grey; a fault that never struck, or whose positive control survived
  (the scenario *did not bite*), is grey and never green;
* green only on the target evidence: k strikes that hit (their precondition held) and n
  grants after them; below it pale *held, thin*.

Reads plain dicts of cases.csv only; every string goes through :func:`dashboards.html_bits.e`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dashboards.html_bits import DAMAGED, UNKNOWN_DAMAGED, VIOLATIONS, e
from dashboards.load import flag, num, text
from dashboards.timeline import anchor

Row = dict[str, Any]

#: cell class -> (word shown, legend text)
CLASSES = {
    "good": ("survived", "survived, on at least the target evidence"),
    "thin": ("held, thin", "no violation, but fewer strikes or grants than the target"),
    "bad": ("failed", "the lock failed (two holders at once, damaged data, tokens out of order ...)"),
    "warn": ("failed, data safe", "the lock failed; fencing kept the data right"),
    "stuck": (
        "stuck",
        "nobody got the lock again within its bound after a holder died, or ever after a server fault (liveness)",
    ),
    "nottested": (
        "not tested",
        "the fault never struck (or missed: its precondition did not hold), no control of its own failed "
        "beside it (did not bite, or unproven: no control), or the scenario could not run here",
    ),
    "unknown": (
        "unknown",
        "the checkers could not decide (a lost worker, a dead server ...), or the failure came under a stall "
        "of the load generator that could explain it (stalled)",
    ),
    "baseline": (
        "no fault",
        "the fault-free row: exclusion under contention alone, the baseline the faults are read against; "
        "never a safety claim",
    ),
}
#: Worst first: the cell takes the worst class among its cases.
ORDER = ("bad", "warn", "stuck", "unknown", "thin", "good", "baseline", "nottested")
#: Counters shown on hover when nonzero.
COUNTED = (
    *VIOLATIONS, "stale_writes_accepted", "stale_writes_refused", "fencing_order_violations",
    "legit_writes_refused", "stuck_locks", "unrecovered_strikes",
)  # fmt: skip


@dataclass
class GridCell:
    """What one impl x scenario cell shows, over every case (trials, fenced and unfenced) of that pair."""

    cls: str
    word: str
    detail: str
    hover: str
    k: int
    n: int
    contradicts: bool = False
    #: element id of the failed case's violation timeline (dashboards/timeline.py), "" for none
    link: str = ""

    def html(self, column: str) -> str:
        extra = " contradicts" if self.contradicts else ""
        sort = ORDER.index(self.cls) if self.cls in ORDER else len(ORDER)
        detail = f"<small>{e(self.detail)}</small>" if self.detail else ""
        why = f' <a class="tl-link" href="#{e(self.link)}">timeline</a>' if self.link else ""
        return (
            f'<td class="{self.cls}{extra}" data-col="{e(column)}" data-sort="{sort}" '
            f'title="{e(self.hover)}">{e(self.word)}{detail}{why}</td>'
        )


def _int(row: Row, column: str) -> int:
    value = num(row, column)
    return int(value) if value is not None and math.isfinite(value) else 0


def _target(rows: list[Row]) -> tuple[int | None, int]:
    ks = [num(r, "evidence_target_k") for r in rows]
    ns = [num(r, "evidence_target_n") for r in rows]
    k = max((int(v) for v in ks if v is not None), default=None)
    n = max((int(v) for v in ns if v is not None), default=0)
    return k, n


def fencing_saved(rows: list[Row]) -> bool:
    """Did fencing keep the data right where the lock failed? Amber rests on this, and only this.

    Every ``enforce`` case of these rows kept its data safe, and fencing was seen at work: at
    least one stale read or write refused. A case that was never struck, or where no stale write came,
    shows nothing about fencing: its data survived by luck, and the cell says "failed".
    """
    fenced = [r for r in rows if text(r, "fencing") == "enforce"]
    if not fenced or not all(flag(r, "data_safe") is True for r in fenced):
        return False
    # enforced, a stale token is refused at the read (stale_reads) or at the write: either is fencing at work
    return sum(_int(r, "stale_writes_refused") + _int(r, "stale_reads") for r in fenced) >= 1


def _lost_case(row: Row) -> bool:
    """An unknown case that never got to strike for a reason of its own (its servers died or never
    started, its recording is incomplete): undecided, not "did not strike" and not "n/a"."""
    why = text(row, "verdict_reason") or ""
    return bool(why) and "did not strike" not in why and not why.startswith("n/a: ")


def _stuck(row: Row) -> bool:
    # a killed holder's lock nobody got again, or a server-fault strike never followed by a grant:
    # a liveness failure, never "held, thin"
    return (num(row, "stuck_locks") or 0) > 0 or (num(row, "unrecovered_strikes") or 0) > 0


def _recovery(rows: list[Row]) -> str:
    p50 = [v for v in (num(r, "recovery_ms_p50") for r in rows) if v is not None and math.isfinite(v)]
    top = [v for v in (num(r, "recovery_ms_max") for r in rows) if v is not None and math.isfinite(v)]
    if not p50:
        return ""
    grant = f"{sorted(p50)[len(p50) // 2] / 1000:.1f} s"
    if top and max(top) > 1.5 * min(p50):
        grant += f" (max {max(top) / 1000:.1f} s)"
    back = [v for v in (num(r, "service_back_ms_p50") for r in rows) if v is not None and math.isfinite(v)]
    if back:  # a server fault: two clocks, named apart (workloads/checks/recovery.py)
        return f"the service answered again after {sorted(back)[len(back) // 2] / 1000:.1f} s; the next grant after {grant}"
    return f"recovered in {grant}"


def distinct_strikes(rows: list[Row]) -> int:
    """Strikes that hit these cases, each physical strike once.

    The cases of one group (``group_id``: fenced and unfenced of a lock, under one nemesis)
    share the same strikes: counting each case's would count one restart twice. A group
    counts its most-struck case (the strikes that hit any of its cases, as far as the rows
    can tell); cases run alone, and workload faults (each case pauses or crashes its own
    clients), count their own.
    """
    by_group: dict[str, int] = {}
    alone = 0
    for r in rows:
        k = _int(r, "strikes")
        group = text(r, "group_id")
        if group and text(r, "fault"):
            by_group[group] = max(by_group.get(group, 0), k)
        else:
            alone += k
    return alone + sum(by_group.values())


@dataclass(frozen=True)
class _Evidence:
    """What one impl x scenario's cases add up to, before any class is decided: strikes, grants, hover text.

    Why a record: each of cell_for's decisions (failed, stuck, undecided, earned) reads the same counts.
    """

    fault_scenario: bool
    target_k: int | None
    target_n: int
    struck: list[Row]
    k: int
    n: int
    missed: int
    control: str
    contradicts: bool
    hover: str

    @property
    def text(self) -> str:
        return f"k={self.k} n={self.n:,}" if self.fault_scenario else f"n={self.n:,}"


def _hover(
    rows: list[Row], fault_scenario: bool, k: int, n: int, missed: int, control: str, target: str
) -> str:
    """The cell's tooltip: its cases, the evidence and its bound, misses, target, control, counters, reasons."""
    bound = ""
    if fault_scenario and k:
        bound = f"; 95%: per-strike failure < {3 / k:.2g}" + (f", per-grant race < {3 / n:.2g}" if n else "")
    counters = []
    for column in COUNTED:
        total = sum(_int(r, column) for r in rows)
        if total:
            counters.append(f"{column} {total:,}")
    expected = {t for t in (text(r, "expected_outcome") for r in rows) if t}
    reasons = sorted({t for t in (text(r, "verdict_reason") for r in rows) if t})
    hover_parts = [
        f"{len(rows)} case{'s' if len(rows) != 1 else ''}: " + ", ".join(str(r.get("case")) for r in rows),
        f"k={k} strikes that hit, n={n:,} grants after them{bound}"
        if fault_scenario
        else f"n={n:,} acquisitions",
        f"{missed} strike{'s' if missed != 1 else ''} missed (precondition did not hold): "
        + "; ".join(sorted({t for t in (text(r, "strikes_missed_reason") for r in rows) if t}))
        if missed
        else "",
        target,
        f"positive control {control}" if control else "",
        "expected: " + ", ".join(sorted(expected)) if expected else "",
        *counters,
        *reasons,
    ]
    return "; ".join(p for p in hover_parts if p)


def _evidence(rows: list[Row]) -> _Evidence:
    """Strikes that hit (k) and grants after them (n), or acquisitions (n) without a fault; the tooltip."""
    target_k, target_n = _target(rows)
    fault_scenario = target_k is not None
    struck = [r for r in rows if _int(r, "strikes") > 0] if fault_scenario else rows
    k = distinct_strikes(struck) if fault_scenario else 0
    n = (
        sum(_int(r, "acquisitions_after_strike") for r in struck)
        if fault_scenario
        else sum(_int(r, "acquisitions") for r in rows)
    )
    missed = sum(_int(r, "strikes_missed") for r in rows)
    target = (
        f"target k >= {target_k}" + (f", n >= {target_n:,}" if target_n else "") if fault_scenario else ""
    )
    control = control_of(rows)
    contradicts = any(flag(r, "contradicts_catalog") is True for r in rows)
    hover = _hover(rows, fault_scenario, k, n, missed, control, target)
    return _Evidence(fault_scenario, target_k, target_n, struck, k, n, missed, control, contradicts, hover)


def _failed_cell(rows: list[Row], ev: _Evidence) -> GridCell | None:
    """Red (or amber where fencing saved the data) for an invalid case; unknown when a stall could explain it."""
    failed = [r for r in rows if text(r, "verdict") == "invalid"]
    # a failure a stall of the load generator could explain decides nothing: neither red nor green
    stalled = [r for r in failed if text(r, "stall_reason")]
    failed = [r for r in failed if not text(r, "stall_reason")]
    if stalled and not failed:
        return GridCell(
            "unknown", "stalled", f"{ev.text}; undecided: the generator stalled",
            f"{ev.hover}; {text(stalled[0], 'stall_reason')}", ev.k, ev.n, ev.contradicts,
            link=anchor(str(stalled[0].get("case"))),
        )  # fmt: skip
    if not failed:
        return None
    # amber only where fencing (enforce) ran, refused a stale write and kept the data right
    if fencing_saved(rows):
        detail = ev.text
        cls, word = "warn", CLASSES["warn"][0]
    else:
        survived = all(flag(r, "data_safe") is True for r in failed)
        cls, word = "bad", CLASSES["bad"][0]
        detail = "the data happened to survive (no fencing)" if survived else ev.text
    return GridCell(
        cls, word, detail, ev.hover, ev.k, ev.n, ev.contradicts, link=anchor(str(failed[0].get("case")))
    )


def _stuck_cell(rows: list[Row], ev: _Evidence) -> GridCell | None:
    """Stuck when no acquisition was possible for longer than the bound after a strike."""
    if not any(_stuck(r) for r in rows):
        return None
    bound_s = max((num(r, "stuck_bound_s") or 0 for r in rows), default=0)
    never = sum(_int(r, "unrecovered_strikes") for r in rows)
    detail = f"none in {bound_s:g} s" if bound_s else ev.text
    if never:
        within = max((num(r, "recovery_bound_s") or 0 for r in rows), default=0)
        detail = f"never granted again after {never} strike{'s' if never != 1 else ''}" + (
            f" (waited {within:g} s, 3x its own timeout)" if within else ""
        )
    return GridCell("stuck", "stuck", detail, ev.hover, ev.k, ev.n, ev.contradicts)


def _undecided_cell(rows: list[Row], ev: _Evidence) -> GridCell | None:
    """Unknown (damaged data, no verdict), or not tested (no strike hit, the fault cannot reach it, no control)."""
    # a case resting on damaged data (resultsio: verdict unknown, reason "damaged: ...") is unknown whatever struck
    damaged = any((text(r, "verdict_reason") or "").startswith(DAMAGED) for r in rows)
    if damaged or any(
        text(r, "verdict") == "unknown" and (_int(r, "strikes") or not ev.fault_scenario or _lost_case(r))
        for r in rows
    ):
        word = UNKNOWN_DAMAGED if damaged else "unknown"
        return GridCell("unknown", word, ev.text, ev.hover, ev.k, ev.n, ev.contradicts)
    if ev.fault_scenario and not ev.struck:
        if any((text(r, "verdict_reason") or "").startswith("n/a: ") for r in rows):
            return GridCell(
                "nottested", "n/a", "the fault cannot reach this lock", ev.hover, 0, 0, ev.contradicts
            )
        word = "did not strike" if not ev.missed else "missed"
        return GridCell("nottested", word, "not tested", ev.hover, 0, 0, ev.contradicts)
    control = ev.control
    if (
        any(text(r, "matrix_scenario") for r in rows)
        and ev.fault_scenario
        and (not control or control.startswith("not run"))
    ):
        # a green needs a control beside it, under the same strikes, that failed as it must
        why = f"control {control}" if control else "no control ran beside it"
        return GridCell("nottested", "unproven: no control", why, ev.hover, ev.k, ev.n, ev.contradicts)
    if control and not control.startswith("failed"):
        word = "did not bite" if control.startswith("survived") else "unproven"
        return GridCell("nottested", word, f"control {control}", ev.hover, ev.k, ev.n, ev.contradicts)
    return None


def _held_cell(rows: list[Row], ev: _Evidence) -> GridCell:
    """Held: the matrix's fault-free baseline, or green once the evidence reaches its target (thin below it)."""
    recovery = _recovery(rows)
    if any(text(r, "matrix_scenario") for r in rows) and not ev.fault_scenario:
        # the matrix's fault-free row shows exclusion under contention, never safety under a fault
        return GridCell(
            "baseline", CLASSES["baseline"][0], f"{ev.text}; held", ev.hover, 0, ev.n, ev.contradicts
        )
    if ev.fault_scenario:
        earned = ev.k >= (ev.target_k or 0) and ev.n >= ev.target_n
    else:
        earned = ev.n >= max(ev.target_n, 1)
    cls = "good" if earned else "thin"
    detail = ev.text + (f"; {recovery}" if recovery else "")
    return GridCell(cls, CLASSES[cls][0], detail, ev.hover, ev.k, ev.n, ev.contradicts)


def cell_for(rows: list[Row]) -> GridCell:
    """The cell of one impl x scenario from its cases (plain dicts of cases.csv).

    Decided in this order: a failure (or a stall that explains one), a stuck lock, what
    leaves it undecided (damage, no strike, no control), else held.
    """
    ev = _evidence(rows)
    return (
        _failed_cell(rows, ev) or _stuck_cell(rows, ev) or _undecided_cell(rows, ev) or _held_cell(rows, ev)
    )


def control_of(rows: list[Row]) -> str:
    """What the scenario's positive control did beside these cases ("" when it had none).

    ``control_outcome`` (cases.csv, set by ``bench matrix``): ``failed (impl, k strikes)`` when
    the control broke as it must, ``survived (impl)`` when it did not (the scenario did not
    bite), ``not run (impl): why`` when it could not run. The worst over the cases decides.
    """
    outcomes = [t for t in (text(r, "control_outcome") for r in rows) if t]
    if not outcomes:
        return ""
    bad = [o for o in outcomes if not o.startswith("failed")]
    return bad[0] if bad else outcomes[0]


def case_class(row: Row) -> str:
    """The class of a single case, by the same rules as a cell."""
    return cell_for([row]).cls
