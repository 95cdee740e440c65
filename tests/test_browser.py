"""report.html in a real browser: headless Chromium, no network, every chart drawn, no JS error.

Chromium is the OS package ``chromium`` (scripts/test installs it with apt-get); this file
installs nothing and skips, saying why, where it is missing. The browser runs with a fresh
profile and no network: every host name resolves to nothing and every request that is not
file:// or data: goes to a dead proxy, and the test also fails if the page even tries one.
It is driven over the DevTools protocol (websocket) to catch exceptions and console errors,
count the charts plotly drew, and save a full-page screenshot into test-artifacts/.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dashboards import render_report
from tests.conftest import ARTIFACTS
from tests.test_report import CALIBRATION, CASES, FIDELITY, FIGURES, SCENARIOS, make_fault_run, make_run

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
websocket = pytest.importorskip("websocket", reason="websocket-client is needed to drive Chromium (pip)")

if not os.access(CHROMIUM, os.X_OK):
    pytest.skip(
        f"Chromium not found at {CHROMIUM}: install the OS package (apt-get install chromium; "
        "scripts/test does it as root)",
        allow_module_level=True,
    )

WAIT_S = 60  # upper bound for start-up and drawing; the test never asserts a duration


class DevTools:
    """A minimal Chrome DevTools protocol client: send commands, keep every event."""

    def __init__(self, ws_url: str) -> None:
        self.ws = websocket.create_connection(ws_url, timeout=WAIT_S, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict] = []

    def call(self, method: str, **params: object) -> dict:
        self.next_id += 1
        my_id = self.next_id
        self.ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.events.append(msg)

    def wait_event(self, method: str) -> dict:
        deadline = time.monotonic() + WAIT_S
        seen = 0
        while time.monotonic() < deadline:
            for ev in self.events[seen:]:
                if ev["method"] == method:
                    return ev
            seen = len(self.events)
            msg = json.loads(self.ws.recv())
            if "method" in msg:
                self.events.append(msg)
        raise TimeoutError(f"no {method} event")

    def evaluate(self, expression: str) -> object:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")

    def close(self) -> None:
        self.ws.close()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevTools]:
    """One headless Chromium for the module, stopped (its whole process group) afterwards."""
    profile = tmp_path_factory.mktemp("chromium") / "profile"
    proc = subprocess.Popen(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-default-apps",
            "--disable-extensions",
            f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--proxy-server=http://127.0.0.1:9",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1300,900",
            "about:blank",
        ],  # fmt: skip
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    tools = None
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + WAIT_S
        while not port_file.exists() or not port_file.read_text().strip():
            if proc.poll() is not None or time.monotonic() > deadline:
                err = proc.stderr.read().decode(errors="replace")[-500:] if proc.stderr else ""
                pytest.fail(f"Chromium did not start (exit {proc.poll()}): {err}")
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=WAIT_S) as resp:
            targets = json.load(resp)
        page = next(t for t in targets if t.get("type") == "page")
        tools = DevTools(page["webSocketDebuggerUrl"])
        yield tools
    finally:
        if tools is not None:
            tools.close()
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)


def _report(tmp_path: Path) -> Path:
    """A two-run comparison with trials, so every section and chart of the page is there."""
    base = make_run(tmp_path, name="20250101T000000Z-aaaaaa", trials=3, cases=CASES[:3])
    new = make_run(tmp_path, name="20250102T000000Z-bbbbbb", trials=3, cases=CASES[:3], speedup=1.5)
    return render_report([base, new], slo_us=1_000)


def inspect(browser: DevTools, report: Path, screenshot: Path | None = None) -> dict:
    """Open ``report`` and return what went wrong: JS errors, network requests, charts drawn."""
    browser.events.clear()
    for domain in ("Page", "Runtime", "Log", "Network"):
        browser.call(f"{domain}.enable")
    browser.call("Page.navigate", url=report.resolve().as_uri())
    browser.wait_event("Page.loadEventFired")
    expected = report.read_text(encoding="utf-8").count("Plotly.newPlot(")
    state: dict = {}
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        value = browser.evaluate(
            "JSON.stringify({divs: document.querySelectorAll('.plotly-graph-div').length,"
            " drawn: Array.from(document.querySelectorAll('.plotly-graph-div')).filter("
            "  d => d._fullLayout && d.querySelector('.main-svg') && d.getBoundingClientRect().height > 100"
            " ).length,"
            " traces: Array.from(document.querySelectorAll('.plotly-graph-div')).map("
            "  d => d.querySelectorAll('.trace, .barlayer .point').length),"
            " errors: window.lockbenchErrors || []})"
        )
        state = json.loads(value) if isinstance(value, str) else {}
        if state.get("drawn") == expected or state.get("errors"):
            break
        time.sleep(0.2)
    if screenshot is not None:
        height = browser.evaluate("document.documentElement.scrollHeight")
        browser.call(
            "Emulation.setDeviceMetricsOverride",
            width=1300,
            height=int(height),
            deviceScaleFactor=1,
            mobile=False,
        )
        shot = browser.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        screenshot.parent.mkdir(parents=True, exist_ok=True)
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        browser.call("Emulation.clearDeviceMetricsOverride")
    errors = [
        ev["params"].get("exceptionDetails", {}).get("exception", {}).get("description")
        or ev["params"].get("exceptionDetails", {}).get("text")
        for ev in browser.events
        if ev["method"] == "Runtime.exceptionThrown"
    ]
    errors += [
        " ".join(str(a.get("value", a.get("description", ""))) for a in ev["params"].get("args", []))
        for ev in browser.events
        if ev["method"] == "Runtime.consoleAPICalled" and ev["params"].get("type") in ("error", "assert")
    ]
    errors += [
        ev["params"]["entry"].get("text")
        for ev in browser.events
        if ev["method"] == "Log.entryAdded" and ev["params"]["entry"].get("level") == "error"
    ]
    requests = [
        ev["params"]["request"]["url"]
        for ev in browser.events
        if ev["method"] == "Network.requestWillBeSent"
        and not ev["params"]["request"]["url"].startswith(("file:", "data:", "blob:", "about:"))
    ]
    return {"expected": expected, "errors": errors, "requests": requests, **state}


def test_report_renders_every_chart_offline_without_errors(browser: DevTools, tmp_path: Path) -> None:
    report = _report(tmp_path)
    found = inspect(browser, report, screenshot=ARTIFACTS / "report-browser.png")
    assert found["expected"] == FIGURES
    assert found["errors"] == [], found["errors"]
    assert found["requests"] == [], f"the report tried the network: {found['requests']}"
    assert found["divs"] == found["drawn"] == FIGURES, found
    assert all(n > 0 for n in found["traces"]), found  # every chart drew data, not just axes
    assert (ARTIFACTS / "report-browser.png").stat().st_size > 10_000


def test_the_check_sees_a_broken_chart_and_a_network_request(browser: DevTools, tmp_path: Path) -> None:
    """The same inspection on a page spoiled on purpose: it must not come back clean."""
    report = _report(tmp_path)
    page = report.read_text(encoding="utf-8")
    page = page.replace("Plotly.newPlot(", "Plotly.noSuchPlot(", 1)
    page = page.replace("</body>", '<img src="http://203.0.113.7/pixel.png"></body>')
    broken = tmp_path / "broken.html"
    broken.write_text(page, encoding="utf-8")
    found = inspect(browser, broken)
    assert any("noSuchPlot" in (err or "") for err in found["errors"]), found["errors"]
    assert found["drawn"] == FIGURES - 1
    assert any("203.0.113.7" in url for url in found["requests"]), found["requests"]
    assert found["errors"] and found["requests"]


def test_fault_run_draws_the_matrix_and_the_shaded_windows(browser: DevTools, tmp_path: Path) -> None:
    """A run with fault scenarios: matrix colours and the over-time chart's shapes survive plotly.js."""
    cases = [
        {**SCENARIOS[0], "fault_s": (1.25, 2.0)},
        {**SCENARIOS[1], "pauses_s": [(0.5, 1.0)], "crashes_s": [2.5]},
        *SCENARIOS[2:],
    ]
    report = render_report([make_fault_run(tmp_path, cases)])
    found = inspect(browser, report, screenshot=ARTIFACTS / "report-faults-browser.png")
    assert found["errors"] == [], found["errors"]
    assert found["requests"] == []
    assert found["divs"] == found["drawn"] == FIGURES, found
    assert_decision_first_and_nothing_wide(first_screen(browser))
    drawn = json.loads(
        browser.evaluate(
            "JSON.stringify({shapes: Array.from(document.querySelectorAll('.plotly-graph-div')).map("
            "  d => d.querySelectorAll('.shapelayer path').length),"
            " matrix: Array.from(document.querySelectorAll('#scenario-matrix-table td.mcell')).map("
            "  td => getComputedStyle(td).backgroundColor)})"
        )
    )
    assert sorted(drawn["shapes"])[-1] == 3, drawn  # fault window, pause window, crash line
    colours = set(drawn["matrix"])
    assert len(colours) >= 4, colours  # red, amber, green, grey


#: What a reader's first screen shows and what the report must fit in without sideways scrolling.
FIRST_SCREEN = {"width": 1400, "height": 900}

LAYOUT_PROBE = """JSON.stringify({
  decisionTop: document.getElementById("decision-table").getBoundingClientRect().top,
  firstRowBottom: document.querySelector("#decision-table tbody tr").getBoundingClientRect().bottom,
  firstH2: document.querySelector("h2").id,
  pageWidth: document.documentElement.scrollWidth,
  viewport: window.innerWidth,
  wide: Array.from(document.querySelectorAll("table, .scroll")).filter(
    el => el.scrollWidth > el.clientWidth + 1 || el.getBoundingClientRect().right > window.innerWidth
  ).map(el => el.id || el.className || el.tagName),
  untested: Array.from(document.querySelectorAll("#decision-table .chip.untested, #decision-details .chip.untested")).map(
    el => getComputedStyle(el).backgroundColor),
  good: Array.from(document.querySelectorAll("#decision-table .chip.good, #decision-details .chip.good")).map(
    el => getComputedStyle(el).backgroundColor)
})"""


def first_screen(browser: DevTools, screenshot: Path | None = None) -> dict:
    """The open page's layout at 1400x900 (and its first screen as a PNG), window size restored after."""
    browser.call("Emulation.setDeviceMetricsOverride", deviceScaleFactor=1, mobile=False, **FIRST_SCREEN)
    try:
        layout = json.loads(browser.evaluate(LAYOUT_PROBE))
        if screenshot is not None:
            shot = browser.call("Page.captureScreenshot", format="png")
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
    finally:
        browser.call("Emulation.clearDeviceMetricsOverride")
    return layout


def assert_decision_first_and_nothing_wide(layout: dict) -> None:
    assert layout["firstH2"] == "decision", layout
    assert layout["decisionTop"] >= 0 and layout["firstRowBottom"] <= FIRST_SCREEN["height"], layout
    assert layout["pageWidth"] <= layout["viewport"], layout
    assert layout["wide"] == [], layout  # no table wider than its box or the window
    assert layout["untested"] and not set(layout["untested"]) & set(layout["good"]), layout  # grey, not green


def test_first_screen_is_the_decision_table_and_nothing_scrolls_sideways(
    browser: DevTools, tmp_path: Path
) -> None:
    """A comparison at 1400x900 (parameter and no-fault banners above the table: the most crowded first
    screen): the decision table starts on the first screen, no table is wider than the page, rows sort."""
    single = make_run(
        tmp_path, name="20250101T000000Z-aaaaaa", cases=CASES[:2] + CASES[4:], per_impl=FIDELITY,
        meta_extra={"calibration": CALIBRATION}, params={"users": 20, "workload": "flash-sale"},
    )  # fmt: skip
    other = make_run(
        tmp_path, name="20250102T000000Z-bbbbbb", cases=CASES[:2] + CASES[4:], per_impl=FIDELITY, speedup=3.0,
        params={"users": 50, "workload": "flash-sale"},
    )  # fmt: skip
    found = inspect(browser, render_report([single, other]))
    assert found["errors"] == [] and found["drawn"] == found["expected"], found
    assert_decision_first_and_nothing_wide(first_screen(browser, ARTIFACTS / "report-first-screen.png"))
    order = "Array.from(document.querySelectorAll('#decision-table tbody tr')).map(tr => tr.dataset.row)"
    click = "document.querySelector('#decision-table th[data-sort-col=\"1\"]').click()"
    browser.evaluate(click)
    up = browser.evaluate(order)
    browser.evaluate(click)
    assert up == sorted(up) and browser.evaluate(order) == sorted(up, reverse=True)


REDIS_LOCKS = [
    "redis.setnx-del", "redis.setnx-expire", "redis.setnx-getset", "redis.set-nx-px", "redis.set-nx-px-lua",
    "redis.reentrant", "redis.redlock", "redis.redis-py", "redis.python-redis-lock", "redis.pottery-redlock",
]  # fmt: skip

ROWS_PROBE = """JSON.stringify({
  rows: document.querySelectorAll("#decision-table tbody tr").length,
  lastRowBottom: Array.from(document.querySelectorAll("#decision-table tbody tr")).pop().getBoundingClientRect().bottom,
  pickBottom: document.getElementById("pick").getBoundingClientRect().bottom,
  green: Array.from(document.querySelectorAll("#decision-table .chip.good")).map(el => el.textContent),
  nofault: document.querySelectorAll("#decision-table .chip.nofault").length,
  tallest: Math.max(...Array.from(document.querySelectorAll("#decision-table tbody tr")).map(
    tr => tr.getBoundingClientRect().height))
})"""


@pytest.mark.parametrize("with_matrix", [False, True])
def test_ten_locks_fit_the_first_screen_with_a_pick(
    browser: DevTools, tmp_path: Path, with_matrix: bool
) -> None:
    """A default Redis run's ten locks (and the no-fault banner above them) fit one 1400x900 screen, one line
    each; without a matrix none is green, with one the safety chips come from it."""
    from bench.results.matrices import sources_for_run
    from tests.test_first_screen import _matrix

    cases = [(impl, 300 + 40 * i, "valid", 0, 0) for i, impl in enumerate(REDIS_LOCKS)]
    run = make_run(tmp_path, name="20250103T000000Z-run010", cases=cases,
                   per_impl={i: {"generator_bound": True, "generator_bound_reason": "loop late 40% > 15%"}
                             for i in REDIS_LOCKS[::2]},
                   meta_extra={"kind": "run", "impls": REDIS_LOCKS})  # fmt: skip
    if with_matrix:
        cells = {(impl, s): {"verdict": "invalid" if s == "crash" and i < 3 else "valid",
                             "overlapping_holds": 1 if s == "crash" and i < 3 else 0}
                 for i, impl in enumerate(REDIS_LOCKS) for s in ("long-cs", "crash", "restart", "failover")}  # fmt: skip
        _matrix(tmp_path, "20250102T000000Z-mtx010", cells=cells)
    sources = sources_for_run(run)
    assert bool(sources) == with_matrix
    found = inspect(browser, render_report([run], safety_sources=sources))
    assert found["errors"] == [], found["errors"]
    name = "first-screen-matrix.png" if with_matrix else "first-screen-no-fault.png"
    layout = first_screen(browser, ARTIFACTS / name)
    assert layout["pageWidth"] <= layout["viewport"] and layout["wide"] == [], layout
    rows = json.loads(browser.evaluate(ROWS_PROBE))
    assert rows["rows"] == 10 and rows["lastRowBottom"] <= FIRST_SCREEN["height"], rows
    assert rows["pickBottom"] <= FIRST_SCREEN["height"], rows
    assert rows["tallest"] < 40, rows  # one line per lock, not a paragraph
    if with_matrix:
        assert rows["green"] and rows["nofault"] == 0, rows
    else:
        assert rows["green"] == [] and rows["nofault"] == 10, rows
