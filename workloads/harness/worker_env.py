"""What a Locust worker process and ``bench worker`` (which starts it) agree on.

Kept apart from ``workloads.harness.locust_glue`` because ``bench`` must never import Locust.
"""

from __future__ import annotations

import os
from pathlib import Path

#: Exit code of a worker process whose master ran the run's last case: ``bench worker`` stops.
RUN_DONE_EXIT = 3
#: The name this worker's host goes by in results (default: the hostname).
HOST_ENV = "LOCKBENCH_HOST"
#: Test only: nanoseconds added to every timestamp a worker hands to the master, as if its
#: clock were that far off; proves that the offset estimate finds and undoes it.
CLOCK_SHIFT_ENV = "LOCKBENCH_TEST_CLOCK_SHIFT_NS"
#: Locust's default master port.
DEFAULT_MASTER_PORT = 5557


def child_gone(pid: int | None) -> bool:
    """Has this process's child ``pid`` exited (a zombie, reaped, or the pid now someone else's)?

    False when not known (None) or still running. Reads ``/proc`` and reaps nothing: Locust's
    own exit waits for its forked workers.
    """
    if pid is None:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    fields = stat.rpartition(")")[2].split()
    return len(fields) < 2 or fields[0] in ("Z", "X") or int(fields[1]) != os.getpid()
