"""What keeps a matrix report small and quick to render (issue 31), asserted as outcomes, not times.

A standard matrix's report was 79 MB and took minutes: a timeline per failed case, each with
every acquire attempt of its window, and a plotly shape added one at a time. These tests pin
what replaced that: plotly.js once, the grid as an HTML table, one timeline per lock x fault
with the other failed cases listed (anchor and history file), and a window's dense events
drawn as marks that say how many they stand for. benchmarks/report_render.py has the times.
"""

from __future__ import annotations

import re
from pathlib import Path

from dashboards.report import render_report
from dashboards.timeline import anchor, case_views
from tests.test_checkers import history
from tests.test_report import PLOTLY_SIGNATURE, _case_id, make_run
from tests.test_timeline import MS, S, _run

EVIDENCE = {
    "scenario": "restart",
    "workload": "flash-sale",
    "strikes": 3,
    "acquisitions_after_strike": 500,
    "evidence_target_k": 3,
    "evidence_target_n": 100,
}


def test_a_multi_case_matrix_has_plotly_once_the_grid_as_a_table_and_one_timeline_per_lock_and_fault(
    tmp_path: Path,
) -> None:
    run = make_run(tmp_path, trials=3, extra_columns=EVIDENCE)
    page = render_report([run]).read_text(encoding="utf-8")
    assert page.count(PLOTLY_SIGNATURE) == 1
    assert (
        page.count("Plotly.newPlot(") == 5
    )  # the five figures; timelines draw later with the same plotly.js
    grid = page[
        page.index('<table id="safety-grid"') : page.index("</table>", page.index('id="safety-grid"'))
    ]
    assert '<tr data-row="redis.setnx">' in grid and '<td class="bad' in grid
    # redis.setnx-no-owner failed in all three trials: one drawn (the one the grid links to), two listed
    failed = [_case_id("redis.setnx-no-owner", t) for t in (1, 2, 3)]
    assert "3 failed case(s); 1 drawn, one per lock x fault" in page
    for case in failed:
        assert page.count(f'id="{anchor(case)}"') == 1
    for case in failed[1:]:
        assert f"{run.name}/history/{case}.parquet" in page
    # every link to a timeline lands on an element of the page
    for target in set(re.findall(r'href="#(timeline-[^"]+)"', page)):
        assert f'id="{target}"' in page


def test_dense_events_in_a_window_are_one_mark_that_says_how_many(tmp_path: Path) -> None:
    lock = "L"
    ev = [
        ("1-u0", 0, "acquire", "invoke", lock, 0),
        ("1-u0", 0, "acquire", "ok", lock, 1 * MS, 1),
        ("2-u0", 0, "acquire", "invoke", lock, 2 * MS),
        ("2-u0", 0, "acquire", "fail", lock, 3 * MS),
    ]
    # 2-u0 retries every 0.5 ms for a second: 2,000 failed attempts before it is granted
    for i in range(1, 2_001):
        t = 5 * MS + i * MS // 2
        ev += [("2-u0", i, "acquire", "invoke", lock, t), ("2-u0", i, "acquire", "fail", lock, t + 100_000)]
    ev += [
        ("2-u0", 9_000, "acquire", "invoke", lock, 1 * S + 10 * MS),
        ("2-u0", 9_000, "acquire", "ok", lock, 1 * S + 20 * MS, 2),
        ("2-u0", 9_001, "release", "invoke", lock, 1 * S + 40 * MS),
        ("1-u0", 1, "release", "invoke", lock, 1 * S + 50 * MS),
    ]
    row = {"case": "d", "impl": "d", "verdict": "invalid"}
    views = case_views(_run(tmp_path, {"d": history(*ev)}, [row]), row)
    assert len(views) == 1
    attempts = next(t for t in views[0]["data"] if t["name"] == "acquire attempt")
    assert 1 < len(attempts["x"]) < 100  # not 2,003 bars
    counts = [
        int(m.group(1))
        for h in attempts["hovertext"]
        for m in [re.search(r"\((\d+) acquire attempts", h)]
        if m
    ]
    assert sum(counts) + len(attempts["x"]) - len(counts) == 2_003  # every attempt is counted in some mark
    holds = [t for t in views[0]["data"] if t["name"].startswith("hold: client")]
    assert sorted(len(t["x"]) for t in holds) == [1, 1]  # the violation's two holds stay whole
