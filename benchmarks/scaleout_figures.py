"""Issue 14 figures: one run over 3 worker hosts against the single-host run, and 1/2/3 worker hosts.

Every run is a real ``bench run``: on this machine's loopback (single host) or on
network-namespace test hosts (``--test-hosts N``: a master host, N worker hosts, the lock
server and the resource on hosts of their own). Prints Markdown. Figures from a shared
machine are ratios against a floor from the same script: the solo hold (one client on
one worker host), and throughput with one worker host.

    .venv/bin/python benchmarks/scaleout_figures.py [--duration 8] [--users 12]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd

from workloads.harness.recording import decode_histogram

ROOT = Path(__file__).resolve().parent.parent


def bench_run(results: Path, *args: str) -> Path:
    before = set(results.iterdir()) if results.exists() else set()
    argv = [sys.executable, "-m", "bench", "run", "--results-dir", str(results), "--no-report", *args]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"bench run {' '.join(args)} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    (run,) = set(results.iterdir()) - before
    return run


def cases(run: Path) -> list[dict[str, Any]]:
    meta = json.loads((run / "run.json").read_text())
    rows = pd.read_csv(run / "cases.csv").set_index("case").to_dict("index")
    out = []
    for case in meta["cases"]:
        rec = json.loads((run / "hist" / f"{case}.json").read_text())
        history = pd.read_parquet(run / "history" / f"{case}.parquet")
        hold = decode_histogram(rec["histograms"]["hold"])
        out.append(
            {
                **rows[case],
                "hold_p50_us": hold.get_value_at_percentile(50),
                "events_merged": len(history),
                "events_workers": sum(w["events"] for w in rec["workers"].values()),
                "complete": rec["recording_complete"],
                "offsets": meta.get("clock_offsets", {}),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", default="8")
    ap.add_argument("--users", default="12")
    a = ap.parse_args()
    common = ["--duration", a.duration, "--users", a.users]
    impls = ["--impl", "redis.set-nx-px-lua", "--impl", "test.no-mutex"]
    with tempfile.TemporaryDirectory(prefix="scaleout-figures-") as tmp:
        results = Path(tmp)
        single = cases(bench_run(results, *impls, *common))
        multi = cases(bench_run(results, *impls, *common, "--test-hosts", "3"))
        print(
            f"## Master + 3 worker hosts, lock server and resource on hosts of their own ({a.users} users, {a.duration} s)\n"
        )
        print(
            "| impl | single-host verdict | 3-host verdict | overlaps (certain / uncertain) | witness violations | events merged = sum of workers | complete |"
        )
        print("|---|---|---|---|---|---|---|")
        for s, m in zip(single, multi, strict=True):
            print(
                f"| {m['impl']} | {s['verdict']} | {m['verdict']} | {m['overlapping_holds']:.0f} / "
                f"{m['uncertain_overlaps']:.0f} | {m['witness_violations']:.0f} | "
                f"{m['events_merged']} = {m['events_workers']} | {m['complete']} |"
            )
        print("\nClock offsets measured (true offset 0: one machine):\n")
        print("| worker | offset us | uncertainty us | drift us | best rtt us |")
        print("|---|---|---|---|---|")
        for w, o in sorted(multi[0]["offsets"].items()):
            print(
                f"| {w} | {o['offset_ns'] / 1e3:.1f} | {o['uncertainty_ns'] / 1e3:.1f} | "
                f"{o['drift_ns'] / 1e3:.1f} | {o['rtt_ns'] / 1e3:.1f} |"
            )

        solo = cases(
            bench_run(
                results,
                "--impl",
                "redis.set-nx-px-lua",
                "--duration",
                a.duration,
                "--users",
                "1",
                "--test-hosts",
                "1",
            )
        )[0]
        print(f"\n## redis.set-nx-px-lua with 1, 2, 3 worker hosts ({a.users} users in all)\n")
        print(
            f"Floor: solo hold p50 {solo['hold_p50_us']} us (1 user, 1 worker host), {solo['throughput_acq_s']:.0f} acq/s.\n"
        )
        print(
            "| worker hosts | acq/s | x 1 host | hold p50 us | hold inflation (/ solo) | acquire p50 us | worker CPU max (cores) | generator bound |"
        )
        print("|---|---|---|---|---|---|---|---|")
        s0 = single[0]
        print(
            f"| loopback, 1 local process | {s0['throughput_acq_s']:.0f} | - | {s0['hold_p50_us']} | "
            f"{s0['hold_p50_us'] / solo['hold_p50_us']:.2f} | {s0['acquire_p50_us']:.0f} | "
            f"{s0['harness_cpu_max']:.2f} | {s0['generator_bound']} |"
        )
        base = None
        for n in (1, 2, 3):
            row = (
                multi[0]
                if n == 3
                else cases(
                    bench_run(results, "--impl", "redis.set-nx-px-lua", *common, "--test-hosts", str(n))
                )[0]
            )
            base = base or row["throughput_acq_s"]
            print(
                f"| {n} | {row['throughput_acq_s']:.0f} | {row['throughput_acq_s'] / base:.2f} | {row['hold_p50_us']} | "
                f"{row['hold_p50_us'] / solo['hold_p50_us']:.2f} | {row['acquire_p50_us']:.0f} | "
                f"{row['harness_cpu_max']:.2f} | {row['generator_bound']} |"
            )


if __name__ == "__main__":
    main()
