"""The report's figures drawn on plotly_white without plotly copying the template per figure (issue 42 item 7).

charts.white_figure leaves a small slot where the template goes and page.py writes
plotly_white's JSON there, as a figure given ``template="plotly_white"`` writes it. These
tests hold the page to that: every figure of a rendered report carries exactly that
template, and no slot is left in the page. No server: the folder is written the way bench
writes it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import plotly.graph_objects as go

from dashboards.charts import WHITE_SLOT, white_figure, with_white_template
from dashboards.report import render_report
from tests.test_gate import noisy, write_run

_NEW_PLOT = re.compile(r'Plotly\.newPlot\(\s*"[^"]+",\s*(\[.*?\]),\s*(\{.*?\}),\s*\{"displaylogo"', re.S)


def _plotly_white() -> dict:
    return go.Figure(layout={"template": "plotly_white"}).to_dict()["layout"]["template"]


def test_a_white_figure_is_written_with_plotly_white_key_for_key() -> None:
    for fig in (white_figure(), white_figure(rows=2, cols=1, shared_xaxes=True)):
        fig.update_layout(height=440)
        spec = with_white_template(fig.to_dict())
        assert json.dumps(spec["layout"]["template"]) == json.dumps(_plotly_white())
        assert list(spec["layout"])[0] == "template"  # where plotly puts a figure's template: first
    other = {"layout": {"template": {"layout": {"meta": "not ours"}}}}
    assert with_white_template(other)["layout"]["template"] == {"layout": {"meta": "not ours"}}


def test_every_figure_of_a_report_carries_plotly_white_and_no_slot_is_left(tmp_path: Path) -> None:
    run = write_run(
        tmp_path,
        "r",
        {"redis.x": {"throughput_acq_s": noisy(1000)}, "redis.y": {"throughput_acq_s": noisy(900)}},
    )
    html = render_report([run], out=tmp_path / "report.html").read_text()
    assert WHITE_SLOT["layout"]["meta"] not in html
    layouts = [json.loads(layout) for _, layout in _NEW_PLOT.findall(html)]
    white = _plotly_white()
    drawn = [layout for layout in layouts if layout.get("template") == white]
    assert len(drawn) >= 3, [sorted(layout) for layout in layouts]  # throughput, spectrum, handoff at least
