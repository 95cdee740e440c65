"""One scratch folder per bench process, removed by the next bench when its owner is gone.

Every temporary file of a ``bench`` command (a case's Locust output, server data
directories, the matrix's lanes) goes through :mod:`tempfile`, so pointing
``tempfile.tempdir`` (and ``TMPDIR`` for the processes bench starts) at one folder,
``/tmp/lockbench-run-<pid>-XXXX/``, puts all of it in one place. A normal exit, Ctrl-C or
SIGTERM removes that folder; ``kill -9`` cannot, so every bench first removes the folders
whose owner (pid and start time, in the folder's ``owner`` file) no longer runs. A folder
whose owner is alive, another bench running now, is never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

PREFIX = "lockbench-run-"
OWNER_FILE = "owner"
#: ``bench infra up`` keeps its servers' state here (infra/state.py), outside any scratch folder.
INFRA_DIR_ENV = "LOCKBENCH_INFRA_DIR"


def _owner(folder: Path) -> tuple[int | None, int | None]:
    """(pid, start) of the bench that made ``folder``; the pid in its name when the file is missing."""
    try:
        pid, start = (folder / OWNER_FILE).read_text().split()
        return int(pid), int(start)
    except (OSError, ValueError):
        pass
    try:
        return int(folder.name[len(PREFIX) :].split("-", 1)[0]), None
    except ValueError:
        return None, None


def remove_dead(base: Path) -> list[Path]:
    """Remove the scratch folders under ``base`` whose bench process is gone; the ones removed."""
    from bench.results.proc import process_alive

    removed = []
    with contextlib.suppress(OSError):
        for folder in base.glob(f"{PREFIX}*"):
            pid, start = _owner(folder)
            if pid is None or not folder.is_dir() or process_alive(pid, start):
                continue
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def enter() -> Callable[[], None]:
    """Make this process's scratch folder and send every temporary file there; returns the undo.

    The undo restores ``tempfile.tempdir`` and the environment (tests call ``main()`` in
    their own process) and removes the folder.
    """
    base = Path(tempfile.gettempdir())
    remove_dead(base)
    saved = {k: os.environ.get(k) for k in ("TMPDIR", INFRA_DIR_ENV)}
    saved_tempdir = tempfile.tempdir
    try:
        root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base))
        # others may pass through (not list): PostgreSQL runs as its own OS user when bench is root
        # and must reach its data folder inside; every folder in here is made private by mkdtemp
        root.chmod(0o711)
        from bench.results.proc import process_start

        start = process_start(os.getpid())
        (root / OWNER_FILE).write_text(
            f"{os.getpid()} {start}\n" if start is not None else f"{os.getpid()}\n"
        )
    except OSError:
        return lambda: None  # no scratch folder of our own: temporary files go where they always went
    # the state of `bench infra up` must outlive this process: keep it where infra/state.py puts it
    os.environ.setdefault(INFRA_DIR_ENV, str(base / f"lockbench-infra-{os.getuid()}"))
    os.environ["TMPDIR"] = str(root)
    tempfile.tempdir = str(root)

    def leave() -> None:
        tempfile.tempdir = saved_tempdir
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(root, ignore_errors=True)

    return leave
