"""The results folder: created once per run, written atomically, readable after any interruption.

Layout (docs/architecture.md): run.json, cases.csv, cases.parquet, hist/<case>.json,
history/<case>.parquet, report.html. ``run.json`` is rewritten after every case so an
interrupted run leaves the finished cases readable, with ``status`` saying it stopped early.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import secrets
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd

from bench.errors import UserError
from bench.results.proc import process_alive, process_start

SCHEMA_VERSION = 1


def new_run_id(now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%SZ}-{secrets.token_hex(3)}"


def atomic_write_text(path: Path, text: str) -> None:
    """Write to ``.<name>.tmp`` and rename; the temporary file never outlives a failed write."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_frame(path: Path, frame: pd.DataFrame) -> None:
    """A table as CSV or parquet, written like :func:`atomic_write_text`."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        if path.suffix == ".csv":
            frame.to_csv(tmp, index=False)
        else:
            frame.to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


class ResultsWriteError(UserError):
    """The results folder could not be written (a full disk, a lost mount): what was kept and how to go on.

    A UserError: one line on stderr, no traceback; the folder is left consistent (no
    temporary files, run.json not ``running``) before it is raised.
    """


def _write_error(folder: Path, what: str, exc: OSError, kept: int) -> ResultsWriteError:
    why = "the disk is full" if exc.errno == errno.ENOSPC else exc.strerror or str(exc)
    return ResultsWriteError(
        f"could not write {what} in {folder}: {why}; kept the {kept} finished case(s) written before "
        f"(run.json status incomplete); free space, then render them with: bench report {folder}"
    )


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
        # the checkers' witnesses (one file per case that failed): its presence says they were kept
        (self.path / "violations").mkdir()
        self.meta = {
            "schema": SCHEMA_VERSION,
            "run_id": self.run_id,
            "status": "running",
            # who is writing: a later bench marks the folder interrupted once this process is gone
            "pid": os.getpid(),
            "pid_start": process_start(os.getpid()),
            **meta,
            "cases": [],
        }
        self.rows: list[dict[str, Any]] = []
        self.columns: list[str] | None = None
        self.broken: ResultsWriteError | None = None
        self._written = 0  # rows in cases.csv on disk
        self._write_meta()

    def _write_meta(self) -> None:
        if self.broken is not None:
            raise self.broken
        try:
            atomic_write_text(self.path / "run.json", json.dumps(self.meta, indent=2, default=str))
        except OSError as exc:
            raise self._fail("run.json", exc) from None

    def _fail(self, what: str, exc: OSError) -> ResultsWriteError:
        """Leave the folder consistent after a failed write, and say what was kept.

        Every temporary file goes; run.json lists only the cases whose rows are in
        cases.csv and says ``incomplete``, written compactly in place when there is no
        room for a second copy (a truncated file frees its blocks first).
        """
        for tmp in self.path.rglob(".*.tmp"):
            tmp.unlink(missing_ok=True)
        kept = self._written
        self.rows = self.rows[:kept]
        self.meta["cases"] = [str(r["case"]) for r in self.rows]
        self.meta["status"] = "incomplete"
        self.meta["finished_at"] = datetime.now(UTC).isoformat()
        error = _write_error(self.path, what, exc, kept)
        self.meta.setdefault("failures", []).append(str(error))
        text = json.dumps(self.meta, default=str)
        try:
            atomic_write_text(self.path / "run.json", text)
        except OSError:
            with contextlib.suppress(OSError), open(self.path / "run.json", "w", encoding="utf-8") as fh:
                fh.write(text)
        self.broken = error
        return error

    def keep_log(self, case: str, text: str) -> Path:
        """Keep a case's Locust output as ``logs/<case>.log``: a finished case's, or a lost one's,
        which has no row to hang it on and whose scratch folder goes when the run ends."""
        (self.path / "logs").mkdir(exist_ok=True)
        path = self.path / "logs" / f"{case}.log"
        atomic_write_text(path, text)
        return path

    def add_case(
        self,
        row: dict[str, Any],
        histograms: dict[str, str],
        history_file: Path | None,
        extra: dict[str, Any],
        log_text: str | None = None,
    ) -> None:
        """Store one finished case: its histograms, its history, its log, its row, then the metadata.

        A failed write (a full disk) raises :class:`ResultsWriteError` after :meth:`_fail`
        left the folder consistent with the cases written before.
        """
        if self.broken is not None:
            raise self.broken
        case = row["case"]
        what = f"case {case}"
        try:
            if log_text is not None:
                self.keep_log(case, log_text)
            atomic_write_text(
                self.path / "hist" / f"{case}.json",
                json.dumps({"unit": "us", "histograms": histograms, **extra}),
            )
            if history_file is not None and history_file.exists():
                dest = self.path / "history" / f"{case}.parquet"
                shutil.copyfile(history_file, dest.with_name(f".{dest.name}.tmp"))
                os.replace(dest.with_name(f".{dest.name}.tmp"), dest)
                # the checkers' witnesses judging left beside it (bench/run/witnesses.py), if any
                found = history_file.with_name("violations.parquet")
                if found.exists():
                    dest = self.path / "violations" / f"{case}.parquet"
                    shutil.copyfile(found, dest.with_name(f".{dest.name}.tmp"))
                    os.replace(dest.with_name(f".{dest.name}.tmp"), dest)
            self.rows.append(row)
            frame = pd.DataFrame(self.rows)
            if self.columns:
                frame = frame[
                    [c for c in self.columns if c in frame] + [c for c in frame if c not in self.columns]
                ]
            atomic_write_frame(self.path / "cases.csv", frame)
            self._written = len(self.rows)
            atomic_write_frame(self.path / "cases.parquet", frame)
        except OSError as exc:
            raise self._fail(what, exc) from None
        self.meta["cases"].append(case)
        self._write_meta()

    def rewrite_rows(self) -> None:
        """Write cases.csv and cases.parquet again from :attr:`rows` (after a pass that annotated them)."""
        if self.broken is not None or not self.rows:
            return
        frame = pd.DataFrame(self.rows)
        if self.columns:
            frame = frame[
                [c for c in self.columns if c in frame] + [c for c in frame if c not in self.columns]
            ]
        try:
            atomic_write_frame(self.path / "cases.csv", frame)
            self._written = len(self.rows)
            atomic_write_frame(self.path / "cases.parquet", frame)
        except OSError as exc:
            raise self._fail("the annotated cases", exc) from None

    def note(self, key: str, value: Any) -> None:
        self.meta[key] = value
        self._write_meta()

    def finish(self, status: str) -> None:
        """status: complete, incomplete (interrupted) or failed; after a failed write, nothing more."""
        if self.broken is not None:
            return  # _fail already wrote what could be written
        if not self.rows:
            # a readable, empty table so report and gate can still say what happened
            atomic_write_text(self.path / "cases.csv", "case\n")
        self.meta["status"] = status
        self.meta["finished_at"] = datetime.now(UTC).isoformat()
        self._write_meta()


#: run.json ``status`` of a run whose bench process died without finishing (kill -9, power loss).
INTERRUPTED = "interrupted"


def mark_if_dead(folder: Path) -> bool:
    """Mark a folder left ``running`` by a bench process that is gone as ``interrupted``.

    Only when run.json records the writer (``pid``, ``pid_start``) and that process is no
    longer running: a run in progress, or a folder from before the pid was recorded, is
    left alone. Returns True when it marked the folder.
    """
    run_json = Path(folder) / "run.json"
    try:
        meta = json.loads(run_json.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):  # damaged (deeply nested, say): the reader names it
        return False
    if not isinstance(meta, dict) or meta.get("status") != "running" or "pid" not in meta:
        return False
    if process_alive(meta.get("pid"), meta.get("pid_start")):
        return False
    done = meta.get("cases") if isinstance(meta.get("cases"), list) else []
    meta["status"] = INTERRUPTED
    meta["interrupted"] = (
        f"bench (pid {meta.get('pid')}) died before finishing; {len(done)} finished case(s) are kept. "
        f"Marked by a later bench at {datetime.now(UTC).isoformat()}"
    )
    try:
        atomic_write_text(run_json, json.dumps(meta, indent=2, default=str))
    except OSError:
        return False
    return True


def mark_dead_runs(root: Path) -> list[Path]:
    """:func:`mark_if_dead` on every run folder under a results root; the folders it marked."""
    root = Path(root)
    if not root.is_dir():
        return []
    marked = []
    for path in sorted(root.iterdir()):
        if path.is_dir() and (path / "run.json").is_file() and mark_if_dead(path):
            marked.append(path)
    return marked


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
