"""Checkers: pure functions that judge a history (and the resource's final state).

A checker never does I/O and never trusts the lock: it looks only at what the clients
recorded (docs/architecture.md, "History") and at the protected resource read back at
the end. Each checker returns a :class:`CheckResult`; a workload combines them into
one :class:`Verdict` whose counters become columns of ``cases.csv``.

Everything here is vectorised with numpy/pandas so a history of a million events is
judged in seconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import pandas as pd

Status = Literal["valid", "invalid", "unknown"]

#: Every counter the checkers here can report, in the order results tables show them.
COUNTER_COLUMNS = [
    "overlapping_holds",
    "uncertain_overlaps",
    "max_concurrent_holders",
    "witness_violations",
    "witness_max",
    "oversold_units",
    "lost_updates",
    "indeterminate_purchases",
    "acquire_info",
]

HOLD_COLUMNS = [
    "client",
    "lock",
    "start_ns",
    "end_ns",
    "token",
    "open",
    "depth",
    "acquire_seq",
    "release_seq",
    "seen_ns",
    "open_ended",
]

#: ``error`` prefix of the info completion the harness writes for an invoke that never got one
#: (workloads/harness/recording.py ``UNFINISHED``; checkers import nothing from the harness).
UNFINISHED = "unfinished: "
#: Stands for "no bound known" (a worker whose clock offset was not measured): wider than any run.
UNBOUNDED_NS = 1 << 60


@dataclass
class CheckResult:
    """The finding of one checker: a status, the numbers behind it, and a sentence for humans."""

    name: str
    status: Status
    counters: dict[str, int | float]
    detail: str


@dataclass
class Verdict:
    """What a workload's checkers say together; one per case, merged into one row of results."""

    status: Status
    counters: dict[str, int | float] = field(default_factory=dict)
    results: list[CheckResult] = field(default_factory=list)

    @classmethod
    def combine(cls, results: list[CheckResult]) -> Verdict:
        """invalid if any result is invalid, else unknown if any is unknown, else valid."""
        statuses = {r.status for r in results}
        status: Status = (
            "invalid" if "invalid" in statuses else "unknown" if "unknown" in statuses else "valid"
        )
        counters: dict[str, int | float] = {}
        for r in results:
            counters.update(r.counters)
        return cls(status=status, counters=counters, results=list(results))


# holds -----------------------------------------------------------------------------------


def _empty_holds() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "client": pd.Series([], dtype="string"),
            "lock": pd.Series([], dtype="string"),
            "start_ns": pd.Series([], dtype="int64"),
            "end_ns": pd.Series([], dtype="int64"),
            "token": pd.Series([], dtype="Int64"),
            "open": pd.Series([], dtype="bool"),
            "depth": pd.Series([], dtype="int64"),
            "acquire_seq": pd.Series([], dtype="int64"),
            "release_seq": pd.Series([], dtype="Int64"),
            "seen_ns": pd.Series([], dtype="int64"),
            "open_ended": pd.Series([], dtype="bool"),
        }
    )


def _group_starts(codes: np.ndarray) -> np.ndarray:
    """Boolean mask of the first row of each run of equal codes (codes sorted)."""
    first = np.ones(len(codes), dtype=bool)
    first[1:] = codes[1:] != codes[:-1]
    return first


def holds(history: pd.DataFrame) -> pd.DataFrame:
    """Every hold of the history: one row per ``acquire ok``.

    A hold runs from a client's ``acquire ok`` to that client's matching ``release
    invoke`` on the same lock. Matching is by nesting, so a reentrant client that
    acquires twice and releases twice gets an inner hold inside an outer one (``depth``
    1 is the outermost). A release with nothing to match (e.g. after an unknown
    acquire) is ignored. An acquire never released (client killed) is ``open``: it
    lasts until the last event of the history, or until a ``crash`` event of a client
    of the same process (client ids are ``<pid>-u<n>``).

    Columns: client, lock, start_ns, end_ns, token, open, depth, acquire_seq,
    release_seq (nullable).
    """
    if history is None or history.empty:
        return _empty_holds()
    is_acq = (history["op"] == "acquire") & (history["type"] == "ok")
    is_rel = (history["op"] == "release") & (history["type"] == "invoke")
    ev = history.loc[(is_acq | is_rel).to_numpy(dtype=bool), ["client", "lock", "seq", "t_ns", "token", "op"]]
    if ev.empty or not is_acq.any():
        return _empty_holds()
    history_end = int(history["t_ns"].max())

    client_codes, clients = pd.factorize(ev["client"])
    lock_codes, locks = pd.factorize(ev["lock"])
    pair = client_codes.astype(np.int64) * (len(locks) + 1) + lock_codes
    seq = ev["seq"].to_numpy(dtype=np.int64)
    t = ev["t_ns"].to_numpy(dtype=np.int64)
    order = np.lexsort((t, seq, pair))
    pair, seq, t = pair[order], seq[order], t[order]
    client_codes, lock_codes = client_codes[order], lock_codes[order]
    acq = (ev["op"].to_numpy(dtype=object) == "acquire")[order]
    tokens = ev["token"].array[order]
    n = len(t)

    first = _group_starts(pair)
    gid = np.cumsum(first) - 1  # dense (client, lock) id, ascending along the rows
    # Depth after each event: a running sum of +1 (acquire ok) / -1 (release invoke) per
    # (client, lock), reflected at zero so an unmatched release cannot make a later
    # acquire look like a release: depth_i = S_i - min(0, min_{k<=i} S_k).
    step = np.where(acq, 1, -1).astype(np.int64)
    run = np.cumsum(step)
    start_row = np.maximum.accumulate(np.where(first, np.arange(n), 0))
    s = run - np.where(start_row > 0, run[start_row - 1], 0)
    # segmented running minimum: shift each group below all earlier ones (|s| <= n)
    span = np.int64(2 * n + 2)
    seg_min = np.minimum(np.minimum.accumulate(s - gid * span) + gid * span, 0)
    depth = s - seg_min
    pre = np.empty_like(depth)
    pre[0] = 0
    pre[1:] = depth[:-1]
    pre[first] = 0
    # an acquire opens level depth; a release closes level pre. An unmatched release
    # closes level 0, which no acquire opens, so it pairs with nothing.
    level = np.where(acq, depth, pre)

    idx = np.lexsort((np.arange(n), level, gid))
    g2, lv2, acq2 = gid[idx], level[idx], acq[idx]
    # within one (client, lock, level), events alternate acquire, release, acquire, ...
    closes = np.zeros(len(idx), dtype=bool)
    closes[:-1] = (g2[1:] == g2[:-1]) & (lv2[1:] == lv2[:-1]) & ~acq2[1:]
    a_pos = np.flatnonzero(acq2)
    closed = closes[a_pos]
    a_idx = idx[a_pos]
    r_idx = idx[np.minimum(a_pos + 1, len(idx) - 1)]

    end = np.where(closed, t[r_idx], history_end)
    rel_seq = pd.array(seq[r_idx], dtype="Int64")
    rel_seq[~closed] = pd.NA
    out = pd.DataFrame(
        {
            "client": pd.array(np.asarray(clients, dtype=object)[client_codes[a_idx]], dtype="string"),
            "lock": pd.array(np.asarray(locks, dtype=object)[lock_codes[a_idx]], dtype="string"),
            "start_ns": t[a_idx],
            "end_ns": np.maximum(end, t[a_idx]),
            "token": pd.array(tokens[a_idx], dtype="Int64"),
            "open": ~closed,
            "depth": depth[a_idx],
            "acquire_seq": seq[a_idx],
            "release_seq": rel_seq,
        }
    )
    out["seen_ns"] = out["end_ns"].to_numpy(dtype=np.int64)
    out["open_ended"] = False
    is_open = out["open"].to_numpy(dtype=bool)
    crashes = history.loc[(history["op"] == "crash").to_numpy(dtype=bool), ["client", "t_ns"]]
    cut = np.zeros(len(out), dtype=bool)
    if not crashes.empty and is_open.any():
        # a dead process holds nothing, whatever the lock server still believes
        died = crashes.assign(proc=process_of(crashes["client"])).groupby("proc")["t_ns"].min()
        death = process_of(out["client"]).map(died)
        cut = is_open & death.notna().to_numpy(dtype=bool)
        if cut.any():
            ends = np.maximum(out.loc[cut, "start_ns"].to_numpy(), death[cut].astype("int64").to_numpy())
            out.loc[cut, "end_ns"] = ends
            out.loc[cut, "seen_ns"] = ends
    lost = is_open & ~cut
    if lost.any():
        # known to hold only while its process kept recording; a lost worker's hold is open-ended
        real = history["error"].isna() | ~history["error"].fillna("").str.startswith(UNFINISHED)
        mine = history.loc[(real & (history["client"] != "bench")).to_numpy(dtype=bool), ["client", "t_ns"]]
        last = mine.assign(proc=process_of(mine["client"])).groupby("proc")["t_ns"].max()
        seen = process_of(out.loc[lost, "client"]).map(last).fillna(history_end).astype("int64").to_numpy()
        seen = np.maximum(seen, out.loc[lost, "start_ns"].to_numpy())
        out.loc[lost, "seen_ns"] = seen
        out.loc[lost, "open_ended"] = seen < out.loc[lost, "end_ns"].to_numpy()
    return out.sort_values(["lock", "start_ns", "client"], kind="stable").reset_index(drop=True)


def process_of(clients: pd.Series) -> pd.Series:
    """The process a client ran in: its id without the ``-u<n>`` user suffix (``<worker>/<pid>``)."""
    return clients.astype("string").str.rsplit("-u", n=1).str[0]


# overlaps --------------------------------------------------------------------------------


def _open_counts(group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each interval, how many intervals of its group are open at its start.

    Intervals are half-open [start, end): one that ends exactly when another starts does
    not overlap it. The interval itself is included in its count.
    """
    if len(start) == 0:
        return np.zeros(0, dtype=np.int64)
    # dense-rank every time so (group, time) packs into one int64 without overflow
    times = np.concatenate([start, end])
    _, ranks = np.unique(times, return_inverse=True)
    m = np.int64(ranks.max() + 1)
    skey = group.astype(np.int64) * m + ranks[: len(start)]
    ekey = group.astype(np.int64) * m + ranks[len(start) :]
    s_sorted = np.sort(skey)
    e_sorted = np.sort(ekey)
    # every earlier group contributes as many starts as ends, so they cancel
    return np.searchsorted(s_sorted, skey, side="right") - np.searchsorted(e_sorted, skey, side="right")


def worker_of(client: str) -> str:
    """The worker a client ran on: the ``<worker>/`` prefix the master gives remote clients, else ""."""
    return client.rsplit("/", 1)[0] if "/" in client else ""


def bounds_of(workers: np.ndarray, uncertainty_ns: dict[str, int | None] | None) -> np.ndarray:
    """Each worker's clock bound (ns); :data:`UNBOUNDED_NS` for one whose offset was not measured."""
    if not uncertainty_ns:
        return np.zeros(len(workers), dtype=np.int64)
    out = np.zeros(len(workers), dtype=np.int64)
    for i, w in enumerate(workers):
        b = uncertainty_ns.get(w, 0)
        out[i] = UNBOUNDED_NS if b is None else int(b)
    return out


def unmeasured_workers(uncertainty_ns: dict[str, int | None] | None) -> list[str]:
    """Workers whose clock bound is not known (no offset estimate, or the end measurement failed)."""
    return sorted(w for w, b in (uncertainty_ns or {}).items() if b is None)


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
            overlap = np.minimum(end[j], end[i]) - start[i]
            tolerance = np.where(worker[j] == worker[i], 0, np.minimum(bound[j] + bound[i], UNBOUNDED_NS))
            certain[i] = bool((overlap > tolerance).any())
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
    return CheckResult("overlaps", status, counters, detail)


# witness ---------------------------------------------------------------------------------


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
    return CheckResult("witness", status, counters, detail)


# stock -----------------------------------------------------------------------------------


def indeterminate_purchases(history: pd.DataFrame | None) -> dict[str, tuple[int, int | None]]:
    """Purchases that began and never finished, per item: (how many, units they may have taken).

    A purchase is ``invoke`` then ``ok`` or ``fail`` (same client and seq). One without
    either was cut off mid critical section (Locust stopping its users at ``--run-time``,
    a killed process): it may have written the stock and not yet appended its order, so
    the ledger and the stock may disagree by up to its units without any lost update.
    The invoke's ``value`` is the quantity it wanted (None in histories that lack it).
    """
    if history is None or history.empty:
        return {}
    p = history.loc[
        (history["op"] == "purchase").to_numpy(dtype=bool), ["client", "seq", "type", "lock", "value"]
    ]
    if p.empty:
        return {}
    done = p.loc[p["type"].isin(["ok", "fail"]), ["client", "seq"]].drop_duplicates()
    invoked = p[p["type"] == "invoke"]
    open_ = invoked.merge(done, on=["client", "seq"], how="left", indicator=True)
    open_ = open_[open_["_merge"] == "left_only"]
    out: dict[str, tuple[int, int | None]] = {}
    for lock, group in open_.groupby("lock"):
        item = str(lock).rsplit(":", 1)[-1]
        units = None if group["value"].isna().any() else int(group["value"].astype("int64").sum())
        n, u = out.get(item, (0, 0))
        out[item] = (n + len(group), None if units is None or u is None else u + units)
    return out


def check_stock(
    final_state: dict[str, Any] | None, indeterminate: dict[str, tuple[int, int | None]] | None = None
) -> CheckResult:
    """The resource invariant of flash-sale: units ordered = units taken from stock <= initial.

    ``oversold_units`` are units ordered beyond the initial stock; ``lost_updates`` are
    units the order ledger and the stock disagree on (two writers read the same stock and
    one write was lost, or the reverse). Stock taken without an order is excused up to the
    units of that item's ``indeterminate`` purchases (cut off between writing the stock and
    appending the order: an unknown outcome, not a lost update); each of them wanted at
    most ``max_qty`` units when the history does not say how many.
    """
    items = (final_state or {}).get("items") or {}
    indeterminate = indeterminate or {}
    n_indeterminate = sum(n for n, _ in indeterminate.values())
    if not items:
        return CheckResult(
            "stock",
            "unknown",
            {"oversold_units": 0, "lost_updates": 0, "indeterminate_purchases": n_indeterminate},
            "no final state of the resource",
        )
    max_qty = int((final_state or {}).get("max_qty") or 0)
    oversold = 0
    lost = 0
    excused = 0
    bad: list[str] = []
    for name, it in items.items():
        initial, stock, units = int(it["initial"]), int(it["stock"]), int(it["orders_units"])
        o = max(0, units - initial)
        taken_not_ordered = (initial - stock) - units
        n_open, open_units = indeterminate.get(name, (0, 0))
        allowance = open_units if open_units is not None else n_open * max_qty
        excuse = min(max(taken_not_ordered, 0), allowance)
        lu = abs(taken_not_ordered) - excuse
        oversold += o
        lost += lu
        excused += excuse
        if o or lu:
            bad.append(f"{name}: initial {initial}, stock {stock}, ordered {units}")
    status: Status = "invalid" if oversold or lost else "valid"
    counters = {"oversold_units": oversold, "lost_updates": lost, "indeterminate_purchases": n_indeterminate}
    cut = (
        f"; {n_indeterminate} purchases cut off mid critical section (indeterminate) explain {excused} units"
        if n_indeterminate
        else ""
    )
    if bad:
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        detail = f"oversold {oversold} units, {lost} units lost; " + "; ".join(bad[:3]) + more + cut
    else:
        detail = f"{len(items)} items, ledger and stock agree, nothing oversold" + cut
    return CheckResult("stock", status, counters, detail)


# unknown outcomes ------------------------------------------------------------------------


def check_unknown(history: pd.DataFrame) -> CheckResult:
    """Counts acquires whose outcome is unknown (``info``), so a valid verdict says how much it rests on.

    Kept informational: an unknown acquire that did take the lock shows up anyway as an
    overlap or a witness reading when it matters.
    """
    if history is None or history.empty:
        n = 0
    else:
        n = int(((history["op"] == "acquire") & (history["type"] == "info")).sum())
    detail = f"{n} acquires with unknown outcome" if n else "no unknown outcomes"
    return CheckResult("unknown", "valid", {"acquire_info": n}, detail)


# workloads -------------------------------------------------------------------------------


def clock_uncertainty(final_state: dict[str, Any] | None) -> dict[str, int | None] | None:
    """Per worker clock bounds the master put in the final state (None: one clock for all).

    A worker whose bound is None had no offset estimate (or its end-of-run measurement
    failed): wherever its timestamps decide, the checkers say ``unknown``.
    """
    bounds = (final_state or {}).get("clock_uncertainty_ns")
    return None if bounds is None else dict(bounds)


def fenced(final_state: dict[str, Any] | None) -> bool:
    """Whether the case used fencing tokens (``observe`` or ``enforce``)."""
    return ((final_state or {}).get("fencing") or {}).get("mode", "off") != "off"


def check_flash_sale(history: pd.DataFrame, final_state: dict[str, Any] | None) -> Verdict:
    """The flash-sale verdict: overlaps, witness, stock invariant, fencing and unknown outcomes."""
    bounds = clock_uncertainty(final_state)
    h = holds(history)
    results = [
        check_overlaps(history, h, uncertainty_ns=bounds),
        check_witness(history, h),
        check_stock(final_state, indeterminate_purchases(history)),
        check_fencing(final_state, history, h, bounds),
    ]
    if fenced(final_state):
        results.append(check_fencing_order(history, h, bounds))
    return Verdict.combine([*results, check_unknown(history)])


# fencing, pauses, crashes ----------------------------------------------------------------


def _tolerances(h: pd.DataFrame, uncertainty_ns: dict[str, int | None] | None) -> np.ndarray:
    workers = np.array([worker_of(str(c)) for c in h["client"]], dtype=object)
    return bounds_of(workers, uncertainty_ns)


def check_fencing_order(
    history: pd.DataFrame,
    hold_frame: pd.DataFrame | None = None,
    uncertainty_ns: dict[str, int | None] | None = None,
) -> CheckResult:
    """Fencing tokens in grant order: per lock, each grant's token above every earlier grant's.

    The rule of Hazelcast's FencedLock (as Jepsen checks it) and SyncGuard's contract tests.
    A grant is an outermost ``acquire ok`` with a token (a reentrant hold keeps its outer
    token: see ``workloads.checks.reentrant``). Grant A is *earlier* than grant B when A's
    hold certainly ended (release invoke, crash) before B's ``acquire ok``, clock bounds
    added across workers: a correct lock can grant B only after A let go, so its token must
    be higher. Holds that overlap are not ordered (the overlap checker speaks for them); an
    open-ended hold (lost worker) never certainly ended. ``fencing_order_violations`` counts
    grants whose token is not strictly above the highest token of the grants certainly
    before them (invalid). Where only clock error could order two grants the other way,
    ``uncertain_fencing_order`` counts them (unknown).
    """
    h = holds(history) if hold_frame is None else hold_frame
    if not h.empty and "seen_ns" not in h.columns:
        h = h.assign(seen_ns=h["end_ns"], open_ended=False)
    g = (
        h[(h["depth"] == 1).to_numpy(dtype=bool) & h["token"].notna().to_numpy(dtype=bool)]
        if not h.empty
        else h
    )
    if g.empty:
        return CheckResult("fencing-order", "valid", {"fencing_order_violations": 0}, "no tokens to order")
    tol = _tolerances(g, uncertainty_ns)
    start = g["start_ns"].to_numpy(dtype=np.int64)
    end = g["end_ns"].to_numpy(dtype=np.int64)
    seen = g["seen_ns"].to_numpy(dtype=np.int64)
    open_ended = g["open_ended"].to_numpy(dtype=bool)
    token = g["token"].to_numpy(dtype=np.float64)  # float: -inf pads the prefix maxima below
    lock = np.asarray(g["lock"].astype(str), dtype=object)
    never = np.int64(UNBOUNDED_NS) * 2
    surely_ended = np.where(open_ended, never, end + tol)  # certainly over by then
    maybe_ended = np.where(open_ended, seen, end) - tol  # possibly over from then
    bad = np.zeros(len(g), dtype=bool)
    maybe = np.zeros(len(g), dtype=bool)
    example = ""
    for name in pd.unique(lock):
        rows = np.flatnonzero(lock == name)
        for ends, at, into in ((surely_ended, start - tol, bad), (maybe_ended, start + tol, maybe)):
            order = rows[np.argsort(ends[rows], kind="stable")]
            prefix = np.maximum.accumulate(token[order])
            k = np.searchsorted(ends[order], at[rows], side="right")
            before = np.where(k > 0, prefix[np.maximum(k - 1, 0)], -np.inf)
            if into is bad:
                into[rows] = token[rows] <= before
                first = np.flatnonzero(into[rows])
                if len(first) and not example:
                    i = rows[first[0]]
                    example = f" (e.g. {name}: token {int(token[i])} granted after {int(before[first[0]])})"
            else:
                into[rows] = token[rows] < before
    violations = int(bad.sum())
    uncertain = int((maybe & ~bad).sum())
    counters: dict[str, int | float] = {"fencing_order_violations": violations}
    if uncertain:
        counters["uncertain_fencing_order"] = uncertain
    if violations:
        status: Status = "invalid"
        detail = f"fencing tokens out of grant order: {violations} grants{example}"
    elif uncertain:
        status, detail = "unknown", f"{len(g)} grants in token order as far as the clocks tell"
    else:
        status, detail = "valid", f"{len(g)} grants, every token above every earlier grant's"
    if uncertain:
        detail += f"; {uncertain} grants below an earlier token unless the clocks err (cannot tell)"
    return CheckResult("fencing-order", status, counters, detail)


def _alone(h: pd.DataFrame, rows: np.ndarray, tol: np.ndarray) -> np.ndarray:
    """For the holds at ``rows``: did they certainly overlap no other client's hold of their lock?"""
    lock = np.asarray(h["lock"].astype(str), dtype=object)
    client = np.asarray(h["client"].astype(str), dtype=object)
    start = h["start_ns"].to_numpy(dtype=np.int64)
    end = h["end_ns"].to_numpy(dtype=np.int64)  # an open hold counts to the history's end
    out = np.zeros(len(rows), dtype=bool)
    longest = int((end - start).max()) if len(h) else 0
    by_lock: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for k, i in enumerate(rows):
        if lock[i] not in by_lock:
            mine = np.flatnonzero(lock == lock[i])
            mine = mine[np.argsort(start[mine], kind="stable")]
            by_lock[lock[i]] = (mine, start[mine])
        mine, s = by_lock[lock[i]]
        pad = int(tol[i]) + int(tol.max())
        lo = np.searchsorted(s, start[i] - longest - pad, side="left")
        hi = np.searchsorted(s, end[i] + pad, side="right")
        j = mine[lo:hi]
        j = j[client[j] != client[i]]
        near = (start[j] < end[i] + tol[i] + tol[j]) & (end[j] + tol[i] + tol[j] > start[i])
        out[k] = not near.any()
    return out


def legitimate_refusals(
    final_state: dict[str, Any] | None,
    history: pd.DataFrame | None,
    hold_frame: pd.DataFrame | None = None,
    uncertainty_ns: dict[str, int | None] | None = None,
) -> int:
    """Accesses the resource refused as stale from holders that certainly overlapped nobody.

    A token is stale when an older holder's is higher; a holder alone on its lock holds the
    newest grant, so refusing it means the tokens do not follow grant order: fencing is
    broken, not working. Which accesses were refused comes from the resource's own log
    (``fencing.refused``: item, token, client) when it kept one, else from the history
    (``purchase`` ``fail`` with error ``stale``).
    """
    if history is None or history.empty:
        return 0
    h = holds(history) if hold_frame is None else hold_frame
    if h.empty:
        return 0
    tol = _tolerances(h, uncertainty_ns)
    fencing = (final_state or {}).get("fencing") or {}
    log = fencing.get("refused")
    refused: list[list[int]] = []  # per refusal, the holds it may have come from
    if log is not None:
        item = h["lock"].astype(str).str.rsplit(":", n=1).str[-1].to_numpy(dtype=object)
        tokens = h["token"].to_numpy(dtype=np.float64, na_value=np.nan)
        clients = np.asarray(h["client"].astype(str), dtype=object)
        index: dict[tuple[str, float], list[int]] = {}
        for i, (it, tk) in enumerate(zip(item, tokens, strict=True)):
            if tk == tk:
                index.setdefault((str(it), float(tk)), []).append(i)
        for entry in log:
            it, tk, who = str(entry[0]), float(entry[1]), str(entry[2] or "")
            cands = index.get((it, tk), [])
            if who:
                cands = [i for i in cands if clients[i] == who or clients[i].endswith("/" + who)]
            if cands:
                refused.append(cands)
    else:
        is_stale = (history["op"] == "purchase") & (history["type"] == "fail") & (history["error"] == "stale")
        stale = history.loc[is_stale.to_numpy(dtype=bool), ["client", "lock", "t_ns"]]
        starts = h["start_ns"].to_numpy(dtype=np.int64)
        seen = h["seen_ns"].to_numpy(dtype=np.int64) if "seen_ns" in h.columns else h["end_ns"].to_numpy()
        key = h["client"].astype(str) + "\x00" + h["lock"].astype(str)
        groups = {k: np.asarray(v) for k, v in key.groupby(key).groups.items()} if not stale.empty else {}
        for client, lock, t in stale.itertuples(index=False):
            rows = groups.get(f"{client}\x00{lock}")
            if rows is None:
                continue
            inside = rows[(starts[rows] <= t) & (seen[rows] >= t)]
            if len(inside):
                refused.append([int(inside[np.argmax(starts[inside])])])
    if not refused:
        return 0
    involved = np.unique(np.concatenate([np.asarray(c, dtype=np.int64) for c in refused]))
    alone = dict(zip(involved.tolist(), _alone(h, involved, tol).tolist(), strict=True))
    # a refusal several holds could have made is legitimate only if every one of them was alone
    return sum(1 for cands in refused if all(alone[i] for i in cands))


def check_fencing(
    final_state: dict[str, Any] | None,
    history: pd.DataFrame | None = None,
    hold_frame: pd.DataFrame | None = None,
    uncertainty_ns: dict[str, int | None] | None = None,
) -> CheckResult:
    """Stale accesses the resource saw: a token older than the newest it had already seen.

    In ``observe`` mode the resource accepted them (a holder that had lost the lock
    wrote anyway: invalid); in ``enforce`` mode it refused them. A refusal is fencing doing
    its job only when the refused holder had lost the lock to a newer one: a refusal of a
    holder that overlapped nobody (``legit_writes_refused``, needs the history) means the
    tokens are wrong, and the result is invalid. ``off``: no tokens, nothing to count.
    """
    fencing = (final_state or {}).get("fencing") or {}
    mode = fencing.get("mode", "off")
    if mode == "off":
        return CheckResult("fencing", "valid", {}, "unfenced: no tokens were used")
    writes, reads = int(fencing.get("stale_writes", 0)), int(fencing.get("stale_reads", 0))
    if mode == "observe":
        counters = {"stale_writes_accepted": writes, "stale_writes_refused": 0, "stale_reads": reads}
        status: Status = "invalid" if writes else "valid"
        detail = f"{writes} writes carried a stale token and were accepted (fencing observed, not enforced)"
        return CheckResult("fencing", status, counters, detail)
    legit = (
        legitimate_refusals(final_state, history, hold_frame, uncertainty_ns) if history is not None else 0
    )
    counters = {
        "stale_writes_accepted": 0,
        "stale_writes_refused": writes,
        "stale_reads": reads,
        "legit_writes_refused": legit,
    }
    if legit:
        status = "invalid"
        detail = (
            f"fencing is broken: it refused {legit} accesses of holders that overlapped nobody "
            f"(legitimate writes refused; {writes} stale writes and {reads} stale reads refused in all)"
        )
    else:
        status = "valid"
        detail = f"fencing refused {writes} stale writes and {reads} stale reads"
    return CheckResult("fencing", status, counters, detail)


def check_pauses(history: pd.DataFrame) -> CheckResult:
    """How many holders paused (lease-expiry) and for how long in total; counts only."""
    mask = ((history["op"] == "pause") & (history["type"] == "ok")).to_numpy(dtype=bool)
    values = history.loc[mask, "value"].dropna().to_numpy(dtype=np.int64) if mask.any() else np.array([])
    counters = {"pauses": int(mask.sum()), "pause_ms_total": int(values.sum()) if len(values) else 0}
    return CheckResult("pauses", "valid", counters, f"{counters['pauses']} holders paused while holding")


def check_crashes(history: pd.DataFrame, final_state: dict[str, Any] | None) -> CheckResult:
    """Recovery after a holder was killed: kill -> next successful acquisition of that lock.

    A lock is *stuck* when nobody acquired it within ``stuck_bound_s`` (from the final
    state, default 5 s) of the kill, including never before the history ends: the
    guarantee "a crashed holder does not block everyone forever" failed.

    The kill is timed on the dead worker's clock and the next grant on its own: with clients
    on several hosts, a recovery time within the two clocks' bounds of the stuck bound cannot
    be decided (unknown), nor can one involving a worker whose bound was not measured.
    """
    bound_ns = int(float((final_state or {}).get("stuck_bound_s", 5.0)) * 1e9)
    clocks = clock_uncertainty(final_state)

    def tol(client: str) -> int:
        b = (clocks or {}).get(worker_of(str(client)), 0) if clocks else 0
        return UNBOUNDED_NS if b is None else int(b)

    crash_mask = ((history["op"] == "crash") & (history["type"] == "info")).to_numpy(dtype=bool)
    crashes = history.loc[crash_mask, ["lock", "t_ns", "client"]]
    if crashes.empty:
        return CheckResult("crash", "unknown", {"crashes": 0, "stuck_locks": 0}, "no holder was killed")
    ok = history[(history["op"] == "acquire") & (history["type"] == "ok")]
    end_ns = int(history["t_ns"].max())
    recoveries: list[float] = []
    stuck = undecided = 0
    for lock, t, client in crashes.itertuples(index=False):
        after = ok.loc[(ok["lock"] == lock) & (ok["t_ns"] > t), ["t_ns", "client"]]
        if not after.empty:
            first = after.loc[after["t_ns"].idxmin()]
            recovery_ns = int(first["t_ns"]) - t
            margin = (
                0
                if worker_of(str(first["client"])) == worker_of(str(client))
                else tol(client) + tol(first["client"])
            )
            recoveries.append(recovery_ns / 1e6)
            if recovery_ns - margin > bound_ns:
                stuck += 1
            elif recovery_ns + margin > bound_ns:
                undecided += 1  # stuck or not depends on clock error
        elif end_ns - t - tol(client) >= bound_ns:  # never acquired again, and the run lasted past the bound
            stuck += 1
        else:  # not acquired again, but the run ended before the bound: cannot tell
            undecided += 1
    counters: dict[str, int | float] = {
        "crashes": len(crashes),
        "stuck_locks": stuck,
        "recovery_ms_p50": float(np.median(recoveries)) if recoveries else float("nan"),
        "recovery_ms_max": float(max(recoveries)) if recoveries else float("nan"),
    }
    # A stuck lock is a liveness failure, not a safety one: nobody held it twice. The verdict
    # stays about safety; ``stuck_locks`` (and the bound) carry the liveness finding.
    status: Status = "unknown" if undecided and not stuck else "valid"
    if stuck:
        detail = (
            f"{stuck} of {len(crashes)} locks stayed stuck: nobody got them within {bound_ns / 1e9:g}s "
            "after their holder was killed (liveness)"
        )
    elif undecided:
        detail = (
            f"{undecided} killed holders' locks: not acquired again before the run ended (< {bound_ns / 1e9:g}s), "
            "or recovered within the clocks' uncertainty of the bound"
        )
    else:
        detail = f"every crashed holder's lock was acquired again (p50 {counters['recovery_ms_p50']:.0f} ms)"
    return CheckResult("crash", status, counters, detail)


def check_lease_expiry(history: pd.DataFrame, final_state: dict[str, Any] | None) -> Verdict:
    """flash-sale's checkers plus the pause counts."""
    base = check_flash_sale(history, final_state)
    return Verdict.combine([*base.results, check_pauses(history)])


def check_crash(history: pd.DataFrame, final_state: dict[str, Any] | None) -> Verdict:
    """flash-sale's checkers plus stuck locks and recovery time after a killed holder."""
    base = check_flash_sale(history, final_state)
    return Verdict.combine([*base.results, check_crashes(history, final_state)])


def check_lock_pairs(history: pd.DataFrame, final_state: dict[str, Any] | None = None) -> Verdict:
    """The lock-pairs verdict: only the history can speak (there is no resource)."""
    return Verdict.combine(
        [check_overlaps(history, uncertainty_ns=clock_uncertainty(final_state)), check_unknown(history)]
    )
