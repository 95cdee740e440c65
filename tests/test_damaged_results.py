"""A corpus of damaged results folders, made from one real run, through every reader (issue 34).

The suite's own version of SQLite's corrupt-database tests: one real ``bench run`` (a real
redis-server, started by bench) gives a clean folder; each kind of damage below is applied
to a copy of it, and the copy goes through each reader of a results folder:

* ``bench gate``, with the damaged copy as the candidate and as the baseline: exit 2 with
  one line naming the side and what is wrong, never a table, never PASS;
* ``bench report``: a page with the red damage banner naming it, and the damaged lock's
  cells reading "unknown (damaged)", never survived (or, when nothing is left to read,
  one line and exit 2);
* ``bench history --check``: the damaged run skipped with a named warning, the newest run
  reported damaged (exit 2), and no "the newest run is safe".

The clean folder goes through the same three first, so each outcome is shown to differ
from the clean one's.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from resultsio import read_results
from tests.helpers import InProcessResult, bench, bench_in_process

IMPL = "redis.set-nx-px-lua"


Result = InProcessResult
cli = bench_in_process


@pytest.fixture(scope="session")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One real small run: 3 trials of one Redis lock under flash-sale, every file bench writes."""
    root = tmp_path_factory.mktemp("clean-results")
    r = bench(
        "run", "--impl", IMPL, "--workload", "flash-sale", "--trials", "3", "--duration", "2",
        "--users", "3", "--no-report", "--results-dir", str(root),
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr  # 1: a case bench itself judged unknown (a busy machine)
    run = Path(r.stdout.strip().splitlines()[-1])
    if not run.is_dir():  # --no-report prints the folder, or the report path beside it
        run = run.parent
    assert (run / "cases.parquet").is_file() and list((run / "hist").glob("*.json")), list(run.iterdir())
    assert read_results(run).problems == [], [str(p) for p in read_results(run).problems]
    return run


# the kinds of damage --------------------------------------------------------------------------------

Spoil = Callable[[Path], None]


def _tables(fn: Callable[[pd.DataFrame], pd.DataFrame], parquet: bool = True) -> Spoil:
    """Apply ``fn`` to cases.csv (and cases.parquet, so the damage agrees in both and the schema must see it)."""

    def spoil(run: Path) -> None:
        frame = fn(pd.read_csv(run / "cases.csv"))
        frame.to_csv(run / "cases.csv", index=False)
        if parquet:
            frame.to_parquet(run / "cases.parquet", index=False)

    return spoil


def _cell(column: str, value: object, row: int = 0, parquet: bool = True, **also: object) -> Spoil:
    """``column`` of ``row`` set to ``value`` (and each column of ``also`` to its value) in both tables."""

    def fn(frame: pd.DataFrame) -> pd.DataFrame:
        for name, v in {column: value, **also}.items():
            frame[name] = frame[name].astype(object if isinstance(v, str) else float)
            frame.loc[row, name] = v
        return frame

    return _tables(fn, parquet)


def _file(name: str, content: bytes | Callable[[bytes], bytes]) -> Spoil:
    def spoil(run: Path) -> None:
        path = run / name
        path.write_bytes(content(path.read_bytes()) if callable(content) else content)

    return spoil


def _first_case(run: Path) -> str:
    return str(pd.read_csv(run / "cases.csv")["case"].iloc[0])


def _hist(content: bytes | Callable[[bytes], bytes], merged: bool = False) -> Spoil:
    def spoil(run: Path) -> None:
        case = _first_case(run)
        name = f"{case.rsplit('__t', 1)[0]}.merged.json" if merged else f"{case}.json"
        _file(f"hist/{name}", content)(run)

    return spoil


def _history_file(run: Path) -> None:
    (run / "history" / f"{_first_case(run)}.parquet").write_bytes(b"PAR1 not a parquet file at all")


def _meta(key: str, value: object) -> Spoil:
    def spoil(run: Path) -> None:
        meta = json.loads((run / "run.json").read_text())
        meta[key] = value
        (run / "run.json").write_text(json.dumps(meta))

    return spoil


def _undecodable(text: bytes) -> bytes:
    data = json.loads(text)
    data["histograms"]["acquire_ok"] = "bm90IGFuIEhEUiBoaXN0b2dyYW0="  # base64 of "not an HDR histogram"
    return json.dumps(data).encode()


def _half(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _rename(frame: pd.DataFrame) -> pd.DataFrame:
    frame.loc[0, "case"] = f"{IMPL}__flash-sale__t7"
    return frame


def _repeat_trial(frame: pd.DataFrame) -> pd.DataFrame:
    frame.loc[1, "trial"] = frame.loc[0, "trial"]
    return frame


def _csv_only_differs(frame: pd.DataFrame) -> pd.DataFrame:
    frame.loc[0, "utilization"] = frame.loc[0, "utilization"] / 2
    return frame


def _remove(name: str) -> Spoil:
    """``name`` (a file or a folder inside the run) gone; a ``{case}`` / ``{group}`` in it is the first case's."""

    def spoil(run: Path) -> None:
        case = _first_case(run)
        path = run / name.format(case=case, group=case.rsplit("__t", 1)[0])
        shutil.rmtree(path) if path.is_dir() else path.unlink()

    return spoil


def _hist_a_file(run: Path) -> None:
    shutil.rmtree(run / "hist")
    (run / "hist").write_text("not a folder")


def _raw_meta(old: str, new: str) -> Spoil:
    """run.json's text with ``old`` replaced: figures json.dumps would not write (``1e999``)."""

    def spoil(run: Path) -> None:
        text = (run / "run.json").read_text()
        assert old in text, old
        (run / "run.json").write_text(text.replace(old, new, 1))

    return spoil


def _params(key: str, value: object) -> Spoil:
    def spoil(run: Path) -> None:
        meta = json.loads((run / "run.json").read_text())
        meta["params"][key] = value
        (run / "run.json").write_text(json.dumps(meta))

    return spoil


def _timing_nan(run: Path) -> None:
    meta = json.loads((run / "run.json").read_text())
    meta["timing"] = {**(meta.get("timing") or {}), "wall_s": float("nan")}
    (run / "run.json").write_text(json.dumps(meta))  # json writes NaN, as Python's json module reads it


def _strikes_above_grants(frame: pd.DataFrame) -> pd.DataFrame:
    frame["strikes"] = frame["strikes"].astype(float) if "strikes" in frame else float("nan")
    frame.loc[0, "strikes"] = float(frame.loc[0, "acquisitions"]) + 5
    return frame


def _bogus_evidence(frame: pd.DataFrame) -> pd.DataFrame:
    frame["evidence"] = frame["evidence"].astype(object) if "evidence" in frame else ""
    frame.loc[0, "evidence"] = "bogus"
    return frame


DEEP = b"[" * 100_000

#: (kind, damage, what the gate's line and the report's banner must name, nothing left to read)
CORPUS: list[tuple[str, Spoil, str, bool]] = [
    ("NaN overlapping_holds", _cell("overlapping_holds", float("nan")), "overlapping_holds", False),
    ("negative overlapping_holds", _cell("overlapping_holds", -1), "overlapping_holds", False),
    ("fractional overlapping_holds", _cell("overlapping_holds", 0.5), "overlapping_holds", False),
    ("NaN acquisitions", _cell("acquisitions", float("nan")), "acquisitions", False),
    ("huge acquisitions", _cell("acquisitions", 1e30), "acquisitions", False),
    ("huge throughput", _cell("throughput_acq_s", 1e300), "throughput_acq_s", False),
    ("inf throughput", _cell("throughput_acq_s", float("inf")), "throughput_acq_s", False),
    ("negative throughput", _cell("throughput_acq_s", -5.0), "throughput_acq_s", False),
    ("text throughput", _cell("throughput_acq_s", "fast", parquet=False), "throughput_acq_s", False),
    ("p99 of 0", _cell("acquire_p99_us", 0.0), "acquire_p99_us", False),
    # the verdict is set too: on a loaded machine the clean run's first case can be judged
    # unknown (generator-bound), and a violation beside "unknown" is no contradiction
    ("violation beside valid", _cell("oversold_units", 3.0, verdict="valid"), "verdict", False),
    ("changed impl id", _cell("impl", "redis.other"), "impl", False),
    (
        "dropped safety columns",
        _tables(lambda f: f.drop(columns=["witness_violations", "oversold_units", "lost_updates"])),
        "witness_violations",
        False,
    ),
    ("duplicated row", _tables(lambda f: pd.concat([f, f.iloc[:1]])), "appears more than once", False),
    ("missing row", _tables(lambda f: f.iloc[:-1]), "have no row", False),
    ("renamed id", _tables(_rename), "not in run.json", False),
    ("repeated trial", _tables(_repeat_trial), "repeats a trial", False),
    ("empty cases.csv", _file("cases.csv", b""), "cases.csv", False),
    (
        "header-only cases.csv",
        _file("cases.csv", lambda d: d.split(b"\n", 1)[0] + b"\n"),
        "have no row",
        False,
    ),
    ("truncated cases.csv", _file("cases.csv", _half), "cases.csv", False),
    ("garbage cases.csv", _file("cases.csv", os.urandom(3000)), "cases.csv", False),
    ("garbage cases.parquet", _file("cases.parquet", b"PAR1 garbage PAR1"), "cases.parquet", False),
    ("truncated cases.parquet", _file("cases.parquet", _half), "cases.parquet", False),
    ("empty cases.parquet", _file("cases.parquet", b""), "cases.parquet", False),
    ("parquet and csv disagree", _tables(_csv_only_differs, parquet=False), "differs between", False),
    ("garbage run.json", _file("run.json", b"\x00\xffnot json"), "run.json", True),
    ("truncated run.json", _file("run.json", _half), "run.json", True),
    ("empty run.json", _file("run.json", b""), "run.json", True),
    ("deep run.json", _file("run.json", DEEP), "run.json", True),
    ('run.json "cases": 5', _meta("cases", 5), "cases must be a JSON list", False),
    ("run.json params a string", _meta("params", "fast"), "params must be a JSON dict", False),
    ("garbage histogram file", _hist(b"{oops"), "hist/", False),
    ("deep histogram file", _hist(DEEP), "hist/", False),
    ("undecodable histogram", _hist(_undecodable), "hist/", False),
    ("truncated merged histograms", _hist(_half, merged=True), "hist/", False),
    ("garbage history file", _history_file, "history/", False),
    # issue 43: what was never checked (files that are missing, enums, ranges and invariants of run.json)
    ("hist/ missing", _remove("hist"), "hist/ is missing", False),
    ("hist/ a file", _hist_a_file, "hist/ is a file", False),
    ("a trial's histograms missing", _remove("hist/{case}.json"), "__t0.json is missing", False),
    ("merged histograms missing", _remove("hist/{group}.merged.json"), ".merged.json is missing", False),
    ("history/ missing", _remove("history"), "history/ is missing", False),
    ("a trial's history missing", _remove("history/{case}.parquet"), "__t0.parquet is missing", False),
    ("verdict VALID", _cell("verdict", "VALID"), "verdict is not one of valid", False),
    ("evidence grade bogus", _tables(_bogus_evidence), "evidence is not one of", False),
    ("strikes above grants", _tables(_strikes_above_grants), "strikes is more than acquisitions", False),
    ("no case column", _tables(lambda f: f.drop(columns=["case"])), "lacks column(s) case", False),
    ("NaN in run.json", _timing_nan, "timing.wall_s is nan", False),
    ("1e999 in run.json", _raw_meta('"duration_s": 2.0', '"duration_s": 1e999'), "duration_s is inf", False),
    ("params.evidence bogus", _params("evidence", "bogus"), "params.evidence must be one of", False),
    ("params.controls a list", _params("controls", ["redis"]), "params.controls must be a JSON dict", False),
    ('run.json "matrix" a string', _meta("matrix", "fast"), "matrix must be a JSON dict", False),
]


def _damaged_copy(clean: Path, root: Path, spoil: Spoil) -> Path:
    """The clean run copied under ``root`` as the newest run (a later run id), then damaged."""
    stamp = datetime.strptime(clean.name.split("-", 1)[0], "%Y%m%dT%H%M%SZ") + timedelta(minutes=1)
    target = root / f"{stamp:%Y%m%dT%H%M%SZ}-ffffff"
    shutil.copytree(clean, target)
    spoil(target)
    return target


def _one_error_line(r: Result) -> str:
    lines = [line for line in r.err.splitlines() if line.strip()]
    assert r.code == 2 and len(lines) == 1 and lines[0].startswith("bench: error:"), (r.code, r.out, r.err)
    assert "Traceback" not in r.err
    return lines[0]


# the clean run: what each reader says when nothing is wrong -----------------------------------------


@pytest.mark.slow
def test_the_clean_run_is_judged_rendered_and_drawn(clean_run: Path, tmp_path: Path) -> None:
    gate = cli("gate", clean_run, clean_run, "--rule", "throughput:-5%")
    assert "| case | metric |" in gate.out and "bench: error" not in gate.err, (gate.out, gate.err)
    assert gate.code in (0, 2)  # 2 only as "not enough data" (a generator-bound trial), never an error
    if gate.code == 2:
        assert "NOT ENOUGH DATA" in gate.out

    page = tmp_path / "clean.html"
    report = cli("report", clean_run, "--out", page)
    assert report.code == 0 and "DAMAGED" not in report.err, report
    html = page.read_text()
    assert 'id="damage-banner"' not in html and "unknown (damaged)" not in html

    root = tmp_path / "results"
    shutil.copytree(clean_run, root / clean_run.name)
    history = cli("history", root, "--check", "--out", tmp_path / "history.html")
    assert "the newest run is safe" in history.out and "DAMAGED" not in history.out, history
    assert "skipped" not in history.err


# every kind of damage, through every reader ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("kind", "spoil", "needle", "fatal"), CORPUS, ids=[c[0] for c in CORPUS])
def test_a_damaged_folder_is_never_passed_unbannered_or_safe(
    clean_run: Path, tmp_path: Path, kind: str, spoil: Spoil, needle: str, fatal: bool
) -> None:
    root = tmp_path / "results"
    clean = root / clean_run.name
    shutil.copytree(clean_run, clean)
    damaged = _damaged_copy(clean_run, root, spoil)
    results = read_results(damaged)
    assert results.problems, kind
    assert bool(results.fatal) == fatal, [str(p) for p in results.problems]

    # the gate: exit 2, one line naming the side and the damage, on either side; never a verdict table
    for base, cand, side in ((clean, damaged, "candidate"), (damaged, clean, "baseline")):
        r = cli("gate", base, cand, "--rule", "throughput:-5%")
        line = _one_error_line(r)
        assert line.startswith(f"bench: error: {side} ") and needle in line, line
        assert str(damaged) in line or damaged.name in line, line
        assert "PASS" not in r.out and "| case |" not in r.out

    # the report: a red banner naming the damage, and no lock called safe on it; or one line, exit 2
    page = tmp_path / "report.html"
    r = cli("report", damaged, "--out", page)
    if fatal:
        assert needle in _one_error_line(r) and not page.exists()
    else:
        assert r.code == 0 and "DAMAGED DATA" in r.err, (r.out, r.err)
        html = page.read_text()
        banner = html[html.index('id="damage-banner"') :]
        banner = banner[: banner.index("</div>")]
        assert needle in banner, banner
        assert html.index('id="damage-banner"') < html.index("<table")  # at the top, above the tables
        assert "flash-sale: survived" not in html
        from dashboards.load import load_run

        if load_run(damaged).cases.empty:  # no row left to show (a header-only table): the banner says why
            assert "No cases." in html
        else:  # the lock's cells rest on the damage: they read unknown (damaged)
            assert "flash-sale: unknown (damaged)" in html
            # the other trials' words sit beside it in the cell: an undamaged trial judged unknown on
            # a busy machine ("unknown") sorts before it, so the cell is matched, not its start
            cell = re.search(r'<td class="(\w+)" data-col="verdict">([^<]*)', html)
            assert cell is not None and cell.group(1) == "unknown", html
            assert "unknown (damaged)" in cell.group(2).split(", "), cell.group(2)

    # history: skipped with a named warning; --check says the newest run is damaged, exit 2, never "safe"
    r = cli("history", root, "--check", "--out", tmp_path / "history.html")
    assert r.code == 2, (r.out, r.err)
    skipped = [line for line in r.err.splitlines() if line.startswith("bench history: skipped")]
    assert len(skipped) == 1 and damaged.name in skipped[0] and needle in skipped[0], r.err
    assert f"DAMAGED {damaged}" in r.out and "DAMAGED (exit 2)" in r.err, (r.out, r.err)
    assert "the newest run is safe" not in r.out


@pytest.mark.slow
def test_merge_and_every_reader_share_the_one_reader(clean_run: Path, tmp_path: Path) -> None:
    """The problems the gate refuses on are exactly the ones the report lists (one reader, one schema)."""
    from dashboards.load import load_run

    damaged = _damaged_copy(clean_run, tmp_path, _cell("overlapping_holds", -3))
    problems = [str(p) for p in read_results(damaged).problems]
    assert load_run(damaged).damaged == problems
    line = _one_error_line(cli("gate", clean_run, damaged, "--rule", "throughput:-5%"))
    assert problems[0] in line
    row = load_run(damaged).cases.iloc[0]
    assert row["verdict"] == "unknown" and str(row["verdict_reason"]).startswith("damaged: overlapping_holds")
    assert pd.isna(row["overlapping_holds"])  # a damaged counter is never summed


# issue 43: the shard merge, baseline update, --out and the first screen ---------------------------


def _as_shard(run: Path) -> Path:
    """The run made a matrix's only shard (1/1) of the cases it holds: what bench merge takes."""
    meta = json.loads((run / "run.json").read_text())
    meta["kind"] = "matrix"
    meta["params"]["shard"] = {"index": 1, "of": 1, "plan": list(meta["cases"]), "lanes": ["redis#0"]}
    (run / "run.json").write_text(json.dumps(meta))
    _tables(lambda f: f.assign(matrix_scenario="flash-sale"))(run)
    return run


#: (kind, damage, what the merge's line must name)
SHARD_DAMAGE: list[tuple[str, Spoil, str]] = [
    ("hist/ missing", _remove("hist"), "hist/ is missing"),
    ("history/ missing", _remove("history"), "history/ is missing"),
    ("a trial's history missing", _remove("history/{case}.parquet"), "__t0.parquet is missing"),
    ("params.evidence bogus", _params("evidence", "bogus"), "params.evidence must be one of"),
    ("params.controls a list", _params("controls", ["redis"]), "params.controls must be a JSON dict"),
    ('run.json "matrix" a string', _meta("matrix", "fast"), "matrix must be a JSON dict"),
    ("no matrix_scenario", _tables(lambda f: f.drop(columns=["matrix_scenario"])), "matrix_scenario"),
]


@pytest.mark.slow
def test_a_clean_shard_merges_and_a_damaged_one_is_refused_naming_folder_and_field(
    clean_run: Path, tmp_path: Path
) -> None:
    clean = _as_shard(_damaged_copy(clean_run, tmp_path / "clean", lambda run: None))
    assert read_results(clean).problems == []
    r = cli("merge", clean, "--no-report", "--results-dir", tmp_path / "merged")
    assert r.code in (0, 1) and "bench: error" not in r.err, (r.code, r.err)  # 1: its one cell is undecided
    (merged,) = list((tmp_path / "merged").iterdir())
    assert read_results(merged).problems == []  # the merge writes what the reader requires

    for kind, spoil, needle in SHARD_DAMAGE:
        shard = _as_shard(_damaged_copy(clean_run, tmp_path / kind.replace(" ", "-"), lambda run: None))
        spoil(shard)
        r = cli("merge", shard, "--no-report", "--results-dir", tmp_path / "refused")
        line = _one_error_line(r)
        assert f"{shard} is damaged, not merged" in line and needle in line, (kind, line)
    assert not (tmp_path / "refused").exists() or not any((tmp_path / "refused").iterdir())


@pytest.mark.slow
def test_a_matrix_whose_controls_are_a_list_renders_with_the_banner(clean_run: Path, tmp_path: Path) -> None:
    matrix = _as_shard(_damaged_copy(clean_run, tmp_path, _params("controls", ["redis"])))
    page = tmp_path / "matrix.html"
    r = cli("report", matrix, "--out", page)
    assert r.code == 0 and "Traceback" not in r.err and "DAMAGED DATA" in r.err, (r.code, r.err)
    html = page.read_text()
    banner = html[html.index('id="damage-banner"') :]
    assert "params.controls must be a JSON dict" in banner[: banner.index("</div>")]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["file", "sys"])
def test_baseline_update_into_an_unwritable_place_changes_nothing_and_says_why(
    clean_run: Path, tmp_path: Path, where: str
) -> None:
    run = _damaged_copy(clean_run, tmp_path / "results", lambda run: None)
    before = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (run / "hist").iterdir()}
    if where == "file":
        (tmp_path / "a-file").write_text("")
        target = tmp_path / "a-file" / "baselines"
        needle = "is a file, not a folder"
    else:
        target = Path("/sys/lockbench-baselines")  # sysfs: refused even to root
        needle = "/sys is not writable"
    r = cli("baseline", "update", run, "--name", "ci", "--baselines-dir", target)
    line = _one_error_line(r)
    assert needle in line and "--baselines-dir" in line and "[Errno" not in line, line
    after = {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in (run / "hist").iterdir()}
    assert after == before  # the run's merged histograms were rewritten before the refusal once
    assert not target.exists()


@pytest.mark.slow
@pytest.mark.parametrize("command", ["report", "history"])
def test_an_empty_or_folder_out_is_one_line_naming_the_option(
    clean_run: Path, tmp_path: Path, command: str
) -> None:
    for out, needle in (("", "must name a file, not an empty path"), (str(tmp_path), "is a folder")):
        r = cli(command, clean_run, "--out", out)
        line = _one_error_line(r)
        assert "--out" in line and needle in line and "free some space" not in line, line


@pytest.mark.slow
def test_the_first_screen_takes_no_safety_from_a_damaged_matrix_and_names_it(
    clean_run: Path, tmp_path: Path
) -> None:
    """A matrix beside a run answers "is it safe?"; a damaged one answers nothing and is named."""
    root = tmp_path / "results"
    run = root / clean_run.name
    shutil.copytree(clean_run, run)
    matrix = _as_shard(_damaged_copy(clean_run, root, lambda run: None))
    meta = json.loads((matrix / "run.json").read_text())
    meta["params"]["shard"] = None  # a whole matrix, not a slice
    meta["run_id"] = matrix.name
    (matrix / "run.json").write_text(json.dumps(meta))

    r = cli("report", run, "--out", tmp_path / "clean.html")
    assert r.code == 0, r.err
    html = (tmp_path / "clean.html").read_text()
    sources = html[html.index('id="safety-sources"') :]
    assert f"matrix {matrix.name} of this commit" in sources[: sources.index("</ol>")]

    _remove("history/{case}.parquet")(matrix)
    r = cli("report", run, "--out", tmp_path / "damaged.html")
    assert r.code == 0 and "Traceback" not in r.err, r.err
    html = (tmp_path / "damaged.html").read_text()
    sources = html[html.index('id="safety-sources"') :]
    sources = sources[: sources.index("</ol>")]
    assert f"matrix {matrix.name} not used" in sources and "__t0.parquet is missing" in sources, sources
    assert "of this commit" not in sources
    row = html[html.index(f'data-row="{IMPL}"') :]
    assert "#safety-source-1" not in row[: row.index("</tr>")]  # no lock's safety cites it


@pytest.mark.slow
def test_history_names_an_older_damaged_folder_it_skipped_and_why(clean_run: Path, tmp_path: Path) -> None:
    """Not only the newest run: every skipped folder is named with its damage, beside "not enough data"."""
    root = tmp_path / "results"
    older = root / "20200101T000000Z-000000"
    shutil.copytree(clean_run, older)
    _remove("hist")(older)
    shutil.copytree(clean_run, root / clean_run.name)
    r = cli("history", root, "--check", "--out", tmp_path / "history.html")
    assert r.code == 2 and "Traceback" not in r.err, (r.out, r.err)
    skipped = [line for line in r.err.splitlines() if line.startswith("bench history: skipped")]
    assert len(skipped) == 1 and str(older) in skipped[0] and "hist/ is missing" in skipped[0], r.err
    assert "NOT ENOUGH DATA" in r.err and f"DAMAGED {older}" not in r.out  # the newest run is the clean one
