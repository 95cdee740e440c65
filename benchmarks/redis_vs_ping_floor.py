"""Redis lock costs against floors of the same run: PINGs, a plain gevent loop, and one hot key.

1. Uncontended acquire+release p50 of redis.set-nx-px-lua / two raw redis-py PINGs on the
   same connection (one process, no gevent, no recording).
2. Harness overhead: lock pairs/s driven by Locust with full recording (``bench run
   --workload lock-pairs``) / the same loop under plain gevent without Locust or recording.
3. One hot key, 50 users, 1 ms critical section (``bench run --backend redis``):
   acquisitions/s and p99 acquire wait of each impl, next to the floor of (1).

Run: ``.venv/bin/python benchmarks/redis_vs_ping_floor.py [--duration 10]``. Machines here
are noisy: quote the ratios, and run it more than once before believing a difference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.redis_server import RedisServer  # noqa: E402
from lockimpls.base import LockOptions  # noqa: E402
from lockimpls.registry import resolve  # noqa: E402


def p50_us(samples_ns: list[int]) -> float:
    return statistics.median(samples_ns) / 1000


def uncontended(url: str, n: int) -> dict[str, float]:
    import redis

    client = redis.Redis.from_url(url)
    lock = resolve("redis.set-nx-px-lua")("floor", [url], LockOptions())
    for _ in range(200):  # warm up connections and the script cache
        client.ping()
        lock.release(lock.acquire(timeout=1))
    pings, pairs = [], []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        client.ping()
        client.ping()
        t1 = time.perf_counter_ns()
        lock.release(lock.acquire(timeout=1))
        t2 = time.perf_counter_ns()
        pings.append(t1 - t0)
        pairs.append(t2 - t1)
    return {"two_pings_p50_us": p50_us(pings), "lua_pair_p50_us": p50_us(pairs)}


def bench_run(args: list[str], results: Path) -> pd.DataFrame:
    cmd = [sys.executable, "-m", "bench", "run", *args, "--no-report", "--results-dir", str(results)]
    subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    run = sorted(p for p in results.iterdir() if p.is_dir())[-1]
    return pd.read_csv(run / "cases.csv")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", type=float, default=10)
    parser.add_argument("--users", type=int, default=50)
    parser.add_argument("--samples", type=int, default=5000)
    a = parser.parse_args()
    out: dict[str, object] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        server = RedisServer(tmp_path).start()
        try:
            floor = uncontended(server.url, a.samples)
            gevent = subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "benchmarks" / "gevent_loop.py"),
                    "redis.set-nx-px-lua",
                    server.url,
                    str(a.users),
                    str(a.duration),
                    "0",
                    "own",
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            plain = json.loads(gevent.stdout.strip().splitlines()[-1])["acq_per_s"]
        finally:
            server.stop()
        out["1 uncontended"] = {
            **floor,
            "ratio_pair_over_two_pings": floor["lua_pair_p50_us"] / floor["two_pings_p50_us"],
        }
        pairs = bench_run(
            ["--impl", "redis.set-nx-px-lua", "--workload", "lock-pairs", "--users", str(a.users),
             "--duration", str(a.duration)],
            tmp_path / "r1",
        )  # fmt: skip
        locust_rate = float(pairs["throughput_acq_s"].iloc[0])
        out["2 harness overhead"] = {
            "locust_recorded_pairs_per_s": locust_rate,
            "plain_gevent_pairs_per_s": plain,
            "ratio_locust_over_plain": locust_rate / plain,
        }
        hot = bench_run(
            ["--backend", "redis", "--users", str(a.users), "--cs", "1ms", "--duration", str(a.duration)],
            tmp_path / "r2",
        )
        out["3 hot key, 50 users, 1 ms cs"] = {
            row["impl"]: {
                "acquisitions_per_s": round(row["throughput_acq_s"], 1),
                "acquire_p99_us": row["acquire_p99_us"],
                "acquire_p99_over_lua_pair_p50": round(row["acquire_p99_us"] / floor["lua_pair_p50_us"], 1),
                "server_cmds_per_acquire": round(row["server_cmds_per_acquire"], 1),
                "verdict": row["verdict"],
            }
            for _, row in hot.iterrows()
        }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
