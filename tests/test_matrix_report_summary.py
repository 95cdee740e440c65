"""A matrix report's over-time chart in summary shows the figures its detail shows (issue 42 item 5).

Above SUMMARY_ABOVE impl x scenario lines, the chart draws one line per backend x scenario and
keeps each lock's own lines behind a click on the legend. These tests hold the outcome, never a
time: every point of a summary line (p50, p99, acquisitions/s) is the median of its locks' points
at that second, as the detail draws them; the detail is the chart drawn without a summary; and the
faster readers behind the chart (numpy columns from the history file, per-trial medians without a
pandas groupby) give what the pandas readers they replaced gave.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import dashboards.charts as charts
from dashboards.load import AcquireRows, EventRows, load_run
from dashboards.report import render_report
from tests.test_report import T0, _over_time, make_fault_run

SEC = 1_000_000_000
IMPLS = ("redis.set-nx-px-lua", "redis.setnx-del", "redis.redlock")
SCENARIOS = ("long-cs+unfenced", "long-cs+fenced")


def acquisitions_per_client(history: pd.DataFrame) -> pd.Series:
    """The pandas oracle: successful acquires per client; clients that tried and never got the lock count 0."""
    tried = pd.unique(history["client"])
    got = history.loc[(history["op"] == "acquire") & (history["type"] == "ok"), "client"]
    return got.value_counts().reindex(tried, fill_value=0)


def _matrix(root: Path) -> Path:
    """Three locks of one backend in two scenarios, two trials of one, each case on its own clock and pace."""
    cases = [
        {"impl": impl, "scenario": s, "trial": t, "verdict": "valid"}
        for impl in IMPLS
        for s in SCENARIOS
        for t in ((1, 2) if impl == "redis.redlock" else (None,))
    ]
    cases[0] |= {"fault_s": (0.5, 1.2), "pauses_s": [(2.0, 2.4)], "crashes_s": [3.1]}
    run = make_fault_run(root, cases)
    # stretch each case's history by its own factor: different latencies, rates and lengths per lock
    for k, path in enumerate(sorted((run / "history").glob("*.parquet"))):
        history = pd.read_parquet(path)
        history["t_ns"] = T0 + ((history["t_ns"] - T0) * (1.0 + 0.37 * k)).astype("int64")
        history.to_parquet(path, index=False)
    return run


def _lines(data: list[dict]) -> dict[str, dict[str, dict]]:
    """{legend group: {"p50" | "p99" | "acq/s": trace}} of the over-time chart's lines."""
    out: dict[str, dict[str, dict]] = {}
    for trace in data:
        if trace.get("name", "").startswith("SLO"):
            continue
        kind = (
            "p99"
            if trace["name"].endswith(" p99")
            else "acq/s"
            if trace["name"].endswith(" acq/s")
            else "p50"
        )
        out.setdefault(trace["legendgroup"], {})[kind] = trace
    return out


def _by_second(trace: dict) -> dict[int, float | None]:
    """Second -> value of a step line (its last point only closes the last step)."""
    return {int(c[0]): y for c, y in zip(trace["customdata"][:-1], trace["y"][:-1], strict=True)}


def test_every_summary_point_is_the_median_of_its_locks_points_as_the_detail_draws_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    detail_page = render_report([_matrix(tmp_path / "a")]).read_text(encoding="utf-8")
    detail = _lines(_over_time(detail_page)[0])
    assert len(detail) == len(IMPLS) * len(SCENARIOS)

    monkeypatch.setattr(charts, "SUMMARY_ABOVE", 2)
    page = render_report([_matrix(tmp_path / "b")]).read_text(encoding="utf-8")
    data, layout = _over_time(page)
    lines = _lines(data)
    summary = {k: v for k, v in lines.items() if v["p50"].get("visible", True) is True}
    hidden = {k: v for k, v in lines.items() if v["p50"].get("visible") == "legendonly"}
    assert sorted(summary) == [f"redis · {s}" for s in sorted(SCENARIOS)]
    # behind the click: the chart drawn without a summary, every line and point
    unhidden = {
        g: {k: {f: v for f, v in t.items() if f != "visible"} for k, t in ts.items()}
        for g, ts in hidden.items()
    }
    assert unhidden == detail
    assert all(s.get("visible") == "legendonly" for s in layout["shapes"]) and layout["shapes"]

    for scenario in SCENARIOS:
        locks = [detail[f"{impl} · {scenario}"] for impl in IMPLS]
        for kind in ("p50", "p99", "acq/s"):
            shown = _by_second(summary[f"redis · {scenario}"][kind])
            per_lock = [_by_second(lock[kind]) for lock in locks]
            assert sorted(shown) == sorted(set().union(*per_lock))  # every second any lock has
            for second, value in shown.items():
                points = [p[second] for p in per_lock if p.get(second) is not None]
                if not points:
                    assert value is None
                    continue
                assert value == pytest.approx(statistics.median(points), rel=1e-12), (scenario, kind, second)
        # the hover says how many locks each point is the median of
        trace = summary[f"redis · {scenario}"]["acq/s"]
        for (second, locks_there), _ in zip(trace["customdata"][:-1], trace["y"][:-1], strict=True):
            assert locks_there == sum(1 for lock in locks if second in _by_second(lock["acq/s"]))


def test_the_history_read_as_numpy_gives_the_figures_the_dataframe_reader_gave(tmp_path: Path) -> None:
    run_dir = _matrix(tmp_path)
    run = load_run(run_dir)
    marks = 0
    for case in run.case_ids():
        path = run_dir / "history" / f"{case}.parquet"
        frame = pd.read_parquet(path, columns=["client", "seq", "op", "type", "t_ns"])
        frame = frame[frame["op"] == "acquire"].reset_index(drop=True)
        fast = run.acquires(case)
        assert fast is not None and len(fast.t_ns) == len(frame)
        pd.testing.assert_frame_equal(charts.acquire_timeseries(fast), charts.acquire_timeseries(frame))
        assert run.client_counts(case) == [int(v) for v in acquisitions_per_client(frame)]
        assert AcquireRows.from_frame(frame).client_counts() == run.client_counts(case)

        events = pd.read_parquet(path, columns=["client", "seq", "op", "type", "lock", "t_ns"])
        events = events[events["op"].isin(["fault", "pause", "crash"])]
        t0, end = int(frame["t_ns"].min()), int(frame["t_ns"].max())
        from_lists = charts.event_marks(run.event_rows(case), t0, end)
        assert from_lists == charts.event_marks(events, t0, end)
        assert run.event_rows(case).ordered() == EventRows.from_frame(events).ordered()
        marks += len(from_lists)
    assert marks >= 3  # the fault window, the pause and the crash were there to compare


def test_per_trial_medians_are_pandas_groupby_medians() -> None:
    rng = np.random.default_rng(11)
    trials = []
    for n in (5, 8, 3, 8):
        values = rng.lognormal(5, 1, (n, 3))
        values[rng.random((n, 3)) < 0.25] = np.nan  # seconds without a completion: no latency
        trials.append(
            pd.DataFrame(
                {"second": np.arange(n), "acq_per_s": values[:, 0], "p50_us": values[:, 1], "p99_us": values[:, 2],
                 "end_s": np.arange(n) + 1.0}
            )
        )  # fmt: skip
    got = charts.aggregate_trials(trials)
    both = pd.concat(trials, ignore_index=True).groupby("second")
    want = both[["acq_per_s", "p50_us", "p99_us", "end_s"]].median()
    want["trials"] = both["acq_per_s"].size()
    want = want.reset_index()
    pd.testing.assert_frame_equal(got, want, check_dtype=False)
    assert got["trials"].tolist() == [4, 4, 4, 3, 3, 2, 2, 2]
