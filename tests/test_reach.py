"""Reach: a fault that cannot touch a lock is "n/a" with the reason, never a strike on it (issue 38 item 2)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tests.helpers import bench


@pytest.mark.server
@pytest.mark.slow
def test_a_skewed_clock_no_lock_read_is_no_strike(tmp_path: Path) -> None:
    """A lock that never reads the client clock (this plug-in, like RedLock, times leases on a
    monotonic clock) under --clock-skew: the harness counted no read, so the case is n/a, not
    "survived on k strikes" (RedLock was green on 529 such "strikes")."""
    res = bench(
        "run", "--impl", "tests.forgetful_locks:SlowReconnectLock", "--clock-skew", "30", "--skewed-clients", "0.5",
        "--duration", "4", "--users", "4", "--results-dir", str(tmp_path), timeout=180,
    )  # fmt: skip
    rows = pd.read_csv(next(tmp_path.glob("*/cases.csv")))
    row = rows.iloc[-1]  # the calibration measures the lock alone; the skewed case is the run's case
    assert row["lockstat_clock_reads"] == 0
    assert row["strikes"] == 0
    assert row["verdict"] == "unknown" and str(row["verdict_reason"]).startswith("n/a: the lock never read")
    assert res.returncode == 1  # an unknown case is no pass
