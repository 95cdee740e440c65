"""What history knows of one folder: a readable run's place in time, or why a folder was left out.

Why a module of its own: the reader (read.py) and the cache of its verdicts (checked.py) both
speak of these records, and neither should import the other for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class RunInfo:
    """What a run's run.json says about where it sits in history: commit, time, machine, parameters.

    Why a record of its own: run.json is read once per folder, and ordering, grouping and the
    page's links all need these few fields, not the whole metadata.
    """

    key: str  # the folder's path as read (also the ``_folder`` column of the case table)
    path: Path
    run_id: str
    started_at: str
    git_commit: str
    machine_class: str
    status: str
    params: dict[str, Any]
    report: Path | None  # report.html when it exists


@dataclass(frozen=True)
class Skipped:
    """A folder left out, and why.

    Why a value and not an exception: one bad folder must not stop the others; it is printed on
    stderr and listed on the page. ``damaged`` says the folder is a run whose files are
    damaged (resultsio found problems), as against a folder of another schema version or a run
    that finished no case; ``when`` places it in time, so ``--check`` can tell whether the
    newest run is the damaged one.
    """

    path: Path
    why: str
    damaged: bool = False
    when: float = 0.0
