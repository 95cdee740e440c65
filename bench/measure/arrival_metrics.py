"""What a shop owner asks of an open-model case, computed from its history alone (pure).

The open model (workloads/flash_sale_open.py) records every buyer as an ``arrive`` op:
``invoke`` at the intended arrival time with ``value`` = actual start - intended (ns), and
one completion when the buyer leaves (``ok``; ``fail`` ``gave-up`` / ``rejected`` / a lock
error; ``info``). The buyer's own acquire and purchase events follow on the same client
with later seqs, so each is matched to its arrival by (client, the last arrive seq before
it). From that, per case:

* outcomes: served (bought units), sold out (got in, too little stock left), gave up
  (patience ran out waiting for the lock: not a lock failure), failed (a lock or resource
  error, a purchase refused as stale), rejected (the in-flight cap was full), unfinished
  (still inside when the run stopped);
* latency in HDR histograms (microseconds, 1 us .. 1 h, 3 digits) of served buyers:
  ``arrival`` (intended arrival -> purchase ok: free of coordinated omission),
  ``arrival_start`` (actual start -> purchase ok: what a closed loop would report), and
  ``arrival_lag`` (actual start - intended, every arrival: the generator's own lateness);
* latency over *every* arrival, ``arrival_all``: a buyer who was served or sold out counts
  at the moment it left; one who gave up, failed (a lock error, a refused purchase), was
  turned away, was never launched (dropped) or was still waiting at the end counts at its
  patience (``--patience``; without it, at the time it left or was last seen) and is
  *censored*: it was not served within its patience. Served-only figures alone reward a lock
  that makes buyers give up (they drop out of the percentiles), and counting a failure at
  its own time would rank a lock that fails fast as fast;
  ``arrival_all_p99_us`` is what the gate's ``arrival.p99`` compares, and
  ``arrival_all_p99_censored`` says the figure is a lower bound ("at least");
* ``arrival_dropped``: arrivals the generator could not launch before the stop (their
  ``arrive`` is recorded at the stop with error ``dropped``): the run did not offer its
  rate, and :func:`bench.measure.fidelity.judge_bound` says so;
* time to sell out and arrival-order inversions (below).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd
from hdrh.histogram import HdrHistogram

from workloads.checks.core import UNBOUNDED_NS, worker_of
from workloads.harness.recording import (
    HIST_HIGHEST_US,
    HIST_LOWEST_US,
    UNFINISHED,
    encode_histogram,
    new_histogram,
)

NAN = float("nan")
HISTOGRAMS = ("arrival", "arrival_start", "arrival_lag", "arrival_all")
#: Outcomes whose latency is censored at the patience: the buyer left (or the run ended, or
#: it was never launched) without being served. A failed buyer is one of them: counted at the
#: moment its lock failed, 100 buyers failing in 1 ms would make a broken lock look fastest.
CENSORED = ("gave_up", "rejected", "unfinished", "failed", "dropped")
#: ``error`` of an ``arrive`` the generator could not launch before the stop (k6's dropped_iterations).
DROPPED = "dropped"


def _rows(history: pd.DataFrame, op: str, types: tuple[str, ...]) -> pd.DataFrame:
    mask = (history["op"] == op) & history["type"].isin(types)
    return history.loc[mask.to_numpy(dtype=bool)]


def _first_per_visit(events: pd.DataFrame, arrivals: pd.DataFrame, prefix: str) -> pd.DataFrame:
    """Each event tagged with its visit (client, last arrive seq <= its seq); the first per visit."""
    if events.empty:
        return pd.DataFrame(columns=["client", "visit", f"{prefix}_type", f"{prefix}_ns", f"{prefix}_value"])
    left = pd.DataFrame(
        {
            "client": events["client"].astype(str).to_numpy(),
            "seq": events["seq"].to_numpy(dtype=np.int64),
            f"{prefix}_type": events["type"].astype(str).to_numpy(),
            f"{prefix}_ns": events["t_ns"].to_numpy(dtype=np.int64),
            f"{prefix}_value": events["value"].astype("Int64").to_numpy(dtype="float64", na_value=np.nan),
        }
    ).sort_values("seq", kind="stable")
    right = arrivals[["client", "seq"]].assign(visit=arrivals["seq"]).sort_values("seq", kind="stable")
    tagged = pd.merge_asof(left, right, on="seq", by="client", direction="backward")
    tagged = tagged.dropna(subset=["visit"]).sort_values(["client", "visit", "seq"], kind="stable")
    tagged["visit"] = tagged["visit"].astype(np.int64)
    return tagged.drop_duplicates(["client", "visit"]).drop(columns=["seq"])


def visits(history: pd.DataFrame) -> pd.DataFrame:
    """One row per arrival: client, visit (its arrive seq), lock, intended_ns, start_ns, end_type,
    end_ns, error, acquire_type, acquire_ns, purchase_type, purchase_ns, units, outcome.

    Empty when the history has no ``arrive`` op (a closed-loop case).
    """
    if history is None or history.empty or not (history["op"] == "arrive").any():
        return pd.DataFrame()
    inv = _rows(history, "arrive", ("invoke",))
    arrivals = pd.DataFrame(
        {
            "client": inv["client"].astype(str).to_numpy(),
            "seq": inv["seq"].to_numpy(dtype=np.int64),
            "lock": inv["lock"].astype(str).to_numpy(),
            "intended_ns": inv["t_ns"].to_numpy(dtype=np.int64),
            "start_ns": inv["t_ns"].to_numpy(dtype=np.int64)
            + inv["value"].fillna(0).to_numpy(dtype=np.int64),
        }
    ).drop_duplicates(["client", "seq"])
    ends = _rows(history, "arrive", ("ok", "fail", "info"))
    ends = pd.DataFrame(
        {
            "client": ends["client"].astype(str).to_numpy(),
            "seq": ends["seq"].to_numpy(dtype=np.int64),
            "end_type": ends["type"].astype(str).to_numpy(),
            "end_ns": ends["t_ns"].to_numpy(dtype=np.int64),
            "error": ends["error"].fillna("").astype(str).to_numpy(),
        }
    ).drop_duplicates(["client", "seq"])
    out = arrivals.merge(ends, on=["client", "seq"], how="left")
    acq = _first_per_visit(_rows(history, "acquire", ("ok", "fail", "info")), arrivals, "acquire")
    buy = _first_per_visit(_rows(history, "purchase", ("ok", "fail")), arrivals, "purchase")
    out = out.rename(columns={"seq": "visit"})
    out = out.merge(acq.drop(columns=["acquire_value"]), on=["client", "visit"], how="left")
    out = out.merge(buy.rename(columns={"purchase_value": "units"}), on=["client", "visit"], how="left")
    out["outcome"] = _outcomes(out)
    return out.sort_values("intended_ns", kind="stable").reset_index(drop=True)


def _outcomes(v: pd.DataFrame) -> np.ndarray:
    error = v["error"].fillna("").to_numpy(dtype=object)
    # an arrive the harness closed at the end (no completion of its own) is still unfinished
    closed = np.array([str(x).startswith(UNFINISHED) for x in error], dtype=bool)
    end = np.where(closed, "", v["end_type"].fillna("").to_numpy(dtype=object))
    bought = (v["purchase_type"] == "ok").to_numpy(dtype=bool)
    units = v["units"].fillna(0).to_numpy(dtype=np.float64)
    return np.select(
        [
            error == "rejected",
            error == DROPPED,
            error == "gave-up",
            bought & (units > 0),
            bought & (units <= 0),
            end == "",
        ],
        ["rejected", "dropped", "gave_up", "served", "sold_out", "unfinished"],
        default="failed",
    )


def _histogram(values_ns: np.ndarray) -> HdrHistogram:
    hist = new_histogram()
    for us in np.clip(values_ns // 1000, HIST_LOWEST_US, HIST_HIGHEST_US).astype(np.int64):
        hist.record_value(int(us))
    return hist


def _pct(hist: HdrHistogram, q: float) -> float:
    return float(hist.get_value_at_percentile(q)) if hist.get_total_count() else NAN


def sellout_s(v: pd.DataFrame, final_state: dict[str, Any] | None) -> float:
    """Seconds from the first arrival until every item was sold out; NaN if one never was.

    An item is sold out at the first purchase that found too little stock, or at the
    purchase that took its last unit, whichever came first. Initial stock per item comes
    from the resource's final state (``items[name]["initial"]``); lock names are
    ``<prefix>:<item>``.
    """
    items = (final_state or {}).get("items") or {}
    if v.empty or not items:
        return NAN
    opening = int(v["intended_ns"].min())
    buys = v[v["purchase_type"] == "ok"].sort_values("purchase_ns", kind="stable")
    item_of = buys["lock"].str.split(":", n=1).str[-1]
    latest = opening
    for name, info in items.items():
        mine = buys[(item_of == name).to_numpy(dtype=bool)]
        units = mine["units"].fillna(0).to_numpy(dtype=np.float64)
        t = mine["purchase_ns"].to_numpy(dtype=np.float64)
        gone = (np.cumsum(units) >= float(info.get("initial", math.inf))) | (units <= 0)
        if not gone.any():
            return NAN
        latest = max(latest, int(t[np.argmax(gone)]))
    return (latest - opening) / 1e9


def _tolerance(v: pd.DataFrame, uncertainty_ns: dict[str, int | None] | None) -> np.ndarray:
    """Each visit's clock bound (ns) from its client's worker; 0 on one host."""
    if not uncertainty_ns:
        return np.zeros(len(v), dtype=np.int64)
    out = [uncertainty_ns.get(worker_of(str(c)), 0) for c in v["client"]]
    return np.array([UNBOUNDED_NS if b is None else int(b) for b in out], dtype=np.int64)


def order_inversions(v: pd.DataFrame, uncertainty_ns: dict[str, int | None] | None = None) -> tuple[int, int]:
    """(inversions, uncertain ones): buyers granted while an earlier arrival on their lock still waited.

    A buyer waits from its intended arrival until its acquire completes (granted, gave up or
    failed); rejected buyers never wait. Buyer B is an inversion when some A with an earlier
    arrival on B's lock was still waiting when B was granted the lock. Across workers both
    comparisons are made with the two clocks' bounds (``uncertainty_ns``, None = not
    measured): an inversion that clock error alone could explain is counted as uncertain.
    """
    tried = v[v["acquire_type"].notna()]
    if tried.empty:
        return 0, 0
    tol_all = _tolerance(tried, uncertainty_ns)
    count = uncertain = 0
    for _, rows in tried.groupby("lock", sort=False):
        tol = tol_all[tried.index.get_indexer(rows.index)].astype(np.float64)
        intended = rows["intended_ns"].to_numpy(dtype=np.float64)
        waiting_until = rows["acquire_ns"].to_numpy(dtype=np.float64)
        granted = (rows["acquire_type"] == "ok").to_numpy(dtype=bool)
        # certain: A arrived before B even if both clocks err, and still waited at B's grant
        order = np.argsort(intended + tol, kind="stable")
        prefix = np.maximum.accumulate(waiting_until[order] - tol[order])
        k = np.searchsorted((intended + tol)[order], intended - tol, side="left")
        before = np.where(k > 0, prefix[np.maximum(k - 1, 0)], -np.inf)
        certain = granted & (before > waiting_until + tol)
        # possible: some other A could have been before B and still waiting, within the bounds
        order = np.argsort(intended - tol, kind="stable")
        best, second, who = _prefix_top2(waiting_until[order] + tol[order], order)
        k = np.searchsorted((intended - tol)[order], intended + tol, side="left")
        at = np.maximum(k - 1, 0)
        # the best earlier waiter other than B itself
        maybe = np.where(k > 0, np.where(who[at] == np.arange(len(rows)), second[at], best[at]), -np.inf)
        possible = granted & (maybe > waiting_until - tol)
        count += int(certain.sum())
        uncertain += int((possible & ~certain).sum())
    return count, uncertain


def _prefix_top2(values: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Running (largest, second largest, id of the largest) over ``values``."""
    best = np.empty(len(values))
    second = np.empty(len(values))
    who = np.empty(len(values), dtype=np.int64)
    b1, b2, w = -np.inf, -np.inf, -1
    for i, (x, ident) in enumerate(zip(values.tolist(), ids.tolist(), strict=True)):
        if x > b1:
            b1, b2, w = x, b1, ident
        elif x > b2:
            b2 = x
        best[i], second[i], who[i] = b1, b2, w
    return best, second, who


def _censored_latency_ns(
    v: pd.DataFrame, patience_s: float | None, end_ns: int
) -> tuple[np.ndarray, np.ndarray]:
    """(latency from the intended arrival for every visit, which of them are censored)."""
    outcome = v["outcome"].to_numpy(dtype=object)
    intended = v["intended_ns"].to_numpy(dtype=np.int64)
    left = np.where(
        v["purchase_ns"].notna().to_numpy(dtype=bool),
        v["purchase_ns"].fillna(0).to_numpy(dtype=np.int64),
        v["end_ns"].fillna(end_ns).to_numpy(dtype=np.int64),
    )
    censored = np.isin(outcome, CENSORED)
    seen = np.where(outcome == "unfinished", end_ns, left)
    latency = np.maximum(seen - intended, 0)
    if patience_s is not None and patience_s == patience_s:
        latency = np.where(censored, int(patience_s * 1e9), latency)
    return latency, censored


def arrival_summary(
    history: pd.DataFrame, final_state: dict[str, Any] | None, patience_s: float | None = None
) -> tuple[dict[str, Any], dict[str, str]]:
    """(``arrival_*`` columns of cases.csv, encoded HDR histograms); both empty for a closed-loop case.

    ``patience_s`` is the run's ``--patience``: what a buyer who did not get served is
    counted at in the every-arrival figures (censored: at least that long).
    """
    v = visits(history)
    if v.empty:
        return {}, {}
    outcome = v["outcome"].to_numpy(dtype=object)
    served = v[outcome == "served"]
    every_ns, censored = _censored_latency_ns(v, patience_s, int(history["t_ns"].max()))
    hists = {
        "arrival": _histogram((served["purchase_ns"] - served["intended_ns"]).to_numpy(dtype=np.int64)),
        "arrival_start": _histogram((served["purchase_ns"] - served["start_ns"]).to_numpy(dtype=np.int64)),
        "arrival_lag": _histogram((v["start_ns"] - v["intended_ns"]).to_numpy(dtype=np.int64)),
        "arrival_all": _histogram(every_ns),
    }
    lowest_censored_us = float(every_ns[censored].min()) / 1000 if censored.any() else math.inf

    def at_least(p: float) -> bool:
        # a censored buyer's real wait is at least its figure: any percentile at or above the
        # lowest censored figure may be higher in truth
        return bool(p == p and p >= _pct_floor(lowest_censored_us))

    span_s = (int(v["intended_ns"].max()) - int(v["intended_ns"].min())) / 1e9
    granted = int((v["acquire_type"] == "ok").sum())
    clocks = (final_state or {}).get("clock_uncertainty_ns")
    inversions, uncertain = order_inversions(v, clocks)
    all_p50, all_p99 = _pct(hists["arrival_all"], 50), _pct(hists["arrival_all"], 99)
    columns: dict[str, Any] = {
        "arrival_count": len(v),
        "arrival_offered_s": (len(v) - 1) / span_s if span_s > 0 else NAN,
        "arrival_served": int((outcome == "served").sum()),
        "arrival_sold_out": int((outcome == "sold_out").sum()),
        "arrival_gave_up": int((outcome == "gave_up").sum()),
        "arrival_failed": int((outcome == "failed").sum()),
        "arrival_rejected_in_flight": int((outcome == "rejected").sum()),
        "arrival_dropped": int((outcome == "dropped").sum()),
        "arrival_unfinished": int((outcome == "unfinished").sum()),
        "arrival_sellout_s": sellout_s(v, final_state),
        "arrival_p50_us": _pct(hists["arrival"], 50),
        "arrival_p99_us": _pct(hists["arrival"], 99),
        "arrival_all_p50_us": all_p50,
        "arrival_all_p99_us": all_p99,
        "arrival_all_p50_censored": at_least(all_p50),
        "arrival_all_p99_censored": at_least(all_p99),
        "arrival_censored": int(censored.sum()),
        "arrival_start_p50_us": _pct(hists["arrival_start"], 50),
        "arrival_start_p99_us": _pct(hists["arrival_start"], 99),
        "arrival_schedule_lag_p50_us": _pct(hists["arrival_lag"], 50),
        "arrival_schedule_lag_p99_us": _pct(hists["arrival_lag"], 99),
        "arrival_order_inversions": inversions,
        "arrival_order_inversion_frac": inversions / granted if granted else NAN,
    }
    if clocks is not None:
        columns["arrival_order_inversions_uncertain"] = uncertain
    return columns, {name: encode_histogram(h) for name, h in hists.items()}


def _pct_floor(us: float) -> float:
    """The lowest value HDR reports for a recording of ``us`` (its bucket's lower edge, 3 digits)."""
    if not math.isfinite(us):
        return math.inf
    hist = new_histogram()
    hist.record_value(int(min(max(us, HIST_LOWEST_US), HIST_HIGHEST_US)))
    return float(hist.get_value_at_percentile(50)) * (1 - 1e-3)
