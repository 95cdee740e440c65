"""The reentrant workload: its pure checker on hand-made histories, and whole runs through bench."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import bench
from workloads.checks.reentrant import check_free_at_end, check_nesting, check_reentrant
from workloads.harness.catalog import WORKLOADS
from workloads.harness.recording import history_frame

L = "reentrant:item-0"
FREE = {"locks": {L: {"free": True}}}


def _h(*events: tuple) -> pd.DataFrame:
    """Events as (client, seq, op, type, t_ns[, value]) on one lock."""
    rows = []
    for e in events:
        client, seq, op, type_, t = e[:5]
        value = e[5] if len(e) > 5 else None
        rows.append((client, seq, op, type_, L, t, None, value, None))
    return history_frame(rows)


def _nested(client: str, t0: int, inner_released_at: int, outer_released_at: int) -> list[tuple]:
    """One client: outer acquire, inner acquire, inner release, outer release."""
    return [
        (client, 0, "acquire", "invoke", t0),
        (client, 0, "acquire", "ok", t0 + 1),
        (client, 1, "acquire", "invoke", t0 + 2),
        (client, 1, "acquire", "ok", t0 + 3),
        (client, 2, "release", "invoke", inner_released_at),
        (client, 2, "release", "ok", inner_released_at + 1),
        (client, 3, "release", "invoke", outer_released_at),
        (client, 3, "release", "ok", outer_released_at + 1),
    ]


def test_catalog_entry_requires_reentrancy() -> None:
    info = WORKLOADS["reentrant"]
    assert info.requires == "reentrant" and info.path.exists()
    assert info.options["depth"] == "--depth"
    assert info.check_function() is check_reentrant


def test_nested_holds_one_after_another_are_valid() -> None:
    history = _h(*_nested("a", 100, 200, 300), *_nested("b", 400, 500, 600))
    verdict = check_reentrant(history, {"items": {}, **FREE})
    nesting = next(r for r in verdict.results if r.name == "nesting")
    assert nesting.status == "valid"
    assert nesting.counters == {"nested_acquires": 2, "max_hold_depth": 2, "reentry_failures": 0}
    assert verdict.counters["overlapping_holds"] == 0
    assert verdict.counters["locks_not_free_at_end"] == 0


def test_a_lock_freed_by_the_inner_release_shows_an_overlap() -> None:
    """b gets in between a's inner release (200) and a's outer release (300)."""
    history = _h(*_nested("a", 100, 200, 300), *_nested("b", 210, 250, 260))
    verdict = check_reentrant(history, FREE)
    assert verdict.status == "invalid"
    assert verdict.counters["overlapping_holds"] > 0


def test_a_refused_reentry_is_a_failure() -> None:
    history = _h(
        ("a", 0, "acquire", "invoke", 100),
        ("a", 0, "acquire", "ok", 101),
        ("a", 1, "acquire", "invoke", 110),
        ("a", 1, "acquire", "fail", 900),
        ("a", 2, "release", "invoke", 950),
        ("a", 2, "release", "ok", 951),
        ("b", 0, "acquire", "invoke", 120),  # b waiting while a holds is no reentry failure
        ("b", 0, "acquire", "fail", 940),
    )
    result = check_nesting(history)
    assert result.status == "invalid"
    assert result.counters["reentry_failures"] == 1


def test_without_nesting_reentrancy_was_not_exercised() -> None:
    history = _h(
        ("a", 0, "acquire", "invoke", 1), ("a", 0, "acquire", "ok", 2), ("a", 1, "release", "invoke", 3)
    )
    assert check_nesting(history).status == "unknown"


def test_lock_taken_after_every_release_is_invalid_unless_a_hold_was_left_open() -> None:
    closed = _h(*_nested("a", 100, 200, 300))
    taken = {"locks": {L: {"free": False}}}
    assert check_free_at_end(closed, taken).status == "invalid"
    assert check_free_at_end(closed, taken).counters["locks_not_free_at_end"] == 1
    left_open = _h(("a", 0, "acquire", "invoke", 1), ("a", 0, "acquire", "ok", 2))
    assert check_free_at_end(left_open, taken).status == "unknown"
    assert check_free_at_end(closed, FREE).status == "valid"
    assert check_free_at_end(closed, {}).status == "unknown"


# --- whole runs -----------------------------------------------------------------------------

SHORT = ["--workload", "reentrant", "--duration", "2", "--users", "8", "--cs", "2ms", "--no-report"]

#: Claims reentrancy, re-grants to its own holder, but its first release deletes the key.
FREES_EARLY = textwrap.dedent(
    '''
    from lockimpls.base import Capabilities
    from lockimpls.redis_locks import SetNxPxLua


    class FreesOnFirstRelease(SetNxPxLua):
        """A counterfeit reentrant lock: nested grants are local, any release frees the server key."""

        id = "user.frees-on-first-release"
        capabilities = Capabilities(ttl=True, fencing=False, reentrant=True)
        _holding = None

        def _try_acquire(self):
            if self._holding is not None:
                return self._new_lease(self._holding.owner)
            self._holding = super()._try_acquire()
            return self._holding

        def _release(self, lease):
            self._holding = None
            return super()._release(lease)
    '''
)


def _row(results: Path) -> tuple[pd.Series, dict]:
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    row = pd.read_csv(runs[0] / "cases.csv").iloc[0]
    case = json.loads((runs[0] / "run.json").read_text())["cases"][0]
    return row, json.loads((runs[0] / "hist" / f"{case}.json").read_text())


@pytest.mark.slow
def test_redis_reentrant_runs_the_workload_valid(tmp_path: Path) -> None:
    results = tmp_path / "results"
    r = bench("run", "--impl", "redis.reentrant", "--impl", "redis.set-nx-px-lua", *SHORT,
              "--results-dir", str(results))  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "skipping redis.set-nx-px-lua" in r.stderr
    row, case = _row(results)
    assert row["impl"] == "redis.reentrant" and row["verdict"] == "valid"
    assert row["nested_acquires"] > 0 and row["max_hold_depth"] == 3
    assert row["reentry_failures"] == 0 and row["locks_not_free_at_end"] == 0
    assert row["overlapping_holds"] == 0 and row["lost_updates"] == 0
    assert row["lockstat_reentries"] == row["nested_acquires"]
    assert case["final_state"]["locks"] == {L: {"free": True}}


@pytest.mark.slow
def test_a_counterfeit_reentrant_lock_is_caught(tmp_path: Path) -> None:
    (tmp_path / "counterfeit.py").write_text(FREES_EARLY)
    results = tmp_path / "results"
    r = bench("run", "--impl", "counterfeit:FreesOnFirstRelease", *SHORT, "--results-dir", str(results),
              cwd=tmp_path)  # fmt: skip
    assert r.returncode == 1, r.stderr[-3000:]  # the lock was found unsafe: the run fails
    row, _ = _row(results)
    assert row["verdict"] == "invalid"
    assert row["overlapping_holds"] > 0
    assert row["witness_violations"] > 0 or row["lost_updates"] > 0


def test_non_reentrant_impls_are_skipped(tmp_path: Path) -> None:
    r = bench("run", "--impl", "redis.redis-py", "--workload", "reentrant", "--results-dir", str(tmp_path))
    assert r.returncode == 2
    assert "skipping redis.redis-py for reentrant: it needs reentrant" in r.stderr
    assert r.stderr.strip().splitlines()[-1] == "bench: error: no impl of those can run workload reentrant"
