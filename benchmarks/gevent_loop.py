"""The floor loop without Locust or recording: N greenlets doing acquire (+ cs) + release.

Benchmarks run it as a subprocess (gevent patches the whole process):
``python benchmarks/gevent_loop.py IMPL URL USERS DURATION_S CS_S hot|own``. ``hot``: every
greenlet on one lock name; ``own``: each greenlet its own lock. Prints one JSON line,
``{"acq_per_s": ..., "errors": ...}``.
"""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lockimpls.base import LockOptions  # noqa: E402
from lockimpls.registry import resolve  # noqa: E402


def main() -> None:
    impl, url, users, duration, cs, mode = sys.argv[1:7]
    cls = resolve(impl)
    users_n, duration_s, cs_s = int(users), float(duration), float(cs)
    base = f"loop-{impl}-{time.time_ns()}"
    count, errors = [0], [0]

    def loop(i: int) -> None:
        lock = cls(base if mode == "hot" else f"{base}-{i}", [url], LockOptions())
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            try:
                lease = lock.acquire(timeout=5)
            except Exception:  # noqa: BLE001 - counted, the loop goes on
                errors[0] += 1
                continue
            if cs_s:
                gevent.sleep(cs_s)
            lock.release(lease)
            count[0] += 1

    warm = cls(base, [url], LockOptions())
    warm.release(warm.acquire(timeout=5))
    start = time.monotonic()
    gevent.joinall([gevent.spawn(loop, i) for i in range(users_n)])
    print(json.dumps({"acq_per_s": count[0] / (time.monotonic() - start), "errors": errors[0]}))


if __name__ == "__main__":
    main()
