"""bench.measure.stats against published values: scipy's documented example, exact tables, Holm's method."""

from __future__ import annotations

import itertools
import random

import pytest

from bench.measure.stats import holm, mann_whitney_u, midranks, min_p_value

# scipy.stats.mannwhitneyu documentation example (Conover's "males vs females" ages).
MALES = [19, 22, 16, 29, 24]
FEMALES = [20, 11, 17, 12]


def test_scipy_documented_example_exact_and_normal() -> None:
    exact = mann_whitney_u(MALES, FEMALES, "two-sided")
    assert exact.u == 17 and exact.method == "exact"
    assert exact.p == pytest.approx(0.1111111111111111, abs=1e-12)  # scipy: method="exact"
    normal = mann_whitney_u(MALES, FEMALES, "two-sided", method="normal")
    assert normal.p == pytest.approx(0.11134688653314041, abs=1e-12)  # scipy: method="asymptotic"
    assert mann_whitney_u(MALES, FEMALES, "greater").p == pytest.approx(7 / 126)


def test_exact_table_for_five_against_five() -> None:
    """n1 = n2 = 5: P(U <= 4) = 12/252 and P(U <= 5) = 19/252 (Mann & Whitney 1947, table I)."""
    low = list(range(1, 11))

    def split_with_u(u: int) -> tuple[list[int], list[int]]:
        for x in itertools.combinations(low, 5):
            y = [v for v in low if v not in x]
            if sum(1 for a in x for b in y if a > b) == u:
                return list(x), y
        raise AssertionError(u)

    x4, y4 = split_with_u(4)
    x5, y5 = split_with_u(5)
    assert mann_whitney_u(x4, y4, "less").p == pytest.approx(12 / 252)
    assert mann_whitney_u(x5, y5, "less").p == pytest.approx(19 / 252)
    assert mann_whitney_u([6, 7, 8, 9, 10], [1, 2, 3, 4, 5], "greater").p == pytest.approx(1 / 252)


def test_exact_with_ties_matches_brute_force_permutation() -> None:
    x, y = [3, 3, 5, 7, 7], [1, 3, 3, 4, 7, 8]
    pooled = x + y
    ranks = midranks(pooled)
    observed = sum(ranks[: len(x)])
    sums = [sum(ranks[i] for i in idx) for idx in itertools.combinations(range(len(pooled)), len(x))]
    expected = sum(1 for s in sums if s >= observed - 1e-9) / len(sums)
    assert mann_whitney_u(x, y, "greater").p == pytest.approx(expected)


def test_midranks_share_ties() -> None:
    assert list(midranks([10, 20, 20, 30])) == [1.0, 2.5, 2.5, 4.0]


def test_identical_samples_are_never_significant() -> None:
    assert mann_whitney_u([5, 5, 5], [5, 5, 5], "greater").p == 1.0
    assert mann_whitney_u([1, 2, 3], [1, 2, 3], "less").p > 0.5


def test_normal_approximation_agrees_with_exact_for_larger_samples() -> None:
    rng = random.Random(7)
    x = [rng.gauss(0.3, 1) for _ in range(20)]
    y = [rng.gauss(0, 1) for _ in range(20)]
    exact = mann_whitney_u(x, y, "greater", method="exact").p
    normal = mann_whitney_u(x, y, "greater", method="normal").p
    assert normal == pytest.approx(exact, abs=0.01)
    assert mann_whitney_u(x * 2, y * 2, "greater").method == "normal"  # 80 values: beyond exact


def test_smallest_reachable_p_value() -> None:
    assert min_p_value(3, 3) == pytest.approx(1 / 20)
    assert min_p_value(4, 4) == pytest.approx(1 / 70)
    assert min_p_value(5, 5) == pytest.approx(1 / 252)
    assert min_p_value(0, 5) == 1.0


def test_holm_adjustment() -> None:
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 -> 0.06 (monotone)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([]) == []
    assert holm([0.9, 0.8]) == pytest.approx([1.0, 1.0])


def test_empty_sample_is_an_error() -> None:
    with pytest.raises(ValueError):
        mann_whitney_u([], [1.0])
