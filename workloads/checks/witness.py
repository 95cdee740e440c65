"""Mutual exclusion as the resource saw it: the witness counter, independent of client clocks.

Pure, no I/O: reads the history's ``witness ok`` readings (and the holds, for holders whose
worker was lost inside and never counted out).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workloads.checks.common import (
    MAX_WITNESSES,
    CheckResult,
    Status,
    Witness,
    hold_record,
    holders_at,
    holds,
)


def _dead_entrants(history: pd.DataFrame, h: pd.DataFrame) -> pd.DataFrame:
    """(lock, t_ns) of each witness entry made inside an open-ended hold: never decremented, as far as anyone knows."""
    lost = (
        h[h["open_ended"].to_numpy(dtype=bool)] if "open_ended" in h.columns and not h.empty else h.iloc[0:0]
    )
    if lost.empty:
        return pd.DataFrame({"lock": pd.Series([], dtype="string"), "t_ns": pd.Series([], dtype="int64")})
    w = history.loc[((history["op"] == "witness") & (history["type"] == "ok")).to_numpy(dtype=bool)]
    rows = []
    for hold_row in lost.itertuples(index=False):
        inside = w[
            (w["client"] == hold_row.client)
            & (w["lock"] == hold_row.lock)
            & (w["t_ns"] >= hold_row.start_ns)
            & (w["t_ns"] <= hold_row.seen_ns)
        ]
        if not inside.empty:
            rows.append((str(hold_row.lock), int(inside["t_ns"].min())))
    return pd.DataFrame(rows, columns=["lock", "t_ns"])


def check_witness(history: pd.DataFrame, hold_frame: pd.DataFrame | None = None) -> CheckResult:
    """Mutual exclusion as the resource saw it, independent of client clocks.

    Each client INCRs a counter on the resource right after entering and reports the
    value (``witness ok``); any reading above 1 means someone else was inside.

    A holder whose worker was lost inside its hold (an ``open_ended`` hold that had entered)
    never decremented the counter, so every later reading on that lock is one higher though
    nobody else may be inside. Readings explained by such entrants count in
    ``uncertain_witness`` (unknown); only a reading above what they explain is a violation.
    """
    if history is None or history.empty:
        w = history.iloc[0:0] if history is not None else None
        values = np.array([], dtype=np.int64)
    else:
        mask = ((history["op"] == "witness") & (history["type"] == "ok")).to_numpy(dtype=bool)
        w = history.loc[mask].dropna(subset=["value"])
        values = w["value"].to_numpy(dtype=np.int64)
    if not len(values):
        return CheckResult(
            "witness", "valid", {"witness_violations": 0, "witness_max": 0}, "no witness readings"
        )
    allowance = np.zeros(len(values), dtype=np.int64)
    if hold_frame is not None and not hold_frame.empty:
        dead = _dead_entrants(history, hold_frame)
        if not dead.empty:
            locks = np.asarray(w["lock"].astype(str))
            t = w["t_ns"].to_numpy(dtype=np.int64)
            for name, group in dead.groupby("lock"):
                times = np.sort(group["t_ns"].to_numpy(dtype=np.int64))
                mine = locks == name
                # entries strictly before the reading (the dead holder's own reading is its entry)
                allowance[mine] = np.searchsorted(times, t[mine], side="left")
    excess = values - 1 - allowance
    violations = int((excess > 0).sum())
    uncertain = int(((values > 1) & (excess <= 0)).sum())
    wmax = int(values.max())
    status: Status = "invalid" if violations else "unknown" if uncertain else "valid"
    if violations:
        detail = f"{violations} of {len(values)} witness readings saw another client inside (max {wmax})"
    else:
        detail = f"{len(values)} witness readings, all alone inside"
    counters: dict[str, int | float] = {"witness_violations": violations, "witness_max": wmax}
    if uncertain:
        counters["uncertain_witness"] = uncertain
        detail += (
            f"; {uncertain} readings above 1 are explained by holders whose worker was lost inside "
            "(never counted out): cannot tell"
        )
    first = int(w["t_ns"].to_numpy(dtype=np.int64)[excess > 0].min()) if violations else None
    found = witness_witnesses(history, w[excess > 0], hold_frame) if violations else []
    return CheckResult("witness", status, counters, detail, first_ns=first, witnesses=found)


def witness_witnesses(
    history: pd.DataFrame, readings: pd.DataFrame, hold_frame: pd.DataFrame | None
) -> list[Witness]:
    """The first readings above what the lost entrants explain: the reader's hold, after another client's then."""
    h = holds(history) if hold_frame is None else hold_frame
    out: list[Witness] = []
    for row in readings.sort_values("t_ns", kind="stable").head(MAX_WITNESSES).itertuples(index=False):
        t, lock, client = int(row.t_ns), str(row.lock), str(row.client)
        at = holders_at(h, lock, t)
        clients = h["client"].astype(str).to_numpy(dtype=object)
        mine = [k for k in at if clients[k] == client]
        others = [k for k in at if clients[k] != client]
        if not mine:
            continue
        pair = (
            (hold_record(h, others[0]), hold_record(h, mine[-1])) if others else (hold_record(h, mine[-1]),)
        )
        out.append(Witness("witness", t, lock, pair))
    return out
