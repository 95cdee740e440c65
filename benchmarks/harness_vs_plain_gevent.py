"""What the harness costs: lockbench (Locust, full recording) against a plain gevent loop, same run.

Both sides run flash-sale's buyer on one hot item with the same lock impl, critical
section and retry interval, one process each, against the same two redis-servers (lock
and resource) started here on loopback:

- **lockbench**: ``python -m locust -f workloads/flash_sale.py --headless`` with the
  flags ``bench run`` passes (one process), every event in the history and every
  latency in the HDR histograms; acquisitions/s over the steady window and hold p50
  are computed from its recording as ``bench run`` does (``bench.measure.analysis``);
- **plain**: ``benchmarks/plain_flash_sale_loop.py``, the same steps in N greenlets,
  no Locust, no history, only the hold histogram.

Each setting (1 client: uncontended; ``--users``, 50: contended) runs ``--trials``
times, lockbench and plain alternating (ABBA order) so drift hits both. Printed per
setting: medians of acquisitions/s and hold p50 on each side and the ratios
lockbench/plain (throughput: higher is better, goal >= 0.9; hold: plain/lockbench, so
that >= 0.9 is good too), plus client CPU per acquisition.

Run: ``.venv/bin/python benchmarks/harness_vs_plain_gevent.py [--duration 8] [--trials 3]
[--users 1 50] [--impl redis.set-nx-px-lua] [--cs 0.001] [--json FILE]``. Shared machines
are noisy: quote the ratios, not the absolute figures.
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
import redis  # noqa: E402

from bench.measure.analysis import steady_window  # noqa: E402
from infra.redis_server import RedisServer  # noqa: E402
from lockimpls.base import DEFAULT_RETRY_INTERVAL  # noqa: E402
from workloads.harness.recording import decode_histogram  # noqa: E402

PLAIN_LOOP = ROOT / "benchmarks" / "plain_flash_sale_loop.py"
FLASH_SALE = ROOT / "workloads" / "flash_sale.py"


def run_lockbench(
    impl: str, lock_url: str, resource_url: str, users: int, a: argparse.Namespace, out: Path
) -> dict[str, float]:
    argv = [
        sys.executable, "-m", "locust", "-f", str(FLASH_SALE), "--headless",
        "--users", str(users), "--spawn-rate", str(users),
        "--run-time", f"{max(1, round(a.duration))}s", "--stop-timeout", "10",
        "--exit-code-on-error", "0", "--only-summary", "--loglevel", "WARNING",
        "--lock-impl", impl, "--lock-url", lock_url, "--resource-url", resource_url,
        "--retry-interval", str(a.retry_interval), "--cs", f"{a.cs * 1000}ms", "--items", "1",
        "--lockbench-out", str(out), "--lockbench-case", f"harness-{users}",
    ]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0 or not (out / "recording.json").exists():
        raise SystemExit(f"locust failed ({proc.returncode}): {proc.stderr[-2000:]}")
    recording = json.loads((out / "recording.json").read_text())
    history = pd.read_parquet(out / "history.parquet")
    start, end = steady_window(history)
    acquired = history[(history["op"] == "acquire") & (history["type"] == "ok")]["t_ns"]
    in_window = int(((acquired >= start) & (acquired <= end)).sum())
    (worker,) = recording["workers"].values()
    wall_s = (recording["t_stop_ns"] - recording["t_start_ns"]) / 1e9
    return {
        "acq_per_s": in_window / ((end - start) / 1e9),
        "hold_p50_us": decode_histogram(recording["histograms"]["hold"]).get_value_at_percentile(50),
        "cpu_ms_per_acq": 1000 * worker["cpu_share"] * wall_s / max(1, len(acquired)),
    }


def run_plain(
    impl: str, lock_url: str, resource_url: str, users: int, a: argparse.Namespace
) -> dict[str, float]:
    argv = [sys.executable, str(PLAIN_LOOP), impl, lock_url, resource_url, str(users), str(a.duration),
            str(a.cs), str(a.retry_interval)]  # fmt: skip
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"plain loop failed ({proc.returncode}): {proc.stderr[-2000:]}")
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "acq_per_s": got["acq_per_s"],
        "hold_p50_us": got["hold_p50_us"],
        "cpu_ms_per_acq": 1000 * got["cpu_s"] / max(1, got["acquisitions"]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=8.0, help="seconds per run")
    ap.add_argument("--trials", type=int, default=3, help="runs per side and setting")
    ap.add_argument("--users", type=int, nargs="+", default=[1, 50], help="client counts to compare")
    ap.add_argument("--impl", default="redis.set-nx-px-lua")
    ap.add_argument("--cs", type=float, default=0.001, help="critical section, seconds")
    ap.add_argument("--retry-interval", type=float, default=DEFAULT_RETRY_INTERVAL)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()

    runs: dict[int, dict[str, list[dict[str, float]]]] = {u: {"lockbench": [], "plain": []} for u in a.users}
    with tempfile.TemporaryDirectory(prefix="harness-vs-plain-") as tmp:
        tmp_path = Path(tmp)
        lock_srv = RedisServer(tmp_path, name="lock").start()
        res_srv = RedisServer(tmp_path, name="resource").start()
        try:
            flush = redis.Redis.from_url(lock_srv.url)
            n = 0
            for trial in range(a.trials):
                for users in a.users:
                    order = ("lockbench", "plain") if trial % 2 == 0 else ("plain", "lockbench")
                    for side in order:
                        flush.flushall()  # a holder stopped mid-hold leaves its lock behind
                        n += 1
                        if side == "lockbench":
                            got = run_lockbench(
                                a.impl, lock_srv.url, res_srv.url, users, a, tmp_path / f"r{n}"
                            )
                        else:
                            got = run_plain(a.impl, lock_srv.url, res_srv.url, users, a)
                        runs[users][side].append(got)
                        print(f"trial {trial} users {users} {side}: {got}", file=sys.stderr)
            flush.close()
        finally:
            res_srv.stop()
            lock_srv.stop()

    summary: dict[str, Any] = {
        "impl": a.impl, "cs_s": a.cs, "retry_interval_s": a.retry_interval,
        "duration_s": a.duration, "trials": a.trials, "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }  # fmt: skip
    print(f"## {a.impl}, flash-sale, one hot item, {a.cs * 1000:g} ms cs, retry {a.retry_interval * 1000:g} ms, "
          f"one process each, medians of {a.trials} runs of {a.duration:g} s\n")  # fmt: skip
    print("| clients | side | acq/s | hold p50 us | client CPU ms/acq |")
    print("|---|---|---|---|---|")
    for users in a.users:
        med = {
            side: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for side, rs in runs[users].items()
        }
        for side in ("lockbench", "plain"):
            m = med[side]
            print(
                f"| {users} | {side} | {m['acq_per_s']:.0f} | {m['hold_p50_us']:.0f} | {m['cpu_ms_per_acq']:.2f} |"
            )
        med["ratio_acq_s"] = med["lockbench"]["acq_per_s"] / med["plain"]["acq_per_s"]
        med["ratio_hold_p50"] = med["plain"]["hold_p50_us"] / med["lockbench"]["hold_p50_us"]
        summary[str(users)] = {**med, "runs": runs[users]}
    print("\n| clients | acq/s lockbench/plain | hold p50 plain/lockbench |")
    print("|---|---|---|")
    for users in a.users:
        s = summary[str(users)]
        print(f"| {users} | {s['ratio_acq_s']:.2f} | {s['ratio_hold_p50']:.2f} |")
    if a.json:
        a.json.write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
