"""The shrunk schedule drawn on the failing run's hold timeline (dashboards/explore_view.py).

A planted explore folder: one run whose history has a strike window and two overlapping holds,
the checkers' witnesses of it written by judging's own writer, and run.json ``explore`` naming
the shrunk schedule. The picture must mark every event at its time after the round's start, and
its holds must be the checkers' (the same pair of clients), not ones the dashboards paired.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from bench.run.witnesses import WITNESS_FILE, write_witnesses
from dashboards.explore_view import EVENT_COLOUR, explore_section
from dashboards.load import RunData
from tests.test_checkers import history
from workloads.checks.core import check_lock_pairs

MS = 1_000_000
S = 1_000 * MS
CASE = "x__explore__r0"
LOCK = "m0:flash-sale:item-0"
SCHEDULE = {
    "format": 1, "impl": "x", "backend": "redis", "topology": None, "seed": 3, "settings": {}, "lock_params": {},
    "fencing": "off",
    "events": [{"kind": "world-pause", "at": 0.0, "params": {"seconds": 2.5}}, {"kind": "restart", "at": 0.3, "params": {}}],
}  # fmt: skip


def _history() -> pd.DataFrame:
    """1-u0 holds from 1 s; the round's strike starts at 1.1 s; 2-u0 is granted at 3.8 s while 1-u0 still holds."""
    return history(
        ("1-u0", 0, "acquire", "invoke", LOCK, 1 * S - 5 * MS),
        ("1-u0", 0, "acquire", "ok", LOCK, 1 * S),
        ("bench", 0, "fault", "invoke", "explore: +0s world-pause 2.5s, +0.3s restart", int(1.1 * S)),
        ("1-u0", 1, "pause", "invoke", LOCK, int(1.11 * S)),
        ("2-u0", 0, "acquire", "invoke", LOCK, int(1.2 * S)),
        ("bench", 0, "fault", "ok", "explore: +0s world-pause 2.5s, +0.3s restart", int(3.6 * S)),
        ("1-u0", 1, "pause", "ok", LOCK, int(3.61 * S), None, 2500),
        ("2-u0", 0, "acquire", "ok", LOCK, int(3.8 * S)),
        ("1-u0", 2, "release", "invoke", LOCK, int(4.5 * S)),
        ("1-u0", 2, "release", "ok", LOCK, int(4.51 * S), None, 0),
        ("2-u0", 1, "release", "invoke", LOCK, int(4.9 * S)),
        ("2-u0", 1, "release", "ok", LOCK, int(4.91 * S), None, 1),
    )


def _folder(tmp_path: Path, found: bool = True) -> RunData:
    (tmp_path / "history").mkdir()
    (tmp_path / "violations").mkdir()
    h = _history()
    h.to_parquet(tmp_path / "history" / f"{CASE}.parquet")
    write_witnesses(tmp_path / "history" / f"{CASE}.parquet", check_lock_pairs(h).results, h)
    (tmp_path / "history" / WITNESS_FILE).rename(tmp_path / "violations" / f"{CASE}.parquet")
    entry = (
        {"found": found, "schedule": SCHEDULE, "case": CASE, "reason": "overlaps"}
        if found
        else {"found": False}
    )
    meta = {"kind": "explore", "params": {"ttl_s": 5.0}, "explore": {"x": entry}}
    row = {"case": CASE, "impl": "x", "workload": "flash-sale", "verdict": "invalid", "fault": "explore"}
    (tmp_path / "run.json").write_text(json.dumps(meta))
    return RunData(path=tmp_path, meta=meta, cases=pd.DataFrame([row]))


def _figure(section: str) -> dict:
    data = section.split('<script type="application/json" class="ex-data">', 1)[1].split("</script>", 1)[0]
    return json.loads(data)


def test_every_event_is_marked_at_its_time_after_the_round_s_start(tmp_path: Path) -> None:
    section = explore_section(_folder(tmp_path))
    figure = _figure(section)
    lines = [s for s in figure["layout"]["shapes"] if s.get("line", {}).get("color") == EVENT_COLOUR]
    # the timeline's zero is the history's first event (0.995 s); the round starts at 1.1 s
    assert sorted(round(s["x0"], 3) for s in lines) == [0.105, 0.405]
    spans = [s for s in figure["layout"]["shapes"] if s.get("fillcolor") == EVENT_COLOUR]
    assert [(round(s["x0"], 3), round(s["x1"], 3)) for s in spans] == [(0.105, 2.605)]
    labels = [
        a["text"] for a in figure["layout"]["annotations"] if a.get("font", {}).get("color") == EVENT_COLOUR
    ]
    assert labels == ["event: world-pause 2.5s", "event: restart"]
    lo, hi = figure["layout"]["xaxis"]["range"]
    assert lo <= 0.105 and hi >= 2.605


def test_the_holds_drawn_are_the_checkers_pair(tmp_path: Path) -> None:
    """The caption names the two clients the checker found overlapping: the timeline's, from violations/."""
    section = explore_section(_folder(tmp_path))
    assert "client 1-u0 held m0:flash-sale:item-0" in section and "client 2-u0 was granted" in section
    # without the checkers' witness file there is no pair to draw: the schedule alone, said so
    (tmp_path / "violations" / f"{CASE}.parquet").unlink()
    bare = RunData(path=tmp_path, meta=json.loads((tmp_path / "run.json").read_text()), cases=_folder_rows())
    alone = explore_section(bare)
    assert "No pair of holds to draw" in alone and "1-u0" not in alone
    assert _figure(alone)["data"] == []


def _folder_rows() -> pd.DataFrame:
    return pd.DataFrame([{"case": CASE, "impl": "x", "workload": "flash-sale", "verdict": "invalid"}])


def test_nothing_found_and_other_folders_draw_nothing(tmp_path: Path) -> None:
    assert explore_section(_folder(tmp_path, found=False)) == ""
    matrix = RunData(path=tmp_path, meta={"kind": "matrix"}, cases=pd.DataFrame())
    assert explore_section(matrix) == ""
