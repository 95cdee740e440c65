"""How much a fault case saw of its fault, and whether a "survived" is earned. Pure, no I/O.

"Survived" is a claim about evidence (Jepsen's habit: a test that did not exercise the
fault proved nothing). Two numbers carry it:

* ``strikes`` k: how often the fault struck (server-fault windows; pauses; crashes; holds
  that outlasted the lease). No violation in k independent strikes bounds the per-strike
  failure probability below 3/k at 95% (the rule of three).
* ``acquisitions_after_strike`` n: grants that followed a strike before the next one, i.e.
  every successful acquire after the first strike. No violation in n of them bounds the
  per-acquisition race rate below 3/n at 95%.

A case is ``earned`` when both reach the target (:class:`EvidenceTarget`, default k >= 10
and n >= 1,000; docs/guide.md says why), ``thin`` when it held with less, ``not-struck``
when its fault never struck (the case proved nothing: its verdict becomes ``unknown``),
and ``failed`` when a violation was seen: one witnessed violation stays a violation.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from bench.measure.levels import DEFAULT_TARGET, LEVELS, EvidenceTarget
from workloads.checks.core import holds

__all__ = ["DEFAULT_TARGET", "LEVELS", "EvidenceTarget"]

#: Workloads that fault by themselves (a client stalls, dies or outlives its lease).
FAULT_WORKLOADS = ("long-cs", "lease-expiry", "crash")
#: Workloads whose own events are the strikes: event kind -> the history (op, type) marking it.
WORKLOAD_STRIKES = {"lease-expiry": ("pause", "ok"), "crash": ("crash", "info")}
#: Workloads where every hold longer than the lease is a strike.
LONG_HOLD_WORKLOADS = ("long-cs",)


def grants_between(target: EvidenceTarget, strikes: int) -> int:
    """Purchases the service grants between two strikes so that k strikes bring n acquisitions after."""
    if strikes <= 1 or not target.acquisitions:
        return 0
    return math.ceil(target.acquisitions / strikes)


def strike_times(history: pd.DataFrame, workload: str, ttl_s: float | None, server_fault: bool) -> np.ndarray:
    """Start times (history ns) of every strike the case saw whose precondition held, sorted."""
    return strike_record(history, workload, ttl_s, server_fault)[0]


def strike_record(
    history: pd.DataFrame, workload: str, ttl_s: float | None, server_fault: bool
) -> tuple[np.ndarray, list[str]]:
    """The strikes that count (start times, sorted) and, for each one that missed, why.

    A strike counts only when it could have broken the lock (issue 30): for a server fault,
    the case's holder claimed it and was still holding, inside its critical section, when the
    action began, on a server its grant rested on (bench's ``strike`` rows say so; a holder
    whose ``fault-hold`` had ended before the action, e.g. released by a stale heal message,
    misses too); for long-cs, a hold longer than the lease of a lock that has one.
    """
    empty = np.array([], dtype=np.int64)
    if history is None or history.empty:
        return empty, []
    if server_fault:
        return _server_strikes(history)
    if workload == "clock-skew":
        return _skew_strikes(history), []
    marker = WORKLOAD_STRIKES.get(workload)
    if marker is not None:
        rows = history[(history["op"] == marker[0]) & (history["type"] == marker[1])]
        t = rows["t_ns"].to_numpy(dtype=np.int64)
        if marker[0] == "pause":
            # a pause is marked when it ends (its value: how long it lasted, ms); it struck when it began,
            # and a violation during it (a waiter granted while the holder sleeps) is tied to it
            t = (
                t
                - rows["value"].astype("Float64").fillna(0).to_numpy(dtype=float).astype(np.int64) * 1_000_000
            )
        return np.sort(t), []
    if workload in LONG_HOLD_WORKLOADS and ttl_s:
        h = holds(history)
        long = h[(h["end_ns"] - h["start_ns"]) > ttl_s * 1e9]
        return np.sort(long["start_ns"].to_numpy(dtype=np.int64)), []
    return empty, []


def _skew_strikes(history: pd.DataFrame) -> np.ndarray:
    """Grants to a skewed client while an unskewed client of the same lock waited for it or held it.

    That is when a lock trusting client clocks can go wrong (its skewed holder's lease looks
    longer or shorter to the others); a skewed grant with nobody else around tests nothing.
    """
    skewed = set(history.loc[history["op"] == "skew", "client"])
    if not skewed:
        return np.array([], dtype=np.int64)
    acq = history[history["op"] == "acquire"].sort_values("t_ns", kind="stable")
    open_since: dict[tuple[str, str], int] = {}  # (lock, unskewed client) -> waiting or holding
    hits: list[int] = []
    rel = history[(history["op"] == "release") & (history["type"] == "invoke")]
    events = pd.concat([acq, rel]).sort_values("t_ns", kind="stable")
    for ev in events.itertuples(index=False):
        key = (ev.lock, ev.client)
        if ev.op == "release":
            open_since.pop(key, None)
            continue
        if ev.client in skewed:
            if ev.type == "ok" and any(lock == ev.lock for lock, _ in open_since):
                hits.append(int(ev.t_ns))
            continue
        if ev.type == "invoke":
            open_since[key] = int(ev.t_ns)
        elif ev.type != "ok":
            open_since.pop(key, None)  # gave up: no longer waiting
    return np.array(sorted(hits), dtype=np.int64)


def _server_strikes(history: pd.DataFrame) -> tuple[np.ndarray, list[str]]:
    faults = history[(history["op"] == "fault") & (history["type"] == "invoke")]
    marks = history[history["op"] == "strike"]
    if marks.empty:  # a history from before per-strike marks: every strike counted
        return np.sort(faults["t_ns"].to_numpy(dtype=np.int64)), []
    holds_ = history[history["op"] == "fault-hold"]
    counted: list[int] = []
    missed: list[str] = []
    for mark in marks.sort_values("t_ns").itertuples(index=False):
        t = int(mark.t_ns)
        if mark.type != "ok":
            missed.append(f"strike {int(mark.seq) + 1}: {mark.error or 'missed'}")
            continue
        mine = holds_[holds_["client"] == mark.lock]
        began = mine[(mine["type"] == "invoke") & (mine["t_ns"] <= t)]
        if began.empty:
            missed.append(f"strike {int(mark.seq) + 1}: its holder {mark.lock} had not claimed it")
            continue
        seq = int(began.iloc[-1]["seq"])
        ended = mine[(mine["type"] == "ok") & (mine["seq"] == seq)]
        if not ended.empty and int(ended.iloc[0]["t_ns"]) < t:
            missed.append(f"strike {int(mark.seq) + 1}: its holder {mark.lock} let go before the fault hit")
            continue
        counted.append(t)
    return np.array(sorted(counted), dtype=np.int64), missed


def _acquisitions_after(history: pd.DataFrame, t_ns: int) -> int:
    ok = (history["op"] == "acquire") & (history["type"] == "ok") & (history["t_ns"] > t_ns)
    return int(ok.sum())


def columns(history: pd.DataFrame, strikes_ns: np.ndarray, missed: list[str] | None = None) -> dict[str, Any]:
    """cases.csv columns: strikes, acquisitions_after_strike, the two 95% bounds they give, and the misses."""
    k = len(strikes_ns)
    n = _acquisitions_after(history, int(strikes_ns[0])) if k else 0
    missed = missed or []
    return {
        "strikes": k,
        "acquisitions_after_strike": n,
        # a bound on a probability: under 3 events it says nothing, which is 1, never more
        "strike_failure_bound": min(1.0, 3 / k) if k else None,
        "race_rate_bound": min(1.0, 3 / n) if n else None,
        "strikes_missed": len(missed),
        "strikes_missed_reason": "; ".join(missed[:3])
        + (f"; and {len(missed) - 3} more" if len(missed) > 3 else ""),
    }


def _int(row: dict[str, Any], key: str) -> int:
    value = row.get(key)
    try:
        value = float(value)
    except (TypeError, ValueError):
        return 0
    return int(value) if math.isfinite(value) else 0


def grade(row: dict[str, Any], target: EvidenceTarget, fault_case: bool) -> str:
    """``earned`` / ``thin`` / ``not-struck`` / ``failed`` for a fault case; "" for a case without one."""
    if not fault_case:
        return ""
    if row.get("verdict") == "invalid":
        return "failed"
    k, n = _int(row, "strikes"), _int(row, "acquisitions_after_strike")
    if k == 0:
        return "not-struck"
    if row.get("verdict") == "unknown":
        return "unknown"
    if k >= target.strikes and n >= target.acquisitions:
        return "earned"
    return "thin"


#: A crashed holder's lock counts as stuck when nobody gets it within this many times the time the
#: lock's own timeout needs to free it (its lease TTL, session timeout ...), and never sooner than
#: MIN_STUCK_S: the bound follows the lock, so a 10 s session is not called stuck at 3 s.
STUCK_FACTOR = 3.0
MIN_STUCK_S = 3.0


def stuck_bound(expected_s: float | None, ttl_s: float) -> float:
    """The stuck bound for a lock whose own timeout frees a dead holder after ``expected_s`` (None: never)."""
    base = expected_s if expected_s is not None else ttl_s
    return max(MIN_STUCK_S, STUCK_FACTOR * float(base))


def shortfall(rows: list[dict[str, Any]], asked: int) -> list[str]:
    """One line per server-fault case that struck fewer times than ``--strikes`` asked, and why.

    A slow lock is starved of strikes by the grants the service must make between two of them
    (n/k), and a strike that missed its holder is not one: the user must be told, for example
    "1 of 10 strikes in 40 s: 16 grants; raise --duration", not left with an "unknown".
    """
    lines = []
    for r in rows:
        if not r.get("fault") or asked <= 1:
            continue
        k = _int(r, "strikes")
        if k >= asked:
            continue
        grants = _int(r, "acquisitions")
        took = r.get("duration_s")
        took_s = f" in {float(took):.0f} s" if isinstance(took, int | float) and took == took else ""
        missed = _int(r, "strikes_missed")
        why = f"{grants:,} grants" + (f", {missed} strikes missed their holder" if missed else "")
        reason = r.get("strikes_missed_reason")
        if missed and isinstance(reason, str) and reason:
            why += f" ({reason.split('; ')[0]})"
        lines.append(f"{r.get('case')}: {k} of {asked} strikes{took_s}: {why}; raise --duration")
    return lines


#: The stuck rule after a server fault: a lock nobody is granted for this many times its own
#: timeout, never less than MIN_RECOVERY_S, is stuck (the matrix and bench explore both use it).
RECOVERY_FACTOR = 3.0
MIN_RECOVERY_S = 10.0


def recovery_bound_s(cls: type, ttl: float, lock_params: dict[str, Any]) -> float:
    """How long after a strike nobody may be granted the lock before it is stuck (s): its own bound.

    Not a fixed wait: etcd's restart recovery was measured at 7.5 s, and a fixed 5 s called it
    stuck. The bound is 3x the lock's own timeout (``Lock.recovery_after_crash``: lease TTL,
    session timeout, the server noticing a dead connection; ``ttl`` when the lock names none),
    at least 10 s.
    """
    expected, _ = cls.recovery_after_crash(ttl, lock_params)
    own = float(ttl) if expected is None else float(expected)
    own = max(own, float(lock_params.get("session_timeout") or 0.0))
    return max(MIN_RECOVERY_S, RECOVERY_FACTOR * own)
