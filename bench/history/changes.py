"""Change points of one series: E-divisive means as Apache Otava implements it, with its settings.

Otava (formerly DataStax Hunter; Fleming et al., ICPE 2023) runs E-divisive means (Matteson
and James 2014) over sliding windows, then keeps a split only when a Student's t-test between
the neighbouring segments gives a p-value under ``max_pvalue`` *and* the step is larger than
``min_magnitude`` (relative). No statistics are computed here: this module chooses the
settings and turns Otava's change points into plain values.

The settings and the measurement behind them (docs/guide.md, "Performance history"):
five runs of ``bench run --impl redis.set-nx-px-lua --duration 3`` back to back on the
development machine (2 cores, load average 1.2-1.8) gave a run-to-run throughput CV of
5.4% (acquire p50 22%, p99 17%, handoff p50 13%, hold inflation 3.3%). At 5.4% noise, on
300 generated 40-run series, these settings find a 10% step in the middle within one run
of its place 80% of the time (the best any split can do there: least squares places it
within one run 83% of the time), and put a change point in 3.3% of A/A series.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

#: Otava's default: a split needs p < 0.001 between its neighbouring segments. At 0.005 a
#: change point appeared in 15% of 40-run A/A series at the measured noise; at 0.001, 3.3%.
MAX_PVALUE = 0.001
#: Steps smaller than one run's own noise (5.4% for throughput here) are not drawn.
MIN_MAGNITUDE = 0.05
#: Otava's default window (runs per E-divisive pass); longer series are scanned window by window.
WINDOW = 50
#: Below this many runs a series is "not enough data" for ``--check``: at the measured noise
#: a 10% step in the middle of 20 runs is found 79% of the time, of 16 runs 63%, of 10 runs 25%.
MIN_RUNS = 20
#: The run-to-run noise measured here (coefficient of variation of single-trial runs, 5 runs).
MEASURED_NOISE_CV = {
    "throughput": 0.054,
    "acquire.p50": 0.223,
    "acquire.p99": 0.168,
    "handoff.p50": 0.127,
    "hold-inflation": 0.033,
}


@dataclass(frozen=True)
class ChangePoint:
    """A step in a series: the first index of the new level, the means on either side, its size.

    Why not Otava's own object: the page and the check need plain numbers (JSON), and the
    index must refer to the series as given, missing values included.
    """

    index: int  # first point after the change, in the series as given
    before: float  # mean of the segment before (back to the previous change point)
    after: float  # mean of the segment after (up to the next change point)
    step: float  # after / before - 1
    pvalue: float


def change_points(
    values: Sequence[float | None],
    max_pvalue: float = MAX_PVALUE,
    min_magnitude: float = MIN_MAGNITUDE,
    window: int = WINDOW,
) -> list[ChangePoint]:
    """Otava's change points of ``values`` (None / NaN skipped), in order; [] for under 4 values."""
    from otava.analysis import compute_change_points

    kept = [(i, float(v)) for i, v in enumerate(values) if v is not None and math.isfinite(float(v))]
    if len(kept) < 4:
        return []
    series = [v for _, v in kept]
    if max(series) == min(series):
        return []  # a constant series has no step, and the t-test would divide by zero
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # segments of equal values: t-test of zero spread
        found, _ = compute_change_points(
            series, window_len=window, max_pvalue=max_pvalue, min_magnitude=min_magnitude
        )
    out = []
    for cp in found:
        stats = cp.stats
        before, after = float(stats.mean_1), float(stats.mean_2)
        step = after / before - 1.0 if before else (0.0 if after == before else math.inf)
        out.append(ChangePoint(kept[int(cp.index)][0], before, after, step, float(stats.pvalue)))
    return out
