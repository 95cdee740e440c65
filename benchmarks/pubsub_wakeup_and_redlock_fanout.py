"""Pub/sub wake-up against polling on one hot key, and RedLock's fan-out cost over one instance.

1. One hot key, ``--users`` (50) clients, 1 ms critical section, flash-sale through
   ``bench run``: ``redis.reentrant`` (waiters woken by pub/sub) next to
   ``redis.set-nx-px-lua`` (polling every ``--retry-interval``): acquisitions/s, p99
   acquire wait and handoff gap p50, medians over ``--trials`` interleaved trials.
2. Uncontended acquire+release p50 of ``redis.redlock`` (five masters) over
   ``redis.set-nx-px-lua`` (one of them), two ways: through ``bench run --workload
   lock-pairs --users 1`` (acquire p50 + release p50 from cases.csv), and in a plain
   loop in this process (no Locust, no recording), alternating rounds so drift hits both.
   RedLock's validity left at acquisition and first-try quorum rate come from its
   ``lockstat_*`` columns.

Run: ``.venv/bin/python benchmarks/pubsub_wakeup_and_redlock_fanout.py [--duration 10] [--trials 3]
[--retry-interval S] [--json FILE]``. Everything runs on servers bench starts on
loopback. Machines here are noisy: quote ratios, and run it more than once.
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pandas as pd  # noqa: E402

from infra.redis_server import RedisServer  # noqa: E402
from lockimpls.base import Lock, LockOptions  # noqa: E402
from lockimpls.redis_conn import close_clients  # noqa: E402
from lockimpls.redis_locks import SetNxPxLua  # noqa: E402
from lockimpls.redlock import RedLock, close_pools  # noqa: E402

HOT = ("redis.reentrant", "redis.set-nx-px-lua")
PAIR = ("redis.redlock", "redis.set-nx-px-lua")


def bench_run(args: list[str], results: Path) -> pd.DataFrame:
    """``bench run ARGS`` into ``results``; its cases.csv."""
    cmd = [sys.executable, "-m", "bench", "run", *args, "--no-report", "--results-dir", str(results)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"bench failed ({out.returncode}): {out.stderr[-2000:]}")
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    return pd.read_csv(run / "cases.csv")


def medians(cases: pd.DataFrame, columns: list[str]) -> dict[str, dict[str, float]]:
    return {
        impl: {c: float(group[c].median()) for c in columns if c in group}
        for impl, group in cases.groupby("impl")
    }


def hot_key(
    duration: float, trials: int, users: int, retry_interval: float | None, processes: int
) -> dict[str, Any]:
    args = ["--workload", "flash-sale", "--items", "1", "--cs", "1ms", "--users", str(users),
            "--duration", str(duration), "--trials", str(trials), "--processes", str(processes)]  # fmt: skip
    for impl in HOT:
        args += ["--impl", impl]
    if retry_interval is not None:
        args += ["--retry-interval", str(retry_interval)]
    with tempfile.TemporaryDirectory(prefix="pubsub-hot-") as tmp:
        cases = bench_run(args, Path(tmp))
    cols = ["throughput_acq_s", "acquire_p99_us", "handoff_p50_us", "jain_index", "acquire_timeouts",
            "server_cmds_per_acquire"]  # fmt: skip
    out = medians(cases, cols)
    out["verdicts"] = {impl: sorted(set(g["verdict"])) for impl, g in cases.groupby("impl")}
    return out


def uncontended_bench(duration: float, trials: int) -> dict[str, Any]:
    args = ["--workload", "lock-pairs", "--users", "1", "--duration", str(duration), "--trials", str(trials)]
    for impl in PAIR:
        args += ["--impl", impl]
    with tempfile.TemporaryDirectory(prefix="redlock-pairs-") as tmp:
        cases = bench_run(args, Path(tmp))
    cases["pair_p50_us"] = cases["acquire_p50_us"] + cases["release_p50_us"]
    cols = ["pair_p50_us", "acquire_p50_us", "release_p50_us", "throughput_acq_s"]
    cols += [c for c in cases.columns if c.startswith("lockstat_")]
    out = medians(cases, cols)
    red = cases[cases["impl"] == "redis.redlock"]
    acquired = red.get("lockstat_acquired", pd.Series(dtype=float)).sum()
    if acquired:
        out["redlock_first_try_quorum"] = float(red["lockstat_first_try_quorum"].sum() / acquired)
        out["redlock_validity_left_ms_mean"] = float(red["lockstat_validity_left_ms_sum"].sum() / acquired)
    out["ratio_pair_p50"] = out["redis.redlock"]["pair_p50_us"] / out["redis.set-nx-px-lua"]["pair_p50_us"]
    return out


def _pairs(lock: Lock, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        lock.release(lock.acquire(timeout=1))
        samples.append((time.perf_counter_ns() - t0) / 1000)
    return samples


def uncontended_loop(samples: int, rounds: int = 5) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="redlock-loop-") as tmp:
        servers = [RedisServer(Path(tmp), name=f"master-{i}").start() for i in range(5)]
        try:
            urls = [s.url for s in servers]
            red = RedLock("loop", urls, LockOptions())
            one = SetNxPxLua("loop", urls[:1], LockOptions())
            _pairs(red, 200), _pairs(one, 200)  # connect, load scripts
            got: dict[str, list[float]] = {"redis.redlock": [], "redis.set-nx-px-lua": []}
            for _ in range(rounds):
                got["redis.redlock"] += _pairs(red, samples // rounds)
                got["redis.set-nx-px-lua"] += _pairs(one, samples // rounds)
        finally:
            close_pools()
            close_clients()
            for s in servers:
                s.stop()
    p50 = {impl: statistics.median(v) for impl, v in got.items()}
    return {"pair_p50_us": p50, "ratio_pair_p50": p50["redis.redlock"] / p50["redis.set-nx-px-lua"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=10.0, help="seconds per bench case")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--users", type=int, default=50)
    ap.add_argument(
        "--processes", type=int, nargs="+", default=[1, 2], help="Locust processes of the hot-key runs"
    )
    ap.add_argument("--retry-interval", type=float, default=None, help="polling interval (default: bench's)")
    ap.add_argument("--samples", type=int, default=3000, help="pairs per impl in the plain loop")
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()

    figures = {
        "hot_key": {n: hot_key(a.duration, a.trials, a.users, a.retry_interval, n) for n in a.processes},
        "uncontended_bench": uncontended_bench(max(3.0, a.duration / 2), a.trials),
        "uncontended_loop": uncontended_loop(a.samples),
    }
    print(f"## one hot key, {a.users} users, 1 ms critical section (medians of {a.trials} trials)\n")
    print("| processes | impl | acq/s | acquire p99 us | handoff p50 us | Jain | timeouts | verdicts |")
    print("|---|---|---|---|---|---|---|---|")
    for n, hot in figures["hot_key"].items():
        for impl in HOT:
            h = hot[impl]
            print(f"| {n} | {impl} | {h['throughput_acq_s']:.0f} | {h['acquire_p99_us']:.0f} | "
                  f"{h['handoff_p50_us']:.0f} | {h['jain_index']:.2f} | {h['acquire_timeouts']:.0f} | "
                  f"{','.join(hot['verdicts'][impl])} |")  # fmt: skip
    ub, ul = figures["uncontended_bench"], figures["uncontended_loop"]
    print("\n## uncontended acquire+release p50: redis.redlock (5 masters) / redis.set-nx-px-lua (1)\n")
    print(f"- through bench (lock-pairs, 1 user): {ub['redis.redlock']['pair_p50_us']:.0f} us / "
          f"{ub['redis.set-nx-px-lua']['pair_p50_us']:.0f} us = {ub['ratio_pair_p50']:.2f}")  # fmt: skip
    print(f"- plain loop: {ul['pair_p50_us']['redis.redlock']:.0f} us / "
          f"{ul['pair_p50_us']['redis.set-nx-px-lua']:.0f} us = {ul['ratio_pair_p50']:.2f}")  # fmt: skip
    if "redlock_first_try_quorum" in ub:
        print(f"- RedLock: first-try quorum {ub['redlock_first_try_quorum']:.1%}, "
              f"validity left at acquisition {ub['redlock_validity_left_ms_mean']:.0f} ms (ttl 10 s)")  # fmt: skip
    if a.json:
        a.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
