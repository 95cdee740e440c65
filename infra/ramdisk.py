"""Data directories in RAM (``/dev/shm``), each named for the process that owns it and reaped once that process is gone.

Why: a server whose every write is flushed (etcd fsyncs each grant; it has no switch to stop that
in 3.4) measures the host disk, shared with every other lane, not the lock. lockbench kills and
pauses processes and never crashes the operating system, so a killed server loses nothing the
kernel holds whether its files are on a disk or in RAM; in RAM a flush costs nothing. PostgreSQL
gets the same with ``fsync=off`` (infra/postgres_server.py).

A directory is removed by its server's stop; one whose owner died (bench killed with SIGKILL) is
removed by the next process that asks for one, so a crash leaves RAM behind only until then.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

from infra.state import pid_alive

#: Where RAM-backed directories go (tmpfs on Linux)
RAM_ROOT = Path("/dev/shm")
PREFIX = "lockbench-"
#: Below this much free in RAM_ROOT a server keeps its data on the disk instead (etcd preallocates
#: a 64 MB write-ahead log segment per member)
MIN_FREE_BYTES = 1 << 30


def _owner(path: Path) -> int | None:
    """The pid in a directory's name (``lockbench-<kind>-<pid>-<label>``), None when it has none."""
    parts = path.name[len(PREFIX) :].split("-")
    return int(parts[1]) if len(parts) > 2 and parts[1].isdigit() else None


def reap(root: Path = RAM_ROOT) -> list[Path]:
    """Remove the directories whose owning process is gone; returns those removed."""
    gone = []
    with contextlib.suppress(OSError):
        for path in root.glob(f"{PREFIX}*"):
            pid = _owner(path)
            if pid is not None and pid != os.getpid() and not pid_alive(pid):
                shutil.rmtree(path, ignore_errors=True)
                gone.append(path)
    return gone


def ram_dir(kind: str, label: str, root: Path = RAM_ROOT) -> Path | None:
    """A new empty directory in RAM owned by this process, or None where there is none (or too little room)."""
    reap(root)
    try:
        if not root.is_dir() or shutil.disk_usage(root).free < MIN_FREE_BYTES:
            return None
        path = root / f"{PREFIX}{kind}-{os.getpid()}-{label}"
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(mode=0o700)
    except OSError:
        return None
    return path


def release(path: Path | None) -> None:
    """Remove a directory :func:`ram_dir` gave (nothing when None)."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)
