"""reentrant: buyers who take the item's lock again inside their critical section (a valid locustfile).

flash-sale, except that between reading and writing the stock each buyer acquires the
item's lock ``--depth - 1`` more times (nested, as code that calls a locked helper from
a locked method does), spends half of ``--cs``, releases the inner holds, and spends the
other half before writing. A lock that frees itself at the first inner release lets
another buyer read the same stock in the second half: the checkers see the overlap, the
witness and the lost update.

At the end the harness probes every item's lock with a fresh client: it must be free.
It runs only for impls that declare ``reentrant``::

    locust -f workloads/reentrant.py --headless -u 20 -r 20 -t 10s --depth 3 \\
        --lock-impl redis.reentrant --lock-url redis://127.0.0.1:6379/0 \\
        --resource-url redis://127.0.0.1:6380/0
"""

from __future__ import annotations

import time
from typing import Any

from locust import events

from lockimpls.base import Lease, LockError
from workloads.checks.reentrant import check_reentrant
from workloads.flash_sale import FlashSale, FlashSaleUser, item_names
from workloads.harness import locust_glue as harness
from workloads.harness.recording import RecordedLock

LOCK_PREFIX = "reentrant"


def lock_name(item: str) -> str:
    return f"{LOCK_PREFIX}:{item}"


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    g = parser.add_argument_group("reentrant")
    g.add_argument("--depth", type=int, default=3, help="holds per critical section (1 = no nesting)")


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


class Reentrant(FlashSale):
    """flash-sale's resource and steps, plus a probe that every lock is free at the end."""

    name = "reentrant"

    def final_state(self, opts: Any) -> dict:
        state = super().final_state(opts)
        state["locks"] = {
            lock_name(item): probe_free(opts, lock_name(item)) for item in item_names(opts.items)
        }
        return state

    def summarize(self, history: Any, final_state: dict) -> str:
        verdict = check_reentrant(history, final_state)
        counters = ", ".join(f"{k}={v}" for k, v in verdict.counters.items())
        return f"lockbench reentrant verdict: {verdict.status} ({counters})"


harness.use_workload(Reentrant())


class ReentrantUser(FlashSaleUser):
    """One buyer whose critical section takes the same lock ``--depth`` times."""

    lock_prefix = LOCK_PREFIX

    def on_start(self) -> None:
        if self.environment.parsed_options.depth < 1:
            raise ValueError(f"--depth must be at least 1, got {self.environment.parsed_options.depth}")
        super().on_start()

    def think(self, lock: RecordedLock, item: str) -> None:
        inner: list[Lease] = []
        cs = self.cs()
        try:
            for _ in range(self.opts.depth - 1):
                started = time.monotonic_ns()
                lease, error = lock.acquire(timeout=self.opts.acquire_timeout)
                if lease is None:
                    self._fire("reenter", started, RuntimeError(error))
                    break
                self._fire("reenter", started)
                inner.append(lease)
            time.sleep(cs / 2)
        finally:
            while inner:  # innermost first; the outermost hold must still exclude everyone
                lock.release(inner.pop())
        time.sleep(cs / 2)


FlashSaleUser.abstract = True  # only the nesting buyer runs in this locustfile
