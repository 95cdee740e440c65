"""etcd, memcached and file lock figures, each next to a floor measured in the same run.

1. Uncontended acquire+release p50 of every etcd, memcached and file impl over its
   backend's floor: etcd one ``put`` over the same gateway client (urllib3 keep-alive),
   memcached one ``get`` over the same pool, file one ``open`` + ``close`` of the lock file.
   Floor and impl samples are taken in alternating rounds so drift hits both alike.
2. ``--hot``: one hot key, N greenlets (default 50), 1 ms critical section, plain gevent
   without Locust or recording: acquisitions/s of each impl next to redis.set-nx-px-lua.

Run: ``.venv/bin/python benchmarks/engines_floor.py [--samples 1000] [--hot]
[--etcd-url URL] [--memcached-url URL] [--json FILE]``. Without URLs it starts its own
etcd (fsync on, as etcd ships) and memcached on loopback and stops them at the end.
Machines here are noisy: quote ratios, and run it more than once before believing a
difference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GEVENT_LOOP_SCRIPT = Path(__file__).resolve().parent / "gevent_loop.py"
sys.path.insert(0, str(ROOT))

from infra import catalog  # noqa: E402
from infra.etcd_server import EtcdServer  # noqa: E402
from infra.memcached_server import MemcachedServer  # noqa: E402
from infra.redis_server import RedisServer  # noqa: E402
from lockimpls.base import LockOptions  # noqa: E402
from lockimpls.etcd_client import client_for as etcd_client_for  # noqa: E402
from lockimpls.memcached_locks import pool_for  # noqa: E402
from lockimpls.registry import ids_for_backend, resolve  # noqa: E402

BACKENDS = ("etcd", "memcached", "file")
FLOOR_NAMES = {"etcd": "one put", "memcached": "one get", "file": "open+close"}
#: Samples per impl relative to --samples: an etcd pair costs several fsyncs.
SCALE = {"etcd": 0.25, "memcached": 1.0, "file": 1.0}
ROUNDS = 5


def pct(samples_ns: list[int], q: float) -> float:
    """Percentile ``q`` (0..1) in microseconds, nearest rank."""
    ordered = sorted(samples_ns)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000


def floor_op(backend: str, url: str) -> Callable[[], None]:
    """One call of the backend's floor operation, over the same client the locks use."""
    if backend == "etcd":
        client = etcd_client_for([url])
        key = f"lockbench/floor/{uuid.uuid4().hex[:8]}"

        def put() -> None:
            client.put(key, b"x")

        return put
    if backend == "memcached":
        lock = resolve("memcached.add")("floor", [url])
        pool = pool_for(*lock._pool_args)

        def get() -> None:
            client = pool.get()
            client.get("lockbench:floor")
            pool.put(client)

        return get
    path = Path(resolve("file.flock")("floor", [url]).path)

    def open_close() -> None:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644))

    return open_close


def uncontended(urls: dict[str, str], samples: int) -> list[dict]:
    """One row per impl: floor p50, pair p50/p99, ratio, pairs/s (single client, no contention)."""
    rows = []
    for backend in BACKENDS:
        n = max(50, int(samples * SCALE[backend]))
        floor = floor_op(backend, urls[backend])
        locks = {
            impl: resolve(impl)(f"floor-{impl}-{uuid.uuid4().hex[:6]}", [urls[backend]], LockOptions())
            for impl in ids_for_backend(backend)
        }
        for _ in range(max(20, n // 10)):  # warm up connections and code paths
            floor()
            for lock in locks.values():
                lock.release(lock.acquire(timeout=5))
        floor_ns: list[int] = []
        pair_ns: dict[str, list[int]] = {impl: [] for impl in locks}
        per_round = max(1, n // ROUNDS)
        for _ in range(ROUNDS):
            for _ in range(per_round):
                t = time.perf_counter_ns()
                floor()
                floor_ns.append(time.perf_counter_ns() - t)
            for impl, lock in locks.items():
                for _ in range(per_round):
                    t = time.perf_counter_ns()
                    lock.release(lock.acquire(timeout=5))
                    pair_ns[impl].append(time.perf_counter_ns() - t)
        floor_p50 = pct(floor_ns, 0.5)
        for impl, got in pair_ns.items():
            p50 = pct(got, 0.5)
            rows.append(
                {
                    "impl": impl,
                    "floor": FLOOR_NAMES[backend],
                    "floor_p50_us": round(floor_p50, 1),
                    "pair_p50_us": round(p50, 1),
                    "pair_p99_us": round(pct(got, 0.99), 1),
                    "ratio": round(p50 / floor_p50, 2),
                    "pairs_per_s": round(1e9 / statistics.mean(got), 0),
                    "samples": len(got),
                }
            )
        for lock in locks.values():
            lock.close()
    return rows


def hot(urls: dict[str, str], users: int, duration: float, cs: float) -> list[dict]:
    """Acquisitions/s on one key with ``users`` greenlets in one process, per impl."""
    rows = []
    impls = [(i, urls[i.split(".", 1)[0]]) for b in BACKENDS for i in ids_for_backend(b)]
    impls.append(("redis.set-nx-px-lua", urls["redis"]))
    for impl, url in impls:
        out = subprocess.run(
            [sys.executable, str(GEVENT_LOOP_SCRIPT), impl, url, str(users), str(duration), str(cs), "hot"],
            capture_output=True,
            text=True,
            timeout=duration * 10 + 60,
        )
        if out.returncode != 0:
            rows.append({"impl": impl, "error": out.stderr.strip().splitlines()[-1:]})
            continue
        rows.append({"impl": impl, **json.loads(out.stdout.strip().splitlines()[-1])})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--samples", type=int, default=1000, help="pairs per memcached/file impl (etcd: a quarter)"
    )
    parser.add_argument("--etcd-url", help="use this etcd instead of starting one")
    parser.add_argument("--memcached-url", help="use this memcached instead of starting one")
    parser.add_argument("--hot", action="store_true", help="also the one-hot-key figure (gevent, 50 users)")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--cs", type=float, default=0.001, help="critical section, seconds")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()

    with ExitStack() as stack, tempfile.TemporaryDirectory(prefix="lockbench-floor-") as tmp:
        workdir = Path(tmp)
        urls: dict[str, str] = {"file": catalog.local_url("file", workdir)}
        versions: dict[str, str] = {}
        if args.etcd_url:
            urls["etcd"] = args.etcd_url
        else:
            etcd = EtcdServer(workdir, "etcd-floor").start()
            stack.callback(etcd.stop)
            urls["etcd"], versions["etcd"] = etcd.url, etcd.version()
        if args.memcached_url:
            urls["memcached"] = args.memcached_url
        else:
            mc = MemcachedServer(workdir, "memcached-floor").start()
            stack.callback(mc.stop)
            urls["memcached"], versions["memcached"] = mc.url, mc.version()
        if args.hot:
            redis = RedisServer(workdir, "redis-floor").start()
            stack.callback(redis.stop)
            urls["redis"] = redis.url

        rows = uncontended(urls, args.samples)
        print(
            f"uncontended acquire+release, one client ({', '.join(f'{k} {v}' for k, v in versions.items())})"
        )
        print(
            f"{'impl':<20} {'floor':<11} {'floor p50':>10} {'pair p50':>10} {'pair p99':>10} {'ratio':>6} {'pairs/s':>8}"
        )
        for r in rows:
            print(
                f"{r['impl']:<20} {r['floor']:<11} {r['floor_p50_us']:>8.1f}us {r['pair_p50_us']:>8.1f}us "
                f"{r['pair_p99_us']:>8.1f}us {r['ratio']:>6.2f} {r['pairs_per_s']:>8.0f}"
            )
        hot_rows: list[dict] = []
        if args.hot:
            hot_rows = hot(urls, args.users, args.duration, args.cs)
            print(
                f"\none hot key, {args.users} greenlets, {args.cs * 1000:.0f} ms critical section, {args.duration:.0f}s"
            )
            for r in hot_rows:
                if "error" in r:
                    print(f"{r['impl']:<20} error: {r['error']}")
                else:
                    print(f"{r['impl']:<20} {r['acq_per_s']:>8.0f} acq/s  ({r['errors']} timeouts/errors)")
        if args.json:
            args.json.write_text(
                json.dumps({"versions": versions, "uncontended": rows, "hot": hot_rows}, indent=2)
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
