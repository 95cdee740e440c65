"""A case whose answer is the harness's, not the lock's, runs once more (bench/matrix/rerun.py).

Buyers that never started decide no cell: the case runs again, and only a second attempt that
also never starts is recorded, as unknown. A failure a generator stall could explain is run
again too; a second stall leaves the cell undecided.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from bench.matrix.rerun import NO_BUYERS, rerun_reason, settle
from bench.run.case import CaseFailed
from tests.helpers import bench
from tests.unstarted_locks import DIR_ENV


def _result(**row: object) -> dict:
    base = {"case": "x__crash", "verdict": "valid", "acquisitions": 40, "acquire_timeouts": 0,
            "acquire_unknown": 0, "stall_reason": ""}  # fmt: skip
    return {"row": {**base, **row}}


def test_a_case_nobody_asked_the_lock_in_runs_again() -> None:
    assert rerun_reason(_result(acquisitions=0, verdict="unknown")) == NO_BUYERS
    # timeouts are asking: a lock nobody could take is the lock's answer, not the harness's
    assert rerun_reason(_result(acquisitions=0, acquire_timeouts=3)) == ""
    assert rerun_reason(_result()) == ""


def test_only_a_failure_a_stall_could_explain_runs_again() -> None:
    stall = "a Locust process stalled 0.6 s near the violation, against a 1 s lease"
    assert "stall could explain" in rerun_reason(_result(verdict="invalid", stall_reason=stall))
    assert rerun_reason(_result(verdict="invalid")) == ""  # a clean failure is the answer
    assert rerun_reason(_result(verdict="valid", stall_reason=stall)) == ""  # green needs no second look
    assert rerun_reason(CaseFailed("x: Locust exited")) == ""  # no result: the lane records it lost


def test_the_second_answer_is_recorded_with_why_there_were_two() -> None:
    again = settle(
        "a failure a stall could explain (...)", _result(verdict="invalid", stall_reason="stalled again")
    )
    assert isinstance(again, dict)
    assert again["row"]["stall_reason"] == "stalled again"  # stays: the cell is "stalled", undecided
    assert again["row"]["rerun_reason"].startswith("run twice: the first attempt showed a failure a stall")
    lost = settle(NO_BUYERS, _result(acquisitions=0))
    assert isinstance(lost, CaseFailed) and "in both of its two attempts" in str(lost)
    logged = settle(NO_BUYERS, {**_result(acquisitions=0), "log": "locust said this"})
    assert isinstance(logged, CaseFailed) and logged.log == "locust said this"
    # both attempts' output is kept, in order (P kept only the second's)
    twice = settle(NO_BUYERS, {**_result(acquisitions=0), "log": "second said"}, first_log="first said")
    assert isinstance(twice, CaseFailed) and twice.log is not None
    assert twice.log.index("attempt 1 of 2") < twice.log.index("first said") < twice.log.index("second said")
    stood = settle(NO_BUYERS, {**_result(), "log": "second said"}, first_log="first said")
    assert isinstance(stood, dict) and "first said" in stood["log"] and "second said" in stood["log"]
    # a case run again for a stall whose second attempt never started says so, not "both"
    after_stall = settle("a failure a stall could explain (...)", _result(acquisitions=0))
    assert isinstance(after_stall, CaseFailed) and "both" not in str(after_stall)
    assert "the first attempt showed a failure a stall could explain" in str(after_stall)


@pytest.mark.server
def test_a_matrix_case_whose_buyers_never_started_is_run_again(tmp_path: Path) -> None:
    r = bench(
        "matrix", "--impl", "tests.unstarted_locks:FirstProcessNeverStarts", "--scenario", "flash-sale",
        "--evidence", "quick", "--no-report", "--results-dir", str(tmp_path / "r"),
        env={DIR_ENV: str(tmp_path)},
    )  # fmt: skip
    assert "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "running once more" in r.stderr and NO_BUYERS in r.stderr
    (run,) = (tmp_path / "r").iterdir()
    row = pd.read_csv(run / "cases.csv").iloc[0]
    assert row["verdict"] == "valid" and row["acquisitions"] > 0, row.to_dict()
    assert row["rerun_reason"] == f"run twice: the first attempt showed {NO_BUYERS}"
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.server
def test_a_matrix_case_whose_buyers_never_start_twice_is_unknown(tmp_path: Path) -> None:
    r = bench(
        "matrix", "--impl", "tests.unstarted_locks:NeverStarts", "--scenario", "flash-sale",
        "--evidence", "quick", "--no-report", "--results-dir", str(tmp_path / "r"),
    )  # fmt: skip
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-2000:]
    (run,) = (tmp_path / "r").iterdir()
    row = pd.read_csv(run / "cases.csv").iloc[0]
    assert row["verdict"] == "unknown"
    assert NO_BUYERS in row["verdict_reason"] and "in both of its two attempts" in row["verdict_reason"]
    # the second attempt's Locust output is kept, and the reason names it
    kept = run / "logs" / f"{row['case']}.log"
    assert f"logs/{row['case']}.log" in row["verdict_reason"] and kept.stat().st_size > 0
    assert "=== attempt 1 of 2 ===" in kept.read_text() and "=== attempt 2 of 2 ===" in kept.read_text()
