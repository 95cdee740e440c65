"""The results folder: created once per run, written atomically, readable after any interruption.

Layout (docs/architecture.md): run.json, cases.csv, cases.parquet, hist/<case>.json,
history/<case>.parquet, report.html. ``run.json`` is rewritten after every case so an
interrupted run leaves the finished cases readable, with ``status`` saying it stopped early.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

SCHEMA_VERSION = 1


def new_run_id(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def atomic_write_frame(path: Path, frame: pd.DataFrame) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    if path.suffix == ".csv":
        frame.to_csv(tmp, index=False)
    else:
        frame.to_parquet(tmp, index=False)
    os.replace(tmp, path)


class RunFolder:
    """One run's folder under the results root; never reuses an existing folder.

    Why a class: the metadata, the case table and the per-case files must stay
    consistent with each other after every case, whatever stops the run.
    """

    def __init__(self, root: Path, meta: dict[str, Any], run_id: str | None = None) -> None:
        self.run_id = run_id or new_run_id()
        self.path = root / self.run_id
        self.path.mkdir(parents=True, exist_ok=False)
        (self.path / "hist").mkdir()
        (self.path / "history").mkdir()
        self.meta = {
            "schema": SCHEMA_VERSION,
            "run_id": self.run_id,
            "status": "running",
            **meta,
            "cases": [],
        }
        self.rows: list[dict[str, Any]] = []
        self.columns: list[str] | None = None
        self._write_meta()

    def _write_meta(self) -> None:
        atomic_write_text(self.path / "run.json", json.dumps(self.meta, indent=2, default=str))

    def add_case(
        self,
        row: dict[str, Any],
        histograms: dict[str, str],
        history_file: Path | None,
        extra: dict[str, Any],
        log_text: str | None = None,
    ) -> None:
        """Store one finished case: its histograms, its history, its log, its row, then the metadata."""
        case = row["case"]
        if log_text is not None:
            (self.path / "logs").mkdir(exist_ok=True)
            atomic_write_text(self.path / "logs" / f"{case}.log", log_text)
        atomic_write_text(
            self.path / "hist" / f"{case}.json",
            json.dumps({"unit": "us", "histograms": histograms, **extra}),
        )
        if history_file is not None and history_file.exists():
            dest = self.path / "history" / f"{case}.parquet"
            shutil.copyfile(history_file, dest.with_name(f".{dest.name}.tmp"))
            os.replace(dest.with_name(f".{dest.name}.tmp"), dest)
        self.rows.append(row)
        frame = pd.DataFrame(self.rows)
        if self.columns:
            frame = frame[
                [c for c in self.columns if c in frame] + [c for c in frame if c not in self.columns]
            ]
        atomic_write_frame(self.path / "cases.csv", frame)
        atomic_write_frame(self.path / "cases.parquet", frame)
        self.meta["cases"].append(case)
        self._write_meta()

    def note(self, key: str, value: Any) -> None:
        self.meta[key] = value
        self._write_meta()

    def finish(self, status: str) -> None:
        """status: complete, incomplete (interrupted) or failed."""
        if not self.rows:
            # a readable, empty table so report and gate can still say what happened
            atomic_write_text(self.path / "cases.csv", "case\n")
        self.meta["status"] = status
        self.meta["finished_at"] = datetime.now(UTC).isoformat()
        self._write_meta()


# trials merged per impl x workload ----------------------------------------------------------

_TRIAL_SUFFIX = re.compile(r"__t\d+$")

#: Per-trial figures copied next to the merged histograms (from cases.csv).
TRIAL_FIGURES = (
    "trial", "acquisitions", "throughput_acq_s", "throughput_ops_s", "acquire_p50_us", "acquire_p90_us",
    "acquire_p99_us", "acquire_p999_us", "acquire_max_us", "release_p50_us", "release_p99_us",
    "handoff_p50_us", "handoff_p99_us", "utilization", "jain_index", "server_cmds_per_acquire", "verdict",
)  # fmt: skip


def trial_group(case_id: str) -> str:
    """The case id without its trial suffix: ``redis.x__flash-sale__t3`` -> ``redis.x__flash-sale``."""
    return _TRIAL_SUFFIX.sub("", case_id)


def _plain(value: Any) -> Any:
    if isinstance(value, float) and value != value:
        return None
    return value.item() if hasattr(value, "item") else value


def write_merged_histograms(run_path: Path) -> list[Path]:
    """Merge every trial's histograms per impl x workload into ``hist/<group>.merged.json``.

    HDR histograms of one range add exactly, so the merged percentiles are those of all
    trials' samples together. The file also lists each trial's figures from cases.csv,
    which is what the gate tests (one number per trial). Returns the files written.
    """
    from workloads.harness.recording import decode_histogram, encode_histogram

    try:
        cases = pd.read_csv(run_path / "cases.csv")
    except (OSError, pd.errors.EmptyDataError):
        return []
    if cases.empty or "case" not in cases.columns:
        return []
    cases["_group"] = cases["case"].astype(str).map(trial_group)
    written: list[Path] = []
    for group, rows in cases.groupby("_group", sort=False):
        merged: dict[str, Any] = {}
        trials = []
        for _, row in rows.iterrows():
            trials.append(
                {"case": str(row["case"]), **{k: _plain(row[k]) for k in TRIAL_FIGURES if k in row}}
            )
            try:
                data = json.loads((run_path / "hist" / f"{row['case']}.json").read_text())
            except (OSError, ValueError):
                continue
            for name, text in (data.get("histograms") or {}).items():
                hist = decode_histogram(text)
                if name in merged:
                    merged[name].add(hist)
                else:
                    merged[name] = hist
        first = rows.iloc[0]
        out = run_path / "hist" / f"{group}.merged.json"
        payload = {
            "unit": "us",
            "group": group,
            "impl": _plain(first.get("impl")),
            "workload": _plain(first.get("workload")),
            "cases": [t["case"] for t in trials],
            "histograms": {name: encode_histogram(h) for name, h in merged.items()},
            "trials": trials,
        }
        atomic_write_text(out, json.dumps(payload, default=str))
        written.append(out)
    return written
