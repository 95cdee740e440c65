"""A matrix report draws the same figures faster (issue 42 item 5): each cut pinned to what it replaced.

The spectrum's points no longer come from hdrh's percentile iterator (every count visited in
Python) but from a walk over the non-zero counts: the points must be the iterator's, exactly,
on every shape of distribution. Counted: iterator steps avoided, never seconds.
"""

from __future__ import annotations

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from dashboards.charts import _percentile_walk, spectrum_points


def _iterator_points(hist: HdrHistogram, ticks: int = 5) -> list[tuple[float, float]]:
    return [
        (float(i.percentile_level_iterated_to), float(hist.get_highest_equivalent_value(i.value_iterated_to)))
        for i in hist.get_percentile_iterator(ticks)
    ]


def _histogram(values: np.ndarray) -> HdrHistogram:
    hist = HdrHistogram(1, 3_600_000_000, 3)
    for v in values:
        hist.record_value(max(1, int(v)))
    return hist


SHAPES = {
    "one value": lambda rng: np.full(50, 130),
    "two values": lambda rng: np.array([100] * 99 + [5_000_000]),
    "lognormal": lambda rng: rng.lognormal(6.0, 1.2, 20_000),
    "bimodal with a long tail": lambda rng: np.concatenate(
        [rng.normal(200, 20, 5_000), rng.normal(90_000, 5_000, 500), rng.pareto(1.1, 50) * 1e6]
    ),
    "uniform wide": lambda rng: rng.uniform(1, 3_000_000_000, 3_000),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("ticks", [1, 5])
def test_the_walk_gives_the_iterators_points_exactly(shape: str, ticks: int) -> None:
    hist = _histogram(np.abs(SHAPES[shape](np.random.default_rng(7))))
    walked = _percentile_walk(hist, ticks)
    assert walked == _iterator_points(hist, ticks)
    assert walked[-1][0] == 100.0 and walked[-1][1] == float(
        hist.get_highest_equivalent_value(hist.get_max_value())
    )
    assert [p for _, _, p in spectrum_points(hist, ticks)] == [p for p, _ in walked]


def test_a_decoded_histogram_walks_like_the_one_recorded() -> None:
    """Reports read histograms from hist/*.json: the decoded counts array is what the walk reads."""
    hist = _histogram(np.random.default_rng(3).lognormal(7.0, 1.0, 5_000))
    decoded = HdrHistogram.decode(hist.encode())
    assert _percentile_walk(decoded, 5) == _iterator_points(hist, 5) == _iterator_points(decoded, 5)
    assert _percentile_walk(HdrHistogram(1, 3_600_000_000, 3), 5) == []
