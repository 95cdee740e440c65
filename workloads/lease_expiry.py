"""lease-expiry: a holder pauses longer than its lease (a valid locustfile).

Every ``--pause-every``-th critical section of a process pauses for ``--pause`` seconds
(default 2 s, with a 1 s lease) between reading and writing the stock. Two kinds:

* ``--pause-kind task``: only the holding task sleeps; the process lives on, so a
  watchdog or heartbeat in it keeps renewing the lease (as for a slow request).
* ``--pause-kind world``: a blocking sleep gevent cannot switch away from, so the whole
  client process stops, watchdogs and heartbeats included, as in a long GC pause. Only
  worker 0 pauses, so it needs ``--processes 2`` or more (others must be able to take the
  expired lock); ``bench run`` sets that for you.

The pause is triggered by an event (the n-th time this process holds a lock), not by a
timer, so a run shows the same thing every time.
"""

from __future__ import annotations

import time
from typing import Any

from gevent import monkey
from locust import events

from workloads.flash_sale import FlashSale, FlashSaleUser
from workloads.harness import locust_glue as harness
from workloads.harness.backoff import wait_of
from workloads.harness.recording import RecordedLock

DEFAULTS = {"lock_ttl": 1.0}
_blocking_sleep = monkey.get_original("time", "sleep")


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    g = parser.add_argument_group("lease-expiry")
    g.add_argument("--pause", type=float, default=2.0, help="seconds a holder pauses (longer than the lease)")
    g.add_argument("--pause-every", type=int, default=20, help="pause at every n-th critical section")
    g.add_argument("--pause-kind", choices=("task", "world"), default="task", help="task or whole process")
    parser.set_defaults(**DEFAULTS)


def worker_index(environment: Any) -> int:
    return int(getattr(environment.runner, "worker_index", 0) or 0)


class LeaseExpiry(FlashSale):
    """flash-sale plus holders that stall past their lease."""

    name = "lease-expiry"


harness.use_workload(LeaseExpiry())


class LeaseExpiryUser(FlashSaleUser):
    """A buyer that sometimes stalls while holding the lock."""

    def wait_time(self) -> float:
        """As flash-sale's, except worker 0 of a world pause runs flat out whatever ``--pace`` says:
        its sections set when the next pause comes, and the other workers' buyers, paced, only
        make the grants the evidence counts. A server error's backoff still applies."""
        if self.opts.pause_kind == "world" and worker_index(self.environment) == 0:
            return wait_of(self)
        return super().wait_time()

    def think(self, lock: RecordedLock, item: str) -> None:
        opts = self.opts
        world = opts.pause_kind == "world"
        section = next(self.sections)
        if section % max(1, opts.pause_every) or (world and worker_index(self.environment) != 0):
            time.sleep(self.cs())
            return
        seq = self.mark(lock, "pause", "invoke")
        started = time.monotonic_ns()
        if world:
            _blocking_sleep(opts.pause)  # nothing else in this process runs, watchdogs included
            harness.context(self.environment).probe.excuse(
                time.monotonic_ns() - started
            )  # the experiment, not the generator's queue
        else:
            time.sleep(opts.pause)
        self.mark(lock, "pause", "ok", seq, value=(time.monotonic_ns() - started) // 1_000_000)


FlashSaleUser.abstract = True  # only the pausing buyer runs in this locustfile
