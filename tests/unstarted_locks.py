"""A plug-in lock (``module:Class``) whose buyers never start in the first Locust process that
loads it: the matrix's "its buyers never started" must lead to a second attempt, not a cell.

:class:`FirstProcessNeverStarts` is ``redis.set-nx-px-lua``'s behaviour with one difference:
the first process that constructs it (recorded in ``$LOCKBENCH_TEST_UNSTARTED_DIR/first.pid``)
cannot construct it at all, as a worker that lost its master's heartbeat never runs its users.
Every later process works, so a re-run of the case succeeds.
"""

from __future__ import annotations

import os
from pathlib import Path

from lockimpls.redis_locks import SetNxPxLua

#: The folder holding ``first.pid``; the test gives its own tmp_path.
DIR_ENV = "LOCKBENCH_TEST_UNSTARTED_DIR"


def _first_process() -> bool:
    marker = Path(os.environ[DIR_ENV]) / "first.pid"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return marker.read_text().strip() == str(os.getpid())
    with os.fdopen(fd, "w") as fh:
        fh.write(str(os.getpid()))
    return True


class FirstProcessNeverStarts(SetNxPxLua):
    """SET NX PX whose first process cannot make a lock; why: buyers that never start, once."""

    id = "test.first-process-never-starts"

    def __init__(self, *args: object, **kwargs: object) -> None:
        if _first_process():
            raise RuntimeError("this process's buyers never start (tests/unstarted_locks.py)")
        super().__init__(*args, **kwargs)


class NeverStarts(SetNxPxLua):
    """SET NX PX that no process can construct; why: a case whose buyers never start, twice."""

    id = "test.never-starts"

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("no process's buyers ever start (tests/unstarted_locks.py)")
