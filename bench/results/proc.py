"""Is the process that wrote a folder still running? Read from /proc, importing nothing heavy.

Why its own module: every ``bench`` command asks it first (bench/cli/scratch.py removes the
scratch folders of dead benches), before its options are checked, so it must not pull in
pandas with the results folder's readers (bench/results/folder.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc), or None when there is none.

    A pid with its start time names one process for good: a pid alone may have been reused.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    try:
        return int(stat.rsplit(")", 1)[1].split()[19])
    except (IndexError, ValueError):
        return None


def process_alive(pid: Any, start: Any = None) -> bool:
    """Is the process that wrote ``pid`` (and ``start``, when recorded) still running?"""
    try:
        pid = int(pid)
    except (TypeError, ValueError):
        return False
    now = process_start(pid)
    if now is None:
        return False
    return start is None or now == start
