"""A distributed Locust case starts when its workers are ready and ends when they have left.

Locust's headless master waits for its workers and for their goodbyes with fixed sleeps:
its start loop looks once, before a forked worker can have connected, then sleeps a whole
second; ``MasterRunner.quit`` sleeps 0.5 s for the workers' last stats, and one headless
shut-down calls it three times (the ``--run-time`` limit, the quitting event, ``main``'s
shut-down). Measured on a quiet 2-core machine (load average 0.6) with ``--processes 2``:
1.0 s before the first user and 2.1 s after the last, for a few milliseconds of work,
about 30 s of a default ``bench run``'s ten cases.

Here the master waits for the same things, in short steps: its workers' ``client_ready``
before the test (so Locust's loop finds them there and does not sleep), and each worker's
``quit`` message before it ends (a worker sends its last stats before that message, on the
same socket). Nothing a case measures happens in either wait: the load window starts at
``test_start`` and ends at ``test_stop``, and the recording is complete before ``quit``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import gevent
from locust.rpc import Message
from locust.runners import STATE_MISSING, MasterRunner

from workloads.harness.worker_env import child_gone

#: Locust's own wait for the workers' last stats (``MasterRunner.quit``), kept as the bound.
QUIT_WAIT_S = 0.5
#: Step of both waits: small against the second and the half second they replace.
STEP_S = 0.01
#: How long the master waits for its workers when ``--expect-workers-max-wait`` sets no limit;
#: past it Locust's own loop goes on waiting, a second at a time, as before.
UNLIMITED_WAIT_S = 60.0

log = logging.getLogger("locust.runners")  # Locust's own logger: its quit logs as Locust's does


class PromptMasterRunner(MasterRunner):
    """Locust's master runner whose ``quit`` waits for the workers to leave, not for a fixed 0.5 s.

    Why a subclass: the master is made by Locust's ``main`` before any locustfile hook runs,
    so :func:`make_prompt` turns that very object into this class; everything but ``quit``
    is Locust's own.
    """

    _lockbench_quitting = False
    #: worker node id -> its pid, for workers forked by this master (``--processes``); set by the harness
    lockbench_local_pids: dict[str, int] | None = None

    def quit(self) -> None:
        """Stop, tell every worker to quit and wait until the live ones have; later calls do nothing."""
        if self._lockbench_quitting:
            return  # Locust calls quit up to three times per shut-down: the first one did it all
        self._lockbench_quitting = True
        self.stop(send_stop_to_client=False)
        log.debug("Quitting...")
        for client in self.clients.all:
            self.server.send_to_client(Message("quit", None, client.id))
        deadline = time.monotonic() + QUIT_WAIT_S
        # a worker deletes itself from ``clients`` with its quit message; a lost one never will,
        # nor one forked here that exited before its message left (a process that ends at once
        # can take its last message with it: the master then waited the whole half second)
        pids = self.lockbench_local_pids or {}
        while time.monotonic() < deadline and any(
            c.state != STATE_MISSING and not child_gone(pids.get(c.id)) for c in self.clients.all
        ):
            gevent.sleep(STEP_S)
        self.greenlet.kill(block=True)


def make_prompt(environment: Any) -> None:
    """For a headless master: wait here for its workers, and make its quit prompt (Locust's ``init``)."""
    runner = environment.runner
    opts = environment.parsed_options
    if not isinstance(runner, MasterRunner) or opts is None:
        return
    # only Locust's own master with the parts the override uses: another Locust keeps its quit
    if type(runner) is MasterRunner and all(hasattr(runner, a) for a in ("server", "clients", "greenlet")):
        runner.__class__ = PromptMasterRunner
    if not getattr(opts, "headless", False):
        return
    want = int(getattr(opts, "expect_workers", 1) or 1)
    limit = float(getattr(opts, "expect_workers_max_wait", 0) or 0) or UNLIMITED_WAIT_S
    deadline = time.monotonic() + limit
    while len(runner.clients.ready) < want and time.monotonic() < deadline:
        gevent.sleep(STEP_S)
