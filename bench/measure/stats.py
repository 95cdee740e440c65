"""Mann-Whitney U (exact for small samples, normal approximation beyond) and Holm's correction.

The gate compares per-trial figures of two runs: a handful of numbers per side, often with
ties (HDR percentiles have 3 significant digits). So the exact test is the conditional
permutation distribution of the rank sum given the observed (mid)ranks, computed by
dynamic programming; it is exact with or without ties. Large samples use the normal
approximation with the tie correction and a continuity correction (as scipy does).
No scipy: this is ~100 lines and the tests pin it to published values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Alternative = Literal["greater", "less", "two-sided"]

#: Samples up to this many values in total get the exact distribution.
EXACT_MAX_N = 50


@dataclass(frozen=True)
class MWUResult:
    """U of the first sample (pairs where x > y, ties counting 1/2), its p-value and how it was got."""

    u: float
    p: float
    method: Literal["exact", "normal"]


def midranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n, ties sharing the mean of their ranks."""
    a = np.asarray(values, dtype=np.float64)
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(len(a), dtype=np.float64)
    sorted_a = a[order]
    i = 0
    while i < len(a):
        j = i
        while j + 1 < len(a) and sorted_a[j + 1] == sorted_a[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def _rank_sum_distribution(doubled: np.ndarray, n1: int) -> np.ndarray:
    """counts[s] = number of ways n1 of the (doubled, integer) ranks sum to s."""
    top = int(np.sort(doubled)[-n1:].sum()) if n1 else 0
    dp = np.zeros((n1 + 1, top + 1), dtype=np.float64)
    dp[0, 0] = 1.0
    for r in doubled.astype(np.int64):
        if r > top:
            continue
        # 0/1 knapsack: the right side is evaluated from the old table before assignment
        dp[1:, r:] = dp[1:, r:] + dp[:-1, : top + 1 - r]
    return dp[n1]


def _normal_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2))


def mann_whitney_u(
    x: Sequence[float],
    y: Sequence[float],
    alternative: Alternative = "two-sided",
    method: Literal["auto", "exact", "normal"] = "auto",
) -> MWUResult:
    """Test whether x tends to be larger ("greater"), smaller ("less") or either than y.

    Raises ValueError when a sample is empty.
    """
    x = [float(v) for v in x]
    y = [float(v) for v in y]
    n1, n2 = len(x), len(y)
    if not n1 or not n2:
        raise ValueError("both samples need at least one value")
    ranks = midranks(x + y)
    r1 = float(ranks[:n1].sum())
    u = r1 - n1 * (n1 + 1) / 2
    n = n1 + n2
    if method == "exact" or (method == "auto" and n <= EXACT_MAX_N):
        doubled = np.rint(ranks * 2)
        counts = _rank_sum_distribution(doubled, n1)
        total = counts.sum()
        observed = int(round(r1 * 2))
        sums = np.arange(len(counts))
        p_greater = float(counts[sums >= observed].sum() / total)
        p_less = float(counts[sums <= observed].sum() / total)
        used: Literal["exact", "normal"] = "exact"
    else:
        mu = n1 * n2 / 2
        _, tie_counts = np.unique(ranks, return_counts=True)
        tie_term = float((tie_counts**3 - tie_counts).sum()) / (n * (n - 1)) if n > 1 else 0.0
        var = n1 * n2 / 12 * ((n + 1) - tie_term)
        if var <= 0:
            p_greater = p_less = 1.0
        else:
            sd = math.sqrt(var)
            p_greater = _normal_sf((u - mu - 0.5) / sd)
            p_less = 1 - _normal_sf((u - mu + 0.5) / sd)
        used = "normal"
    if alternative == "greater":
        p = p_greater
    elif alternative == "less":
        p = p_less
    else:
        p = 2 * min(p_greater, p_less)
    return MWUResult(u=u, p=min(1.0, max(0.0, p)), method=used)


def min_p_value(n1: int, n2: int) -> float:
    """The smallest one-sided p-value any data of these sizes can give (complete separation).

    When it exceeds alpha, no amount of difference can be significant: not enough trials.
    """
    if n1 < 1 or n2 < 1:
        return 1.0
    x = [float(i) for i in range(n2, n2 + n1)]
    return mann_whitney_u(x, list(range(n2)), "greater").p


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-Bonferroni adjusted p-values (family-wise error rate), in the input's order."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted
