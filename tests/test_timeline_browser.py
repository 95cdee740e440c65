"""The violation timeline of a real run, in headless Chromium: drawn, and naming the two holders.

One ``bench run`` plants two violations against real servers: ``test.no-mutex`` (no lock at
all) under flash-sale, and ``redis.set-nx-px`` (a lease lock) under lease-expiry, where a
holder pauses past its 1 s lease. The report is opened at each failed case's anchor (what
the red chips link to); its timeline must be drawn by plotly, and its caption must name two
clients whose holds the checkers (workloads/checks) find overlapping in the history, and,
for the lease lock, the pause (the strike) and the lease's end. A screenshot of each goes to
test-artifacts/ (docs/timeline-*.png are copies of them).
"""

from __future__ import annotations

import base64
import json
import re
import time
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import ARTIFACTS
from tests.helpers import bench
from tests.test_browser import WAIT_S, DevTools, browser  # noqa: F401 - the module's Chromium fixture
from workloads.checks.core import holds

CASES = ("test.no-mutex__flash-sale", "redis.set-nx-px__lease-expiry__unfenced")


def _open_timeline(tools: DevTools, report: Path, case: str, shot: Path) -> str:
    """Navigate to the case's anchor, wait until its view is drawn, screenshot it; its caption."""
    tools.events.clear()
    for domain in ("Page", "Runtime"):
        tools.call(f"{domain}.enable")
    tools.call("Page.navigate", url="about:blank")  # a new document: only a fragment's change fires no load
    tools.wait_event("Page.loadEventFired")
    tools.events.clear()
    tools.call("Page.navigate", url=f"{report.resolve().as_uri()}#timeline-{case}")
    tools.wait_event("Page.loadEventFired")
    block = json.dumps(f"timeline-{case}")
    caption = ""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        state = tools.evaluate(
            f"(function () {{ var b = document.getElementById({block}); if (!b) return null;"
            " var svg = b.querySelector('.tl-plot .main-svg');"
            " return b.dataset.drawn !== undefined && svg ? b.querySelector('.tl-caption').textContent : '' })()"
        )
        assert state is not None, f"no timeline block for {case}"
        if state:
            caption = str(state)
            break
        time.sleep(0.2)
    assert caption, f"the timeline of {case} was not drawn"
    bars = tools.evaluate(f"document.getElementById({block}).querySelectorAll('.barlayer .point').length")
    assert bars and int(bars) > 0  # holds and attempts drawn as bars
    rect = json.loads(
        tools.evaluate(f"JSON.stringify(document.getElementById({block}).getBoundingClientRect())")
    )
    top = tools.evaluate("window.scrollY")
    png = tools.call(
        "Page.captureScreenshot", format="png", captureBeyondViewport=True,
        clip={"x": rect["x"], "y": rect["y"] + top, "width": rect["width"], "height": rect["height"], "scale": 1},
    )  # fmt: skip
    shot.parent.mkdir(parents=True, exist_ok=True)
    shot.write_bytes(base64.b64decode(png["data"]))
    errors = [ev for ev in tools.events if ev["method"] == "Runtime.exceptionThrown"]
    assert not errors, errors[:3]
    return caption


def _overlap(history: pd.DataFrame, one: str, two: str) -> bool:
    h = holds(history)
    h = h[h["depth"] == 1]
    a, b = h[h["client"] == one], h[h["client"] == two]
    return any(
        ((b["start_ns"] < e) & (b["end_ns"] > s)).any()
        for s, e in zip(a["start_ns"], a["end_ns"], strict=True)
    )


@pytest.mark.server
@pytest.mark.slow
def test_planted_violations_are_drawn_and_name_their_two_holders(tmp_path: Path, browser: DevTools) -> None:  # noqa: F811
    results = tmp_path / "results"
    r = bench(
        "run", "--impl", "test.no-mutex", "--impl", "redis.set-nx-px", "--workload", "flash-sale",
        "--workload", "lease-expiry", "--duration", "4", "--users", "6", "--cs", "2ms",
        "--results-dir", str(results),
    )  # fmt: skip
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    rows = pd.read_csv(run / "cases.csv").set_index("case")
    report = run / "report.html"
    assert report.is_file(), r.stderr[-3000:]
    page = report.read_text()
    for case in CASES:
        assert rows.loc[case, "verdict"] == "invalid", rows.loc[case].get("verdict_reason")
        assert f'href="#timeline-{case}"' in page  # the red chip links to it
        caption = _open_timeline(browser, report, case, ARTIFACTS / f"timeline-{case}.png")
        named = re.match(r"client (\S+) held .*?; client (\S+) was granted at", caption)
        assert named, caption
        first, second = named.groups()
        history = pd.read_parquet(run / "history" / f"{case}.parquet")
        assert first != second and _overlap(history, first, second), caption
    lease = _open_timeline(browser, report, CASES[1], ARTIFACTS / f"timeline-{CASES[1]}.png")
    assert re.search(
        r"its 1 s lease ended at [\d.]+(-[\d.]+)? s while it was paused \(the strike: ", lease
    ), lease
    assert "was granted" in lease
    # a passing case has no timeline
    assert "timeline-redis.set-nx-px__flash-sale" not in page
