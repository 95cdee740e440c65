"""Shards of a matrix (``bench matrix --shard I/N``) and their merge (``bench merge``).

The slice is whole lanes, dealt the same way on every machine; the merge of every shard gives
the cells one unsharded run gives, and refuses (exit 2, one line) anything that is not one
matrix: a shard missing or given twice, another commit, other options, a damaged folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from bench.errors import UserError
from bench.matrix.machine import auto_lanes, busy_cores, cpu_ticks, steal_cores
from bench.matrix.plan import Lane, plan_lanes, plan_matrix
from bench.matrix.shards import deal, lane_slot_seconds, parse_shard, start_order
from bench.matrix.tables import grid
from tests.helpers import bench

SELECTION = ("--impl", "file.flock", "--impl", "redis.set-nx-px-lua", "--scenario", "crash",
             "--evidence", "quick", "--strikes", "1", "--no-report")  # fmt: skip


def test_a_shard_is_i_of_n_and_anything_else_is_one_line() -> None:
    assert parse_shard("2/4").index == 2 and parse_shard(" 1 / 1 ").of == 1
    assert parse_shard(None) is None
    for bad in ("", "0/2", "3/2", "1/0", "a/b", "1-2", "2"):
        with pytest.raises(UserError):
            parse_shard(bad)


def test_the_lanes_are_dealt_whole_the_same_way_every_time_and_each_once() -> None:
    cases, _ = plan_matrix(["redis", "file"], [], ["crash", "long-cs", "restart"], fixed_servers=set())
    lanes = plan_lanes(cases, set())
    assert len(lanes) >= 2
    for of in (1, 2, 3, len(lanes) + 2):
        dealt = deal(lanes, of)
        again = deal(
            plan_lanes(plan_matrix(["redis", "file"], [], ["crash", "long-cs", "restart"], set())[0], set()),
            of,
        )
        assert [[ln.name for ln in s] for s in dealt] == [[ln.name for ln in s] for s in again]
        names = [ln.name for s in dealt for ln in s]
        assert sorted(names) == sorted(ln.name for ln in lanes)  # every lane exactly once
    # a lane is never cut: its cases all go to one shard
    first, second = deal(lanes, 2)
    assert not {c.case_id for ln in first for c in ln.cases} & {c.case_id for ln in second for c in ln.cases}
    assert isinstance(first[0], Lane)


def test_auto_lanes_follow_the_spare_cores() -> None:
    assert auto_lanes(cores=2, busy=0.1)[0] == 3  # a quiet 2-core machine: three lanes of 0.6 core
    assert auto_lanes(cores=2, busy=0.9)[0] == 1
    assert auto_lanes(cores=8, busy=0.5)[0] == 4  # never more than 4
    assert auto_lanes(cores=8, busy=6.5)[0] == 2
    lanes, why = auto_lanes(cores=2, busy=3.0)
    assert lanes == 1 and "3.00 busy now" in why  # a busy machine still runs one lane


def test_steal_is_given_apart_from_the_busy_cores_it_is_part_of(monkeypatch: pytest.MonkeyPatch) -> None:
    """run.json's ``steal_cores``: the share of ``busy_cores`` the hypervisor took, from /proc/stat's 8th field."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    # (busy, total, steal) ticks: 200 over 2 cores, 60 of them busy, 20 of those stolen
    start, end = (1000, 5000, 300), (1060, 5200, 320)
    assert busy_cores(start, end) == 0.6 and steal_cores(start, end) == 0.2
    assert steal_cores((1000, 5000), (1060, 5200)) is None  # a reading without steal: not known, never 0
    now = cpu_ticks()
    assert now is not None and len(now) == 3 and 0 <= now[2] <= now[0] <= now[1]


def test_auto_lanes_measure_the_machine_now() -> None:
    """Without a figure given, the busy cores are sampled from /proc/stat, not the load average."""
    lanes, why = auto_lanes(cores=2)
    assert "busy now" in why and 1 <= lanes <= 3


def _run(tmp: Path, name: str, *extra: str) -> Path:
    r = bench("matrix", *SELECTION, *extra, "--results-dir", str(tmp / name), timeout=600)
    assert r.returncode in (0, 1), r.stderr[-2000:]  # 1: cells thin at one strike (undecided)
    return next(p for p in (tmp / name).iterdir() if p.is_dir())


def _cells(run: Path) -> dict[tuple[str, str], str]:
    meta = json.loads((run / "run.json").read_text())
    rows = pd.read_csv(run / "cases.csv").to_dict("records")
    _, _, cells = grid(rows, meta["params"].get("not_run"))
    return {key: cell.cls for key, cell in cells.items()}


@pytest.mark.server
@pytest.mark.slow
def test_two_shards_merged_give_the_cells_of_one_run(tmp_path: Path) -> None:
    whole = _run(tmp_path, "whole")
    one = _run(tmp_path, "one", "--shard", "1/2")
    two = _run(tmp_path, "two", "--shard", "2/2")
    shard_ids = [set(pd.read_csv(p / "cases.csv")["case"]) for p in (one, two)]
    assert shard_ids[0] and shard_ids[1] and not shard_ids[0] & shard_ids[1]

    r = bench("merge", str(one), str(two), "--no-report", "--results-dir", str(tmp_path / "merged"))
    assert r.returncode in (0, 1), r.stderr[-2000:]
    merged = next(p for p in (tmp_path / "merged").iterdir() if p.is_dir())
    assert set(pd.read_csv(merged / "cases.csv")["case"]) == set(pd.read_csv(whole / "cases.csv")["case"])
    assert _cells(merged) == _cells(whole)
    meta = json.loads((merged / "run.json").read_text())
    assert meta["kind"] == "matrix" and meta["status"] == "complete"
    assert [m["shard"] for m in meta["merged_from"]] == [1, 2] and (merged / "matrix.md").is_file()
    for sub in ("hist", "history"):
        assert {p.stem for p in (merged / sub).glob("*")} >= shard_ids[0] | shard_ids[1]
    # the checkers' witnesses of each shard's failed cases come along, as their histories do
    witnessed = {p.name for shard in (one, two) for p in (shard / "violations").glob("*.parquet")}
    assert {p.name for p in (merged / "violations").glob("*.parquet")} == witnessed

    def refused(*folders: Path) -> str:
        out = bench("merge", *map(str, folders), "--no-report", "--results-dir", str(tmp_path / "refused"))
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
        return out.stderr

    assert "shard 2/2 is missing" in refused(one)
    assert "given twice" in refused(one, one)
    assert "not a shard" in refused(one, whole)
    other = tmp_path / "other" / two.name
    shutil.copytree(two, other)
    meta = json.loads((other / "run.json").read_text())
    meta["git_commit"] = "0" * 40
    (other / "run.json").write_text(json.dumps(meta))
    assert "different commits" in refused(one, other)
    meta["git_commit"] = json.loads((two / "run.json").read_text())["git_commit"]
    meta["params"]["evidence"] = "thorough"
    (other / "run.json").write_text(json.dumps(meta))
    assert "different evidence levels" in refused(one, other)


def test_the_matrix_estimates_the_time_left_only_after_a_twentieth_of_its_caps(tmp_path: Path) -> None:
    from rich.console import Console

    from bench.matrix.lanes import Shared

    shared = Shared(folder=None, console=Console(), total=100, caps_s=1000.0)  # type: ignore[arg-type]
    shared.caps_done_s = 10.0  # one short case: says little about the rest
    assert shared.time_left().endswith("estimating the time left")
    shared.caps_done_s = 100.0
    assert "left" in shared.time_left() and "estimating" not in shared.time_left()


def _unit(scenario: str, duration: float, cases: int = 1) -> list[SimpleNamespace]:
    settings = SimpleNamespace(duration=duration, processes=1)
    return [
        SimpleNamespace(matrix_scenario=scenario, backend="zookeeper", fault=None, settings=settings)
        for _ in range(cases)
    ]


def test_lanes_start_by_the_slot_seconds_they_hold_not_by_their_cases() -> None:
    """A lane of two heavy units (few cases) starts before a lane of many light cases that holds
    fewer slot-seconds: heavy units never meet, so started last they ran one after the other
    with the machine nearly idle (shard 4, 2026-12-06)."""
    heavy = SimpleNamespace(
        name="heavy", units=[_unit("session-pause", 100, 2), _unit("session-pause", 100, 2)]
    )
    light = SimpleNamespace(name="light", units=[_unit("crash", 60, 2) for _ in range(5)])
    small = SimpleNamespace(name="small", units=[_unit("crash", 50)])
    assert lane_slot_seconds(heavy) == 400  # two slots of three, 100 s each
    assert lane_slot_seconds(light) == 300
    assert sum(c.settings.duration for u in light.units for c in u) > sum(
        c.settings.duration for u in heavy.units for c in u
    )  # the old order (the cases' durations) put the light lane first
    assert [ln.name for ln in start_order([small, light, heavy])] == ["heavy", "light", "small"]
    twin = SimpleNamespace(name="a-twin", units=light.units)
    assert [ln.name for ln in start_order([light, twin])] == ["a-twin", "light"]  # ties: by name
