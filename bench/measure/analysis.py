"""Per-case metrics: a history and its histograms -> one row of ``cases.csv`` and series over time.

Pure functions, no I/O: the runner reads files and writes results, this module only
computes. Latency percentiles come from the HDR histograms (microseconds, exact to 3
significant digits); everything about ordering between clients (handoff gaps,
utilization, fairness, per-second series) comes from the history, whose timestamps are
``time.monotonic_ns()`` and so comparable across processes on one host.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from hdrh.histogram import HdrHistogram

from workloads.checks.core import COUNTER_COLUMNS, Verdict, holds
from workloads.harness.recording import STALL_CLIENT_PREFIX

NAN = float("nan")

#: Columns of ``cases.csv`` in order. A verdict may add counters not listed here; they
#: go after these, just before ``verdict``.
CASE_COLUMNS: list[str] = [
    "case",
    "impl",
    "backend",
    "workload",
    "trial",
    "users",
    "processes",
    "duration_s",
    "acquisitions",
    "acquire_timeouts",
    "acquire_unknown",
    "releases_not_owned",
    "purchases",
    "units_sold",
    "throughput_acq_s",
    "throughput_ops_s",
    "acquire_p50_us",
    "acquire_p90_us",
    "acquire_p99_us",
    "acquire_p999_us",
    "acquire_max_us",
    "release_p50_us",
    "release_p99_us",
    "hold_p50_us",
    "hold_p99_us",
    "handoff_p50_us",
    "handoff_p99_us",
    "hold_mean_us",
    "handoff_mean_us",
    "utilization",
    "jain_index",
    *COUNTER_COLUMNS,
    "verdict",
]


# small selectors -------------------------------------------------------------------------


def _mask(history: pd.DataFrame, op: str, type_: str) -> np.ndarray:
    return ((history["op"] == op) & (history["type"] == type_)).to_numpy(dtype=bool)


def _timeout_mask(history: pd.DataFrame) -> np.ndarray:
    """Acquire ``fail`` events that are timeouts.

    workloads.harness.recording also writes ``fail`` for BackendUnavailable (nothing applied,
    but not a timeout either) with an error starting with the exception's name.
    """
    fail = _mask(history, "acquire", "fail")
    unavailable = (
        history["error"].fillna("").astype(str).str.startswith("BackendUnavailable").to_numpy(dtype=bool)
    )
    return fail & ~unavailable


def _purchase_mask(history: pd.DataFrame) -> np.ndarray:
    ok = _mask(history, "purchase", "ok")
    value = history["value"].fillna(0).to_numpy(dtype=np.int64)
    return ok & (value > 0)


def _pct(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q)) if len(values) else NAN


# latency ---------------------------------------------------------------------------------


def hist_mean(hist: HdrHistogram) -> float:
    """The histogram's mean, exactly as ``HdrHistogram.get_mean_value`` computes it, in numpy.

    Why: hdrh walks its recorded buckets in Python, about 40 ms for a case's few thousand
    distinct buckets and three histograms per case: a tenth of a second per case spent
    between two load windows. Each count is weighted by the middle of its bucket (HDR's
    "median equivalent value"), from the bucket layout of the counts array.
    """
    total = int(hist.get_total_count())
    if not total:
        return 0.0
    counts = np.ctypeslib.as_array(hist.counts)[: hist.counts_len].astype(np.int64)
    index = np.flatnonzero(counts)
    half, half_magnitude, unit = (
        hist.sub_bucket_half_count,
        hist.sub_bucket_half_count_magnitude,
        hist.unit_magnitude,
    )
    bucket = (index >> half_magnitude) - 1
    sub_bucket = (index & (half - 1)) + half
    first = bucket < 0  # the first bucket's lower half: indexes 0 .. half - 1
    sub_bucket[first] -= half
    bucket[first] = 0
    lowest = sub_bucket << (bucket + unit)
    middle = lowest + ((np.int64(1) << (bucket + unit)) >> 1)
    return float(int(np.dot(counts[index], middle))) / total


def percentiles(hist: HdrHistogram | None) -> dict[str, float]:
    """p50, p90, p99, p999 (99.9th), max, mean (microseconds) and count of one histogram.

    An empty or missing histogram gives NaN for every figure and a count of 0, so a
    table shows "no data" rather than a fake 0 us.
    """
    count = int(hist.get_total_count()) if hist is not None else 0
    if not count:
        return {"p50": NAN, "p90": NAN, "p99": NAN, "p999": NAN, "max": NAN, "mean": NAN, "count": 0}
    return {
        "p50": float(hist.get_value_at_percentile(50)),
        "p90": float(hist.get_value_at_percentile(90)),
        "p99": float(hist.get_value_at_percentile(99)),
        "p999": float(hist.get_value_at_percentile(99.9)),
        "max": float(hist.get_max_value()),
        "mean": hist_mean(hist),
        "count": count,
    }


def _release_ok_times(history: pd.DataFrame) -> pd.DataFrame:
    rel = history.loc[_mask(history, "release", "ok"), ["client", "seq", "t_ns"]]
    return rel.rename(columns={"seq": "release_seq", "t_ns": "release_ok_ns"}).drop_duplicates(
        ["client", "release_seq"]
    )


def handoff_gaps_us(history: pd.DataFrame) -> np.ndarray:
    """Per lock, the time from one holder's ``release ok`` to the next holder's ``acquire ok``, in us.

    Holds are taken in order of start; only outermost holds count (a reentrant inner
    release hands nothing over). A gap is skipped when the release had no ``ok`` (unknown
    or killed) or when it is negative (the next holder got in before the release
    returned: an overlap, which the checkers count).
    """
    h = holds(history)
    if h.empty:
        return np.zeros(0, dtype=np.float64)
    h = h[h["depth"] == 1].copy()
    h["release_seq"] = h["release_seq"].astype("Int64")
    rel = _release_ok_times(history)
    rel["release_seq"] = rel["release_seq"].astype("Int64")
    rel["client"] = rel["client"].astype("string")
    h = h.merge(rel, on=["client", "release_seq"], how="left")
    h = h.sort_values(["lock", "start_ns"], kind="stable")
    prev_release = h.groupby("lock", sort=False)["release_ok_ns"].shift(1)
    gap = h["start_ns"].astype("float64") - prev_release.astype("float64")
    gap = gap.to_numpy(dtype=np.float64, na_value=np.nan)
    gap = gap[~np.isnan(gap) & (gap >= 0)]
    return gap / 1000.0


def utilization(history: pd.DataFrame, start_ns: int, end_ns: int) -> float:
    """Fraction of [start_ns, end_ns) during which the lock was held, averaged over locks.

    Per lock, the union of hold intervals (overlaps counted once) clipped to the window.
    Locks that were tried but never held count as 0. NaN for an empty window or no lock.
    """
    window = end_ns - start_ns
    if history is None or history.empty or window <= 0:
        return NAN
    locks = pd.unique(history.loc[(history["op"] == "acquire").to_numpy(dtype=bool), "lock"])
    if len(locks) == 0:
        return NAN
    h = holds(history)
    s = h["start_ns"].to_numpy(dtype=np.int64).clip(start_ns, end_ns)
    e = h["end_ns"].to_numpy(dtype=np.int64).clip(start_ns, end_ns)
    keep = e > s
    if not keep.any():
        return 0.0
    d = pd.DataFrame({"lock": h["lock"].to_numpy(dtype=object)[keep], "s": s[keep], "e": e[keep]})
    d = d.sort_values(["lock", "s"], kind="stable")
    # union length: each interval adds what sticks out beyond the furthest end before it
    reach = d.groupby("lock", sort=False)["e"].cummax()
    prev_reach = reach.groupby(d["lock"], sort=False).shift(1).fillna(np.iinfo(np.int64).min)
    covered = (d["e"] - np.maximum(d["s"], prev_reach)).clip(lower=0)
    per_lock = covered.groupby(d["lock"], sort=False).sum()
    total = float(per_lock.sum())
    return total / (window * len(locks))


def fairness(history: pd.DataFrame) -> dict[str, Any]:
    """Acquisitions per client and Jain's index over them ((sum x)^2 / (n sum x^2)).

    Every client that tried to acquire counts, including the ones that never got the
    lock: starvation is exactly what the index should show. 1.0 is perfectly fair,
    1/n is one client taking everything.
    """
    if history is None or history.empty:
        return {"jain_index": NAN, "min": 0, "max": 0, "clients": 0, "per_client": {}}
    tried = history.loc[(history["op"] == "acquire").to_numpy(dtype=bool), "client"]
    got = history.loc[_mask(history, "acquire", "ok"), "client"]
    counts = got.value_counts().reindex(pd.unique(tried), fill_value=0)
    x = counts.to_numpy(dtype=np.float64)
    if len(x) == 0:
        return {"jain_index": NAN, "min": 0, "max": 0, "clients": 0, "per_client": {}}
    sq = float((x**2).sum())
    jain = float(x.sum() ** 2 / (len(x) * sq)) if sq else NAN
    return {
        "jain_index": jain,
        "min": int(x.min()),
        "max": int(x.max()),
        "clients": len(x),
        "per_client": {str(k): int(v) for k, v in counts.items()},
    }


# over time -------------------------------------------------------------------------------


def steady_window(history: pd.DataFrame) -> tuple[int, int]:
    """The part of the run where every client was running: (start_ns, end_ns).

    Start is when the last client issued its first operation (ramp-up done), but never
    later than the middle of the history, so a client that joins late (a replacement
    after a kill fault) cannot shrink the window to nothing. End is the last event:
    Locust stops all users at once, so there is no ramp-down to cut. A loop's stall marks
    (client ``loop:<pid>``) are no client: the first of them came whenever the loop first
    stalled, and started the window there (half a group's case lost that way, 2026-12-07).
    """
    if history is None or history.empty:
        return (0, 0)
    t = history["t_ns"]
    lo, hi = int(t.min()), int(t.max())
    clients = history[~history["client"].astype(str).str.startswith(STALL_CLIENT_PREFIX).to_numpy(dtype=bool)]
    if clients.empty:
        clients = history
    first_per_client = int(clients.groupby("client")["t_ns"].min().max())
    start = min(first_per_client, lo + (hi - lo) // 2)
    return (start, hi)


# one row ---------------------------------------------------------------------------------


def case_row(
    case_id: str,
    impl: str,
    workload: str,
    params: dict[str, Any],
    history: pd.DataFrame,
    histograms: dict[str, HdrHistogram],
    verdict: Verdict,
    window: tuple[int, int],
) -> dict[str, Any]:
    """One row of ``cases.csv``: every key of :data:`CASE_COLUMNS`, plus any extra verdict counter.

    Counts (acquisitions, purchases, ...) are over the whole history; throughputs are
    counts inside ``window`` divided by its length, which is ``duration_s``. Latencies
    come from the histograms, handoff gaps and fairness from the whole history,
    utilization from the window. Missing figures are NaN.
    """
    start_ns, end_ns = int(window[0]), int(window[1])
    duration_s = (end_ns - start_ns) / 1e9
    empty = history is None or history.empty
    if empty:
        history = pd.DataFrame(
            columns=["client", "seq", "op", "type", "lock", "t_ns", "token", "value", "error"]
        )
    t = history["t_ns"].to_numpy(dtype=np.int64)
    in_window = (t >= start_ns) & (t <= end_ns)

    acq_ok = _mask(history, "acquire", "ok")
    bought = _purchase_mask(history)
    purchase_ok = _mask(history, "purchase", "ok")
    rel_ok = _mask(history, "release", "ok")
    value = history["value"].fillna(-1).to_numpy(dtype=np.int64)

    def rate(mask: np.ndarray) -> float:
        return float((mask & in_window).sum()) / duration_s if duration_s > 0 else NAN

    acq = percentiles(histograms.get("acquire_ok"))
    rel = percentiles(histograms.get("release"))
    hold = percentiles(histograms.get("hold"))
    gaps = handoff_gaps_us(history) if not empty else np.zeros(0)

    row: dict[str, Any] = {
        "case": case_id,
        "impl": impl,
        "backend": impl.split(".", 1)[0],
        "workload": workload,
        "trial": int(params.get("trial", 0)),
        "users": params.get("users"),
        "processes": params.get("processes"),
        "duration_s": duration_s,
        "acquisitions": int(acq_ok.sum()),
        "acquire_timeouts": int(_timeout_mask(history).sum()) if not empty else 0,
        "acquire_unknown": int(_mask(history, "acquire", "info").sum()),
        "releases_not_owned": int((rel_ok & (value == 0)).sum()),
        "purchases": int(bought.sum()),
        "units_sold": int(np.where(purchase_ok & (value > 0), value, 0).sum()),
        "throughput_acq_s": rate(acq_ok),
        "throughput_ops_s": rate(bought),
        "acquire_p50_us": acq["p50"],
        "acquire_p90_us": acq["p90"],
        "acquire_p99_us": acq["p99"],
        "acquire_p999_us": acq["p999"],
        "acquire_max_us": acq["max"],
        "release_p50_us": rel["p50"],
        "release_p99_us": rel["p99"],
        "hold_p50_us": hold["p50"],
        "hold_p99_us": hold["p99"],
        "handoff_p50_us": _pct(gaps, 50),
        "handoff_p99_us": _pct(gaps, 99),
        # means, for the model of independent clients (a rate is a mean: fidelity.model_rate)
        "hold_mean_us": hold["mean"],
        "handoff_mean_us": float(gaps.mean()) if len(gaps) else NAN,
        "utilization": utilization(history, start_ns, end_ns) if not empty else NAN,
        "jain_index": fairness(history)["jain_index"] if not empty else NAN,
    }
    for name in COUNTER_COLUMNS:
        row[name] = verdict.counters.get(name, NAN)
    for name, v in verdict.counters.items():
        if name not in row:
            row[name] = v
    row["verdict"] = verdict.status
    return row
