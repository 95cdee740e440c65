"""Mutual exclusion as the clients saw it: did two clients hold one lock at once? Pure, no I/O.

Holds come from :func:`workloads.checks.common.holds`; across hosts an overlap no longer than
the two clocks' bounds is uncertain, never a violation (docs/architecture.md, "Checkers").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workloads.checks.common import (
    MAX_WITNESSES,
    CheckResult,
    Status,
    Witness,
    _open_counts,
    bounds_of,
    certain_overlap,
    hold_record,
    holds,
    unmeasured_workers,
    worker_of,
)


def _certain_overlaps(
    h: pd.DataFrame, flagged: np.ndarray, uncertainty_ns: dict[str, int | None]
) -> np.ndarray:
    """Which flagged holds overlap some other client's hold by more than the two clocks' bound.

    Holds of one worker share one clock (bound 0); holds of two workers were each shifted
    by an estimated offset, so their relative error is at most the sum of both bounds. A
    flagged hold whose every overlap is within that is *uncertain*: it may be clock error.
    A worker whose bound is unknown (None) makes every overlap with another worker uncertain.
    """
    lock = np.asarray(h["lock"], dtype=object)
    client = np.asarray(h["client"], dtype=object)
    start = h["start_ns"].to_numpy(dtype=np.int64)
    end = h["end_ns"].to_numpy(dtype=np.int64)
    worker = np.array([worker_of(c) for c in client], dtype=object)
    bound = bounds_of(worker, uncertainty_ns)
    certain = np.zeros(len(h), dtype=bool)
    longest = int((end - start).max())
    for name in pd.unique(lock[flagged]):
        rows = np.flatnonzero(lock == name)
        rows = rows[np.argsort(start[rows], kind="stable")]
        s, e = start[rows], end[rows]
        for k in np.flatnonzero(flagged[rows]):
            i = rows[k]
            lo = np.searchsorted(s, s[k] - longest, side="left")
            hi = np.searchsorted(s, s[k], side="right")
            j = rows[lo:hi]
            j = j[(client[j] != client[i]) & (e[lo:hi] > s[k])]
            if not len(j):
                continue
            certain[i] = certain_overlap(i, j, start, end, worker, bound)
    return certain


def _flag_others(h: pd.DataFrame, end_column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(holds that began while another client held the lock, per-hold own-open counts, lock codes)."""
    lock_codes, _ = pd.factorize(h["lock"])
    client_codes, clients = pd.factorize(h["client"])
    pair = lock_codes.astype(np.int64) * (len(clients) + 1) + client_codes
    start = h["start_ns"].to_numpy(dtype=np.int64)
    end = h[end_column].to_numpy(dtype=np.int64)
    on_lock = _open_counts(lock_codes, start, end)
    own = _open_counts(pair, start, end)
    return on_lock - own > 0, own, lock_codes


def check_overlaps(
    history: pd.DataFrame,
    hold_frame: pd.DataFrame | None = None,
    uncertainty_ns: dict[str, int | None] | None = None,
) -> CheckResult:
    """Mutual exclusion as the clients saw it: did two clients hold one lock at once?

    ``overlapping_holds`` counts holds that begin while a hold of another client on the
    same lock is open (a client nesting its own holds is reentrancy, not a violation);
    ``max_concurrent_holders`` is the most distinct clients holding one lock at once.

    With clients on several hosts, ``uncertainty_ns`` maps each worker (the client id's
    ``<worker>/`` prefix) to the bound of its clock offset (None: not measured). An overlap
    between two workers no longer than the sum of their bounds might be clock error alone:
    it is counted in ``uncertain_overlaps`` and makes the result ``unknown``, never valid
    and never invalid.

    A hold never released whose worker stopped recording (``open_ended`` in :func:`holds`)
    is known only up to its process's last event. A hold that began after that, while the
    lost holder may or may not still have held the lock, is counted in
    ``open_ended_overlaps`` and makes the result ``unknown``: the lock may well have expired
    the dead holder's lease, as it should.
    """
    h = holds(history) if hold_frame is None else hold_frame
    # the uncertain count exists only where clocks had to be aligned (several hosts)
    extra = {"uncertain_overlaps": 0} if uncertainty_ns is not None else {}
    if h.empty:
        return CheckResult(
            "overlaps", "valid", {"overlapping_holds": 0, **extra, "max_concurrent_holders": 0}, "no holds"
        )
    if "seen_ns" not in h.columns:  # a hand-made frame: everything it says is known
        h = h.assign(seen_ns=h["end_ns"], open_ended=False)
    known = h.assign(end_ns=h["seen_ns"].to_numpy(dtype=np.int64))
    flagged, own, lock_codes = _flag_others(known, "end_ns")
    flagged_any, _, _ = _flag_others(h, "end_ns")
    open_ended = int((flagged_any & ~flagged).sum())
    if uncertainty_ns and flagged.any():
        certain = flagged & _certain_overlaps(known, flagged, uncertainty_ns)
    else:
        certain = flagged
    overlapping = int(certain.sum())
    uncertain = int(flagged.sum()) - overlapping

    # a client's outermost holds (nothing of its own open at their start) form the union
    # of its holding time, so counting them counts distinct holders
    outer = own == 1
    start = known["start_ns"].to_numpy(dtype=np.int64)
    end = known["end_ns"].to_numpy(dtype=np.int64)
    max_holders = int(_open_counts(lock_codes[outer], start[outer], end[outer]).max()) if outer.any() else 0

    status: Status = "invalid" if overlapping else "unknown" if uncertain or open_ended else "valid"
    if overlapping:
        per_lock = pd.Series(certain).groupby(np.asarray(h["lock"])).sum()
        worst = per_lock.sort_values(ascending=False).head(3)
        where = ", ".join(f"{k}: {int(v)}" for k, v in worst.items() if v)
        detail = f"{overlapping} of {len(h)} holds began while another client held the lock ({where}); up to {max_holders} holders at once"
    else:
        detail = f"{len(h)} holds, never two clients at once"
    if uncertain:
        missing = unmeasured_workers(uncertainty_ns)
        why = f" (no clock bound for {', '.join(missing)})" if missing else ""
        detail += f"; {uncertain} overlaps shorter than the clock uncertainty between their hosts{why} (cannot tell)"
    if open_ended:
        lost = h[h["open_ended"].to_numpy(dtype=bool)]
        who = ", ".join(dict.fromkeys(str(c) for c in lost["client"]))
        detail += (
            f"; {open_ended} holds began after {len(lost)} never-released holds whose worker's recording ended "
            f"({who}): open, not overlaps (cannot tell whether the lost holder still held the lock)"
        )
    counters: dict[str, int | float] = {
        "overlapping_holds": overlapping,
        **({"uncertain_overlaps": uncertain} if extra else {}),
        "max_concurrent_holders": max_holders,
    }
    if open_ended:
        counters["open_ended_overlaps"] = open_ended
    first = int(start[certain].min()) if overlapping else None
    return CheckResult(
        "overlaps", status, counters, detail, first_ns=first, witnesses=overlap_witnesses(h, known, certain)
    )


def overlap_witnesses(h: pd.DataFrame, known: pd.DataFrame, certain: np.ndarray) -> list[Witness]:
    """The first overlaps in time: each late hold with the other client's hold it began inside.

    Of the other clients' holds open at its start (by what was known of them), the one that
    lasted longest: the hold whose lease should have ended first.
    """
    rows = np.flatnonzero(certain)
    if not len(rows):
        return []
    lock = h["lock"].astype(str).to_numpy(dtype=object)
    client = h["client"].astype(str).to_numpy(dtype=object)
    start = known["start_ns"].to_numpy(dtype=np.int64)
    end = known["end_ns"].to_numpy(dtype=np.int64)
    out: list[Witness] = []
    for j in rows[np.argsort(start[rows], kind="stable")][:MAX_WITNESSES]:
        cands = np.flatnonzero(
            (lock == lock[j]) & (client != client[j]) & (start <= start[j]) & (end > start[j])
        )
        if not len(cands):
            continue
        i = cands[np.lexsort((start[cands], -end[cands]))[0]]
        out.append(Witness("overlap", int(start[j]), str(lock[j]), (hold_record(h, i), hold_record(h, j))))
    return out
