"""The checkers' witnesses (issue 40): each violation a checker counts carries the holds behind it.

Planted histories judged by the real checkers; the violations table judging writes
(bench/run/witnesses.py) names the same holds, with the lock's other holds around them, and
the report says so plainly when a folder predates the file.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from bench.run.witnesses import witness_frame, write_witnesses
from dashboards.load import RunData
from dashboards.timeline import timeline_section
from tests.test_checkers import history
from workloads.checks.exclusion import check_overlaps
from workloads.checks.fencing import check_fencing_order
from workloads.checks.ownership import check_ownership
from workloads.checks.witness import check_witness

MS = 1_000_000


def _pair(w: object) -> list[tuple[str, int]]:
    return [(h["client"], h["start_ns"]) for h in w.holds]  # type: ignore[attr-defined]


def test_an_overlap_names_the_hold_it_began_inside_and_a_third_hold_is_context() -> None:
    h = history(
        ("a", 0, "acquire", "ok", "L", 1 * MS),
        ("b", 0, "acquire", "ok", "L", 3 * MS),
        ("b", 1, "release", "invoke", "L", 4 * MS),
        ("a", 1, "release", "invoke", "L", 5 * MS),
        ("c", 0, "acquire", "ok", "L", 6 * MS),
        ("c", 1, "release", "invoke", "L", 7 * MS),
    )
    result = check_overlaps(h)
    assert result.counters["overlapping_holds"] == 1
    (w,) = result.witnesses
    assert w.kind == "overlap" and w.at_ns == 3 * MS and _pair(w) == [("a", 1 * MS), ("b", 3 * MS)]
    table = witness_frame([result], h)
    assert list(table["role"]) == ["first", "second", "near"]
    assert list(table["client"]) == ["a", "b", "c"]


def test_a_lost_lock_names_the_holder_told_not_owned_and_the_client_granted_meanwhile() -> None:
    h = history(
        ("a", 0, "acquire", "ok", "L", 1 * MS),
        ("b", 0, "acquire", "ok", "L", 3 * MS),
        ("a", 1, "release", "invoke", "L", 4 * MS),
        ("a", 1, "release", "ok", "L", 5 * MS, None, 0),  # "not owned"
        ("b", 1, "release", "invoke", "L", 6 * MS),
    )
    result = check_ownership(h)
    (w,) = result.witnesses
    assert w.kind == "lost-lock" and w.at_ns == 5 * MS
    # the hold that lost its lock first, then the hold of the client that had it then
    assert _pair(w) == [("a", 1 * MS), ("b", 3 * MS)]


def test_tokens_out_of_order_name_the_earlier_higher_grant_and_a_reading_names_who_was_inside() -> None:
    h = history(
        ("a", 0, "acquire", "ok", "L", 1 * MS, 9),
        ("a", 1, "release", "invoke", "L", 2 * MS),
        ("b", 0, "acquire", "ok", "L", 3 * MS, 5),
        ("b", 1, "release", "invoke", "L", 4 * MS),
    )
    (w,) = check_fencing_order(h).witnesses
    assert w.kind == "tokens" and _pair(w) == [("a", 1 * MS), ("b", 3 * MS)]
    assert [x["token"] for x in w.holds] == [9, 5]
    seen = history(
        ("a", 0, "acquire", "ok", "L", 1 * MS),
        ("b", 0, "acquire", "ok", "L", 2 * MS),
        ("b", 1, "witness", "ok", "L", 3 * MS, None, 2),
        ("b", 2, "release", "invoke", "L", 4 * MS),
        ("a", 1, "release", "invoke", "L", 5 * MS),
    )
    (w,) = check_witness(seen).witnesses
    assert w.kind == "witness" and w.at_ns == 3 * MS and _pair(w) == [("a", 1 * MS), ("b", 2 * MS)]


def test_a_case_without_witnesses_writes_no_file(tmp_path: Path) -> None:
    h = history(("a", 0, "acquire", "ok", "L", 1 * MS), ("a", 1, "release", "invoke", "L", 2 * MS))
    (tmp_path / "violations.parquet").write_bytes(b"left by an earlier attempt")
    assert write_witnesses(tmp_path / "history.parquet", [check_overlaps(h)], h) is None
    assert not (tmp_path / "violations.parquet").exists()


def test_a_folder_written_before_witnesses_were_kept_says_so_instead_of_drawing(tmp_path: Path) -> None:
    h = history(
        ("a", 0, "acquire", "ok", "L", 1 * MS),
        ("b", 0, "acquire", "ok", "L", 2 * MS),
        ("b", 1, "release", "invoke", "L", 3 * MS),
        ("a", 1, "release", "invoke", "L", 4 * MS),
    )
    (tmp_path / "history").mkdir()
    h.to_parquet(tmp_path / "history" / "old.parquet")
    row = {"case": "old", "impl": "x", "verdict": "invalid", "overlapping_holds": 1}
    page = timeline_section(RunData(path=tmp_path, meta={"params": {}}, cases=pd.DataFrame([row])))
    assert 'id="timeline-old"' in page and "No witnesses recorded (folder written before" in page
    assert 'class="tl-data"' not in page  # nothing re-derived from the history, nothing drawn


def test_a_stale_write_accepted_names_the_writers_hold_and_the_newer_grant() -> None:
    from workloads.checks.fencing import check_fencing

    h = history(
        ("a", 0, "acquire", "ok", "flash-sale:item-0", 1 * MS, 1),
        ("b", 0, "acquire", "ok", "flash-sale:item-0", 3 * MS, 2),
        ("b", 1, "release", "invoke", "flash-sale:item-0", 4 * MS),
        ("a", 1, "purchase", "invoke", "flash-sale:item-0", 5 * MS),
        ("a", 1, "purchase", "ok", "flash-sale:item-0", 6 * MS, None, 1),
        ("a", 2, "release", "invoke", "flash-sale:item-0", 7 * MS),
    )
    state = {
        "fencing": {
            "mode": "observe",
            "stale_writes": 1,
            "stale_reads": 0,
            "refused": [["item-0", 1, "a", "w"]],
        }
    }
    result = check_fencing(state, h)
    assert result.status == "invalid"
    (w,) = result.witnesses
    assert w.kind == "stale-write" and w.at_ns == 6 * MS and _pair(w) == [("a", 1 * MS), ("b", 3 * MS)]
