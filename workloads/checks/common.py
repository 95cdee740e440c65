"""What every checker shares: results, verdicts, holds, and the clocks' bounds. Pure, no I/O.

A checker never does I/O and never trusts the lock: it looks only at what the clients
recorded (docs/architecture.md, "History") and at the protected resource read back at
the end. Each checker returns a :class:`CheckResult`; a workload combines them into
one :class:`Verdict` whose counters become columns of ``cases.csv``. The checkers live one
property per module (``exclusion``, ``witness``, ``stock``, ``fencing``, ``recovery``);
:mod:`workloads.checks.core` composes them into each workload's verdict.

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
    "locks_lost",
    "locks_lost_in_lease",
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


#: Violations per checker whose evidence is kept: the first in time (the report draws a few, not all).
MAX_WITNESSES = 5
#: The columns of a hold in a witness (a subset of :data:`HOLD_COLUMNS`; token None: no token).
WITNESS_HOLD_COLUMNS = ("client", "lock", "start_ns", "end_ns", "token", "open")


@dataclass(frozen=True)
class Witness:
    """The evidence of one violation: its kind, when, and the holds involved, in grant order.

    Why carried beside the counters: the report must show the reader the very pair of holds the
    checker counted, not pair holds again by a rule of its own that could drift from this one
    (Jepsen's checkers return their witnesses the same way). ``kind`` is ``overlap`` (two
    clients held one lock at once), ``lost-lock`` (a holder's release or probe said "not
    owned"), ``tokens`` (a grant's token not above an earlier grant's, or repeated),
    ``witness`` (the resource counted two inside), ``stale-write`` (the resource accepted a
    write whose token was older than a grant made meanwhile). Each hold is a dict of
    :data:`WITNESS_HOLD_COLUMNS`.
    """

    kind: str
    at_ns: int
    lock: str
    holds: tuple[dict[str, Any], ...]


def hold_record(h: pd.DataFrame, i: int) -> dict[str, Any]:
    """Row ``i`` (position) of a hold frame as a witness hold (:data:`WITNESS_HOLD_COLUMNS`)."""
    return hold_records(h, np.array([int(i)]))[0]


def hold_records(h: pd.DataFrame, rows: np.ndarray) -> list[dict[str, Any]]:
    """Rows (positions) of a hold frame as witness holds, in one pass over the columns."""
    part = h.iloc[rows]
    token = part["token"].astype("Int64")
    is_open = part["open"].to_numpy(dtype=bool) if "open" in part.columns else np.zeros(len(part), dtype=bool)
    return [
        {
            "client": str(c), "lock": str(k), "start_ns": int(s0), "end_ns": int(e0),
            "token": None if t is pd.NA else int(t), "open": bool(o),
        }
        for c, k, s0, e0, t, o in zip(
            part["client"], part["lock"], part["start_ns"].to_numpy(dtype=np.int64),
            part["end_ns"].to_numpy(dtype=np.int64), token.to_list(), is_open, strict=True,
        )
    ]  # fmt: skip


def holders_at(h: pd.DataFrame, lock: str, t_ns: int) -> np.ndarray:
    """Positions of the holds of ``lock`` that were held at ``t_ns`` (start <= t <= end), earliest first."""
    if h.empty:
        return np.zeros(0, dtype=np.int64)
    start = h["start_ns"].to_numpy(dtype=np.int64)
    end = h["end_ns"].to_numpy(dtype=np.int64)
    rows = np.flatnonzero(
        (h["lock"].astype(str).to_numpy(dtype=object) == lock) & (start <= t_ns) & (end >= t_ns)
    )
    return rows[np.argsort(start[rows], kind="stable")]


@dataclass
class CheckResult:
    """The finding of one checker: a status, the numbers behind it, and a sentence for humans."""

    name: str
    status: Status
    counters: dict[str, int | float]
    detail: str
    #: when the first violation this checker found happened (history ns; None: none, or no time to it),
    #: so a control's failure can be tied to a strike and set beside the stalls before it
    first_ns: int | None = None
    #: the evidence of the first few violations in time (:data:`MAX_WITNESSES`): what the report draws
    witnesses: list[Witness] = field(default_factory=list)


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
    lasts until the last event of the history, or until the death of its process (a
    ``crash``; :func:`crash_deaths`; client ids are ``<pid>-u<n>``).

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
    a_idx, r_idx, closed, depth = _pair_by_nesting(pair, acq)
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
    return _end_open_holds(out, history, history_end)


def _end_open_holds(out: pd.DataFrame, history: pd.DataFrame, history_end: int) -> pd.DataFrame:
    """Where each open hold ends: its process's death, else as far as its process was seen.

    ``seen_ns``: how long the hold is known to have lasted; ``open_ended``: a lost worker's
    hold, known only while its process kept recording (it may have lasted to ``end_ns``).
    """
    out["seen_ns"] = out["end_ns"].to_numpy(dtype=np.int64)
    out["open_ended"] = False
    is_open = out["open"].to_numpy(dtype=bool)
    died = process_deaths(history)
    cut = np.zeros(len(out), dtype=bool)
    if not died.empty and is_open.any():
        # a dead process holds nothing, whatever the lock server still believes
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


def _pair_by_nesting(
    pair: np.ndarray, acq: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Match each acquire to the release that closes it, per (client, lock), by nesting.

    ``pair``: the (client, lock) id of each event, rows sorted by it then by seq and time;
    ``acq``: True for ``acquire ok``, False for ``release invoke``. Returns, per acquire, its
    row, the row of its release (meaningful only where ``closed``), ``closed`` and the depth
    of every row (index by the acquire's row for the hold's depth).
    """
    n = len(pair)
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
    return a_idx, r_idx, closed, depth


def crash_deaths(history: pd.DataFrame) -> pd.DataFrame:
    """One row per killed holder: client, lock, marked_ns (its ``crash info``), died_ns.

    The ``crash info`` mark is written when the workload decides to die; the process still
    sends its recording and sleeps before SIGKILL, and its locks are held until then. The
    harness records that moment as a ``crash ok`` of the same client and seq (the instant
    the kill was scheduled for, docs/architecture.md "History"); a history without one
    (recorded before it existed) dies at the mark.
    """
    rows = history.loc[
        (history["op"] == "crash").to_numpy(dtype=bool), ["client", "seq", "type", "lock", "t_ns"]
    ]
    marks = rows[rows["type"] == "info"]
    if marks.empty:
        return pd.DataFrame(
            {
                "client": pd.Series([], dtype="string"),
                "lock": pd.Series([], dtype="string"),
                "marked_ns": pd.Series([], dtype="int64"),
                "died_ns": pd.Series([], dtype="int64"),
            }
        )
    deaths = rows[rows["type"] == "ok"].groupby(["client", "seq"])["t_ns"].min().rename("died_ns")
    out = marks.rename(columns={"t_ns": "marked_ns"}).join(deaths, on=["client", "seq"])
    died = out["died_ns"].fillna(out["marked_ns"]).astype("int64")
    out = out.assign(died_ns=np.maximum(died.to_numpy(), out["marked_ns"].to_numpy(dtype=np.int64)))
    return out[["client", "lock", "marked_ns", "died_ns"]].reset_index(drop=True)


def process_deaths(history: pd.DataFrame) -> pd.Series:
    """When each killed process died (history ns), indexed by process (see :func:`process_of`)."""
    d = crash_deaths(history)
    if d.empty:
        return pd.Series([], dtype="int64")
    return d.assign(proc=process_of(d["client"])).groupby("proc")["died_ns"].min()


def process_of(clients: pd.Series) -> pd.Series:
    """The process a client ran in: its id without the ``-u<n>`` user suffix (``<worker>/<pid>``)."""
    return clients.astype("string").str.rsplit("-u", n=1).str[0]


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


def certain_overlap(
    i: int, j: np.ndarray, start: np.ndarray, end: np.ndarray, worker: np.ndarray, bound: np.ndarray
) -> bool:
    """Did hold ``i`` overlap one of holds ``j`` (begun before it) by more than the clocks could explain?

    Two holds recorded by the same worker share one clock: no tolerance between them.
    """
    overlap = np.minimum(end[j], end[i]) - start[i]
    tolerance = np.where(worker[j] == worker[i], 0, np.minimum(bound[j] + bound[i], UNBOUNDED_NS))
    return bool((overlap > tolerance).any())


def unmeasured_workers(uncertainty_ns: dict[str, int | None] | None) -> list[str]:
    """Workers whose clock bound is not known (no offset estimate, or the end measurement failed)."""
    return sorted(w for w, b in (uncertainty_ns or {}).items() if b is None)


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


# clocks and modes ------------------------------------------------------------------------


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


def tolerances(h: pd.DataFrame, uncertainty_ns: dict[str, int | None] | None) -> np.ndarray:
    """Each hold's clock bound (ns) from its client's worker; 0 on one host."""
    workers = np.array([worker_of(str(c)) for c in h["client"]], dtype=object)
    return bounds_of(workers, uncertainty_ns)
