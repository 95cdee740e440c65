"""The checkers' witnesses of one case as a table: ``violations/<case>.parquet`` in the results folder.

Why a file: the report's violation timeline must draw the holds the checker counted, not pair
holds again by a rule of its own (dashboards/ reads files only). Judging writes, per violation a
checker kept (:class:`workloads.checks.common.Witness`), its holds (``role`` ``first`` and
``second``, in grant order; a lost lock nobody took meanwhile has only ``first``) and every outermost hold of the same lock around it (``near``, from
:func:`workloads.checks.common.holds`), so the report derives no hold of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from workloads.checks.common import WITNESS_HOLD_COLUMNS, CheckResult, Witness, hold_records, holds

#: The columns of ``violations/<case>.parquet``, one row per hold of a violation.
VIOLATION_COLUMNS = ["violation", "kind", "at_ns", "role", *WITNESS_HOLD_COLUMNS]
#: The file judging leaves beside the case's ``history.parquet`` for the folder to copy.
WITNESS_FILE = "violations.parquet"
#: The least context kept on each side of a violation (ns): the report pads its window by less.
MIN_CONTEXT_NS = 20_000_000


def witnesses_of(results: list[CheckResult]) -> list[Witness]:
    """Every checker's witnesses, earliest first (each checker kept its first few)."""
    found = [w for r in results for w in getattr(r, "witnesses", [])]
    return sorted(found, key=lambda w: w.at_ns)


def _context(w: Witness) -> tuple[int, int]:
    """The span around a violation whose holds are kept: its holds, the tail capped, padded by its length."""
    starts = [int(h["start_ns"]) for h in w.holds]
    ends = [int(h["end_ns"]) for h in w.holds]
    lo = min(starts)
    at = max(max(starts), w.at_ns)
    hi = max(at, min(max(ends), at + max(at - lo, MIN_CONTEXT_NS)))
    span = max(hi - lo, MIN_CONTEXT_NS)
    return lo - span, hi + span


def witness_frame(results: list[CheckResult], history: pd.DataFrame) -> pd.DataFrame:
    """The violations table (:data:`VIOLATION_COLUMNS`); empty when no checker kept a witness."""
    found = witnesses_of(results)
    rows: list[dict[str, Any]] = []
    if found:
        h = holds(history)
        h = h[(h["depth"] == 1).to_numpy(dtype=bool)]
        lock = h["lock"].astype(str).to_numpy(dtype=object)
        start = h["start_ns"].to_numpy(dtype=np.int64)
        end = h["end_ns"].to_numpy(dtype=np.int64)
        for n, w in enumerate(found):
            roles = ("first", "second")[: len(w.holds)]
            own = {(x["client"], x["start_ns"]) for x in w.holds}
            for role, x in zip(roles, w.holds, strict=True):
                rows.append({"violation": n, "kind": w.kind, "at_ns": w.at_ns, "role": role, **x})
            lo, hi = _context(w)
            for near in hold_records(h, np.flatnonzero((lock == w.lock) & (end >= lo) & (start <= hi))):
                if (near["client"], near["start_ns"]) not in own:
                    rows.append({"violation": n, "kind": w.kind, "at_ns": w.at_ns, "role": "near", **near})
    frame = pd.DataFrame(rows, columns=VIOLATION_COLUMNS)
    return frame.astype(
        {
            "violation": "int64", "kind": "string", "at_ns": "int64", "role": "string", "client": "string",
            "lock": "string", "start_ns": "int64", "end_ns": "int64", "token": "Int64", "open": "bool",
        }
    )  # fmt: skip


def write_witnesses(history_file: Path, results: list[CheckResult], history: pd.DataFrame) -> Path | None:
    """Write the case's violations table beside its history (:data:`WITNESS_FILE`); None when it has none.

    A case without a witness writes no file (and removes one an earlier attempt left there).
    """
    path = history_file.with_name(WITNESS_FILE)
    frame = witness_frame(results, history)
    if frame.empty:
        path.unlink(missing_ok=True)
        return None
    frame.to_parquet(path, index=False)
    return path
