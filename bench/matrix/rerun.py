"""Which finished matrix cases run once more, and what the second answer means.

Two outcomes say more about the harness than about the lock, so a lane runs such a case a
second time (once) before it records anything:

- **its buyers never started**: Locust ran but no client ever asked for the lock (a worker that
  lost its master's heartbeat on a loaded machine). Recording it would draw a cell from zero
  grants. A second attempt that also never starts is recorded ``unknown`` with that reason.
- **a failure a stall could explain** (``stall_reason``, bench/run/judge.py): the load
  generator's own loop stopped long enough, near the violation, to explain it. A second
  attempt decides the cell; if it stalls again the row keeps its ``stall_reason`` and the
  cell is undecided ("stalled"), never red and never green.

The row of a re-run case carries ``rerun_reason`` (what the first attempt showed), so a
reader sees that two attempts were made and why.
"""

from __future__ import annotations

from typing import Any

from bench.measure.stalls import failed_under_stall
from bench.run.case import CaseFailed

#: ``rerun_reason`` / a lost case's reason when no client of the case ever asked for the lock.
NO_BUYERS = "its buyers never started (no client asked for the lock)"


def _count(row: dict[str, Any], name: str) -> float:
    try:
        value = float(row.get(name) or 0)
    except (TypeError, ValueError):
        return 0.0
    return value if value == value else 0.0


def rerun_reason(result: dict[str, Any] | Exception) -> str:
    """Why this finished case should run once more ("" when its answer stands)."""
    if isinstance(result, Exception):
        return ""  # no result: recorded lost (a failed start, a dead server) by the lane
    row = result["row"]
    asked = sum(_count(row, k) for k in ("acquisitions", "acquire_timeouts", "acquire_unknown"))
    if asked == 0:
        return NO_BUYERS
    if failed_under_stall(row):
        return f"a failure a stall could explain ({row['stall_reason']})"
    return ""


def both_logs(first: str | None, second: str | None) -> str | None:
    """The Locust output of a case's two attempts, one after the other (the second alone when the
    first left none): in P a case whose buyers never started twice kept only its second attempt's."""
    if not first:
        return second
    return f"=== attempt 1 of 2 ===\n{first}\n=== attempt 2 of 2 ===\n{second or ''}"


def settle(
    first: str, second: dict[str, Any] | Exception, first_log: str | None = None
) -> dict[str, Any] | Exception:
    """The answer recorded for a case run twice: its second result, marked with why it ran again,
    keeping both attempts' Locust output (``first_log``: the first's).

    A second attempt whose buyers also never started becomes a lost case (``unknown``): no
    cell is drawn from zero grants. A second stall stays on the row (the cell is "stalled").
    """
    if isinstance(second, Exception):
        if isinstance(second, CaseFailed):
            second.log = both_logs(first_log, second.log)
        return second
    second["log"] = both_logs(first_log, second.get("log"))
    if rerun_reason(second) == NO_BUYERS:
        case = second["row"].get("case")
        log = second.get("log")
        kept = f" (its Locust output: logs/{case}.log)" if log else ""
        attempts = (
            "in both of its two attempts"
            if first == NO_BUYERS
            else f"when run again (the first attempt showed {first})"
        )
        return CaseFailed(f"{case}: {NO_BUYERS}, {attempts}{kept}", log=log)
    second["row"]["rerun_reason"] = f"run twice: the first attempt showed {first}"
    return second
