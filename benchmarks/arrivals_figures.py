"""Open model vs closed loop on one lock, and a flash-sale spike on each backend's fastest safe lock.

1. ``closed``: ``bench run --impl IMPL`` (flash-sale defaults: 50 users, one hot item). Its
   acquisitions/s, X, is the lock's capacity as the closed loop sees it.
2. ``open``: the same lock with ``--arrivals constant:R`` for R = 0.5 X and 1.2 X (``--shares``) and
   ``--max-in-flight 50`` (the closed loop's 50 users), same duration. Every figure is
   printed beside the closed loop's, which is the floor of the same run.
3. ``spike``: ``--arrivals spike:PEAK@1s --stock STOCK`` for each impl in ``SPIKE_IMPLS``.

All three go into one results folder per step; ``bench report CLOSED OPEN`` draws the open
model's latency from arrival and from start beside the closed loop's acquire latency.

Run: ``.venv/bin/python benchmarks/arrivals_figures.py [--impl redis.set-nx-px-lua] [--duration 8]
[--peak 500] [--stock 300] [--skip-spike]``. Machines here are shared and noisy: compare within
one run, and read a case marked generator_bound as the harness's figure, not the lock's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
#: The fastest lock of each backend that is safe without faults (docs/guide.md "Figures measured here").
SPIKE_IMPLS = [
    "redis.python-redis-lock",
    "postgres.advisory",
    "zookeeper.sequential",
    "etcd.lock-api",
    "memcached.add",
    "file.flock",
]
SHOWN = [
    "impl", "workload", "acquisitions", "throughput_acq_s", "acquire_p50_us", "acquire_p99_us",
    "arrival_count", "arrival_served", "arrival_sold_out", "arrival_gave_up", "arrival_failed",
    "arrival_rejected_in_flight", "arrival_sellout_s", "arrival_p50_us", "arrival_p99_us",
    "arrival_start_p50_us", "arrival_start_p99_us", "arrival_schedule_lag_p99_us",
    "arrival_order_inversion_frac", "oversold_units", "verdict", "generator_bound_reason",
]  # fmt: skip


def bench_run(results: Path, *args: str) -> Path:
    """One ``bench run`` into ``results``; the new run folder."""
    before = set(results.glob("*")) if results.exists() else set()
    argv = [sys.executable, "-m", "bench", "run", "--results-dir", str(results), *args]
    r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"bench run {' '.join(args)} failed: {r.stderr.strip()[-800:]}")
    (run,) = [p for p in results.glob("*") if p.is_dir() and p not in before]
    return run


def cases(run: Path) -> pd.DataFrame:
    frame = pd.read_csv(run / "cases.csv")
    return frame[[c for c in SHOWN if c in frame.columns]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--impl", default="redis.set-nx-px-lua")
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--peak", type=int, default=500, help="spike peak arrivals/s")
    ap.add_argument("--stock", type=int, default=300, help="spike: units per item, so the sale sells out")
    ap.add_argument(
        "--shares", type=float, nargs="+", default=[0.5, 1.2], help="open rates as multiples of X"
    )
    ap.add_argument("--skip-spike", action="store_true")
    ap.add_argument("--results-dir", type=Path, default=ROOT / "results" / "arrivals")
    args = ap.parse_args()
    pd.set_option("display.width", 250, "display.max_columns", 40)
    d = str(args.duration)
    closed = bench_run(args.results_dir, "--impl", args.impl, "--duration", d)
    x = float(pd.read_csv(closed / "cases.csv")["throughput_acq_s"].iloc[0])
    print(f"closed loop ({closed.name}): {x:.1f} acquisitions/s with 50 users")
    opened = []
    for share in args.shares:
        rate = max(1.0, round(share * x))
        run = bench_run(args.results_dir, "--impl", args.impl, "--duration", d, "--arrivals",
                        f"constant:{rate:g}", "--no-report")  # fmt: skip
        opened.append(run)
        print(f"open model at {share:g} X = {rate:g}/s: {run.name}")
    table = pd.concat([cases(closed), *(cases(r) for r in opened)], ignore_index=True)
    print(table.T.to_string())
    report = subprocess.run(
        [sys.executable, "-m", "bench", "report", str(closed), *map(str, opened), "--out",
         str(args.results_dir / "closed-vs-open.html")],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    print(f"report: {report.stdout.strip()}")
    if args.skip_spike:
        return
    spike = bench_run(
        args.results_dir, *[a for impl in SPIKE_IMPLS for a in ("--impl", impl)], "--duration", "5",
        "--arrivals", f"spike:{args.peak}@1s", "--stock", str(args.stock),
    )  # fmt: skip
    print(f"spike:{args.peak}@1s, stock {args.stock} ({spike.name}):")
    print(cases(spike).T.to_string())


if __name__ == "__main__":
    main()
