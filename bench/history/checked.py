"""The results reader's verdict on each run folder, kept between runs of ``bench history``.

``bench history`` checks every folder before drawing it: its tables (run.json, cases.parquet,
the files each row rests on: bench/history/read.py), and the newest run of each impl whole
(``resultsio.read_results``: the case table validated alone, parquet against csv, every
histogram decoded, every history file opened: about 0.1 s a folder). A folder whose files
have not changed gets the same verdict, so the verdict, with how deep the check went, is kept in
``<results>/history/.checked.json``, keyed by

* the folder (its resolved path) and the name, size and mtime (ns) of every file the reader
  looks at (the folder's own files, ``hist/*``, ``history/*``): a written, added or removed
  file is checked again. Not ctime or inode: a restore that keeps mtimes (CI's cache of kept
  runs, ``cp -a``, rsync) keeps the verdicts. What no key sees is a file damaged in place
  without its mtime changing (bit rot, ``touch -r``): ``bench report`` and ``bench gate``
  check every time, and deleting the cache file re-checks everything;
* the reader: the source of resultsio and of this package's read.py, and the versions of
  the libraries the check runs on (pandera, pandas, pyarrow, pydantic-core, hdrhistogram):
  a new rule re-checks every folder.

A verdict is not kept while a file is younger than :data:`RACY_NS` at the check (git's
"racily clean" rule): a second write within the same timestamp tick and of the same size
would otherwise go unseen. A cache that is missing, damaged, of another reader or not
writable is no error: every folder is then checked, as without a cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.history.records import RunInfo, Skipped
from resultsio import parse_json

#: The cache file, inside the history folder (which no run-folder scan reads).
CACHE_NAME = ".checked.json"
#: Bump when what an entry holds changes.
FORMAT = 2
#: A file changed less than this before the check leaves the verdict unkept (timestamps are coarse).
RACY_NS = 2_000_000_000
#: How deep a kept verdict went: the tables (run.json, cases.parquet, files present) or every file.
TABLES, WHOLE = "tables", "whole"
_LIBRARIES = ("pandera", "pandas", "pyarrow", "pydantic-core", "hdrhistogram", "numpy")


def cache_file(base: Path) -> Path:
    """Where the verdicts of the folders under results root ``base`` are kept: ``base/history/.checked.json``."""
    return base / "history" / CACHE_NAME


def reader_fingerprint() -> str:
    """What the verdicts depend on besides the files: the reader's code and its libraries' versions."""
    import resultsio

    digest = hashlib.sha1(f"format {FORMAT}".encode())
    # this package's reader, by path: importing it here would tie the two modules in a circle
    sources = sorted(Path(resultsio.__file__).parent.glob("*.py")) + [Path(__file__).with_name("read.py")]
    for source in sources:
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    for name in _LIBRARIES:
        try:
            digest.update(f"{name}=={metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            digest.update(f"{name} absent".encode())
    return digest.hexdigest()


def signature(path: Path) -> tuple[str, int]:
    """A digest of the folder's files as the reader sees them (name, size, mtime), and the newest mtime (ns)."""
    digest = hashlib.sha1()
    newest = 0
    for sub in ("", "hist", "history"):
        try:
            with os.scandir(path / sub if sub else path) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError as exc:
            digest.update(f"{sub}: {type(exc).__name__}\n".encode())
            continue
        for entry in entries:
            try:
                if not entry.is_file():
                    continue
                st = entry.stat()
            except OSError:
                digest.update(f"{sub}/{entry.name}: gone\n".encode())
                continue
            digest.update(f"{sub}/{entry.name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            newest = max(newest, st.st_mtime_ns)
    return digest.hexdigest(), newest


def _entry(info: RunInfo | Skipped) -> dict[str, Any]:
    if isinstance(info, Skipped):
        return {"skip": {"why": info.why, "damaged": info.damaged, "when": info.when}}
    return {
        "run": {
            "run_id": info.run_id,
            "started_at": info.started_at,
            "git_commit": info.git_commit,
            "machine_class": info.machine_class,
            "status": info.status,
            "params": info.params,
            "report": info.report is not None,
        }
    }


def _value(path: Path, entry: dict[str, Any]) -> RunInfo | Skipped:
    if "skip" in entry:
        skip = entry["skip"]
        return Skipped(path, str(skip["why"]), damaged=bool(skip["damaged"]), when=float(skip["when"]))
    run = entry["run"]
    report = path / "report.html"
    return RunInfo(
        key=str(path),
        path=path,
        run_id=str(run["run_id"]),
        started_at=str(run["started_at"]),
        git_commit=str(run["git_commit"]),
        machine_class=str(run["machine_class"]),
        status=str(run["status"]),
        params=dict(run["params"]),
        report=report if run["report"] else None,
    )


@dataclass(frozen=True)
class Pending:
    """A folder looked up without a kept verdict: its signature then, and when the check began.

    Why kept: the verdict is kept only if the files were settled before the check and did
    not change while it ran (the same signature after it).
    """

    path: Path
    key: str
    sig: str
    newest: int
    started: int


class CheckedFolders:
    """Verdicts of the results reader on run folders, reused while a folder's files are unchanged.

    Why: the check of a folder costs 100 times more than reading its figures, and its answer
    only changes when a file of the folder (or the reader) does; see the module's docstring.
    """

    def __init__(self, file: Path | None) -> None:
        self.file = file
        self.reader = reader_fingerprint() if file is not None else ""
        self.entries: dict[str, dict[str, Any]] = {}
        self.seen: set[str] = set()
        self.changed = False
        if file is None:
            return
        try:
            data = parse_json(file.read_bytes())  # depth-limited: a file of 100,000 "[" is only damaged
        except (OSError, ValueError):
            return
        if (
            isinstance(data, dict)
            and data.get("reader") == self.reader
            and isinstance(data.get("folders"), dict)
        ):
            self.entries = data["folders"]

    def read(self, path: Path, check: Callable[[Path], RunInfo | Skipped]) -> RunInfo | Skipped:
        """``check(path)``, or its kept verdict when the folder's files and the reader are unchanged."""
        kept, pending = self.lookup(path)
        if kept is not None:
            return kept
        info = check(path)
        self.keep(pending, info)
        return info

    def lookup(self, path: Path) -> tuple[RunInfo | Skipped | None, Pending | None]:
        """The kept verdict on ``path``, or None and what :meth:`keep` needs once the folder is checked.

        Why apart from the check: ``bench history`` checks every folder without a kept verdict
        in one batch (bench/history/read.py), then keeps each verdict.
        """
        if self.file is None:
            return None, None
        key = str(path.resolve())
        self.seen.add(key)
        sig, newest = signature(path)
        entry = self.entries.get(key)
        if isinstance(entry, dict) and entry.get("sig") == sig:
            with contextlib.suppress(KeyError, TypeError, ValueError):
                return _value(path, entry), None
        return None, Pending(path, key, sig, newest, time.time_ns())

    def keep(self, pending: Pending | None, info: RunInfo | Skipped, depth: str = TABLES) -> None:
        """Keep the verdict of a folder :meth:`lookup` found no kept verdict for, if its files settled.

        ``depth``: :data:`TABLES` (its run.json and case table checked) or :data:`WHOLE` (every file).
        """
        if pending is None:
            return
        if pending.newest < pending.started - RACY_NS and signature(pending.path)[0] == pending.sig:
            # settled before the check, and unchanged while it ran
            self.entries[pending.key] = {"sig": pending.sig, "depth": depth, **_entry(info)}
            self.changed = True
        elif self.entries.pop(pending.key, None) is not None:
            self.changed = True

    def checked_whole(self, path: Path) -> bool:
        """Whether the kept verdict on ``path`` came from the check of every file (not the tables only)."""
        entry = self.entries.get(str(path.resolve()))
        return isinstance(entry, dict) and entry.get("depth") == WHOLE

    def recheck(self, path: Path) -> Pending | None:
        """What :meth:`keep` needs for a folder checked again, deeper, though a verdict was kept."""
        if self.file is None:
            return None
        sig, newest = signature(path)
        return Pending(path, str(path.resolve()), sig, newest, time.time_ns())

    def save(self) -> None:
        """Write the verdicts (this time's folders, and others' that still exist) atomically; errors ignored."""
        if self.file is None or not self.changed:
            return
        kept = {k: v for k, v in self.entries.items() if k in self.seen or os.path.isdir(k)}
        data = json.dumps({"reader": self.reader, "folders": kept}, separators=(",", ":"))
        with contextlib.suppress(OSError):
            self.file.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".checked-", suffix=".tmp", dir=self.file.parent)
            try:
                with os.fdopen(fd, "w") as out:
                    out.write(data)
                # mkstemp's 0600 would hide the verdicts from another user reading the same results
                os.chmod(tmp, 0o644)
                os.replace(tmp, self.file)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
