"""bench history reads the tables of every folder and checks only the newest runs whole (issue 42 item 4).

A first pass over 1,000 folders took 109 s: every folder went through the whole results
reader (the case table validated alone, every histogram decoded, every history file
opened). Now all case tables are read in one DuckDB scan and validated as one frame, and
only the newest run of each impl (the one ``--check`` calls safe) is checked whole.
Counted here: folders checked whole and schema validations, never seconds.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

import bench.history.read as history_read
from bench.history.read import read_runs
from tests.test_history import make_history, make_run


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, list]:
    """Folders checked whole (read_meta) and per-folder schema validations, as history makes them."""
    seen: dict[str, list] = {"whole": [], "validations": []}
    real_whole: Callable = history_read.read_meta
    real_schema: Callable = history_read._schema_problems

    def whole(path: Path):  # type: ignore[no-untyped-def]
        seen["whole"].append(path)
        return real_whole(path)

    def schema(frame, file):  # type: ignore[no-untyped-def]
        seen["validations"].append(file)
        return real_schema(frame, file)

    monkeypatch.setattr(history_read, "read_meta", whole)
    monkeypatch.setattr(history_read, "_schema_problems", schema)
    return seen


def test_only_the_newest_run_of_each_impl_is_checked_whole(tmp_path: Path, counted: dict[str, list]) -> None:
    root = tmp_path / "results"
    runs = make_history(root, [430.0 + i for i in range(12)])
    other = [make_run(root, 20 + i, 300.0, impl="redis.set-nx-px") for i in range(3)]
    loaded = read_runs([root])
    assert len(loaded.runs) == 15 and not loaded.skipped
    assert sorted(counted["whole"]) == sorted([runs[-1], other[-1]])
    assert counted["validations"] == []  # every table validated in one frame, none alone
    assert len(loaded.cases) == 15 and set(loaded.cases["_folder"]) == {str(p) for p in [*runs, *other]}


def test_a_damaged_table_is_named_from_the_one_frame_and_only_its_folder_validated_alone(
    tmp_path: Path, counted: dict[str, list]
) -> None:
    import pandas as pd

    root = tmp_path / "results"
    runs = make_history(root, [430.0, 431.0, 429.0, 432.0])
    bad = runs[1]
    frame = pd.read_parquet(bad / "cases.parquet")
    frame.loc[0, "overlapping_holds"] = -1
    frame.to_parquet(bad / "cases.parquet", index=False)
    loaded = read_runs([root])
    assert [s.path for s in loaded.skipped] == [bad]
    assert "overlapping_holds" in loaded.skipped[0].why and loaded.skipped[0].damaged
    assert counted["validations"] == [str(bad / "cases.parquet")]
    assert str(bad) not in set(loaded.cases["_folder"]) and len(loaded.runs) == 3


def test_an_older_run_with_an_undecodable_histogram_is_drawn_the_newest_is_not(tmp_path: Path) -> None:
    """No figure draws a histogram: an older run's is not decoded; the newest run's is, as --check speaks of it.

    The newest skipped, the run before it becomes the newest and is checked whole in its turn.
    """
    root = tmp_path / "results"
    older, middle, newest = make_history(root, [430.0, 431.0, 432.0])
    for run in (older, newest):
        hist = next((run / "hist").glob("*__t0.json"))
        hist.write_text('{"histograms": {"acquire_ok": "bm90IGFuIEhEUiBoaXN0b2dyYW0="}}')
    loaded = read_runs([root])
    assert list(loaded.runs) == [str(older), str(middle)]
    assert [s.path for s in loaded.skipped] == [newest] and "hist/" in loaded.skipped[0].why
