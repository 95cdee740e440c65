"""One generator process running the buyers of one or several cases: the child of group_in_one_process.py.

Each case is flash-sale's buyer (``benchmarks/plain_flash_sale_loop.py``'s steps: acquire,
witness INCR, read, critical section, write and order, witness DECR, release) on a lock name
and resource namespace of its own (``m<i>:``, as a matrix group gives each case), ``--users``
buyers a case, each paced at ``--pace`` purchases a second as the matrix's fault cases are.
The loop-lag probe the harness uses (workloads/harness/loop_lag.py) watches the process's one
loop over the load window.

Run as a subprocess (gevent patches the whole process)::

    python benchmarks/group_loop_child.py IMPL LOCK_URL RESOURCE_URL --cases 0,1,2 [--users 6]
        [--pace 10] [--duration 20] [--cs 0.001] [--start-at EPOCH_S]

Prints one JSON line: ``cases``, ``acquisitions`` (in the window), ``errors``, ``cpu_s`` (this
process's user + system seconds in the window) and the probe's ``loop_lag_*`` figures.
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lockimpls.base import LockOptions  # noqa: E402
from lockimpls.registry import resolve  # noqa: E402
from workloads.harness import holder_first  # noqa: E402
from workloads.harness.loop_lag import LoopLagProbe  # noqa: E402
from workloads.harness.resource import FlashSaleResource  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from plain_flash_sale_loop import ITEM, purchase  # noqa: E402

STOCK = 10_000_000


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("impl")
    parser.add_argument("lock_url")
    parser.add_argument("resource_url")
    parser.add_argument("--cases", required=True, help="comma-separated case numbers")
    parser.add_argument("--users", type=int, default=6)
    parser.add_argument("--pace", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--cs", type=float, default=0.001)
    parser.add_argument("--start-at", type=float, default=0.0, help="epoch seconds to start the load at")
    a = parser.parse_args()
    cls = resolve(a.impl)
    options = LockOptions()
    holder_first.install()
    cases = [int(c) for c in a.cases.split(",")]
    resources = {i: FlashSaleResource(a.resource_url, namespace=f"m{i}") for i in cases}
    for r in resources.values():
        r.reset([ITEM], STOCK)
    acquired = [0]
    errors = [0]
    stop_at = [0.0]

    def buyer(i: int) -> None:
        lock = cls(f"m{i}:flash-sale:{ITEM}", [a.lock_url], options)
        resource = resources[i]
        rng = random.Random()
        last = 0.0
        while True:
            now = time.monotonic()
            wait = max(0.0, last + 1.0 / a.pace - now) if a.pace > 0 else 0.0
            if now + wait >= stop_at[0]:
                return
            if wait:
                gevent.sleep(wait)
            last = now + wait
            try:
                purchase(lock, resource, rng, a.cs)
            except Exception:  # noqa: BLE001 - counted, the loop goes on
                errors[0] += 1
                continue
            acquired[0] += 1

    for i in cases:  # connections made before the window
        warm = cls(f"m{i}:flash-sale:{ITEM}", [a.lock_url], options)
        warm.release(warm.acquire(timeout=5))
    if a.start_at:
        time.sleep(max(0.0, a.start_at - time.time()))
    probe = LoopLagProbe()
    probe.start()
    cpu0 = _cpu()
    stop_at[0] = time.monotonic() + a.duration
    gevent.joinall([gevent.spawn(buyer, i) for i in cases for _ in range(a.users)])
    probe.freeze()
    cpu = _cpu() - cpu0
    figures = {k: v for k, v in probe.figures().items() if k != "loop_lag_hist"}
    print(
        json.dumps(
            {"cases": cases, "acquisitions": acquired[0], "errors": errors[0], "cpu_s": cpu, **figures}
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
