"""One reader of ``/proc/<pid>/stat`` for infra and bench: nothing heavy imported.

Why one: the command name in that line may hold spaces and parentheses, so the fields are the
ones after its last ``)``; three places had each written that split again. workloads/ may not
import infra (DESIGN.md section 3), so ``workloads.harness.worker_env.child_gone`` keeps its own.
"""

from __future__ import annotations

from pathlib import Path


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None when there is no such process.

    Index 0 is the state (``Z`` a zombie), 1 the parent's pid, 19 the start time in clock ticks
    since boot.
    """
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    return text.rpartition(")")[2].split()


def is_zombie(pid: int) -> bool:
    """Has ``pid`` exited without being reaped yet? False when it runs or is not there at all."""
    fields = stat_fields(pid)
    return bool(fields) and fields[0] == "Z"
