"""bench history keeps the results reader's verdict on unchanged folders (issue 42): the same page, fewer checks.

Each folder still goes through ``resultsio.read_results`` the first time it is seen, and again
whenever one of its files, the reader's code or its libraries change; in between its verdict
(drawn, or skipped and why) comes from ``<results>/history/.checked.json``. The figures come
from cases.parquet either way (one DuckDB scan), so the page must be the same one, with the
same folders skipped for the same reasons, as when every folder is checked. Counted: calls
of the reader, never seconds.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

import bench.history.read as history_read
from bench.history.checked import CACHE_NAME, RACY_NS, CheckedFolders
from bench.history.command import page_data
from bench.history.read import read_runs
from bench.history.series import build_series, order_runs
from tests.helpers import bench_in_process
from tests.test_damaged_results import _hist, _remove, _undecodable, clean_run  # noqa: F401  (a real run: the fixture)
from tests.test_history import make_history


def _age(root: Path, seconds: float = 600.0) -> None:
    """Every file under ``root`` last written ``seconds`` ago: settled, past the window for racy verdicts."""
    stamp = time.time() - seconds
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            os.utime(Path(dirpath) / name, (stamp, stamp))


@pytest.fixture
def checks(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The folders whose tables were checked (bench history's check_tables), in order."""
    seen: list[Path] = []
    real: Callable = history_read.check_tables

    def counting(paths: list[Path]):  # type: ignore[no-untyped-def]
        seen.extend(paths)
        return real(paths)

    monkeypatch.setattr(history_read, "check_tables", counting)
    return seen


@pytest.fixture
def wholes(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The folders checked whole by the results reader (every file: bench history's read_meta), in order."""
    seen: list[Path] = []
    real: Callable = history_read.read_meta

    def counting(path: Path):  # type: ignore[no-untyped-def]
        seen.append(path)
        return real(path)

    monkeypatch.setattr(history_read, "read_meta", counting)
    return seen


def _figures(root: Path, cache: Path | None, repo: Path) -> tuple[str, list[tuple[str, str, bool]]]:
    """What the page draws (its data, less the time it was made) and the folders skipped, with why."""
    loaded = read_runs([root], cache=cache)
    order = order_runs(loaded.runs, repo)
    series = build_series(loaded, order)
    data = page_data(loaded, order, series, root / "history" / "index.html", {}, None, None)
    data.pop("generated_at")
    skipped = sorted((str(s.path), s.why, s.damaged) for s in loaded.skipped)
    return json.dumps(data, sort_keys=True, default=str), skipped


def _copies(clean: Path, root: Path, count: int) -> list[Path]:
    start = datetime.strptime(clean.name.split("-", 1)[0], "%Y%m%dT%H%M%SZ")
    out = []
    for i in range(count):
        target = root / f"{start + timedelta(minutes=i + 1):%Y%m%dT%H%M%SZ}-{i:06x}"
        shutil.copytree(clean, target)
        out.append(target)
    return out


@pytest.mark.slow
@pytest.mark.server
def test_kept_verdicts_draw_the_same_page_as_checking_every_folder(
    clean_run: Path,  # noqa: F811
    tmp_path: Path,
    checks: list[Path],
) -> None:
    root = tmp_path / "results"
    _first, second, _third, damaged = _copies(clean_run, root, 4)
    _hist(_undecodable)(
        damaged
    )  # the newest run is checked whole: a histogram no figure draws, still skipped
    _age(root)
    cache = root / "history" / CACHE_NAME

    every = _figures(root, None, tmp_path)  # every folder checked, as before issue 42
    assert len(checks) == 4 and not cache.exists()
    assert [p for p, _, _ in every[1]] == [str(damaged)] and "hist/" in every[1][0][1]

    checks.clear()
    assert _figures(root, cache, tmp_path) == every  # first time: each folder checked, verdicts kept
    assert len(checks) == 4 and cache.is_file()
    checks.clear()
    assert _figures(root, cache, tmp_path) == every  # then: the same page, no folder checked
    assert checks == []

    # a folder damaged after its verdict was kept is checked again and skipped, as without the cache
    _remove("hist/{case}.json")(second)
    _age(second)
    checks.clear()
    now = _figures(root, cache, tmp_path)
    assert checks == [second]
    checks.clear()
    assert now == _figures(root, None, tmp_path) and len(checks) == 4
    assert sorted(p for p, _, _ in now[1]) == sorted([str(second), str(damaged)])
    assert len(json.loads(now[0])["runs"]) == 2  # first and third drawn


def test_the_reader_or_a_file_changing_checks_the_folder_again(tmp_path: Path, checks: list[Path]) -> None:
    root = tmp_path / "results"
    runs = make_history(root, [430.0, 431.0, 429.0])
    _age(root)
    cache = root / "history" / CACHE_NAME
    before = _figures(root, cache, tmp_path)
    assert len(checks) == 3
    checks.clear()
    assert _figures(root, cache, tmp_path) == before and checks == []

    # another reader (resultsio's rules, a library's version): every verdict is stale
    data = json.loads(cache.read_text())
    cache.write_text(json.dumps({**data, "reader": "another reader"}))
    assert _figures(root, cache, tmp_path) == before and len(checks) == 3
    checks.clear()

    # a file rewritten (same size, another mtime), added or removed: that folder only
    run_json = runs[1] / "run.json"
    run_json.write_bytes(run_json.read_bytes())
    os.utime(run_json, (time.time() - 300, time.time() - 300))
    (runs[2] / "hist").mkdir(exist_ok=True)
    (runs[2] / "hist" / "extra.json").write_text("{}")
    _age(runs[2])
    assert _figures(root, cache, tmp_path)[1] == _figures(root, None, tmp_path)[1]
    assert sorted(checks[:2]) == sorted([runs[1], runs[2]])


def test_a_file_written_just_now_leaves_its_folder_unkept(tmp_path: Path, checks: list[Path]) -> None:
    """Timestamps are coarse: a second write in the same tick, of the same size, would go unseen."""
    root = tmp_path / "results"
    old, fresh = make_history(root, [430.0, 431.0])
    _age(old)
    os.utime(fresh / "run.json", None)  # now
    cache = root / "history" / CACHE_NAME
    _figures(root, cache, tmp_path)
    checks.clear()
    _figures(root, cache, tmp_path)
    assert checks == [fresh]
    assert RACY_NS >= 1_000_000_000


def test_a_damaged_missing_or_unwritable_cache_is_no_error(tmp_path: Path, checks: list[Path]) -> None:
    root = tmp_path / "results"
    make_history(root, [430.0, 431.0])
    _age(root)
    truth = _figures(root, None, tmp_path)
    cache = root / "history" / CACHE_NAME
    cache.parent.mkdir(parents=True)
    for content in (b"", b"{not json", b"[]", b'{"reader": 5, "folders": []}', b"[" * 100_000):
        cache.write_bytes(content)
        assert _figures(root, cache, tmp_path) == truth
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    checks.clear()
    assert _figures(root, blocked / "history" / CACHE_NAME, tmp_path) == truth and len(checks) == 2
    entries = CheckedFolders(cache).entries
    assert len(entries) == 2 and all("run" in e for e in entries.values())


def test_bench_history_keeps_the_verdicts_beside_the_page(tmp_path: Path, checks: list[Path]) -> None:
    root = tmp_path / "results"
    make_history(root, [430.0, 431.0, 429.0])
    (root / "history").mkdir()
    _age(root)
    out = tmp_path / "elsewhere" / "page.html"
    first = bench_in_process("history", root, "--out", out)
    assert first.code == 0 and len(checks) == 3, first
    page = out.read_text()
    assert (root / "history" / CACHE_NAME).is_file()
    checks.clear()
    again = bench_in_process("history", root, "--out", out)
    assert again.code == 0 and checks == [] and again.err == first.err, again
    generated = re.compile(r"generated [^<]*<|\"generated_at\": *\"[^\"]*\"")
    assert generated.sub("", out.read_text()) == generated.sub("", page)
