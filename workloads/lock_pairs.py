"""lock-pairs: acquire and release as fast as possible, the lock's cost alone (a valid locustfile).

Each user takes and frees its own lock (``--shared-keys N`` makes users share N lock
names instead, for contention without a resource). No critical section, no resource
server traffic: the figure is what one acquire+release pair costs through the harness,
which is the floor every other workload stands on.
"""

from __future__ import annotations

import itertools
from typing import Any

from locust import User, constant, events, task

from workloads.checks.core import check_lock_pairs
from workloads.harness import locust_glue as harness
from workloads.harness.recording import RecordedLock


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    g = parser.add_argument_group("lock-pairs")
    g.add_argument(
        "--shared-keys", type=int, default=0, help="0: every user its own lock; N: users share N locks"
    )


class LockPairs:
    """No resource: nothing to set up, nothing to read back."""

    name = "lock-pairs"

    def setup(self, opts: Any) -> None:
        return None

    def final_state(self, opts: Any) -> dict:
        return {}

    def summarize(self, history: Any, final_state: dict) -> str:
        verdict = check_lock_pairs(history, final_state)
        return f"lockbench lock-pairs verdict: {verdict.status} {verdict.counters}"


harness.use_workload(LockPairs())


class LockPairsUser(User):
    """A closed loop of acquire, release."""

    wait_time = constant(0)

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        self.timeout = opts.acquire_timeout
        rec = harness.recorder(self.environment)
        client = rec.new_client_id()
        n = next(harness.counter(self.environment, "users"))
        name = f"pairs:{client}" if opts.shared_keys <= 0 else f"pairs:shared-{n % opts.shared_keys}"
        lock = harness.lock_class(opts)(
            name,
            harness.lock_urls(opts),
            harness.lock_options(opts, n, harness.context(self.environment).clock_reads),
        )
        self.lock = RecordedLock(lock, rec, client, itertools.count())

    def on_stop(self) -> None:
        harness.close_locks([self.lock], self.environment)

    @task
    def pair(self) -> None:
        lease, _ = self.lock.acquire(timeout=self.timeout)
        if lease is not None:
            self.lock.release(lease)
