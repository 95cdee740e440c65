"""Per-case metrics on hand-made histories whose figures are worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hdrh.histogram import HdrHistogram

from bench.measure.analysis import (
    CASE_COLUMNS,
    case_row,
    fairness,
    handoff_gaps_us,
    hist_mean,
    percentiles,
    steady_window,
    utilization,
)
from workloads.checks.core import check_flash_sale
from workloads.harness.recording import HISTORY_COLUMNS, history_frame

S = 1_000_000_000  # one second in ns


def history(*events: tuple) -> pd.DataFrame:
    """Events as (client, seq, op, type, lock, t_ns[, token[, value[, error]]]) -> a history frame."""
    return history_frame(tuple(e) + (None,) * (len(HISTORY_COLUMNS) - len(e)) for e in events)


def pair(
    client: str,
    seq: int,
    lock: str,
    invoke: int,
    ok: int,
    rel: int | None,
    rel_ok: int | None = None,
    owned: int = 1,
) -> list[tuple]:
    """An acquire invoke/ok and, when ``rel`` is given, its release invoke (and ok at ``rel_ok``)."""
    ev = [(client, seq, "acquire", "invoke", lock, invoke), (client, seq, "acquire", "ok", lock, ok)]
    if rel is not None:
        ev.append((client, seq + 1, "release", "invoke", lock, rel))
        if rel_ok is not None:
            ev.append((client, seq + 1, "release", "ok", lock, rel_ok, None, owned))
    return ev


def hist(*values_us: int) -> HdrHistogram:
    h = HdrHistogram(1, 3_600_000_000, 3)
    for v in values_us:
        h.record_value(v)
    return h


# percentiles -------------------------------------------------------------------------------


def test_percentiles_of_a_known_histogram() -> None:
    p = percentiles(hist(*range(1, 1001)))
    assert p["count"] == 1000
    assert p["p50"] == pytest.approx(500, rel=1e-3)
    assert p["p90"] == pytest.approx(900, rel=1e-3)
    assert p["p99"] == pytest.approx(990, rel=1e-3)
    assert p["p999"] == pytest.approx(999, rel=1e-3)
    assert p["max"] == pytest.approx(1000, rel=1e-3)
    assert p["mean"] == pytest.approx(500.5, rel=1e-3)


def test_percentiles_of_empty_histogram_are_nan() -> None:
    for p in (percentiles(hist()), percentiles(None)):
        assert p["count"] == 0
        assert all(math.isnan(p[k]) for k in ("p50", "p90", "p99", "p999", "max", "mean"))


# handoff -----------------------------------------------------------------------------------


def test_handoff_gaps_from_release_ok_to_next_acquire_ok() -> None:
    ev = history(
        *pair("a", 0, "L", 900, 1_000, 5_000, 6_000),
        *pair("b", 0, "L", 1_100, 9_000, 12_000),  # release never answered: no gap after it
        *pair("c", 0, "L", 9_500, 20_000, 21_000, 22_000),
        *pair("d", 0, "L", 9_600, 21_500, 30_000, 30_100),  # got in before c's release returned
        *pair("e", 0, "M", 50, 100, 200, 300),
        *pair("f", 0, "M", 250, 1_300, 1_400, 1_500),
        *pair("e", 2, "M", 1_450, 4_500, 4_600, 4_700),  # same client again still hands off
    )
    assert sorted(handoff_gaps_us(ev).tolist()) == pytest.approx([1.0, 3.0, 3.0])


def test_handoff_ignores_reentrant_inner_release() -> None:
    ev = history(
        ("a", 0, "acquire", "ok", "L", 1_000),
        ("a", 1, "acquire", "ok", "L", 2_000),
        ("a", 2, "release", "invoke", "L", 3_000),
        ("a", 2, "release", "ok", "L", 3_100, None, 1),
        ("a", 3, "release", "invoke", "L", 8_000),
        ("a", 3, "release", "ok", "L", 8_500, None, 1),
        ("b", 0, "acquire", "ok", "L", 10_500),
    )
    assert handoff_gaps_us(ev).tolist() == pytest.approx([2.0])


def test_handoff_of_empty_history() -> None:
    assert len(handoff_gaps_us(history())) == 0


# utilization -------------------------------------------------------------------------------


def test_utilization_union_of_holds_clipped_to_window_mean_over_locks() -> None:
    ev = history(
        *pair("a", 0, "L", 90, 100, 300),
        *pair("b", 0, "L", 150, 200, 400),  # overlaps a: the union counts once
        *pair("c", 0, "L", 850, 900, 1_200),  # clipped at 1000
        *pair("d", 0, "M", -150, -100, 100),  # clipped at 0
        ("e", 0, "acquire", "invoke", "N", 10),  # tried, never held
        ("e", 0, "acquire", "fail", "N", 990, None, None, "timeout"),
    )
    # L: 300 + 100 of 1000, M: 100 of 1000, N: 0  -> mean of 0.4, 0.1, 0
    assert utilization(ev, 0, 1_000) == pytest.approx(0.5 / 3)
    assert utilization(ev, 100, 300) == pytest.approx((1.0 + 0.0 + 0.0) / 3)


def test_utilization_counts_an_open_hold_to_the_end() -> None:
    ev = history(*pair("a", 0, "L", 0, 500, None), ("b", 0, "acquire", "invoke", "L", 1_000))
    assert utilization(ev, 0, 1_000) == pytest.approx(0.5)


def test_utilization_of_empty_window_is_nan() -> None:
    assert math.isnan(utilization(history(*pair("a", 0, "L", 0, 1, 2)), 10, 10))


# fairness ----------------------------------------------------------------------------------


def test_jain_index_of_equal_counts_is_one() -> None:
    ev = history(*pair("a", 0, "L", 0, 1, 2), *pair("b", 0, "L", 3, 4, 5), *pair("c", 0, "L", 6, 7, 8))
    f = fairness(ev)
    assert f["jain_index"] == pytest.approx(1.0)
    assert (f["min"], f["max"], f["clients"]) == (1, 1, 3)


def test_jain_index_of_one_client_taking_all_is_one_over_n() -> None:
    starving = [
        e
        for c in ("b", "c", "d")
        for e in [
            (c, 0, "acquire", "invoke", "L", 1),
            (c, 0, "acquire", "fail", "L", 9, None, None, "timeout"),
        ]
    ]
    f = fairness(history(*pair("a", 0, "L", 0, 1, 2), *starving))
    assert f["jain_index"] == pytest.approx(0.25)
    assert (f["min"], f["max"]) == (0, 1)
    assert f["per_client"] == {"a": 1, "b": 0, "c": 0, "d": 0}


# window and row ----------------------------------------------------------------------------


def test_steady_window_starts_when_every_client_has_started() -> None:
    ev = history(
        *pair("a", 0, "L", 100, 150, 300), *pair("b", 0, "L", 500, 600, 700), ("a", 2, "x", "ok", "L", 2_000)
    )
    assert steady_window(ev) == (500, 2_000)


def test_steady_window_start_never_past_the_middle() -> None:
    ev = history(
        *pair("a", 0, "L", 0, 10, 20), ("a", 2, "x", "ok", "L", 1_000), *pair("late", 0, "L", 900, 950, 990)
    )
    assert steady_window(ev) == (500, 1_000)


def _sale_history() -> pd.DataFrame:
    return history(
        *pair("1-u0", 0, "item-1", 0, 100_000, 300_000, 310_000),
        ("1-u0", 2, "witness", "ok", "item-1", 120_000, None, 1),
        ("1-u0", 3, "purchase", "ok", "item-1", 200_000, None, 3),
        *pair("1-u1", 0, "item-1", 50_000, 400_000, 600_000, 610_000, owned=0),
        ("1-u1", 2, "witness", "ok", "item-1", 420_000, None, 1),
        ("1-u1", 3, "purchase", "ok", "item-1", 500_000, None, 0),
        ("1-u2", 0, "acquire", "invoke", "item-1", 60_000),
        ("1-u2", 0, "acquire", "fail", "item-1", 900_000, None, None, "timed out"),
        ("1-u3", 0, "acquire", "invoke", "item-1", 70_000),
        ("1-u3", 0, "acquire", "info", "item-1", 950_000, None, None, "LockOutcomeUnknown: lost"),
        ("1-u0", 4, "purchase", "ok", "item-1", 1_000_000, None, 1),  # after the window used below
    )


def test_case_row_has_every_column_and_right_figures() -> None:
    ev = _sale_history()
    final = {"items": {"item-1": {"initial": 10, "stock": 6, "orders_units": 4, "orders_count": 2}}}
    verdict = check_flash_sale(ev, final)
    hists = {"acquire_ok": hist(100, 350), "release": hist(10, 10), "hold": hist(200, 200), "cs": hist(50)}
    row = case_row(
        "c1",
        "redis.set-nx-px-lua",
        "flash-sale",
        {"users": 4, "processes": 1},
        ev,
        hists,
        verdict,
        (0, 500_000),
    )
    assert set(CASE_COLUMNS) <= set(row)
    assert list(row)[: len(CASE_COLUMNS) - 1] == CASE_COLUMNS[:-1]
    assert list(row)[-1] == "verdict"
    assert row["backend"] == "redis"
    assert row["trial"] == 0
    assert (row["users"], row["processes"]) == (4, 1)
    assert row["duration_s"] == pytest.approx(0.0005)
    assert row["acquisitions"] == 2
    assert row["acquire_timeouts"] == 1
    assert row["acquire_unknown"] == 1
    assert row["releases_not_owned"] == 1
    assert row["purchases"] == 2
    assert row["units_sold"] == 4
    assert row["throughput_acq_s"] == pytest.approx(2 / 0.0005)  # both acquire ok inside the window
    assert row["throughput_ops_s"] == pytest.approx(1 / 0.0005)  # the 1-unit purchase is after it
    assert row["acquire_p50_us"] == pytest.approx(100, rel=1e-3)
    assert row["acquire_max_us"] == pytest.approx(350, rel=1e-3)
    assert row["release_p99_us"] == pytest.approx(10, rel=1e-3)
    assert row["hold_p50_us"] == pytest.approx(200, rel=1e-3)
    assert row["handoff_p50_us"] == pytest.approx(90.0)  # 310_000 -> 400_000
    assert row["utilization"] == pytest.approx((200_000 + 100_000) / 500_000)
    assert row["jain_index"] == pytest.approx(4 / (4 * 2))
    assert row["overlapping_holds"] == 0 and row["witness_violations"] == 0
    assert row["oversold_units"] == 0 and row["lost_updates"] == 0 and row["acquire_info"] == 1
    # 1-u1's release found its lock gone (owned=0) while it held it: a lost lock, no overlap needed
    assert row["locks_lost"] == 1 and row["locks_lost_in_lease"] == 1
    assert row["verdict"] == "invalid"


def test_case_row_trial_and_invalid_verdict() -> None:
    ev = _sale_history()
    final = {"items": {"item-1": {"initial": 3, "stock": 0, "orders_units": 4, "orders_count": 2}}}
    verdict = check_flash_sale(ev, final)
    row = case_row("c2", "file.flock", "flash-sale", {"trial": 2}, ev, {}, verdict, steady_window(ev))
    assert row["trial"] == 2 and row["backend"] == "file"
    assert row["oversold_units"] == 1
    assert row["verdict"] == "invalid"
    assert math.isnan(row["acquire_p50_us"])  # no histogram given


def test_case_row_of_empty_history() -> None:
    verdict = check_flash_sale(history(), None)
    row = case_row("c3", "redis.setnx-del", "flash-sale", {}, history(), {}, verdict, (0, 0))
    assert set(CASE_COLUMNS) <= set(row)
    assert row["acquisitions"] == 0 and row["verdict"] == "unknown"
    assert np.isnan(row["throughput_acq_s"])


@pytest.mark.parametrize(
    ("highest", "digits", "values"),
    [
        (60_000_000, 3, [int(v) + 1 for v in np.random.default_rng(7).lognormal(7, 2.5, 20_000)]),
        (3_600_000_000, 3, [0, 1, 2, 1023, 1024, 2047, 2048, 3_600_000_000]),
        (10_000, 2, [int(v) for v in np.random.default_rng(8).integers(0, 10_000, 5_000)]),
        (60_000_000, 3, [42]),
    ],
)
def test_hist_mean_is_hdrh_s_own_mean(highest: int, digits: int, values: list[int]) -> None:
    hist = HdrHistogram(1, highest, digits)
    for value in values:
        hist.record_value(min(value, highest))
    # the same integer sum of the same bucket middles: equal, not merely close
    assert hist_mean(hist) == hist.get_mean_value() and hist_mean(hist) > 0
    assert hist_mean(HdrHistogram(1, highest, digits)) == 0.0
