"""A matrix report draws the same figures faster (issue 42 item 5): each cut pinned to what it replaced.

The spectrum's points no longer come from hdrh's percentile iterator (every count visited in
Python) but from a walk over the non-zero counts: the points must be the iterator's, exactly,
on every shape of distribution. Counted: iterator steps avoided, never seconds.
"""

from __future__ import annotations

from pathlib import Path

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


def test_a_matrix_over_time_chart_draws_one_line_per_backend_and_scenario_the_locks_behind_a_click(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above SUMMARY_ABOVE lines: the median over the locks per backend x scenario, each lock's lines hidden, kept."""
    import dashboards.charts as charts
    from dashboards.report import render_report
    from tests.test_report import _over_time, make_fault_run

    cases = [
        {"impl": impl, "scenario": s, "trial": 1, "verdict": "valid"}
        for impl in ("redis.set-nx-px-lua", "redis.setnx-del")
        for s in ("long-cs+unfenced", "long-cs+fenced")
    ]
    detail_page = render_report([make_fault_run(tmp_path / "a", cases)]).read_text(encoding="utf-8")
    detail, _ = _over_time(detail_page)
    assert len(detail) == 4 * 3 and all("visible" not in t for t in detail)  # few lines: as before

    monkeypatch.setattr(charts, "SUMMARY_ABOVE", 2)
    page = render_report([make_fault_run(tmp_path / "b", cases)]).read_text(encoding="utf-8")
    data, layout = _over_time(page)
    shown = [t for t in data if t.get("visible", True) is True and t["name"] != "SLO"]
    hidden = [t for t in data if t.get("visible") == "legendonly"]
    assert sorted(t["name"] for t in shown if t.get("showlegend", True)) == [
        "redis · long-cs+fenced",
        "redis · long-cs+unfenced",
    ]
    # behind the click: the same lines, value for value, as the chart without a summary draws
    assert [(t["name"], t["y"]) for t in hidden] == [(t["name"], t["y"]) for t in detail]
    assert all(s.get("visible") == "legendonly" for s in layout.get("shapes", []))
    # the summary line is, per second, the median of its locks' lines
    by_name = {t["name"]: t for t in detail}
    summary = next(t for t in shown if t["name"] == "redis · long-cs+fenced acq/s")
    locks = [
        by_name[f"{impl} · long-cs+fenced acq/s"]["y"] for impl in ("redis.set-nx-px-lua", "redis.setnx-del")
    ]
    n = min(len(y) for y in locks)
    assert summary["y"][:n] == [float(np.median([y[i] for y in locks])) for i in range(n)]
