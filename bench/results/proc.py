"""Is the process that wrote a folder still running? Read from /proc, importing nothing heavy.

Why its own module: every ``bench`` command asks it first (bench/cli/scratch.py removes the
scratch folders of dead benches), before its options are checked, so it must not pull in
pandas with the results folder's readers (bench/results/folder.py).
"""

from __future__ import annotations

from typing import Any

from infra.procfs import stat_fields


def process_start(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot, /proc), or None when there is none.

    A pid with its start time names one process for good: a pid alone may have been reused.
    """
    fields = stat_fields(pid)
    try:
        return None if fields is None else int(fields[19])
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
