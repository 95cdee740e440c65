"""PostgreSQL figures, each next to a floor measured in the same run.

1. Uncontended acquire+release p50 of every postgres impl, over ``SELECT 1`` p50 on one
   pooled connection, and two ratios of equal round trips: advisory pair / two ``SELECT 1``;
   FOR UPDATE + COMMIT / an empty ``BEGIN`` + ``COMMIT`` (both two round trips).
2. ``--hot``: one hot key, N greenlets (default 50), 1 ms critical section, plain gevent
   without Locust or recording: acquisitions/s of each impl next to redis.set-nx-px-lua.

Run: ``.venv/bin/python benchmarks/pg_floor.py [--samples 2000] [--hot] [--dsn DSN]``.
Without ``--dsn`` it starts its own cluster (fsync off, synchronous_commit on). Machines
here are noisy: quote ratios, and run it more than once before believing a difference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GEVENT_LOOP_SCRIPT = Path(__file__).resolve().parent / "gevent_loop.py"
sys.path.insert(0, str(ROOT))

from infra.postgres_server import PostgresServer  # noqa: E402
from lockimpls import pg_conn  # noqa: E402
from lockimpls.base import LockOptions  # noqa: E402
from lockimpls.registry import ids_for_backend, resolve  # noqa: E402


def p50_us(samples_ns: list[int]) -> float:
    return statistics.median(samples_ns) / 1000


def uncontended(dsn: str, n: int) -> dict[str, dict[str, float]]:
    """p50 (us) of SELECT 1, two SELECT 1, BEGIN+COMMIT, and every impl's acquire+release."""
    pool = pg_conn.get_pool(dsn)
    conn = pool.getconn()
    locks = {
        impl: resolve(impl)(f"floor-{impl}-{uuid.uuid4().hex[:6]}", [dsn], LockOptions())
        for impl in ids_for_backend("postgres")
    }
    for _ in range(200):  # warm up: prepared statements, key and row creation
        conn.execute("SELECT 1")
        for lock in locks.values():
            lock.release(lock.acquire(timeout=1))
    samples: dict[str, list[int]] = {"select1": [], "two_select1": [], "begin_commit": []}
    samples.update({impl: [] for impl in locks})
    for _ in range(n):  # interleaved, so drift hits every figure alike
        t0 = time.perf_counter_ns()
        conn.execute("SELECT 1")
        t1 = time.perf_counter_ns()
        conn.execute("SELECT 1")
        t2 = time.perf_counter_ns()
        conn.execute("BEGIN")
        conn.execute("COMMIT")
        t3 = time.perf_counter_ns()
        samples["select1"].append(t1 - t0)
        samples["two_select1"].append(t2 - t0)
        samples["begin_commit"].append(t3 - t2)
        for impl, lock in locks.items():
            s = time.perf_counter_ns()
            lock.release(lock.acquire(timeout=1))
            samples[impl].append(time.perf_counter_ns() - s)
    pool.putconn(conn)
    p50 = {k: round(p50_us(v), 1) for k, v in samples.items()}
    ratios = {impl: round(p50[impl] / p50["select1"], 2) for impl in locks}
    return {
        "p50_us": p50,
        "pair_over_select1": ratios,
        "equal_round_trip_ratios": {
            "advisory_pair_over_two_select1": round(p50["postgres.advisory"] / p50["two_select1"], 2),
            "for_update_commit_over_empty_begin_commit": round(
                p50["postgres.for-update"] / p50["begin_commit"], 2
            ),
        },
    }


def hot(impl: str, url: str, users: int, duration: float, cs: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, str(GEVENT_LOOP_SCRIPT), impl, url, str(users), str(duration), str(cs), "hot"],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", help="an existing database (default: start a throwaway cluster)")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--hot", action="store_true", help="also run the hot-key comparison")
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--duration", type=float, default=5)
    a = parser.parse_args()
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = None if a.dsn else PostgresServer(Path(tmp)).start()
        redis = None
        try:
            dsn = a.dsn or server.url
            out["server"] = pg_conn.check_dsn(dsn)
            out["1 uncontended"] = uncontended(dsn, a.samples)
            if a.hot:
                from infra.redis_server import RedisServer

                redis = RedisServer(Path(tmp)).start()
                rows = {
                    "redis.set-nx-px-lua": hot("redis.set-nx-px-lua", redis.url, a.users, a.duration, 0.001)
                }
                for impl in ids_for_backend("postgres"):
                    rows[impl] = hot(impl, dsn, a.users, a.duration, 0.001)
                out[f"2 hot key, {a.users} greenlets, 1 ms cs, plain gevent"] = rows
        finally:
            pg_conn.close_pools()
            if redis is not None:
                redis.stop()
            if server is not None:
                server.stop()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
