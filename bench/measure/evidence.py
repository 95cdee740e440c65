"""The evidence rule: a verdict of ``valid`` needs evidence, or it is ``unknown`` with a reason.

A lock that granted almost nothing, or whose server failed most requests, cannot be called
safe: the checkers found no violation only because nothing happened. So, after the
checkers ran, a ``valid`` verdict becomes ``unknown`` when

* fewer than :data:`MIN_ACQUISITIONS` acquisitions succeeded (too little to judge mutual
  exclusion; ``--duration 1`` lands here: clients spend the first second starting);
* in a case that injected no server fault, acquisition *errors* (the server failed the
  request: ``BackendUnavailable``, unknown outcomes) are more than :data:`MAX_ERROR_SHARE`
  of all finished acquire attempts (timeouts under contention are not errors);
* a server the run depends on died during the case;
* the recording is incomplete (a worker's part never arrived).

``invalid`` stays ``invalid``: a witnessed violation is evidence by itself. Every
``unknown`` verdict gets a ``verdict_reason``; reasons from this rule start with
:data:`NO_EVIDENCE`. ``bench run`` exits 1 naming every ``unknown`` case, whatever made
it unknown (uncertain overlaps, a lost worker's open hold, missing evidence).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

#: Fewest successful acquisitions a case needs before its verdict can be ``valid``: a few
#: handoffs between clients. Kept low on purpose: long critical sections (long-cs, 600 ms)
#: make few but long holds, and those do test exclusion.
MIN_ACQUISITIONS = 5
#: Share of finished acquire attempts that may end in a server error before the case proves nothing.
MAX_ERROR_SHARE = 0.5
#: Prefix of every reason this rule gives (``bench run`` exits 1 on these).
NO_EVIDENCE = "no evidence: "


def acquire_outcomes(history: pd.DataFrame | None) -> dict[str, int]:
    """Finished acquire attempts by kind: ok, timeout, error (the server failed it), and the top error."""
    if history is None or history.empty:
        return {"ok": 0, "timeout": 0, "error": 0}
    acq = history[history["op"] == "acquire"]
    errors = acq["error"].fillna("").astype(str)
    server_error = ((acq["type"] == "fail") & errors.str.startswith("BackendUnavailable")) | (
        acq["type"] == "info"
    )
    return {
        "ok": int((acq["type"] == "ok").sum()),
        "timeout": int(((acq["type"] == "fail") & ~server_error).sum()),
        "error": int(server_error.sum()),
    }


def _top_error(history: pd.DataFrame) -> str:
    acq = history[(history["op"] == "acquire") & history["type"].isin(["fail", "info"])]
    names = acq["error"].fillna("").astype(str).str.split(":", n=1).str[0]
    names = names[names != ""]
    return str(names.value_counts().index[0]) if not names.empty else "error"


def reason(
    history: pd.DataFrame | None,
    *,
    fault_injected: bool,
    recording_complete: bool = True,
    recording_problems: list[str] | None = None,
    duration_s: float | None = None,
    spawn_s: float | None = None,
) -> str:
    """Why the case has no evidence for a verdict, or "" when it has."""
    if not recording_complete:
        problems = "; ".join(recording_problems or []) or "a worker's recording is missing"
        return f"{NO_EVIDENCE}the recording is incomplete ({problems})"
    counts = acquire_outcomes(history)
    finished = counts["ok"] + counts["timeout"] + counts["error"]
    if not fault_injected and finished and counts["error"] > MAX_ERROR_SHARE * finished:
        return (
            f"{NO_EVIDENCE}{counts['error'] / finished:.0%} of {finished:,} acquire attempts failed with server "
            f"errors ({_top_error(history)}): the lock server was unreachable or failing"
        )
    if counts["ok"] < MIN_ACQUISITIONS:
        text = f"{NO_EVIDENCE}only {counts['ok']} acquisitions (a verdict needs at least {MIN_ACQUISITIONS})"
        short = duration_s is not None and spawn_s is not None and duration_s <= spawn_s + 1
        if counts["error"]:
            text += f"; {counts['error']:,} attempts failed with {_top_error(history)}"
        elif finished == 0:
            text += "; no client even tried to acquire: they could not start (the case's log says why)"
            text += " or had no time" if short else ""
        if short and not counts["error"]:
            text += (
                f"; the case lasted {duration_s:g}s and clients start during the first {spawn_s:g}s: "
                "give --duration 3 or more"
            )
        return text
    return ""


def apply(row: dict[str, Any], history: pd.DataFrame | None, **kwargs: Any) -> None:
    """Set ``row['verdict_reason']`` and turn a ``valid`` verdict without evidence into ``unknown``."""
    why = reason(history, **kwargs)
    if why and row.get("verdict") != "invalid":
        row["verdict"] = "unknown"
        row["verdict_reason"] = why
    else:
        row.setdefault("verdict_reason", "")


def server_died(row: dict[str, Any], servers: list[str]) -> None:
    """A server died during the case: what it measured is not what was asked for."""
    if row.get("verdict") != "invalid":
        row["verdict"] = "unknown"
        row["verdict_reason"] = f"{NO_EVIDENCE}server {', '.join(servers)} died during the case"


def checker_reason(results: list[Any], status: str = "unknown") -> str:
    """The details of the checkers behind a verdict: the undecided ones for ``unknown``, the
    failed ones for ``invalid`` (e.g. "fencing-order: fencing tokens out of grant order: 3
    grants"), "" for ``valid``."""
    if status not in ("unknown", "invalid"):
        return ""
    return "; ".join(f"{r.name}: {r.detail}" for r in results if r.status == status)


def lacking(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose verdict is unknown, for whatever reason (the run exits 1 naming them).

    Lack of evidence, an incomplete recording, overlaps shorter than the clocks' bound, a
    lost worker's open hold: each leaves the question "is this lock safe here?" unanswered,
    and a run that cannot answer it must not look like a pass.
    """
    return [r for r in rows if r.get("verdict") == "unknown"]
