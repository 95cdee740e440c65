"""flash-sale as an open model: buyers arrive on a schedule, try once within their patience, leave.

A valid locustfile. Run it with one Locust user per process (``-u`` = number of processes):
that user is the process's *scheduler*, not a buyer. It deals itself its share of the
arrival schedule (``--arrivals``, workloads/harness/arrivals.py) and starts one greenlet per buyer
at the buyer's intended arrival time. Each buyer does what a flash-sale user does once
(lock, read, think, write, order, unlock), giving up when it has not got the lock
``--patience`` seconds after it arrived. At most ``--max-in-flight`` buyers of a process are
inside at once; an arrival that finds them all busy is recorded as ``rejected``.

Why a scheduler inside the workers rather than a LoadTestShape: a shape sets how many
*users* run, and Locust spawns them at a rate over its dispatch loop, so it can neither
place a buyer at an exact instant nor know when the buyer meant to come. Here every
arrival has an intended time, recorded in the history, so latency counts from it and the
generator's own lateness (``schedule lag``) is measured rather than hidden.

History (docs/architecture.md): op ``arrive``, ``invoke`` at the intended arrival time with
``value`` = actual start - intended (ns); the completion, when the buyer leaves, is ``ok``
(got the lock; the purchase event says what was bought), ``fail`` with error ``gave-up``
(patience ran out), ``rejected`` (in-flight cap full), ``dropped`` (due before the stop but
never started: recorded at the stop) or the lock's error, or ``info``.
Every event of a visit carries the buyer's client and seqs after its ``arrive`` seq::

    locust -f workloads/flash_sale_open.py --headless -u 1 -t 10s --arrivals spike:2000@1s \\
        --lock-impl redis.set-nx-px-lua --lock-url redis://127.0.0.1:6379/0 \\
        --resource-url redis://127.0.0.1:6380/0
"""

from __future__ import annotations

import itertools
import math
import random
import time
from typing import Any

import gevent
from gevent.pool import Group
from locust import User, constant, events, task
from locust.runners import WorkerRunner

import workloads.flash_sale as flash_sale  # noqa: F401 - registers flash-sale's options and workload
from workloads.harness import locust_glue as harness
from workloads.harness.arrivals import parse_arrivals
from workloads.harness.distributions import zipf_weights

#: The scheduler starts the schedule this long after it starts, so the first buyers are not late.
LEAD_S = 0.05
#: Longest single sleep of the scheduler, so a stop request is seen quickly.
TICK_S = 0.1
#: The scheduler's timer aims this much before an arrival is due, then yields until it is.
EARLY_S = 0.0015
#: ``error`` of an arrival never started before the stop (bench/measure/arrival_metrics.py DROPPED).
DROPPED = "dropped"
#: An arrival due this long before the stop and not started was dropped (1 ms: not late before).
DROP_GRACE_NS = 1_000_000
#: Buyer slots (a client id with its locks) made before the first arrival.
PREPARED_SLOTS = 50


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    g = parser.add_argument_group("open model")
    g.add_argument(
        "--arrivals", default="constant:100", help="constant:R, poisson:R or spike:PEAK@RAMP[:DECAY]"
    )
    g.add_argument(
        "--patience", type=float, default=2.0, help="seconds a buyer waits for the lock after arriving"
    )
    g.add_argument(
        "--max-in-flight", type=int, default=50, help="buyers inside at once, all processes together"
    )


class ArrivalScheduler(User):
    """One per process: starts a greenlet per arrival at its intended time.

    Why a User at all: it lives and stops with the Locust run (graceful stop included),
    and the buyers it starts record through the same harness as every workload.
    """

    wait_time = constant(0)
    #: the closed-loop user whose setup and critical section a buyer reuses
    buyer_class: type[User] = flash_sale.FlashSaleUser

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        self.opts = opts
        runner = self.environment.runner
        shares = max(1, int(getattr(opts, "num_users", 1) or 1))
        share = (
            runner.worker_index
            if isinstance(runner, WorkerRunner)
            else next(harness.counter(self.environment, "local-index"))
        )
        share = min(max(share, 0), shares - 1)
        self.patience_ns = int(opts.patience * 1e9)
        self.cap = max(1, math.ceil(opts.max_in_flight / shares))  # the cap is for all processes
        self.rec = harness.recorder(self.environment)
        self.client_id = self.rec.new_client_id()
        self.seq = itertools.count()
        self.rng = random.Random()
        self.items = flash_sale.item_names(opts.items)
        self.weights = zipf_weights(opts.items, opts.skew)
        self.free = [self._new_slot() for _ in range(min(self.cap, PREPARED_SLOTS))]
        self.slots = list(self.free)
        self.in_flight = 0
        self.buyers = Group()
        self.holding: set[Any] = set()  # buyer greenlets inside the critical section
        self._launches = itertools.count()
        self.unstarted: dict[int, tuple[str, int]] = {}  # spawned buyers not yet running
        self.times = parse_arrivals(opts.arrivals).schedule(share, shares, random.Random())
        self.epoch_ns = time.monotonic_ns() + int(LEAD_S * 1e9)
        self.next_ns = self._next_due()

    def _next_due(self) -> int | None:
        t = next(self.times, None)
        return None if t is None else self.epoch_ns + int(t * 1e9)

    def _new_slot(self) -> Any:
        slot = self.buyer_class(self.environment)
        slot.on_start()
        return slot

    @task
    def arrive(self) -> None:
        """Start every buyer that is due, then sleep until the next one (at most a tick)."""
        if self.next_ns is None:  # a spike is over: nobody else comes
            gevent.sleep(TICK_S)
            return
        now = time.monotonic_ns()
        while self.next_ns is not None and self.next_ns <= now:
            self._launch(self.next_ns)
            self.next_ns = self._next_due()
            now = time.monotonic_ns()
        if self.next_ns is None:
            return
        wait = (self.next_ns - now) / 1e9
        # gevent's timers wake up to ~1 ms late (epoll counts milliseconds): sleep short of
        # the due time, then yield to other greenlets until it comes
        gevent.sleep(min(wait - EARLY_S, TICK_S) if wait > EARLY_S else 0)

    def _launch(self, intended_ns: int) -> None:
        item = self._pick()
        if self.in_flight >= self.cap:
            lock = f"{self.buyer_class.lock_prefix}:{item}"
            seq = next(self.seq)
            rec = self.rec
            rec.event(
                self.client_id,
                seq,
                "arrive",
                "invoke",
                lock,
                intended_ns,
                value=time.monotonic_ns() - intended_ns,
            )
            rec.event(self.client_id, seq, "arrive", "fail", lock, time.monotonic_ns(), error="rejected")
            return
        self.in_flight += 1
        launch = next(self._launches)
        self.unstarted[launch] = (item, intended_ns)
        self.buyers.spawn(self._visit, item, intended_ns, launch)

    def _pick(self) -> str:
        return self.rng.choices(self.items, self.weights)[0] if len(self.items) > 1 else self.items[0]

    def _dropped(self, item: str, intended_ns: int, stop_ns: int) -> None:
        """An arrival the generator never started before the stop: recorded, so it is counted and censored."""
        lock = f"{self.buyer_class.lock_prefix}:{item}"
        seq = next(self.seq)
        self.rec.event(self.client_id, seq, "arrive", "invoke", lock, intended_ns)
        self.rec.event(self.client_id, seq, "arrive", "fail", lock, stop_ns, error=DROPPED)

    def _visit(self, item: str, intended_ns: int, launch: int) -> None:
        self.unstarted.pop(launch, None)
        started = time.monotonic_ns()
        slot = self.free.pop() if self.free else None
        try:
            if slot is None:
                slot = self._new_slot()
                self.slots.append(slot)
            buy_once(slot, item, intended_ns, started, self.patience_ns, self.holding)
        finally:
            self.in_flight -= 1
            if slot is not None:
                self.free.append(slot)

    def on_stop(self) -> None:
        # Buyers finish their visit, within half of Locust's stop timeout; then those still
        # waiting for the lock are killed (they stay "unfinished"), but never a holder: a
        # holder killed between its stock write and its order would corrupt the resource.
        # Arrivals due before the stop that the generator never started (the scheduler ran
        # late, or their greenlet never got to run) are recorded as dropped, as k6 counts
        # dropped_iterations: the run did not offer its rate, and the report says so.
        stop_ns = time.monotonic_ns()
        # one due less than a millisecond ago is not late yet (fidelity's schedule-lag limit):
        # the stop cut it, the generator did not drop it
        while self.next_ns is not None and self.next_ns <= stop_ns - DROP_GRACE_NS:
            self._dropped(self._pick(), self.next_ns, stop_ns)
            self.next_ns = self._next_due()
        budget = max(1.0, self.environment.stop_timeout / 2)
        self.buyers.join(timeout=min(self.opts.patience + 1.0, budget))
        for buyer in list(self.buyers):
            if buyer not in self.holding:
                buyer.kill(block=False)
        self.buyers.join(timeout=budget - 0.5)
        for item, intended_ns in list(self.unstarted.values()):
            self._dropped(item, intended_ns, stop_ns)
        self.unstarted.clear()
        for slot in self.slots:
            slot.on_stop()


def buy_once(
    buyer: Any, item: str, intended_ns: int, started_ns: int, patience_ns: int, holding: set[Any]
) -> None:
    """One buyer's visit on a flash-sale user's locks and resource, recorded as an ``arrive`` op.

    The calling greenlet is in ``holding`` from the grant to the end of its release.
    """
    rec = buyer.rec
    lock = buyer.locks[item]
    name = lock.lock.name
    seq = lock.next_seq()
    rec.event(buyer.client_id, seq, "arrive", "invoke", name, intended_ns, value=started_ns - intended_ns)
    remaining = max(0.0, (intended_ns + patience_ns - time.monotonic_ns()) / 1e9)
    t0 = time.monotonic_ns()
    lease, error = lock.acquire(timeout=remaining)
    if lease is None:
        buyer._fire("acquire", t0, RuntimeError(error))
        if error == "timeout":
            rec.event(buyer.client_id, seq, "arrive", "fail", name, time.monotonic_ns(), error="gave-up")
        else:
            kind = "fail" if error == "BackendUnavailable" else "info"
            rec.event(buyer.client_id, seq, "arrive", kind, name, time.monotonic_ns(), error=error)
        return
    me = gevent.getcurrent()
    holding.add(me)
    buyer._fire("acquire", t0)
    outcome, failure = "ok", None
    try:
        buyer._critical_section(lock, item, lease)
    except Exception as exc:  # noqa: BLE001 - the resource failed mid-visit: the outcome is unknown
        outcome, failure = "info", f"{type(exc).__name__}: {exc}"[:200]
    finally:
        t0 = time.monotonic_ns()
        lock.release(lease)
        buyer._fire("release", t0)
        holding.discard(me)
    rec.event(buyer.client_id, seq, "arrive", outcome, name, time.monotonic_ns(), error=failure)
