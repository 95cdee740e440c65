"""reentrant: buyers who take the item's lock again inside their critical section (a valid locustfile).

Each buyer acquires the item's lock, then acquires it again ``--depth - 1`` more times
(nested, as code that calls a locked helper from a locked method does), reads the
stock, spends half of ``--cs``, releases the inner holds, spends the other half, and
only then writes the stock and the order and releases the outermost hold. A lock that
frees itself at the first inner release lets another buyer read the same stock in the
second half: the checkers see the overlap, the witness and the lost update.

At the end the harness probes every item's lock with a fresh client: it must be free.
It runs only for impls that declare ``reentrant``::

    locust -f workloads/reentrant.py --headless -u 20 -r 20 -t 10s --depth 3 \\
        --lock-impl redis.reentrant --lock-url redis://127.0.0.1:6379/0 \\
        --resource-url redis://127.0.0.1:6380/0
"""

from __future__ import annotations

import itertools
import os
import random
import time
from typing import Any

from locust import User, constant, events, task

from lockimpls.base import Lease, LockError
from workloads import harness
from workloads.distributions import parse_distribution, zipf_weights
from workloads.recording import RecordedLock
from workloads.reentrant_checks import check_reentrant
from workloads.resource import FlashSaleResource


def item_names(n: int) -> list[str]:
    return [f"item-{i}" for i in range(n)]


def lock_name(item: str) -> str:
    return f"reentrant:{item}"


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    g = parser.add_argument_group("reentrant")
    g.add_argument("--depth", type=int, default=3, help="holds per critical section (1 = no nesting)")
    g.add_argument("--items", type=int, default=1, help="number of items (one lock each)")
    g.add_argument("--skew", type=float, default=1.0, help="Zipf exponent of item popularity (0 = uniform)")
    g.add_argument("--stock", type=int, default=100_000, help="initial stock per item")
    g.add_argument("--max-qty", type=int, default=3, help="a buyer wants 1..max-qty units")
    g.add_argument("--cs", default="1ms", help="critical-section time: 1ms, exp:1ms, uniform:0.5ms:2ms, ...")


def probe_free(opts: Any, name: str) -> dict[str, Any]:
    """Whether a fresh client of the impl gets lock ``name`` at once (then gives it back)."""
    cls = harness.lock_class(opts)
    lock = cls(name, harness.lock_urls(opts), harness.lock_options(opts))
    try:
        lease = lock.try_acquire()
        if lease is None:
            return {"free": False}
        lock.release(lease)
        return {"free": True}
    except LockError as exc:
        return {"free": None, "error": f"{type(exc).__name__}: {exc}"[:200]}
    finally:
        lock.close()


class Reentrant:
    """The workload's server-side steps: reset the resource, read the final state and probe the locks."""

    name = "reentrant"

    def _resource(self, opts: Any) -> FlashSaleResource:
        return FlashSaleResource(opts.resource_url)

    def setup(self, opts: Any) -> None:
        self._resource(opts).reset(item_names(opts.items), opts.stock)

    def final_state(self, opts: Any) -> dict:
        state = self._resource(opts).final_state(item_names(opts.items))
        state["locks"] = {
            lock_name(item): probe_free(opts, lock_name(item)) for item in item_names(opts.items)
        }
        return state

    def summarize(self, history: Any, final_state: dict) -> str:
        verdict = check_reentrant(history, final_state)
        counters = ", ".join(f"{k}={v}" for k, v in verdict.counters.items())
        return f"lockbench reentrant verdict: {verdict.status} ({counters})"


harness.use_workload(Reentrant())
_resources: dict[tuple[int, str], FlashSaleResource] = {}
_client_numbers = itertools.count()


def shared_resource(url: str) -> FlashSaleResource:
    """One resource client (and connection pool) per process and URL."""
    key = (os.getpid(), url)
    if key not in _resources:
        _resources[key] = FlashSaleResource(url)
    return _resources[key]


class ReentrantUser(User):
    """One buyer whose critical section takes the same lock ``--depth`` times."""

    wait_time = constant(0)

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        if opts.depth < 1:
            raise ValueError(f"--depth must be at least 1, got {opts.depth}")
        self.opts = opts
        self.client_id = harness.RECORDER.new_client_id()
        self.items = item_names(opts.items)
        self.weights = zipf_weights(opts.items, opts.skew)
        self.rng = random.Random()
        self.cs = parse_distribution(opts.cs, self.rng)
        self.resource = shared_resource(opts.resource_url)
        cls = harness.lock_class(opts)
        options = harness.lock_options(opts, next(_client_numbers))
        urls = harness.lock_urls(opts)
        seq = itertools.count()
        self.locks = {
            item: RecordedLock(cls(lock_name(item), urls, options), harness.RECORDER, self.client_id, seq)
            for item in self.items
        }

    def on_stop(self) -> None:
        for lock in getattr(self, "locks", {}).values():
            harness.RECORDER.add_lock_stats(lock.lock.stats())
            lock.lock.close()

    def _fire(self, name: str, started_ns: int, exc: Exception | None = None) -> None:
        self.environment.events.request.fire(
            request_type="lock",
            name=name,
            response_time=(time.monotonic_ns() - started_ns) / 1e6,
            response_length=0,
            exception=exc,
            context={},
        )

    @task
    def buy(self) -> None:
        item = self.rng.choices(self.items, self.weights)[0] if len(self.items) > 1 else self.items[0]
        lock = self.locks[item]
        started = time.monotonic_ns()
        lease, error = lock.acquire(timeout=self.opts.acquire_timeout)
        if lease is None:
            self._fire("acquire", started, RuntimeError(error))
            return
        self._fire("acquire", started)
        try:
            self._critical_section(lock, item)
        finally:
            started = time.monotonic_ns()
            lock.release(lease)
            self._fire("release", started)

    def _critical_section(self, lock: RecordedLock, item: str) -> None:
        rec, res, name = harness.RECORDER, self.resource, lock.lock.name
        entered = time.monotonic_ns()
        inside = res.witness_enter(item)
        rec.event(self.client_id, lock.next_seq(), "witness", "ok", name, time.monotonic_ns(), value=inside)
        inner: list[Lease] = []
        try:
            for _ in range(self.opts.depth - 1):
                started = time.monotonic_ns()
                lease, error = lock.acquire(timeout=self.opts.acquire_timeout)
                if lease is None:
                    self._fire("reenter", started, RuntimeError(error))
                    break
                self._fire("reenter", started)
                inner.append(lease)
            seq = lock.next_seq()
            rec.event(self.client_id, seq, "purchase", "invoke", name, time.monotonic_ns())
            stock = res.read_stock(item)
            cs = self.cs()
            time.sleep(cs / 2)
            while inner:  # innermost first; the outermost hold must still exclude everyone
                lock.release(inner.pop())
            time.sleep(cs / 2)
            qty = self.rng.randint(1, self.opts.max_qty)
            bought = 0
            if stock >= qty:
                res.write_stock(item, stock - qty)
                res.append_order(item, self.client_id, qty)
                bought = qty
            rec.event(self.client_id, seq, "purchase", "ok", name, time.monotonic_ns(), value=bought)
        finally:
            while inner:
                lock.release(inner.pop())
            res.witness_exit(item)
            rec.record("cs", time.monotonic_ns() - entered)
