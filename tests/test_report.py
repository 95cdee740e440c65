"""dashboards.render_report on synthetic results folders written the way bench writes them.

The folders hold real HDR encodings and real parquet histories; nothing is mocked, the
renderer only reads files.
"""

from __future__ import annotations

import json
import random
import re
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest
from hdrh.histogram import HdrHistogram

from dashboards import ReportInputError, render_report
from dashboards.charts import acquire_timeseries, spectrum_points
from dashboards.report import main
from tests.helpers import add_case_files

PLOTLY_SIGNATURE = "* plotly.js v"
#: every case row bench writes has these (resultsio.schema): a folder without them is damaged
SAFETY_COUNTERS = ("overlapping_holds", "witness_violations", "oversold_units", "lost_updates")
FIGURES = 5  # throughput, spectrum, over time, handoff/utilization, fairness
SEC = 1_000_000_000

CASES = [
    # impl, acquire median us, verdict, overlapping_holds, oversold_units
    ("redis.setnx", 300, "valid", 0, 0),
    ("redis.setnx-no-owner", 250, "invalid", 3, 2),
    ("postgres.advisory", 900, "valid", 0, 0),
    ("zookeeper.ephemeral", 2_000, "unknown", 0, 0),
    ("file.flock", 40, "valid", 0, 0),
]


def _case_id(impl: str, trial: int = 1) -> str:
    return re.sub(r"[^\w.-]", "_", impl) + f"__flash-sale__u8__t{trial}"


def _group_id(impl: str) -> str:
    return re.sub(r"[^\w.-]", "_", impl) + "__flash-sale__u8"


def _hist(values: list[int]) -> str:
    hist = HdrHistogram(1, 3_600_000_000, 3)
    for v in values:
        hist.record_value(v)
    return hist.encode().decode("ascii")


def _history(median_us: int, seconds: int = 3, clients: int = 2) -> pd.DataFrame:
    rng = random.Random(median_us)
    rows = []
    for c in range(clients):
        client, seq, t = f"100-u{c}", 0, c * 1_000_000
        while t < seconds * SEC:
            lat = int(rng.lognormvariate(0, 0.5) * median_us * 1_000)
            rows.append((client, seq, "acquire", "invoke", "L", t, None, None, None))
            rows.append((client, seq, "acquire", "ok", "L", t + lat, None, None, None))
            t += lat + 200_000
            rows.append((client, seq + 1, "release", "invoke", "L", t, None, None, None))
            rows.append((client, seq + 1, "release", "ok", "L", t + 50_000, None, 1, None))
            seq, t = seq + 2, t + 100_000_000
    df = pd.DataFrame(
        rows, columns=["client", "seq", "op", "type", "lock", "t_ns", "token", "value", "error"]
    )
    return df.astype({"token": "Int64", "value": "Int64", "error": "string"})


def make_run(
    root: Path,
    name: str = "20250101T000000Z-abc123",
    *,
    status: str = "complete",
    schema: int = 1,
    params: dict | None = None,
    cases: list[tuple] = CASES,
    planned_extra: list[str] = (),
    drop_columns: tuple[str, ...] = (),
    no_history: tuple[str, ...] = (),
    no_hist: tuple[str, ...] = (),
    empty_hist: tuple[str, ...] = (),
    speedup: float = 1.0,
    trials: int = 1,
    extra_columns: dict | None = None,
    meta_extra: dict | None = None,
    server_commands: dict | None = None,
    per_impl: dict[str, dict] | None = None,
) -> Path:
    """A results folder as docs/architecture.md describes it, with real HDR and parquet files."""
    run = root / name
    (run / "hist").mkdir(parents=True)
    (run / "history").mkdir()
    rows = []
    for trial, (impl, median, verdict, overlaps, oversold) in (
        (t, c) for t in range(1, trials + 1) for c in cases
    ):
        case = _case_id(impl, trial)
        rng = random.Random(f"{impl}{trial}")
        acquire = [max(1, int(rng.lognormvariate(0, 0.6) * median / speedup)) for _ in range(2_000)]
        if impl not in no_hist:
            hists = {
                "acquire_ok": _hist([] if impl in empty_hist else acquire),
                "acquire_timeout": _hist([]),
                "release": _hist([max(1, v // 3) for v in acquire]),
                "hold": _hist([v + 500 for v in acquire]),
                "cs": _hist([400] * 10),
            }
            payload = {"unit": "us", "histograms": hists, "server_commands": server_commands or {}}
            (run / "hist" / f"{case}.json").write_text(json.dumps(payload))
        if impl not in no_history:
            _history(median).to_parquet(run / "history" / f"{case}.parquet", index=False)
        acquire.sort()
        rows.append(
            {
                "case": case,
                "impl": impl,
                "backend": impl.split(".")[0],
                "workload": "flash-sale",
                "trial": trial,
                "users": 8,
                "processes": 1,
                "duration_s": 3.0,
                "acquisitions": 2_000,
                "acquire_timeouts": 0,
                "acquire_unknown": 0,
                "releases_not_owned": 1 if overlaps else 0,
                "purchases": 1_500,
                "units_sold": 1_500 + oversold,
                "throughput_acq_s": 2_000 / 3 * speedup,
                "throughput_ops_s": 500.0 * speedup,
                "acquire_p50_us": acquire[1_000],
                "acquire_p90_us": acquire[1_800],
                "acquire_p99_us": acquire[1_980],
                "acquire_p999_us": acquire[1_998],
                "acquire_max_us": acquire[-1],
                "release_p50_us": acquire[1_000] // 3,
                "release_p99_us": acquire[1_980] // 3,
                "hold_p50_us": acquire[1_000] + 500,
                "hold_p99_us": acquire[1_980] + 500,
                "handoff_p50_us": 120.0,
                "handoff_p99_us": 900.0,
                "utilization": 0.62,
                "jain_index": 0.987,
                "overlapping_holds": overlaps,
                "max_concurrent_holders": 2 if overlaps else 1,
                "witness_violations": overlaps,
                "witness_max": 2 if overlaps else 1,
                "oversold_units": oversold,
                "lost_updates": 0,
                "acquire_info": 0,
                "verdict": verdict,
                **(extra_columns or {}),
                **(per_impl or {}).get(impl, {}),
            }
        )
    pd.DataFrame(rows).drop(columns=list(drop_columns)).to_csv(run / "cases.csv", index=False)
    meta = {
        "schema": schema,
        "status": status,
        "started_at": "2025-01-01T00:00:00Z",
        "finished_at": None if status != "complete" else "2025-01-01T00:01:00Z",
        "command": ["bench", "run", "--backend", "redis", "--workload", "flash-sale"],
        "git_commit": "0123456789abcdef",
        "host": {
            "hostname": "testhost",
            "cpus": 2,
            "platform": "linux",
            "python": "3.12",
            "machine_class": "x86_64-2cpu-8gib",
        },
        "versions": {"redis": "7.2.4", "locust": "2.31"},
        "params": params if params is not None else {"users": 8, "duration_s": 3},
        "endpoints": {"redis": "redis://127.0.0.1:6390/0"},
        "cases": [r["case"] for r in rows] + list(planned_extra),
        **(meta_extra or {}),
    }
    (run / "run.json").write_text(json.dumps(meta))
    return add_case_files(run, hists=False, history=False)  # the merged histograms bench writes last


class _Cells(HTMLParser):
    """Collects {row: {col: class}} from <tr data-row> / <td data-col> of one table."""

    def __init__(self) -> None:
        super().__init__()
        self.cells: dict[str, dict[str, str]] = {}
        self._row: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr":
            self._row = a.get("data-row")
            if self._row is not None:
                self.cells[self._row] = {}
        elif tag == "td" and self._row is not None and a.get("data-col"):
            self.cells[self._row][a["data-col"]] = a.get("class") or ""


def _table(page: str, table_id: str) -> str:
    start = page.index(f'<table id="{table_id}"')
    return page[start : page.index("</table>", start)]


def _verdict_cells(page: str) -> dict[str, dict[str, str]]:
    parser = _Cells()
    parser.feed(_table(page, "verdicts"))
    return parser.cells


def test_report_is_written_self_contained_with_plotly_once(tmp_path: Path) -> None:
    run = make_run(tmp_path)
    out = render_report([run])
    assert out == run / "report.html"
    page = out.read_text(encoding="utf-8")
    assert page.count(PLOTLY_SIGNATURE) == 1
    assert page.count("Plotly.newPlot(") == FIGURES
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.I)
    assert not re.search(r"<link[^>]*\bhref\s*=\s*[\"']?(https?:)?//", page, re.I)
    assert '<script src="http' not in page
    assert [p.name for p in run.iterdir() if p.name.startswith(".")] == []
    for case in [_case_id(c[0]) for c in CASES]:
        assert case in page or case.split("__")[0] in page
    assert "not Locust&#x27;s rounded stats" in page
    assert "status-banner" not in page


def test_text_from_files_is_escaped(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    cases = [(f"redis.x{evil}", 300, "valid", 0, 0), *CASES[1:2]]
    run = make_run(tmp_path, params={"note": evil, "nested": {"k": evil}}, cases=cases)
    page = render_report([run]).read_text(encoding="utf-8")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert" not in page


def test_invalid_case_counter_cells_are_red_valid_ones_are_not(tmp_path: Path) -> None:
    page = render_report([make_run(tmp_path)]).read_text(encoding="utf-8")
    cells = _verdict_cells(page)
    bad, good = cells["redis.setnx-no-owner|flash-sale"], cells["redis.setnx|flash-sale"]
    assert "bad" in bad["overlapping_holds"].split()
    assert "bad" in bad["oversold_units"].split()
    assert "bad" in bad["verdict"].split()
    assert "bad" not in bad["lost_updates"].split()
    assert "warn" in bad["releases_not_owned"].split()
    assert all("bad" not in cls.split() for cls in good.values())
    assert "good" in good["verdict"].split()
    assert "unknown" in cells["zookeeper.ephemeral|flash-sale"]["verdict"].split()


def test_incomplete_run_shows_banner_with_missing_cases(tmp_path: Path) -> None:
    run = make_run(
        tmp_path, status="incomplete", cases=CASES[:3], planned_extra=["etcd.lease__flash-sale__u8__t1"]
    )
    page = render_report([run]).read_text(encoding="utf-8")
    banner = re.search(r'<div class="banner incomplete" id="status-banner">(.*?)</div>', page, re.S)
    assert banner is not None
    assert "incomplete" in banner.group(1)
    assert "etcd.lease__flash-sale__u8__t1" in banner.group(1)


@pytest.mark.parametrize(
    "breakage",
    ["no_folder", "no_cases_csv", "no_run_json", "schema_2", "bad_json"],
)
def test_unreadable_input_raises_one_line_error(tmp_path: Path, breakage: str) -> None:
    run = make_run(tmp_path, schema=2 if breakage == "schema_2" else 1)
    if breakage == "no_folder":
        run = tmp_path / "nope"
    elif breakage == "no_cases_csv":
        (run / "cases.csv").unlink()
    elif breakage == "no_run_json":
        (run / "run.json").unlink()
    elif breakage == "bad_json":
        (run / "run.json").write_text("{not json")
    with pytest.raises(ReportInputError) as info:
        render_report([run])
    assert "\n" not in str(info.value)
    if breakage == "schema_2":
        assert "schema 2" in str(info.value)
    assert not (run / "report.html").exists()


def test_cli_exits_2_with_one_line_on_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: results folder not found") and err.count("\n") == 1


def test_two_runs_show_deltas_against_the_baseline(tmp_path: Path) -> None:
    base = make_run(tmp_path, name="20250101T000000Z-aaaaaa")
    new = make_run(tmp_path, name="20250102T000000Z-bbbbbb", speedup=2.0, cases=CASES[:4])
    out = render_report([base, new])
    assert out == tmp_path / "comparisons" / f"{base.name}__vs__{new.name}" / "report.html"
    assert not (new / "report.html").exists() and not (base / "report.html").exists()
    page = out.read_text(encoding="utf-8")
    assert 'id="comparison"' in page
    deltas = page[page.index('id="comparison"') :]
    assert "+100.0%" in deltas  # throughput doubled
    assert re.search(r"-(49|50)\.\d%", deltas)  # acquire latencies halved
    assert f'data-row="{_group_id("file.flock")}"' in deltas
    assert "not in this run" in deltas
    assert page.count(PLOTLY_SIGNATURE) == 1


def test_missing_columns_history_and_empty_histograms_render_as_na(tmp_path: Path) -> None:
    run = make_run(
        tmp_path,
        drop_columns=("jain_index", "utilization", "handoff_p50_us", "lost_updates", "release_p99_us"),
        no_history=("file.flock",),
        no_hist=("postgres.advisory",),
        empty_hist=("zookeeper.ephemeral",),
    )
    out = render_report([run], out=tmp_path / "r.html", slo_us=1_000)
    page = out.read_text(encoding="utf-8")
    cells = _verdict_cells(page)
    assert "na" in cells["redis.setnx|flash-sale"]["lost_updates"].split()
    assert "no history/file.flock__flash-sale__u8__t1.parquet" in page
    assert "no hist/postgres.advisory__flash-sale__u8__t1.json" in page
    assert "SLO 1 ms" in page
    latency = _table(page, "latency")
    assert "n/a" in latency
    # release p99 falls back to the case's HDR histogram where one exists: not n/a for redis.setnx.
    row = latency[latency.index(f'data-row="{_case_id("redis.setnx")}"') :]
    row = row[: row.index("</tr>")]
    assert row.count("n/a") == 3  # handoff p50, utilization, Jain's index; no latency cell
    assert page.count(PLOTLY_SIGNATURE) == 1


def test_spectrum_points_follow_the_recorded_distribution() -> None:
    hist = HdrHistogram(1, 3_600_000_000, 3)
    for v in range(1, 1001):
        hist.record_value(v)
    points = spectrum_points(hist)
    xs = [p[0] for p in points]
    assert xs == sorted(xs)
    for x, value, pct in points[:-1]:
        assert x == pytest.approx(1 / (1 - pct / 100))
        assert value == pytest.approx(10 * pct, abs=2 + value / 1000)  # uniform 1..1000, 3 digits
    assert points[-1][1] == 1000 and points[-1][0] == max(1000.0, points[-2][0])  # max at "1 in N"
    assert spectrum_points(HdrHistogram(1, 3_600_000_000, 3)) == []


def test_acquire_timeseries_buckets_by_second_and_pairs_by_client_seq() -> None:
    rows = [
        # client, seq, op, type, t_ns: 3 acquires done in second 0, 2 in second 1, history ends at 1.5 s
        ("a", 0, "acquire", "invoke", 0),
        ("a", 0, "acquire", "ok", 100_000),
        ("b", 0, "acquire", "invoke", 0),
        ("b", 0, "acquire", "ok", 300_000),
        ("a", 1, "acquire", "invoke", 500_000_000),
        ("a", 1, "acquire", "ok", 500_200_000),
        ("b", 1, "acquire", "invoke", 900_000_000),
        ("b", 1, "acquire", "ok", 1_100_000_000),
        ("a", 2, "acquire", "invoke", 1_000_000_000),
        ("a", 2, "acquire", "fail", 1_200_000_000),
        ("a", 3, "acquire", "invoke", 1_300_000_000),
        ("a", 3, "acquire", "ok", 1_500_000_000),
        ("a", 4, "release", "invoke", 1_400_000_000),
    ]
    history = pd.DataFrame(rows, columns=["client", "seq", "op", "type", "t_ns"])
    series = acquire_timeseries(history)
    assert list(series["second"]) == [0, 1]
    assert series.loc[0, "acq_per_s"] == 3
    assert series.loc[1, "acq_per_s"] == pytest.approx(2 / 0.5)
    assert series.loc[0, "p50_us"] == pytest.approx(200)
    assert series.loc[1, "p50_us"] == pytest.approx(200_000)


def test_failed_run_without_cases_still_renders(tmp_path: Path) -> None:
    run = make_run(tmp_path, status="failed", cases=[])
    (run / "cases.csv").write_text("case\n")
    page = render_report([run]).read_text(encoding="utf-8")
    assert "Run status: failed" in page
    assert "No cases." in page
    assert page.count(PLOTLY_SIGNATURE) == 1


def _section(page: str, marker: str) -> str:
    start = page.index(marker)
    return page[start : page.index("</table>", start)]


def test_trials_are_grouped_per_impl_and_workload(tmp_path: Path) -> None:
    base = make_run(tmp_path, name="20250101T000000Z-aaaaaa", trials=3, cases=CASES[:2])
    new = make_run(tmp_path, name="20250102T000000Z-bbbbbb", trials=3, cases=CASES[:2], speedup=2.0)
    page = render_report([base, new]).read_text(encoding="utf-8")
    deltas = page[page.index('id="comparison"') :]
    row = deltas[deltas.index(f'data-row="{_group_id("redis.setnx")}"') :]
    assert "n=3" in row[: row.index("</table>")]
    assert "+100.0%" in row[: row.index("</table>")]  # throughput of all 3 trials doubled
    matrix = _section(page, 'id="verdict-matrix-table"')
    assert matrix.count("3 trial(s)") == 4  # 2 impls x 2 runs
    # one spectrum line per impl and run, trials merged: "baseline: impl" and "candidate: impl"
    assert page.count('"name":"baseline: redis.setnx"') == 1
    assert page.count('"name":"candidate: redis.setnx"') == 1


def test_verdict_matrix_marks_the_run_where_a_lock_became_unsafe(tmp_path: Path) -> None:
    safe = [("redis.setnx", 300, "valid", 0, 0), ("file.flock", 40, "valid", 0, 0)]
    unsafe = [("redis.setnx", 300, "invalid", 4, 0), ("file.flock", 40, "valid", 0, 0)]
    base = make_run(tmp_path, name="20250101T000000Z-aaaaaa", cases=safe)
    new = make_run(tmp_path, name="20250102T000000Z-bbbbbb", cases=unsafe)
    page = render_report([base, new]).read_text(encoding="utf-8")
    parser = _Cells()
    parser.feed(_section(page, 'id="verdict-matrix-table"'))
    setnx = parser.cells[_group_id("redis.setnx")]
    assert setnx["baseline"].split() == ["good"] and setnx["candidate"].split() == ["bad"]
    flock = parser.cells[_group_id("file.flock")]
    assert flock["baseline"] == flock["candidate"] == "good"


def test_metadata_diff_lists_only_what_differs(tmp_path: Path) -> None:
    base = make_run(tmp_path, name="20250101T000000Z-aaaaaa", meta_extra={"git_commit": "aaaa1111"})
    new = make_run(
        tmp_path, name="20250102T000000Z-bbbbbb", params={"users": 16, "duration_s": 3},
        meta_extra={"git_commit": "bbbb2222"},
    )  # fmt: skip
    page = render_report([base, new]).read_text(encoding="utf-8")
    diff = _section(page, 'id="metadata-diff"')
    assert 'data-row="git_commit"' in diff and "aaaa1111" in diff and "bbbb2222" in diff
    assert 'data-row="params.users"' in diff
    assert 'data-row="params.duration_s"' not in diff
    assert 'data-row="host.cpus"' not in diff
    assert "endpoints" not in diff  # ports differ on every run by construction


def test_round_trips_show_server_commands_and_lockstat_columns_generically(tmp_path: Path) -> None:
    run = make_run(
        tmp_path, cases=CASES[:1],
        extra_columns={"server_cmds_per_acquire": 3.5, "lockstat_conflicts": 42, "lockstat_renewals": 7},
        server_commands={"evalsha": 2_000, "set": 5_000},
    )  # fmt: skip
    page = render_report([run]).read_text(encoding="utf-8")
    table = _section(page, 'id="round-trips"')
    assert "<th>conflicts</th>" in table and "<th>renewals</th>" in table
    assert ">42<" in table and ">7<" in table
    assert "3.500" in table
    assert "set&nbsp;2.5" in table and "evalsha&nbsp;1" in table  # per acquisition: 5000 / 2000, 2000 / 2000


def test_fairness_counts_acquisitions_per_client_from_history(tmp_path: Path) -> None:
    run = make_run(tmp_path, cases=CASES[:1])
    history = pd.read_parquet(run / "history" / f"{_case_id('redis.setnx')}.parquet")
    ok = history[(history["op"] == "acquire") & (history["type"] == "ok")]
    per_client = ok["client"].value_counts()
    page = render_report([run]).read_text(encoding="utf-8")
    table = _section(page, 'id="fairness"')
    cells = re.findall(r'<td class="num">([\d,]+)</td>', table)
    assert cells == [str(len(per_client)), f"{per_client.min():,}", f"{per_client.max():,}"]
    assert "Jain 0.987" in page


def test_merged_histogram_adds_trials_exactly_or_reads_the_merged_file(tmp_path: Path) -> None:
    from dashboards.load import load_run

    run = make_run(tmp_path, trials=3, cases=CASES[:1])
    data = load_run(run)
    group = _group_id("redis.setnx")
    merged = data.merged_histogram(group, "acquire_ok")
    assert merged is not None and merged.get_total_count() == 3 * 2_000
    assert merged.get_max_value() == max(
        data.histogram(_case_id("redis.setnx", t), "acquire_ok").get_max_value() for t in (1, 2, 3)
    )
    (run / "hist" / f"{group}.merged.json").write_text(
        json.dumps({"unit": "us", "histograms": {"acquire_ok": _hist([7] * 5)}})
    )
    from_file = load_run(run).merged_histogram(group, "acquire_ok")
    assert from_file is not None and from_file.get_total_count() == 5


def test_every_text_of_a_comparison_is_escaped(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    cases = [(f"redis.x{evil}", 300, "valid", 0, 0)]
    base = make_run(tmp_path, name="20250101T000000Z-aaaaaa", cases=cases, meta_extra={"git_commit": evil})
    new = make_run(
        tmp_path, name="20250102T000000Z-bbbbbb", cases=cases, params={"note": evil},
        extra_columns={f"lockstat_{evil}": 1}, server_commands={evil: 3},
        meta_extra={"host": {"machine_class": evil}},
    )  # fmt: skip
    page = render_report([base, new]).read_text(encoding="utf-8")
    assert "<script>alert" not in page
    assert page.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 5


def test_page_reports_javascript_errors_visibly(tmp_path: Path) -> None:
    page = render_report([make_run(tmp_path)]).read_text(encoding="utf-8")
    assert '<div class="banner error" id="js-error-banner" hidden></div>' in page
    hook = page.index('addEventListener("error"')
    assert hook < page.index(PLOTLY_SIGNATURE)  # installed before plotly.js and every chart runs


# --- fault scenarios: the impl x scenario verdict matrix and fault windows over time --------------

T0 = 7_000 * SEC  # histories start at an arbitrary CLOCK_MONOTONIC reading, not at 0


def _fault_case_id(impl: str, scenario: str, trial: int | None) -> str:
    base = f"{impl}__{scenario.replace('+', '__').replace('@', '-')}"
    return re.sub(r"[^\w.-]", "_", base) + (f"__t{trial}" if trial is not None else "")


def _events(
    fault: tuple[float, float] | None, pauses: list[tuple[float, float | None]], crashes: list[float]
) -> list[tuple]:
    """History rows for a fault window, pauses (end None: still paused at the end) and crashes, in s."""
    rows: list[tuple] = []
    if fault is not None:
        for kind, t in (("invoke", fault[0]), ("ok", fault[1])):
            rows.append(
                ("bench", 0, "fault", kind, "restart", T0 + int(t * SEC), None, None, "killed and restarted")
            )
    for i, (start, end) in enumerate(pauses):
        rows.append(("100-u1", 900 + i, "pause", "invoke", "L", T0 + int(start * SEC), None, None, None))
        if end is not None:
            rows.append(("100-u1", 900 + i, "pause", "ok", "L", T0 + int(end * SEC), None, 700, None))
    for t in crashes:
        rows.append(("100-u0", 999, "crash", "info", "L", T0 + int(t * SEC), None, None, None))
    return rows


def make_fault_run(
    root: Path, cases: list[dict], name: str = "20250301T000000Z-fa0175", drop_columns: tuple[str, ...] = ()
) -> Path:
    """A results folder whose rows carry scenario, fencing, data_safe and the fault counters.

    Each dict gives impl, scenario and verdict, optionally trial, data_safe, any counter
    column, and fault_s=(start, end), pauses_s=[(start, end | None)], crashes_s=[t] that go
    into the case's history as bench writes them (seconds after the history's first acquire).
    """
    run = root / name
    (run / "hist").mkdir(parents=True)
    (run / "history").mkdir()
    rows = []
    for spec in cases:
        spec = dict(spec)
        impl, scenario = spec.pop("impl"), spec.pop("scenario")
        trial = spec.pop("trial", None)
        case = _fault_case_id(impl, scenario, trial)
        history = _history(300, seconds=4)
        extra = pd.DataFrame(
            _events(spec.pop("fault_s", None), spec.pop("pauses_s", []), spec.pop("crashes_s", [])),
            columns=history.columns,
        )
        history = history.assign(t_ns=history["t_ns"] + T0)
        if not extra.empty:
            history = pd.concat([history, extra.astype(history.dtypes.to_dict())], ignore_index=True)
        history.sort_values("t_ns", kind="stable").to_parquet(
            run / "history" / f"{case}.parquet", index=False
        )
        fencing = (
            "enforce"
            if scenario.endswith("+fenced")
            else "observe"
            if scenario.endswith("+unfenced")
            else "off"
        )
        rows.append(
            {
                "case": case, "impl": impl, "backend": impl.split(".")[0], "workload": scenario.split("+")[0],
                "trial": trial or 0, "users": 10, "processes": 2, "acquisitions": 100, "throughput_acq_s": 25.0,
                "scenario": scenario, "fencing": fencing, "fault": "", **dict.fromkeys(SAFETY_COUNTERS, 0), **spec,
            }
        )  # fmt: skip
    pd.DataFrame(rows).drop(columns=list(drop_columns)).to_csv(run / "cases.csv", index=False)
    meta = {
        "schema": 1, "status": "complete", "started_at": "2025-03-01T00:00:00Z",
        "finished_at": "2025-03-01T00:01:00Z", "command": ["bench", "run", "--workload", "long-cs"],
        "params": {"trials": 1}, "cases": [r["case"] for r in rows],
    }  # fmt: skip
    (run / "run.json").write_text(json.dumps(meta))
    return add_case_files(run)  # each case's histograms and the merged ones, as bench writes them


def _matrix(page: str) -> dict[str, dict[str, str]]:
    parser = _Cells()
    parser.feed(_table(page, "scenario-matrix-table"))
    return parser.cells


def _matrix_cell(page: str, impl: str, scenario: str) -> str:
    """The inner text (tags stripped) of one matrix cell."""
    table = _table(page, "scenario-matrix-table")
    row = table[table.index(f'<tr data-row="{impl}">') :]
    row = row[: row.index("</tr>")]
    cell = row[row.index(f'data-col="{scenario}"') :]
    return re.sub(r"<[^>]+>", " ", cell[cell.index(">") + 1 : cell.index("</td>")])


def _figures(page: str) -> list[tuple[list, dict]]:
    """(data, layout) of every Plotly.newPlot call in the page, parsed as JSON."""
    decoder = json.JSONDecoder()
    out = []
    for match in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", page):
        data, end = decoder.raw_decode(page, match.end())
        layout, _ = decoder.raw_decode(page, page.index("{", end))
        out.append((data, layout))
    return out


def _over_time(page: str) -> tuple[list, dict]:
    figures = [f for f in _figures(page) if "seconds since the case" in json.dumps(f[1])]
    assert len(figures) == 1
    return figures[0]


SCENARIOS = [
    # red: the lock failed and the data with it
    {"impl": "redis.set-nx-px-lua", "scenario": "long-cs+unfenced", "verdict": "invalid", "data_safe": False,
     "overlapping_holds": 10, "witness_violations": 10, "oversold_units": 0, "lost_updates": 14,
     "stale_writes_accepted": 4, "stale_writes_refused": 0},
    # amber: the lock failed, fencing refused the stale writes
    {"impl": "redis.set-nx-px-lua", "scenario": "long-cs+fenced", "verdict": "invalid", "data_safe": True,
     "overlapping_holds": 7, "witness_violations": 7, "oversold_units": 0, "lost_updates": 0,
     "stale_writes_accepted": 0, "stale_writes_refused": 5},
    # green, with a recovery time
    {"impl": "redis.set-nx-px-lua", "scenario": "crash", "verdict": "valid", "data_safe": True,
     "overlapping_holds": 0, "crashes": 1, "stuck_locks": 0, "recovery_ms_p50": 250.0},
    # red although the data is safe: a lock stuck after its holder died is not saved by fencing
    {"impl": "redis.setnx-del", "scenario": "crash", "verdict": "invalid", "data_safe": True,
     "overlapping_holds": 0, "crashes": 1, "stuck_locks": 1},
    # grey: unknown, counters absent (NaN)
    {"impl": "redis.setnx-del", "scenario": "long-cs+unfenced", "verdict": "unknown"},
    {"impl": "redis.setnx-del", "scenario": "long-cs+fenced", "verdict": "valid", "data_safe": True,
     "overlapping_holds": 0, "stale_writes_refused": 0},
]  # fmt: skip


def test_scenario_matrix_colours_failed_data_safe_valid_and_unknown_cells(tmp_path: Path) -> None:
    page = render_report([make_fault_run(tmp_path, SCENARIOS)]).read_text(encoding="utf-8")
    assert page.index('id="scenario-matrix"') < page.index('id="verdicts"')  # near the top
    cells = _matrix(page)
    lua, setnx = cells["redis.set-nx-px-lua"], cells["redis.setnx-del"]
    assert lua["long-cs+unfenced"].split() == ["mcell", "bad"]
    assert lua["long-cs+fenced"].split() == ["mcell", "warn"]
    assert lua["crash"].split() == ["mcell", "good"]
    assert setnx["crash"].split() == ["mcell", "bad"]
    assert setnx["long-cs+unfenced"].split() == ["mcell", "unknown"]
    assert setnx["long-cs+fenced"].split() == ["mcell", "good"]

    red = _matrix_cell(page, "redis.set-nx-px-lua", "long-cs+unfenced")
    assert "overlaps 10" in red and "lost updates 14" in red and "stale writes accepted 4" in red
    assert "oversold" not in red and "refused" not in red and "data safe" not in red  # zero: not shown
    assert "witness" not in red  # the same incidents as the overlaps
    amber = _matrix_cell(page, "redis.set-nx-px-lua", "long-cs+fenced")
    assert "overlaps 7" in amber and "stale writes refused 5" in amber and "data safe" in amber
    assert "recovery p50 250 ms" in _matrix_cell(page, "redis.set-nx-px-lua", "crash")
    stuck = _matrix_cell(page, "redis.setnx-del", "crash")
    assert "stuck 1" in stuck and "data safe" not in stuck
    assert _matrix_cell(page, "redis.setnx-del", "long-cs+unfenced").split() == ["unknown"]


def test_scenario_matrix_aggregates_trials_sum_of_counters_worst_verdict(tmp_path: Path) -> None:
    trials = [
        {"impl": "redis.set-nx-px-lua", "scenario": "long-cs+fenced", "trial": 1, "verdict": "valid",
         "data_safe": True, "overlapping_holds": 0, "stale_writes_refused": 0, "recovery_ms_p50": 100.0},
        {"impl": "redis.set-nx-px-lua", "scenario": "long-cs+fenced", "trial": 2, "verdict": "invalid",
         "data_safe": True, "overlapping_holds": 3, "stale_writes_refused": 2, "recovery_ms_p50": 300.0},
        {"impl": "redis.set-nx-px-lua", "scenario": "long-cs+fenced", "trial": 3, "verdict": "invalid",
         "data_safe": True, "overlapping_holds": 4, "stale_writes_refused": 1, "recovery_ms_p50": 200.0},
        {"impl": "redis.set-nx-px-lua", "scenario": "long-cs+unfenced", "trial": 1, "verdict": "invalid",
         "data_safe": True, "overlapping_holds": 1},
        {"impl": "redis.set-nx-px-lua", "scenario": "long-cs+unfenced", "trial": 2, "verdict": "invalid",
         "data_safe": False, "overlapping_holds": 1, "lost_updates": 2},
    ]  # fmt: skip
    page = render_report([make_fault_run(tmp_path, trials)]).read_text(encoding="utf-8")
    cells = _matrix(page)["redis.set-nx-px-lua"]
    assert cells["long-cs+fenced"].split() == ["mcell", "warn"]  # every failed trial kept its data
    assert cells["long-cs+unfenced"].split() == ["mcell", "bad"]  # one trial lost updates
    text = _matrix_cell(page, "redis.set-nx-px-lua", "long-cs+fenced")
    assert "overlaps 7" in text and "stale writes refused 3" in text and "3 trials" in text
    assert "recovery p50 200 ms" in text  # median of the trials' p50


def test_fenced_and_unfenced_columns_of_a_workload_are_adjacent(tmp_path: Path) -> None:
    order = [  # bench's order: per workload, impls, modes; a tokenless impl runs fencing off
        {"impl": "redis.set-nx-px-lua", "scenario": "long-cs+fenced", "verdict": "valid", "data_safe": True},
        {"impl": "file.flock", "scenario": "long-cs", "verdict": "invalid", "data_safe": False,
         "overlapping_holds": 2},
        {"impl": "redis.set-nx-px-lua", "scenario": "crash", "verdict": "valid", "data_safe": True},
        {"impl": "redis.set-nx-px-lua", "scenario": "lease-expiry+unfenced", "verdict": "invalid",
         "data_safe": False, "overlapping_holds": 1},
        {"impl": "redis.set-nx-px-lua", "scenario": "long-cs+unfenced", "verdict": "invalid",
         "data_safe": False, "overlapping_holds": 5},
        {"impl": "redis.set-nx-px-lua", "scenario": "lease-expiry+fenced", "verdict": "invalid",
         "data_safe": True, "overlapping_holds": 1},
    ]  # fmt: skip
    page = render_report([make_fault_run(tmp_path, order)]).read_text(encoding="utf-8")
    cells = _matrix(page)
    columns = list(cells["redis.set-nx-px-lua"])
    assert columns == [
        "long-cs+unfenced", "long-cs+fenced", "crash", "lease-expiry+unfenced", "lease-expiry+fenced"
    ]  # fmt: skip
    assert list(cells["file.flock"]) == columns
    header = re.findall(r'<th data-scenario="([^"]+)"', _table(page, "scenario-matrix-table"))
    assert header.index("long-cs+fenced") == header.index("long-cs+unfenced") + 1
    # the impl without tokens: its plain long-cs result is its unfenced one, and it says so
    assert cells["file.flock"]["long-cs+unfenced"].split() == ["mcell", "bad"]
    assert "no fencing tokens" in _matrix_cell(page, "file.flock", "long-cs+unfenced")
    assert cells["file.flock"]["long-cs+fenced"].split() == ["mcell", "na"]
    assert "no fencing tokens" in _matrix_cell(page, "file.flock", "long-cs+fenced")
    assert "not run" in _matrix_cell(page, "file.flock", "crash")


def test_fault_window_pauses_and_crashes_are_shaded_in_the_over_time_chart(tmp_path: Path) -> None:
    cases = [
        {"impl": "redis.set-nx-px-lua", "scenario": "long-cs+restart@held+fenced", "verdict": "valid",
         "fault_s": (1.25, 2.0)},
        {"impl": "redis.set-nx-px-lua", "scenario": "lease-expiry+unfenced", "verdict": "valid",
         "pauses_s": [(0.5, 1.0), (0.75, 1.5), (3.0, None)], "crashes_s": [2.5]},
    ]  # fmt: skip
    page = render_report([make_fault_run(tmp_path, cases)]).read_text(encoding="utf-8")
    data, layout = _over_time(page)
    shapes = layout["shapes"]
    faults = [s for s in shapes if "server fault" in s.get("name", "")]
    assert len(faults) == 1
    fault = faults[0]
    assert fault["type"] == "rect" and fault["xref"] == "x" and fault["yref"] == "paper"
    assert fault["x0"] == pytest.approx(1.25) and fault["x1"] == pytest.approx(2.0)
    assert "restart" in fault["name"] and fault["showlegend"] is True
    pauses = sorted((s["x0"], s["x1"]) for s in shapes if "paused" in s.get("name", ""))
    # overlapping pauses merge; one still open at the end lasts to the history's last event
    assert pauses[0] == (pytest.approx(0.5), pytest.approx(1.5))
    assert len(pauses) == 2 and pauses[1][0] == pytest.approx(3.0) and pauses[1][1] > 3.5
    crashes = [s for s in shapes if "killed" in s.get("name", "")]
    assert len(crashes) == 1 and crashes[0]["type"] == "line"
    assert crashes[0]["x0"] == crashes[0]["x1"] == pytest.approx(2.5)
    opacity = {
        s["name"]: float(s["fillcolor"].rsplit(",", 1)[1].rstrip(")")) for s in shapes if s.get("fillcolor")
    }
    assert max(v for k, v in opacity.items() if "paused" in k) < min(
        v for k, v in opacity.items() if "fault" in k
    )
    assert "shaded: server fault window" in layout["legend"]["title"]["text"]
    assert "server fault window" in page[page.index("Acquire latency and acquisitions over time") :]
    # the fault belongs to its impl x scenario's line: same legend group
    line = next(t for t in data if t.get("showlegend", True) and "restart" in t["name"])
    assert fault["legendgroup"] == line["legendgroup"]


def test_over_time_draws_one_line_per_impl_and_scenario_median_of_trials(tmp_path: Path) -> None:
    from dashboards.charts import aggregate_trials

    cases = [
        {"impl": "redis.set-nx-px-lua", "scenario": s, "trial": t, "verdict": "valid"}
        for s in ("long-cs+unfenced", "long-cs+fenced") for t in (1, 2, 3)
    ]  # fmt: skip
    page = render_report([make_fault_run(tmp_path, cases)]).read_text(encoding="utf-8")
    data, _ = _over_time(page)
    assert len(data) == 2 * 3  # p50, p99, acq/s per impl x scenario, not per trial
    names = [t["name"] for t in data if t.get("showlegend", True)]
    assert names == ["redis.set-nx-px-lua · long-cs+unfenced", "redis.set-nx-px-lua · long-cs+fenced"]
    series = [
        pd.DataFrame(
            {"second": [0, 1], "acq_per_s": [a, b], "p50_us": [a * 10, b * 10], "p99_us": [1.0, 2.0]}
        )
        for a, b in ((10.0, 1.0), (30.0, 2.0), (100.0, 9.0))
    ]
    series[2] = series[2].iloc[:1]  # a shorter trial
    agg = aggregate_trials(series)
    assert list(agg["acq_per_s"]) == [30.0, 1.5] and list(agg["p50_us"]) == [300.0, 15.0]  # median, not mean
    assert list(agg["trials"]) == [3, 2]


def test_scenario_label_with_markup_is_escaped_everywhere(tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>"
    cases = [
        {"impl": "redis.set-nx-px-lua", "scenario": f"long-cs{evil}+fenced", "verdict": "invalid",
         "data_safe": True, "overlapping_holds": 1, "fault_s": (1.0, 1.5)},
        {"impl": f"redis.{evil}", "scenario": "crash", "verdict": "valid"},
    ]  # fmt: skip
    page = render_report([make_fault_run(tmp_path, cases)]).read_text(encoding="utf-8")
    assert "<script>alert" not in page
    matrix = _table(page, "scenario-matrix-table")
    assert "long-cs&lt;script&gt;alert(1)&lt;/script&gt;" in matrix
    assert 'data-col="long-cs&lt;script&gt;alert(1)&lt;/script&gt;+fenced"' in matrix
    assert f'data-row="redis.{"&lt;script&gt;alert(1)&lt;/script&gt;"}"' in matrix


def test_run_without_scenario_column_renders_the_matrix_by_workload(tmp_path: Path) -> None:
    page = render_report([make_run(tmp_path)]).read_text(encoding="utf-8")  # an older run: no scenario
    cells = _matrix(page)
    assert cells["redis.setnx"] == {"flash-sale": "mcell good"}
    assert '<th data-scenario="flash-sale">flash-sale</th>' in _table(page, "scenario-matrix-table")
    assert cells["redis.setnx-no-owner"]["flash-sale"].split() == ["mcell", "bad"]  # no data_safe: red
    assert cells["zookeeper.ephemeral"]["flash-sale"].split() == ["mcell", "unknown"]
    assert "shapes" not in _over_time(page)[1]
    fault_run = make_fault_run(
        tmp_path, SCENARIOS[:2], name="20250302T000000Z-fa0176", drop_columns=("scenario", "fencing")
    )
    page = render_report([fault_run]).read_text(encoding="utf-8")
    assert list(_matrix(page)["redis.set-nx-px-lua"]) == ["long-cs"]  # both cases under their workload
    assert _matrix(page)["redis.set-nx-px-lua"]["long-cs"].split() == ["mcell", "bad"]


# --- the decision table, fidelity, and the report fixes of issues 11 and 13 -----------------------

FIDELITY = {
    # generator-bound: hatched and grey with its reason everywhere its throughput shows
    "redis.setnx": {"generator_bound": True, "generator_bound_reason": "hold inflation 6.2x > 1.5x",
                    "model_acq_s": 2_000.0, "hold_inflation": 6.2, "solo_hold_p50_us": 810.0,
                    "server_cpu_us_per_acq": 21.5, "client_cpu_ms_per_acq": 0.42, "polls_per_acq": 3.5},
    "file.flock": {"generator_bound": False, "generator_bound_reason": "", "model_acq_s": 900.0,
                   "hold_inflation": 1.05},
}  # fmt: skip
CALIBRATION = {
    "floors": {"redis": {"op": "PING", "p50_us": 95.0}},
    "solo": {"redis.setnx": {"hold_p50_us": 810.0, "acquire_p50_us": 240.0, "acquisitions": 300}},
}


def _row_of(table: str, row: str) -> str:
    start = table.index(f'data-row="{row}"')
    return table[start : table.index("</tr>", start)]


def test_decision_table_comes_first_with_untested_grey_and_the_rule_of_three(tmp_path: Path) -> None:
    run = make_run(
        tmp_path, cases=CASES[:2] + CASES[4:], per_impl=FIDELITY, meta_extra={"calibration": CALIBRATION}
    )
    page = render_report([run]).read_text(encoding="utf-8")
    body = page[page.index("<body>") :]
    first_section = re.search(r"<h2[^>]*>", body)
    assert first_section is not None and 'id="decision"' in first_section.group(0)
    assert (
        body.index('id="decision-table"') < body.index('id="scenario-matrix"') < body.index("Plotly.newPlot(")
    )
    # no fault in this run: the banner says so, what it shows and not, and the command that does
    banner = body[
        body.index('id="no-fault-banner"') : body.index("</div>", body.index('id="no-fault-banner"'))
    ]
    assert body.index('id="no-fault-banner"') < body.index('id="decision-table"')
    assert "No faults were injected" in banner and "does not show" in banner
    assert "bench matrix --backend file --backend redis" in banner
    table = _table(page, "decision-details")
    row = _row_of(table, "redis.setnx")
    untested = re.findall(r'<span class="chip ([^"]+)" data-scenario="([^"]+)"[^>]*>([^<]*)</span>', row)
    grey = {
        scenario.split(" (")[0]: (cls, label) for cls, scenario, label in untested if "not tested" in label
    }
    assert set(grey) == {"long-cs", "lease-expiry", "crash", "server fault"}
    assert all(cls == "untested" for cls, _ in grey.values())  # grey, never green
    assert '<span class="chip nofault" data-scenario="flash-sale"' in row  # plain contention: never green
    # the evidence behind "survived": 2,000 acquisitions rule out nothing rarer than 1 in 667
    assert "flash-sale: 2,000 acquisitions, no fault; a race rarer than 1 in 667 could go unseen" in row
    assert "rule of three, 95%" in row
    assert '<span class="chip bad" data-scenario="flash-sale"' in _row_of(table, "redis.setnx-no-owner")
    # cost: solo acquire from calibration, throughput hatched with its reason, model beside it
    assert "240 µs" in row
    acq = re.search(r'<td class="num bound" data-col="acq_s"[^>]*>(.*?)</td>', row)
    assert (
        acq is not None
        and "hold inflation 6.2x &gt; 1.5x" in acq.group(1)
        and "model 2,000/s" in acq.group(1)
    )
    assert "a lower bound" in acq.group(1)
    flock = _row_of(table, "file.flock")
    assert 'class="num bound"' not in flock and "none: a local file" in flock
    assert "n/a" in re.search(r'data-col="solo_acquire_p50"[^>]*>([^<]*)<', flock).group(1)  # not calibrated
    assert "Stayed exclusive under contention, but no fault was tried" in flock
    sentence = re.search(r'data-col="sentence">([^<]*)<', _row_of(table, "redis.setnx-no-owner")).group(1)
    assert sentence.startswith("Failed flash-sale: 3 overlapping holds") and "2 oversold units" in sentence


def test_generator_bound_figures_are_greyed_with_the_reason_and_n_a_without_columns(tmp_path: Path) -> None:
    run = make_run(
        tmp_path, cases=CASES[:2] + CASES[4:], per_impl=FIDELITY, meta_extra={"calibration": CALIBRATION}
    )
    page = render_report([run]).read_text(encoding="utf-8")
    fidelity = _table(page, "fidelity-table")
    bound = _row_of(fidelity, _group_id("redis.setnx"))
    assert 'class="num bound" title="generator-bound: hold inflation 6.2x &gt; 1.5x"' in bound
    assert "6.20x" in bound and "21.5 µs" in bound and "420 µs" in bound and "3.5" in bound
    assert "yes: hold inflation 6.2x &gt; 1.5x" in bound
    assert '<td data-col="generator_bound">no</td>' in _row_of(fidelity, _group_id("file.flock"))
    assert 'data-col="generator_bound">n/a</td>' in _row_of(fidelity, _group_id("redis.setnx-no-owner"))
    assert "PING" in _table(page, "floors") and "95 µs" in _table(page, "floors")
    latency = _row_of(_table(page, "latency"), _case_id("redis.setnx"))
    assert 'class="num bound"' in latency and "generator-bound: hold inflation" in latency
    assert 'class="num bound"' not in _row_of(_table(page, "latency"), _case_id("file.flock"))
    # throughput bars: highest first, the bound one hatched, the model drawn beside
    data, _ = next(f for f in _figures(page) if "acquisitions/s and purchases/s" in json.dumps(f[1]))
    bars = data[0]
    assert bars["y"] == sorted(bars["y"], reverse=True)
    hatched = dict(zip(bars["x"], bars["marker"]["pattern"]["shape"], strict=True))
    assert hatched["redis.setnx"] == "/" and hatched["file.flock"] == ""
    spectrum, _ = next(f for f in _figures(page) if "percentile (log scale" in json.dumps(f[1]))
    assert [t["name"] for t in spectrum if "generator-bound" in t["name"]] == [
        "redis.setnx (generator-bound: an upper bound)"
    ]
    model = next(t for t in data if t.get("name") == "model: independent clients")
    assert dict(zip(model["x"], model["y"], strict=True))["redis.setnx"] == 2_000.0
    # an older run without any of these columns or calibration: n/a, never an error
    old = render_report([make_run(tmp_path / "old", cases=CASES[:2])]).read_text(encoding="utf-8")
    assert "Calibration floors: n/a" in old
    assert 'data-col="model_acq_s">n/a' in _table(old, "fidelity-table")
    assert "model n/a" in _table(old, "decision-details") and "fidelity n/a" in _table(
        old, "decision-details"
    )


def test_fault_run_decision_table_evidence_fencing_and_catalog_contradictions(tmp_path: Path) -> None:
    cases = [
        {**SCENARIOS[2], "acquisitions": 300, "expected_outcome": "survives", "contradicts_catalog": False},
        {**SCENARIOS[3], "expected_outcome": "survives", "contradicts_catalog": True,
         "expected_note": "catalog: setnx-del survives a crash", "observed_outcome": "stuck"},
        *SCENARIOS[:2], SCENARIOS[4],
        {**SCENARIOS[5], "scenario_events": 3, "acquisitions_after_event": 60},  # bench matrix's evidence
    ]  # fmt: skip
    run = make_fault_run(tmp_path, cases)
    meta = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**meta, "kind": "matrix"}))
    page = render_report([run]).read_text(encoding="utf-8")
    assert 'id="no-fault-banner"' not in page
    banner = page[
        page.index('id="contradicts-banner"') : page.index("</div>", page.index('id="contradicts-banner"'))
    ]
    assert page.index('id="contradicts-banner"') < page.index('id="decision-table"')
    assert "1 result(s) contradict the catalog (safety matrix)" in banner
    assert (
        "redis.setnx-del" in banner
        and "survives" in banner
        and "catalog: setnx-del survives a crash" in banner
    )
    assert "this run: <i>stuck</i>" in banner
    table = _table(page, "decision-details")
    lua = _row_of(table, "redis.set-nx-px-lua")
    # 300 clean acquisitions around one killed holder cannot rule out a 1-in-1000 race
    assert "crash: 300 acquisitions, 1 fault event(s); a race rarer than 1 in 100 could go unseen" in lua
    assert '<span class="chip warn" data-scenario="long-cs+fenced"' in lua
    assert '<span class="chip untested" data-scenario="lease-expiry' in lua
    assert "saved the data when the lock failed (long-cs+fenced)" in lua and "did NOT" not in lua
    setnx = _row_of(table, "redis.setnx-del")
    assert '<span class="chip bad contradicts" data-scenario="crash"' in setnx and "≠ catalog" in setnx
    assert "1 locks left stuck" in setnx
    # bench matrix counts the events and the acquisitions after them: the bound rests on those
    assert "long-cs+fenced: 100 acquisitions (60 after 3 fault event(s)); a race rarer than 1 in 20" in setnx
    assert "not measured: fault cases only" in setnx  # cost belongs to bench run


def test_comparison_lists_parameter_differences_first_and_colours_no_change(tmp_path: Path) -> None:
    base = make_run(
        tmp_path,
        name="20250101T000000Z-aaaaaa",
        cases=CASES[:2],
        params={"users": 20, "workload": "flash-sale"},
    )
    new = make_run(
        tmp_path, name="20250102T000000Z-bbbbbb", cases=CASES[:2], speedup=3.95,
        params={"users": 50, "workload": "flash-sale", "pause_every": 7},
    )  # fmt: skip
    page = render_report([base, new]).read_text(encoding="utf-8")
    banner = page[page.index('id="params-banner"') : page.index("</div>", page.index('id="params-banner"'))]
    assert (
        page.index('id="params-banner"') < page.index('id="decision-table"') < page.index('id="comparison"')
    )
    assert '<li data-param="users"><b>users</b>: 20 (baseline) → 50 (candidate)</li>' in banner
    assert "pause_every" not in banner  # not a flash-sale option: it did not shape either run
    deltas = page[page.index('id="comparison"') :]
    assert "+295.0%" in deltas
    assert 'class="num worse"' not in deltas and 'class="num better"' not in deltas
    assert "No delta is tinted" in deltas
    # alike parameters: the same change is tinted
    same = make_run(tmp_path, name="20250103T000000Z-cccccc", cases=CASES[:2], speedup=3.95,
                    params={"users": 20, "workload": "flash-sale"})  # fmt: skip
    page = render_report([base, same]).read_text(encoding="utf-8")
    assert (
        "used the same parameters" in page and 'class="num better"' in page[page.index('id="comparison"') :]
    )


def test_run_section_lists_only_parameters_of_the_run_workloads(tmp_path: Path) -> None:
    params = {"workload": "flash-sale", "users": 8, "items": 1, "pause_every": 20, "crash_after": 20,
              "fault": "", "clock_skew_s": 0.0}  # fmt: skip
    page = render_report([make_run(tmp_path, cases=CASES[:1], params=params)]).read_text(encoding="utf-8")
    metadata = page[page.index('id="metadata"') :]
    shown, _, hidden = metadata.partition("do not apply to this run")
    assert "<th>items</th>" in shown and "<th>users</th>" in shown
    assert "pause_every" not in shown and "crash_after" not in shown and "clock_skew_s" not in shown
    assert "pause_every" in hidden and "4 recorded option(s)" in shown


def test_latencies_carry_units_and_over_time_lines_of_equal_length_end_together(tmp_path: Path) -> None:
    from dashboards.html_bits import duration_us

    assert [duration_us(v) for v in (459, 1_436.7, 879_615, 2_285_567)] == [
        "459 µs",
        "1.44 ms",
        "880 ms",
        "2.29 s",
    ]

    def spans(end_s: float) -> pd.DataFrame:
        ends = [int(t * SEC) for t in (0.0, 0.4, 1.3, 2.2, 3.0, end_s)]
        rows = [(f"c{i}", i, "acquire", k, t) for i, t in enumerate(ends) for k in ("invoke", "ok")]
        return pd.DataFrame(rows, columns=["client", "seq", "op", "type", "t_ns"])

    ends = [acquire_timeseries(spans(s))["end_s"].iloc[-1] for s in (3.47, 3.60, 3.10)]
    assert ends == pytest.approx([3.47, 3.60, 3.10])  # each line ends where its case's acquires end
    sliver = acquire_timeseries(spans(3.10))
    assert list(sliver["second"]) == [0, 1, 2] and sliver["acq_per_s"].iloc[-1] == pytest.approx(3 / 1.1)
    page = render_report([make_run(tmp_path, cases=CASES[:2])]).read_text(encoding="utf-8")
    latency = _table(page, "latency")
    assert re.search(r">\d[\d.]* (µs|ms|s)</td>", latency) and not re.search(
        r">\d{1,3},\d{3}(,\d{3})?</td>", latency
    )
    fairness = next(f for f in _figures(page) if "fair share" in json.dumps(f[1]))
    assert fairness[1]["yaxis"]["type"] == "log"
    assert all(abs(sum(t["y"]) / len(t["y"]) - 1) < 1e-9 for t in fairness[0])  # normalised to the fair share


def test_clock_skew_run_is_a_fault_run_and_says_so_in_its_scenarios(tmp_path: Path) -> None:
    params = {"workload": "flash-sale", "users": 8, "clock_skew_s": 30.0, "skewed_clients": 0.5}
    page = render_report([make_run(tmp_path, cases=CASES[:1], params=params)]).read_text(encoding="utf-8")
    assert 'id="no-fault-banner"' not in page
    row = _row_of(_table(page, "decision-details"), "redis.setnx")
    assert '<span class="chip good" data-scenario="flash-sale+clock-skew"' in row
    assert "fault events not counted" in row and "not measured: fault cases only" in row
