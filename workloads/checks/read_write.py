"""Checkers of the read-mostly workload: a writer never overlaps anyone, readers may share.

Pure functions over the history (docs/architecture.md, "History") and the resource's
final state, like the flash-sale checkers, whose ``holds``, ``check_witness`` and
``check_unknown`` they reuse. The history of read-mostly marks each acquire with its
mode in the ``value`` column: :data:`MODE_READ` (1) for a shared acquire,
:data:`MODE_WRITE` (0) for an exclusive one; an acquire without a mark (every other
workload) is exclusive. The business steps are ops ``read`` and ``write`` (invoke, then
ok with the document version read or written).

Read and write acquire latencies are reported separately, from the history's own
nanosecond timestamps (invoke -> ok of each acquire), as counters of the verdict.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from workloads.checks.common import (
    CheckResult,
    Status,
    Verdict,
    bounds_of,
    certain_overlap,
    check_unknown,
    clock_uncertainty,
    holds,
    worker_of,
)
from workloads.checks.fencing import fencing_order_result
from workloads.checks.ownership import check_ownership
from workloads.checks.witness import check_witness

MODE_WRITE = 0
MODE_READ = 1

NAN = float("nan")


def _acquire_modes(history: pd.DataFrame) -> pd.DataFrame:
    """(client, seq, mode) of every ``acquire ok``; unmarked acquires are writes."""
    ok = history.loc[((history["op"] == "acquire") & (history["type"] == "ok")).to_numpy(dtype=bool)]
    mode = ok["value"].fillna(MODE_WRITE).to_numpy(dtype=np.int64)
    return pd.DataFrame(
        {
            "client": ok["client"].astype("string").to_numpy(),
            "acquire_seq": ok["seq"].to_numpy(dtype=np.int64),
            "mode": mode,
        }
    )


def rw_holds(history: pd.DataFrame) -> pd.DataFrame:
    """:func:`workloads.checks.common.holds` plus a ``read`` column (True for a shared hold)."""
    h = holds(history)
    if h.empty:
        h["read"] = pd.Series([], dtype="bool")
        return h
    modes = _acquire_modes(history).drop_duplicates(["client", "acquire_seq"])
    h = h.merge(
        modes.astype({"client": "string"}), on=["client", "acquire_seq"], how="left", validate="many_to_one"
    )
    h["read"] = h["mode"].fillna(MODE_WRITE).to_numpy(dtype=np.int64) == MODE_READ
    return h.drop(columns=["mode"])


def _open_at_starts(group: np.ndarray, start: np.ndarray, end: np.ndarray, of: np.ndarray) -> np.ndarray:
    """For each interval i, how many intervals selected by ``of`` of its group are open at start_i.

    Intervals are half-open [start, end), so one ending exactly when another starts does
    not overlap it. An interval selected by ``of`` counts itself.
    """
    if len(start) == 0:
        return np.zeros(0, dtype=np.int64)
    times = np.concatenate([start, end])
    _, ranks = np.unique(times, return_inverse=True)
    m = np.int64(ranks.max() + 1)
    g = group.astype(np.int64) * m
    key = g + ranks[: len(start)]
    s_sorted = np.sort(key[of])
    e_sorted = np.sort((g + ranks[len(start) :])[of])
    # earlier groups contribute as many starts as ends below the key, so they cancel
    return np.searchsorted(s_sorted, key, side="right") - np.searchsorted(e_sorted, key, side="right")


def _conflicts(h: pd.DataFrame, end: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(conflicting holds, holders open at each start, readers open at each start) for ends ``end``."""
    lock_codes, _ = pd.factorize(h["lock"])
    client_codes, clients = pd.factorize(h["client"])
    pair = lock_codes.astype(np.int64) * (len(clients) + 1) + client_codes
    start = h["start_ns"].to_numpy(dtype=np.int64)
    read = h["read"].to_numpy(dtype=bool)
    write = ~read
    every = np.ones(len(h), dtype=bool)
    others_any = _open_at_starts(lock_codes, start, end, every) - _open_at_starts(pair, start, end, every)
    others_write = _open_at_starts(lock_codes, start, end, write) - _open_at_starts(pair, start, end, write)
    conflict = np.where(write, others_any > 0, others_write > 0)
    return (
        conflict,
        _open_at_starts(lock_codes, start, end, every),
        _open_at_starts(lock_codes, start, end, read),
    )


def _certain_conflicts(
    h: pd.DataFrame, end: np.ndarray, flagged: np.ndarray, uncertainty_ns: dict[str, int | None]
) -> np.ndarray:
    """Flagged holds whose conflict with another worker's hold exceeds the two clocks' bounds."""
    lock = np.asarray(h["lock"].astype(str), dtype=object)
    client = np.asarray(h["client"].astype(str), dtype=object)
    start = h["start_ns"].to_numpy(dtype=np.int64)
    read = h["read"].to_numpy(dtype=bool)
    worker = np.array([worker_of(c) for c in client], dtype=object)
    bound = bounds_of(worker, uncertainty_ns)
    certain = np.zeros(len(h), dtype=bool)
    for i in np.flatnonzero(flagged):
        j = np.flatnonzero((lock == lock[i]) & (client != client[i]) & (start <= start[i]) & (end > start[i]))
        if not read[i]:
            pass  # a writer conflicts with anyone
        else:
            j = j[~read[j]]
        if not len(j):
            continue
        certain[i] = certain_overlap(i, j, start, end, worker, bound)
    return certain


def check_rw_overlaps(
    history: pd.DataFrame, uncertainty_ns: dict[str, int | None] | None = None
) -> CheckResult:
    """Reader/writer exclusion as the clients saw it.

    A hold conflicts when it begins while another client holds the same lock in a
    conflicting mode: a write hold conflicts with any hold, a read hold with a write
    hold. ``overlapping_holds`` counts conflicting holds (each overlap is counted once,
    on the hold that began second); ``max_concurrent_readers`` is the most readers seen
    holding one lock at once (above 1 shows that readers really shared it).

    As in :func:`workloads.checks.exclusion.check_overlaps`: a conflict between two workers
    within their clocks' bounds (``uncertainty_ns``, None = not measured) is
    ``uncertain_overlaps``, and a hold that began after a lost worker's never-released
    hold was last seen is ``open_ended_overlaps``; both make the result unknown.
    """
    h = rw_holds(history) if history is not None and not history.empty else pd.DataFrame()
    zero: dict[str, int | float] = {
        "overlapping_holds": 0,
        "max_concurrent_holders": 0,
        "max_concurrent_readers": 0,
        "read_acquisitions": 0,
        "write_acquisitions": 0,
    }
    if uncertainty_ns is not None:
        zero["uncertain_overlaps"] = 0
    if h.empty:
        return CheckResult("rw-overlaps", "valid", zero, "no holds")
    read = h["read"].to_numpy(dtype=bool)
    write = ~read
    seen = h["seen_ns"].to_numpy(dtype=np.int64)
    flagged, holders_at, readers_at = _conflicts(h, seen)
    flagged_any, _, _ = _conflicts(h, h["end_ns"].to_numpy(dtype=np.int64))
    open_ended = int((flagged_any & ~flagged).sum())
    if uncertainty_ns and flagged.any():
        conflict = flagged & _certain_conflicts(h, seen, flagged, uncertainty_ns)
    else:
        conflict = flagged
    n_conflicts = int(conflict.sum())
    uncertain = int(flagged.sum()) - n_conflicts
    holders = int(holders_at.max())
    readers = int(readers_at[read].max()) if read.any() else 0
    counters: dict[str, int | float] = {
        "overlapping_holds": n_conflicts,
        "max_concurrent_holders": holders,
        "max_concurrent_readers": readers,
        "read_acquisitions": int(read.sum()),
        "write_acquisitions": int(write.sum()),
    }
    if uncertainty_ns is not None:
        counters["uncertain_overlaps"] = uncertain
    if open_ended:
        counters["open_ended_overlaps"] = open_ended
    status: Status = "invalid" if n_conflicts else "unknown" if uncertain or open_ended else "valid"
    if n_conflicts:
        bad_w = int((conflict & write).sum())
        detail = (
            f"{n_conflicts} of {len(h)} holds began in conflict ({bad_w} writes while someone held the lock, "
            f"{n_conflicts - bad_w} reads while a writer held it)"
        )
    else:
        detail = (
            f"{int(read.sum())} read and {int(write.sum())} write holds; writers always alone, "
            f"up to {readers} readers at once"
        )
    if uncertain:
        detail += (
            f"; {uncertain} conflicts shorter than the clock uncertainty between their hosts (cannot tell)"
        )
    if open_ended:
        detail += (
            f"; {open_ended} holds began after a never-released hold whose worker's recording ended "
            "(open, not a conflict: cannot tell)"
        )
    return CheckResult("rw-overlaps", status, counters, detail)


def acquire_latency_by_mode(history: pd.DataFrame) -> dict[str, float]:
    """p50/p99 of acquire latency (invoke -> ok, microseconds) separately for reads and writes."""
    out = {f"{m}_acquire_{q}_us": NAN for m in ("read", "write") for q in ("p50", "p99")}
    if history is None or history.empty:
        return out
    acq = history.loc[
        (history["op"] == "acquire").to_numpy(dtype=bool), ["client", "seq", "type", "t_ns", "value"]
    ]
    inv = acq[acq["type"] == "invoke"].drop_duplicates(["client", "seq"])
    ok = acq[acq["type"] == "ok"]
    m = ok.merge(inv[["client", "seq", "t_ns"]], on=["client", "seq"], suffixes=("", "_invoke"))
    if m.empty:
        return out
    us = (m["t_ns"] - m["t_ns_invoke"]).to_numpy(dtype=np.float64) / 1000.0
    is_read = m["value"].fillna(MODE_WRITE).to_numpy(dtype=np.int64) == MODE_READ
    for name, mask in (("read", is_read), ("write", ~is_read)):
        if mask.any():
            out[f"{name}_acquire_p50_us"] = float(np.percentile(us[mask], 50))
            out[f"{name}_acquire_p99_us"] = float(np.percentile(us[mask], 99))
    return out


def check_rw_data(final_state: dict[str, Any] | None) -> CheckResult:
    """The resource invariant: each document's version equals the writes that completed on it.

    A writer reads the version, works, and writes version + 1, then counts its write on a
    separate ledger; two writers inside together lose an update (``lost_updates``).
    """
    docs = (final_state or {}).get("docs") or {}
    if not docs:
        return CheckResult("rw-data", "unknown", {"lost_updates": 0}, "no final state of the resource")
    lost = 0
    bad = []
    for name, d in docs.items():
        diff = abs(int(d["writes"]) - int(d["version"]))
        lost += diff
        if diff:
            bad.append(f"{name}: {d['writes']} writes, version {d['version']}")
    status: Status = "invalid" if lost else "valid"
    detail = (
        f"{lost} updates lost; " + "; ".join(bad[:3]) if bad else f"{len(docs)} documents, no update lost"
    )
    return CheckResult("rw-data", status, {"lost_updates": lost}, detail)


def check_read_mostly(history: pd.DataFrame, final_state: dict[str, Any] | None) -> Verdict:
    """The read-mostly verdict: reader/writer exclusion, the witness, lost updates, unknown outcomes.

    Tokens of exclusive grants, where the lock hands them out, are checked for grant order
    (:func:`workloads.checks.fencing.fencing_order_result`).

    The witness of read-mostly records, on entry, how many conflicting clients were
    inside counting itself (a reader: 1 + writers inside; a writer: writers + readers
    inside), so :func:`workloads.checks.witness.check_witness` reads it unchanged.
    """
    latency = acquire_latency_by_mode(history)
    lat = CheckResult("rw-latency", "valid", latency, "acquire latency by mode (from the history)")
    bounds = clock_uncertainty(final_state)
    results = [
        check_rw_overlaps(history, bounds),
        check_ownership(history),
        check_witness(history),
        check_rw_data(final_state),
    ]
    # exclusive grants only: readers share the lock, and may share a token
    h = rw_holds(history)
    writes = h[~h["read"].to_numpy(dtype=bool)] if not h.empty else h
    order = fencing_order_result(history, final_state, writes, bounds)
    if order is not None:
        results.append(order)
    return Verdict.combine([*results, check_unknown(history), lat])
