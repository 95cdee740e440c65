"""The fault verdict matrix: every impl x (long-cs, lease-expiry task and world
pauses, crash, server restart), fenced and unfenced, plus recovery time after a crash.

Runs ``bench`` three times (faults need different set-ups), then prints one table:
impl x scenario -> verdict and the counters that explain it, and recovery p50 per impl.
Each run also leaves its own report.html. Takes about half an hour on 2 cores at the
default 5 s per case.

    .venv/bin/python benchmarks/fault_matrix.py [--duration 5] [--results results/fault-matrix]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent

RUNS = {
    "workloads": ["--backend", "all", "--workload", "long-cs", "--workload", "lease-expiry"],
    # crash keeps its own 10 s: a lock counts as stuck only when the run outlives the 5 s bound
    "crash": ["--backend", "all", "--workload", "crash"],
    "world-pause": ["--backend", "all", "--workload", "lease-expiry", "--pause-kind", "world"],
    "restart": [
        "--backend", "redis", "--backend", "postgres", "--backend", "etcd", "--backend", "memcached",
        "--backend", "zookeeper", "--fault", "restart", "--users", "10",
    ],
}  # fmt: skip

COUNTERS = [
    ("overlapping_holds", "overlaps"),
    ("lost_updates", "lost"),
    ("oversold_units", "oversold"),
    ("stale_writes_accepted", "stale ok"),
    ("stale_writes_refused", "stale refused"),
    ("stuck_locks", "stuck"),
    ("recovery_ms_p50", "recovery ms"),
]


def cell(row: pd.Series) -> str:
    parts = [str(row["verdict"])]
    for col, label in COUNTERS:
        v = row.get(col)
        if v is not None and v == v and v:
            parts.append(f"{label} {v:.0f}" if isinstance(v, float) else f"{label} {v}")
    if row["verdict"] == "invalid" and bool(row.get("data_safe")):
        parts.append("data safe")
    return ", ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", default="5")
    parser.add_argument("--results", default=str(ROOT / "results" / "fault-matrix"))
    parser.add_argument("--only", choices=list(RUNS), action="append")
    a = parser.parse_args()
    frames = []
    for name, args in RUNS.items():
        if a.only and name not in a.only:
            continue
        out = Path(a.results) / name
        duration = [] if name == "crash" else ["--duration", a.duration]
        cmd = [sys.executable, "-m", "bench", "run", *args, *duration, "--results-dir", str(out)]
        print("$", " ".join(cmd[2:]), file=sys.stderr, flush=True)
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        print(done.stdout.strip() or done.stderr.strip().splitlines()[-1], file=sys.stderr, flush=True)
        run = sorted(p for p in out.iterdir() if p.is_dir())[-1]
        cases = pd.read_csv(run / "cases.csv")
        if name == "world-pause":
            cases["scenario"] = cases["scenario"].str.replace("lease-expiry", "lease-expiry(world)")
        frames.append(cases)
    cases = pd.concat(frames, ignore_index=True)
    matrix = cases.assign(cell=cases.apply(cell, axis=1)).pivot_table(
        index="impl", columns="scenario", values="cell", aggfunc="first"
    )
    pd.set_option("display.width", 250)
    pd.set_option("display.max_colwidth", 60)
    for scenario in matrix.columns:
        print(f"\n## {scenario}")
        print(matrix[scenario].dropna().to_string())
    crash = cases[cases["workload"] == "crash"].set_index("impl")
    if not crash.empty:
        print("\n## recovery after a crashed holder (ms, p50) and stuck locks")
        print(crash[["recovery_ms_p50", "stuck_locks", "verdict"]].to_string())


if __name__ == "__main__":
    main()
