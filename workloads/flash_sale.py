"""flash-sale: buyers race for a few items' stock under a lock (a valid locustfile).

Each buyer picks an item (``--items`` with Zipf popularity ``--skew``), acquires the
item's lock, reads the stock from the resource server, spends the critical-section
time (``--cs``), writes stock minus 1..``--max-qty`` units when enough is left, appends
the order to a ledger and releases. An entry witness (INCR on entry, DECR on exit) on
the resource server sees any second client inside. Run it alone with::

    locust -f workloads/flash_sale.py --headless -u 50 -r 50 -t 10s \\
        --lock-impl redis.set-nx-px-lua --lock-url redis://127.0.0.1:6379/0 \\
        --resource-url redis://127.0.0.1:6380/0
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import time
from typing import Any

from locust import User, events, task

from workloads.checks.core import check_flash_sale
from workloads.harness import holder_first
from workloads.harness import locust_glue as harness
from workloads.harness.backoff import ErrorBackoff, wait_of
from workloads.harness.distributions import parse_distribution, zipf_weights
from workloads.harness.recording import STOPPED_ERROR, RecordedLock
from workloads.harness.resource import PAUSE_PREFIX, FlashSaleResource, StaleToken


def item_names(n: int) -> list[str]:
    return [f"item-{i}" for i in range(n)]


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    g = parser.add_argument_group("flash-sale")
    g.add_argument("--items", type=int, default=1, help="number of items (one lock each)")
    g.add_argument("--skew", type=float, default=1.0, help="Zipf exponent of item popularity (0 = uniform)")
    g.add_argument("--stock", type=int, default=100_000, help="initial stock per item")
    g.add_argument("--max-qty", type=int, default=3, help="a buyer wants 1..max-qty units")
    g.add_argument("--cs", default="1ms", help="critical-section time: 1ms, exp:1ms, uniform:0.5ms:2ms, ...")
    g.add_argument(
        "--pace",
        type=float,
        default=0.0,
        help="at most this many purchases a second per buyer (0: flat out; the matrix's fault cases pace)",
    )


class FlashSale:
    """The workload's server-side steps: reset the resource, read the final state, judge."""

    name = "flash-sale"
    #: What this process's reset of the resource returned (its count of resets); None before one.
    resets_at_start: int | None = None

    def _resource(self, opts: Any) -> FlashSaleResource:
        return FlashSaleResource(opts.resource_url)

    def setup(self, opts: Any) -> None:
        # the case and its output folder name the run: a reset from another run's case says which
        case, out = getattr(opts, "lockbench_case", "") or "?", getattr(opts, "lockbench_out", "") or "?"
        who = f"{harness.host_label()}/{os.getpid()} case {case} in {out}"
        self.resets_at_start = self._resource(opts).reset(item_names(opts.items), opts.stock, who)

    def final_state(self, opts: Any) -> dict:
        state = self._resource(opts).final_state(
            item_names(opts.items), harness.fencing_mode(opts), self.resets_at_start
        )
        return {**state, "max_qty": opts.max_qty}

    def summarize(self, history: Any, final_state: dict) -> str:
        verdict = check_flash_sale(history, final_state)
        counters = ", ".join(f"{k}={v}" for k, v in verdict.counters.items())
        return f"lockbench {self.name} verdict: {verdict.status} ({counters})"


harness.use_workload(FlashSale())
holder_first.install()
_resources: dict[tuple[int, str], FlashSaleResource] = {}


def shared_resource(url: str) -> FlashSaleResource:
    """One resource client (and connection pool) per process and URL."""
    key = (os.getpid(), url)
    if key not in _resources:
        _resources[key] = FlashSaleResource(url)
    return _resources[key]


#: Seconds before its lease's deadline a holder keeping its lock through a fault lets go at the
#: latest (a quarter of what is left, where less): the release must reach the server in time.
LEASE_MARGIN_S = 0.25


class FlashSaleUser(User):
    """One buyer: a closed loop of lock, read, think, write, order, unlock.

    Fault workloads subclass it and override :meth:`think` (what happens between the
    read and the write while the lock is held); everything else stays identical, so
    their figures compare with flash-sale's.
    """

    #: lock names are ``<lock_prefix>:<item>``; workloads built on this one use their own
    lock_prefix = "flash-sale"
    _last_start = 0.0

    def wait_time(self) -> float:
        """No wait (a closed loop flat out), or with ``--pace R`` what is left of 1/R since the last start.

        Why pace: a fault case asks whether the lock breaks, and a holder that keeps its lock
        through the strike makes every other buyer wait anyway; a loop flat out between
        strikes only burns the generator's CPU (a fast lock made 300 grants a second in each
        of several cases side by side) and makes it, not the lock, late.
        """
        pace = float(getattr(getattr(self, "opts", None), "pace", 0.0) or 0.0)
        now = time.monotonic()
        wait = max(0.0, self._last_start + 1.0 / pace - now) if pace > 0 else 0.0
        wait = max(wait, wait_of(self))  # after a server error (workloads/harness/backoff.py)
        self._last_start = now + wait
        return wait

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        self.opts = opts
        self.backoff = ErrorBackoff()
        self.rec = harness.recorder(self.environment)
        self.client_id = self.rec.new_client_id()
        #: the case's critical sections, counted from 1 (fault workloads strike every n-th)
        self.sections = harness.counter(self.environment, "sections", 1)
        self.items = item_names(opts.items)
        self.weights = zipf_weights(opts.items, opts.skew)
        self.rng = random.Random()
        self.cs = parse_distribution(opts.cs, self.rng)
        self.resource = shared_resource(opts.resource_url)
        self.fencing = harness.fencing_mode(opts)
        cls = harness.lock_class(opts)
        number = next(harness.counter(self.environment, "clients"))
        options = harness.lock_options(opts, number, harness.context(self.environment).clock_reads)
        urls = harness.lock_urls(opts)
        seq = itertools.count()
        namespace = getattr(opts, "lock_namespace", "") or ""
        skew_s = float(getattr(options.clock, "skew_s", 0.0))
        if abs(skew_s) >= 0.5:
            # the checker counts a clock-skew strike only where a skewed client took the lock
            # while an unskewed one waited or held: it must know which clients are skewed
            self.rec.event(
                self.client_id, -1, "skew", "ok", "", time.monotonic_ns(), value=round(skew_s * 1000)
            )
        self.locks = {
            item: RecordedLock(
                cls(f"{namespace}{self.lock_prefix}:{item}", urls, options),
                self.rec,
                self.client_id,
                seq,
            )
            for item in self.items
        }

    def on_stop(self) -> None:
        harness.close_locks(getattr(self, "locks", {}).values(), self.environment)

    def _fire(
        self, name: str, started_ns: int, exc: Exception | None = None, ended_ns: int | None = None
    ) -> None:
        harness.fire_request(self.environment, name, started_ns, exc, ended_ns)

    @task
    def buy(self) -> None:
        item = self.rng.choices(self.items, self.weights)[0] if len(self.items) > 1 else self.items[0]
        lock = self.locks[item]
        started = time.monotonic_ns()
        lease, error = lock.acquire(timeout=self.opts.acquire_timeout)
        self.backoff.after(error)
        if lease is None:
            if error != STOPPED_ERROR:  # a wait the case's end cut short is no failure of the lock
                self._fire("acquire", started, RuntimeError(error))
            return
        acquired = time.monotonic_ns()
        try:
            with holder_first.holding():
                try:
                    self._critical_section(lock, item, lease)
                finally:
                    releasing = time.monotonic_ns()
                    lock.release(lease)
        finally:
            # Locust's events after the release: their cost is no part of the hold.
            self._fire("acquire", started, ended_ns=acquired)
            self._fire("release", releasing)

    def think(self, lock: RecordedLock, item: str) -> None:
        """The work done while holding the lock, between reading and writing the stock."""
        holder_first.holder_sleep(self.cs())

    def sell(self, item: str, new_stock: int, qty: int) -> None:
        """Unfenced sale: two separate writes, stock then order (the lock must make them safe)."""
        self.resource.write_stock(item, new_stock)
        self.resource.append_order(item, self.client_id, qty)

    def mark(
        self,
        lock: RecordedLock,
        op: str,
        type_: str,
        seq: int | None = None,
        value: int | None = None,
        t_ns: int | None = None,
    ) -> int:
        """Record a workload event (a pause, a crash, a fault signal) in the history, at ``t_ns`` or now."""
        seq = lock.next_seq() if seq is None else seq
        when = time.monotonic_ns() if t_ns is None else t_ns
        self.rec.event(self.client_id, seq, op, type_, lock.lock.name, when, value=value)
        return seq

    def _answer_fault(self, lock: RecordedLock, lease: Any) -> None:
        # bench's fault thread armed a fault "while a lock is held": the first holder granted
        # after the arming claims it, tells bench, and keeps the lock while the fault happens.
        if not self.opts.fault_signal:
            return
        armed_ns = self.resource.armed_at()
        if armed_ns is None or lease.acquired_at_ns <= armed_ns:
            return
        # the claim's time is taken before bench is told: bench strikes as soon as it hears, and a
        # holder descheduled between telling and recording would log its claim after the strike
        # (counted "had not claimed it", a strike lost to the recording's order)
        claimed_ns = time.monotonic_ns()
        if self.resource.signal_held(
            self.client_id,
            str(getattr(lease, "owner", "") or ""),
            None if lease.remaining() is None else int(lease.remaining() * 1000),
        ):
            seq = self.mark(lock, "fault-hold", "invoke", t_ns=claimed_ns)
            # hold until bench says the fault is over (at most --fault-hold s). Where the fault
            # strikes the servers, never past the lease's own deadline: a holder that overstays its
            # lease loses the lock by its own doing (AA, 2026-12-06: a restart struck 1.4 s after
            # the claim on a busy machine, the heal came 4.07 s after it, past the 4 s lease:
            # RedLock drawn red). A holder cut off from its servers (a partition) works on through
            # the cut whatever its lease says: that a lease ends unseen is what the scenario asks
            deadline = time.monotonic() + self.opts.fault_hold
            left = lease.remaining()
            if left is not None and not self.opts.fault_hold_past_lease:
                deadline = min(deadline, time.monotonic() + left - min(LEASE_MARGIN_S, left / 4))
            said = None
            while time.monotonic() < deadline and said is None:
                said = self.resource.wait_healed(deadline - time.monotonic())
                if said is not None and said.startswith(PAUSE_PREFIX):
                    deadline += self._obey(lock, said)  # a pause bench asked for (bench explore)
                    said = None
            # does the holder still own its lock after the strike? A "no" is a lost lock, a
            # failure of exclusion whether or not a waiter came in (workloads/checks/ownership.py)
            lock.probe(lease, "strike")
            # a strike bench says missed this case ends the hold as fail: the case's stop rule
            # counts only the holds that ended ok, so it waits for a strike that hit
            self.mark(lock, "fault-hold", "fail" if said == "missed" else "ok", seq)

    def _obey(self, lock: RecordedLock, command: str) -> float:
        """Pause as bench's explorer told this holder (``pause:task:<ms>`` or ``pause:world:<ms>``); the seconds paused.

        A task pause sleeps this holder's task alone: its process runs on (watchdogs,
        keepalives, heartbeats). A world pause stops the whole process (SIGSTOP; a child
        sends SIGCONT when the time is up): every renewal and heartbeat stops with it.
        """
        _, what, ms = command.split(":", 2)
        seconds = max(0.0, int(ms) / 1000)
        # marked as lease-expiry's pauses are: the report draws it on the holder's lane, and a loop
        # stall inside it is the pause bench asked for, not the generator's
        seq = self.mark(lock, "pause", "invoke")
        started = time.monotonic_ns()
        if what == "world":
            pid = os.getpid()
            subprocess.Popen(["sh", "-c", f"sleep {seconds:.3f}; kill -CONT {pid}"], start_new_session=True)
            os.kill(pid, signal.SIGSTOP)
        else:
            holder_first.holder_sleep(seconds)
        self.mark(lock, "pause", "ok", seq, value=(time.monotonic_ns() - started) // 1_000_000)
        return seconds

    def _critical_section(self, lock: RecordedLock, item: str, lease: Any) -> None:
        rec, res = self.rec, self.resource
        token = lease.token if self.fencing != "off" else None
        enforce = self.fencing == "enforce"
        entered = time.monotonic_ns()
        seq = lock.next_seq()
        inside = res.witness_enter(item)
        rec.event(self.client_id, seq, "witness", "ok", lock.lock.name, time.monotonic_ns(), value=inside)
        try:
            self._answer_fault(lock, lease)
            seq = lock.next_seq()
            # the invoke carries the units wanted: a purchase cut off before its ok (Locust's
            # stop, a killed process) may have taken that much stock without an order
            qty = self.rng.randint(1, self.opts.max_qty)
            rec.event(
                self.client_id, seq, "purchase", "invoke", lock.lock.name, time.monotonic_ns(), value=qty
            )
            try:
                stock = res.read_stock(item, token, enforce)
            except StaleToken:
                rec.event(
                    self.client_id,
                    seq,
                    "purchase",
                    "fail",
                    lock.lock.name,
                    time.monotonic_ns(),
                    error="stale",
                )
                return
            self.think(lock, item)
            bought = 0
            if stock >= qty:
                if token is None:
                    self.sell(item, stock - qty, qty)
                    bought = qty
                elif res.fenced_sale(item, token, stock - qty, self.client_id, qty, enforce):
                    bought = qty
                else:
                    rec.event(
                        self.client_id,
                        seq,
                        "purchase",
                        "fail",
                        lock.lock.name,
                        time.monotonic_ns(),
                        error="stale",
                    )
                    return
            rec.event(
                self.client_id, seq, "purchase", "ok", lock.lock.name, time.monotonic_ns(), value=bought
            )
        finally:
            res.witness_exit(item)
            rec.record("cs", time.monotonic_ns() - entered)
