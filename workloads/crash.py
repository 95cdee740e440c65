"""crash: a worker process is killed (SIGKILL) while one of its buyers holds a lock.

Worker 0 kills itself at its ``--crash-after``-th critical section (an event, not a
timer), after handing its recording so far to the master, so the history shows the kill
(op ``crash``: ``info`` when it decides to die, ``ok`` at the instant of SIGKILL, after
its recording was sent) and every operation before it. Nothing releases the lock: a lock without
expiry stays stuck; one with a lease comes back when the lease runs out. The checker
counts locks stuck for longer than ``--stuck-bound`` seconds and the recovery time (the
process's death to the next successful acquisition by anyone). Needs ``--processes 2`` or more.

``--crashes K`` (at most processes - 1) repeats the strike, as a nemesis does: worker 1
dies once worker 0 has died and the service has since granted ``--crash-gap`` purchases
(counted on the resource's order ledger), then worker 2, and so on. The turn is kept on
the resource server, so each crash strikes a grant made after the previous recovery.

A worker does not die once less than ``--stuck-bound`` (and a second and a half) is left of
``--run-time``: the run would end before anyone could say whether its lock came back, and such
a kill made the whole case unknown (``redis.reentrant`` x crash in a loaded shard, 2026-12-07:
its fourth kill 0.1 s before the cap). A kill that cannot be judged is no strike. The master
writes the run's end on the resource server in the server's own time (workers get no
``--run-time``), and a worker reads it against that clock, so no two clocks are compared.
"""

from __future__ import annotations

import time
from typing import Any

from locust import events

from workloads.flash_sale import FlashSale, FlashSaleUser
from workloads.harness import locust_glue as harness
from workloads.harness.recording import RecordedLock
from workloads.lease_expiry import worker_index

DEFAULTS = {"lock_ttl": 1.0}
#: Besides the stuck bound and the moment of death, what a kill leaves before the run ends: the
#: workers' test starts are up to a few hundred milliseconds apart on a loaded machine.
JUDGE_MARGIN_S = 1.0
#: The run's end (the resource server's seconds), written by the master at the test's start.
END_KEY = "lockbench:res:crash:end"


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    g = parser.add_argument_group("crash")
    g.add_argument("--crash-after", type=int, default=20, help="worker 0 dies at its n-th critical section")
    g.add_argument(
        "--stuck-bound", type=float, default=5.0, help="seconds after which a lock counts as stuck"
    )
    g.add_argument(
        "--crashes", type=int, default=1, help="workers that die, one after another (<= processes-1)"
    )
    g.add_argument("--crash-gap", type=int, default=0, help="purchases granted between two crashes")
    parser.set_defaults(**DEFAULTS)


class Crash(FlashSale):
    """flash-sale plus a holder killed mid critical section."""

    name = "crash"

    def setup(self, opts: Any) -> None:
        super().setup(opts)
        run_time = getattr(opts, "run_time", None)
        if run_time:  # the master (workers get no --run-time): the run's end, by the server's clock
            client = self._resource(opts).client
            seconds, micros = client.time()
            client.set(END_KEY, seconds + micros / 1e6 + float(run_time))

    def final_state(self, opts: Any) -> dict:
        return {**super().final_state(opts), "stuck_bound_s": opts.stuck_bound}


harness.use_workload(Crash())


class CrashUser(FlashSaleUser):
    """A buyer whose process may die while it holds the lock."""

    def think(self, lock: RecordedLock, item: str) -> None:
        worker = worker_index(self.environment)
        if (
            worker < self.opts.crashes
            and next(self.sections) >= self.opts.crash_after
            and self._my_turn(worker, item)
        ):
            self.resource.witness_exit(
                item
            )  # a dead client is inside nothing; the lock server still thinks so
            seq = self.mark(lock, "crash", "info")
            name = lock.lock.name

            def died(t_ns: int) -> None:
                self.rec.event(self.client_id, seq, "crash", "ok", name, t_ns)

            harness.crash_process(self.environment, died)
        time.sleep(self.cs())

    def _my_turn(self, worker: int, item: str) -> bool:
        """Whether this worker dies now: the workers before it died, the gap since has been granted,
        and the run has time left to judge the kill (read only then: no round trip on other sections)."""
        client = self.resource.client
        turn_key, ledger_key = "lockbench:res:crash:next", "lockbench:res:crash:ledger"
        turn, ledger_then, end = client.mget(turn_key, ledger_key, END_KEY)
        if int(turn or 0) != worker:
            return False
        ledger = client.llen(f"lockbench:res:orders:{item}")
        if worker and ledger - int(ledger_then or 0) < self.opts.crash_gap:
            return False
        if end is not None:
            seconds, micros = client.time()
            left_s = float(end) - (seconds + micros / 1e6)
            if left_s <= self.opts.stuck_bound + harness.CRASH_SEND_S + JUDGE_MARGIN_S:
                return False  # a kill the run's end would cut short: no strike
        pipe = client.pipeline()
        pipe.incr(turn_key).set(ledger_key, ledger)
        pipe.execute()
        return True


FlashSaleUser.abstract = True
