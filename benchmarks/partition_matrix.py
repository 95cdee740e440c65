"""Seed algorithms against network partitions: which lock survives which cut (issue 15).

Runs ``bench run`` once per partition kind (every server, the resource and each Locust
worker process on its own test host; needs root), each impl unfenced (``observe``: stale
writes reach the resource and are counted) and fenced (``enforce``: the resource refuses
them), then prints one markdown table: impl x partition kind -> verdict and the counters
that explain it, plus how long the service kept a cut-off holder's lock
(``takeover_after_cut_ms``) and the heal to the next acquisition (``recovery_after_heal_ms``).

The holder that claims the fault keeps its lock 7 s; the cut heals after 8 s. Leases are
2 s (``--ttl 2``) and ZooKeeper sessions 3 s, so a lock service that hands the lock on
during the cut does so while the old holder still works. About 25 minutes on 2 cores.

    .venv/bin/python benchmarks/partition_matrix.py [--duration 14] [--results results/partition-matrix]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent

SINGLE = ["redis.set-nx-px-lua", "postgres.advisory", "postgres.for-update", "postgres.unique-insert",
          "memcached.add"]  # fmt: skip
CLUSTERED = ["redis.redlock", "zookeeper.sequential", "etcd.lease"]

#: partition kind -> impls it means something for. A single server has no leader and no
#: minority: cutting it (partition-node) only stops everyone, and its majority split is
#: the client cut, so those rows are left out. RedLock has no leader.
RUNS = {
    "partition-client": SINGLE + CLUSTERED,
    "partition-majority": CLUSTERED,
    "partition-leader": ["redis.set-nx-px-lua", "zookeeper.sequential", "etcd.lease"],
    "partition-node": CLUSTERED,
}

COMMON = [
    "--users",
    "4",
    "--ttl",
    "2",
    "--fencing",
    "both",
    "--lock-params",
    json.dumps({"session_timeout": 3}),
]

COUNTERS = [
    ("overlapping_holds", "overlaps"),
    ("lost_updates", "lost"),
    ("oversold_units", "oversold"),
    ("stale_writes_accepted", "stale ok"),
    ("stale_writes_refused", "stale refused"),
    ("takeover_after_cut_ms", "taken over after ms"),
    ("recovery_after_heal_ms", "next acq after heal ms"),
]


def cell(row: pd.Series) -> str:
    parts = [str(row["verdict"])]
    for col, label in COUNTERS:
        v = row.get(col)
        if v is not None and v == v and v:
            parts.append(f"{label} {v:.0f}" if isinstance(v, float) else f"{label} {v}")
    if row.get("takeover_after_cut_ms") != row.get("takeover_after_cut_ms"):
        parts.append("kept through the cut")
    learned = row.get("holder_release")
    if isinstance(learned, str) and learned:
        parts.append(f"holder's release: {learned}")
    if row["verdict"] == "invalid" and bool(row.get("data_safe")):
        parts.append("data safe")
    return ", ".join(parts)


def run(kind: str, impls: list[str], duration: str, results: Path, reuse: bool) -> pd.DataFrame:
    out = results / kind
    if reuse and out.is_dir() and any((p / "cases.csv").exists() for p in out.iterdir()):
        return latest(out)
    argv = [sys.executable, "-m", "bench", "run", "--fault", kind, "--duration", duration, *COMMON,
            "--results-dir", str(out)]  # fmt: skip
    for impl in impls:
        argv += ["--impl", impl]
    print(" ".join(argv[2:]), file=sys.stderr, flush=True)
    subprocess.run(argv, cwd=ROOT, check=False)
    return latest(out)


def latest(out: Path) -> pd.DataFrame:
    runs = sorted(p for p in out.iterdir() if (p / "cases.csv").exists()) if out.is_dir() else []
    return pd.read_csv(runs[-1] / "cases.csv") if runs else pd.DataFrame()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--duration", default="14")
    parser.add_argument("--results", default=str(ROOT / "results" / "partition-matrix"))
    parser.add_argument("--only", choices=list(RUNS), action="append")
    parser.add_argument(
        "--reuse", action="store_true", help="take a kind's finished run instead of running it again"
    )
    args = parser.parse_args()
    results = Path(args.results)
    frames = [run(kind, RUNS[kind], args.duration, results, args.reuse) for kind in args.only or RUNS]
    cases = pd.concat([f for f in frames if not f.empty], ignore_index=True)
    if cases.empty:
        sys.exit("no case finished")
    cases.to_csv(results / "partition-matrix.csv", index=False)
    cases["column"] = (
        cases["fault"].str.replace("@held", "")
        + " "
        + cases["fencing"].map({"observe": "unfenced", "enforce": "fenced", "off": "no tokens"})
    )
    table = cases.assign(cell=cases.apply(cell, axis=1)).pivot_table(
        index="impl", columns="column", values="cell", aggfunc="first"
    )
    table = table.fillna("")
    print("| impl | " + " | ".join(table.columns) + " |")
    print("|---" * (len(table.columns) + 1) + "|")
    for impl, row in table.iterrows():
        print(f"| `{impl}` | " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
