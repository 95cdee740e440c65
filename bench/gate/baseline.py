"""``bench baseline update``: keep a small, committable copy of a run to gate later runs against.

A baseline folder is a results folder without the bulky parts: ``run.json``, ``cases.csv``
(one row per trial: what the gate tests), ``hist/*.json`` (per-trial and merged HDR
histograms, a few KB each: what the report's spectra need) and ``baseline.json`` saying
where it came from and on which machine class. No history parquet, no report.html.
``bench gate`` and ``bench report`` read it like any run folder.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from bench.errors import UserError
from bench.gate.compare import load_side
from resultsio import parse_json

DEFAULT_NAME = "ci"


def latest_run(results_dir: Path) -> Path:
    """The newest finished run folder under ``results_dir`` (run ids sort by time)."""
    if not results_dir.is_dir():
        raise UserError(f"no results folder {results_dir}; run bench run first or name a RUN")
    for path in sorted((p for p in results_dir.iterdir() if p.is_dir()), reverse=True):
        try:
            # depth-limited: a damaged (deeply nested) run.json is skipped, not a RecursionError
            meta = parse_json((path / "run.json").read_bytes())
        except (OSError, ValueError):
            continue
        if isinstance(meta, dict) and meta.get("status") in ("complete", "complete-with-failures"):
            return path
    raise UserError(f"no finished run in {results_dir}; run bench run first or name a RUN")


def tracked_by_git(path: Path) -> bool:
    """Does git track any file under ``path`` (a committed baseline)? False outside a git work tree."""
    import subprocess

    try:
        out = subprocess.run(
            ["git", "ls-files", "--", path.name], cwd=path.parent, capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return out.returncode == 0 and bool(out.stdout.strip())


def update_baseline(
    run: Path | None, name: str, baselines_dir: Path, results_dir: Path, force: bool = False
) -> Path:
    """Copy the run's summary into ``baselines_dir/name`` (replacing it) and return that folder.

    A baseline git tracks (the committed CI baseline) is replaced only with ``force``: a
    silent overwrite changed what every later gate compares against and left the checkout dirty.
    The run is only read (its merged histograms were rewritten here once, even when the copy then
    failed); where the baseline cannot be written is found out before anything is.
    """
    if not name or "/" in name or name.startswith("."):
        raise UserError(f"baseline name must be a plain folder name, got {name!r}")
    dest = baselines_dir / name
    if dest.exists() and not force and tracked_by_git(dest):
        raise UserError(
            f"baseline {dest} is committed (git tracks it); replacing it changes what every later gate "
            f"compares against: pass --force to replace it, or choose another --name"
        )
    run = Path(run) if run is not None else latest_run(results_dir)
    side = load_side(run, "run")  # the gate's own checks: a baseline it cannot read is useless
    if side.machine_class is None:
        raise UserError(f"run {run} records no machine class (host.machine_class in run.json)")
    check_writable(baselines_dir)  # before anything is written; the run itself is only ever read
    tmp: Path | None = None
    old: Path | None = None
    try:
        baselines_dir.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=baselines_dir))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a baseline is committed and shared
        shutil.copyfile(run / "run.json", tmp / "run.json")
        shutil.copyfile(run / "cases.csv", tmp / "cases.csv")
        (tmp / "hist").mkdir()
        # per trial and merged (the reader checked that the run holds both): copied, never rewritten in the run
        for hist in sorted((run / "hist").glob("*.json")):
            shutil.copyfile(hist, tmp / "hist" / hist.name)
        info = {
            "name": name,
            "source_run": side.run_id,
            "source_path": str(run),
            "created_at": datetime.now(UTC).isoformat(),
            "machine_class": side.machine_class,
            "git_commit": side.meta.get("git_commit"),
            "schema": side.meta.get("schema"),
            "command": side.meta.get("command"),
        }
        (tmp / "baseline.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        if dest.exists():
            old = baselines_dir / f".{name}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(dest, old)
        os.replace(tmp, dest)
        tmp = None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except OSError as exc:
        if old is not None and old.exists() and not dest.exists():
            os.replace(old, dest)  # the previous baseline back in place
        raise UserError(
            f"could not write the baseline {dest}: {exc.strerror or type(exc).__name__}"
            f"{f' ({exc.filename})' if exc.filename else ''}; the previous baseline and the run are "
            "unchanged: free space, or give --baselines-dir a folder you can write"
        ) from None
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def check_writable(folder: Path) -> None:
    """UserError (in words) unless a baseline can be written under ``folder``; changes nothing.

    Why before the copy: a refusal must leave everything as it was, and a folder that is a
    file, read-only, or on a full disk is found by trying, not by permission bits (root
    passes every one of those).
    """
    probe = Path(folder)
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    fix = "give --baselines-dir a folder you can write"
    if not probe.is_dir():
        raise UserError(f"cannot write a baseline under {folder}: {probe} is a file, not a folder; {fix}")
    try:
        with tempfile.TemporaryDirectory(prefix=".lockbench-probe-", dir=probe):
            pass
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise UserError(
            f"cannot write a baseline under {folder}: {probe} is not writable ({why}); {fix}"
        ) from None


def folder_size(path: Path) -> int:
    """Bytes in all files under ``path`` (to keep committed baselines small)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
