"""flash-sale's buyer steps under plain gevent: no Locust, no history, no Locust events.

The floor that ``harness_vs_plain_gevent.py`` holds lockbench against. N greenlets each
run the buyer of ``workloads/flash_sale.py`` (fencing off, one item): acquire, witness
INCR, read the stock, sleep the critical section, write the stock and append the order
when enough is left, witness DECR, release; the same lock class, options and resource
class. Only the hold time (acquire returned -> release called) is timed, into the same
HDR histogram lockbench uses.

Run as a subprocess (gevent patches the whole process)::

    python benchmarks/plain_flash_sale_loop.py IMPL LOCK_URL RESOURCE_URL USERS DURATION_S CS_S RETRY_S

Prints one JSON line: ``acq_per_s`` (acquisitions from the start to DURATION_S later, over
DURATION_S; the drain after it is not counted), ``hold_p50_us``, ``acquisitions``, ``errors``, ``cpu_s``.
"""

from gevent import monkey

monkey.patch_all()

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
from workloads.harness.recording import new_histogram  # noqa: E402
from workloads.harness.resource import FlashSaleResource  # noqa: E402

ITEM = "item-0"
STOCK = 100_000
MAX_QTY = 3


def purchase(lock, resource, rng: random.Random, cs_s: float, on_hold=None, item: str = ITEM) -> None:  # noqa: ANN001
    """One buyer's visit: acquire, witness, read, critical section, write and order, witness, release.

    ``on_hold(ns)`` gets the hold time (acquire returned -> release called) before the release.
    Raises what the acquire raises.
    """
    lease = lock.acquire(timeout=5)
    got = time.monotonic_ns()
    with holder_first.holding():
        resource.witness_enter(item)
        stock = resource.read_stock(item)
        holder_first.holder_sleep(cs_s)
        qty = rng.randint(1, MAX_QTY)
        if stock >= qty:
            resource.write_stock(item, stock - qty)
            resource.append_order(item, "plain", qty)
        resource.witness_exit(item)
        if on_hold is not None:
            on_hold(time.monotonic_ns() - got)
        lock.release(lease)


def main() -> None:
    impl, lock_url, resource_url, users, duration, cs, retry = sys.argv[1:8]
    cls = resolve(impl)
    users_n, duration_s, cs_s = int(users), float(duration), float(cs)
    options = LockOptions(retry_interval=float(retry))
    holder_first.install()
    resource = FlashSaleResource(resource_url)
    resource.reset([ITEM], STOCK)
    hold = new_histogram()
    acquired_at: list[int] = []
    errors = [0]
    stop_at = [0.0]

    def buyer() -> None:
        lock = cls(f"flash-sale:{ITEM}", [lock_url], options)
        rng = random.Random()

        def held(ns: int) -> None:
            acquired_at.append(time.monotonic_ns() - ns)
            hold.record_value(max(1, ns // 1000))

        while time.monotonic() < stop_at[0]:
            try:
                purchase(lock, resource, rng, cs_s, held)
            except Exception:  # noqa: BLE001 - counted, the loop goes on
                errors[0] += 1

    warm = cls(f"flash-sale:{ITEM}", [lock_url], options)
    warm.release(warm.acquire(timeout=5))
    cpu0 = sum(os.times()[:2])
    stop_at[0] = time.monotonic() + duration_s
    start_ns = time.monotonic_ns()
    end_ns = start_ns + int(duration_s * 1e9)
    gevent.joinall([gevent.spawn(buyer) for _ in range(users_n)])
    cpu = sum(os.times()[:2]) - cpu0
    window = [t for t in acquired_at if start_ns <= t <= end_ns]
    print(
        json.dumps(
            {
                "acq_per_s": len(window) / ((end_ns - start_ns) / 1e9),
                "hold_p50_us": hold.get_value_at_percentile(50),
                "acquisitions": len(acquired_at),
                "errors": errors[0],
                "cpu_s": cpu,
            }
        )
    )


if __name__ == "__main__":
    main()
