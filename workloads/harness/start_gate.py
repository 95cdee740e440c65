"""The start gate of a group: every case's Locust ready before any case's buyers start.

Why: a matrix group runs up to a dozen cases side by side, each its own Locust process. They
were launched together and each began its load as soon as it was ready, so the first cases
ran their buyers (and their loop-lag probes) while the others were still forking and
importing: seconds of start-up CPU inside the measured window. On a 2-core machine that
start burst alone made a case's loop run late, and a short case (the fault-free row, under a
second) lay wholly inside it.

So a case of a group is started with ``--lockbench-start-gate PATH``. Its master (or local
runner) writes :data:`READY_FILE` into its case folder once Locust is set up, and waits, before
its test starts, until ``PATH`` exists. bench opens the gate (creates ``PATH``) when every case
of the group is ready or has ended (bench/run/group.py). The wait is bounded by
:data:`GATE_WAIT_S`: a gate nobody opens costs a case its timing, never its run.

Workers (``--processes``) need no gate: they start their buyers when their master tells them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

#: The file a case's master writes into its case folder when it waits at the gate.
READY_FILE = ".start-ready"
#: Written into a case's folder as it ends when it shares one Locust process with the rest of its
#: group (workloads/harness/group_locust.py): ``{"exit": code}``. bench ends the case's part of the
#: strikes by it, as it does by a lone case's process exit.
EXIT_FILE = "case-exit.json"

#: Longest wait at a gate (seconds) before a case starts anyway (logged).
GATE_WAIT_S = 120.0

#: How often a waiting case looks for the open gate (seconds).
POLL_S = 0.005

log = logging.getLogger(__name__)


def wait_at_gate(gate: str, out: str, sleep: Callable[[float], None] = time.sleep) -> None:
    """Say this case is ready, then wait until ``gate`` exists (at most :data:`GATE_WAIT_S`).

    ``sleep`` is the process's sleep (gevent's, once patched): the wait runs before Locust's
    loop has work, so nothing of the case is held up but its own start.
    """
    started = time.monotonic()
    if out:
        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / READY_FILE).write_text(str(started))
    path = Path(gate)
    while not path.exists():
        if time.monotonic() - started > GATE_WAIT_S:
            log.warning(
                "lockbench: the group's start gate %s did not open in %.0fs; starting", gate, GATE_WAIT_S
            )
            break
        sleep(POLL_S)
