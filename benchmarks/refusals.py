"""How long a refusal takes: bad invocations of every command, each a fresh ``bench`` process.

Issue 43: every refusal (exit 2, one line, nothing started) should come back well under a
second, because the arguments are checked before the heavy imports. The corpus is the kinds
of bad input the refusal tests use (tests/test_refusals_sources.py, tests/test_bad_inputs.py):
numbers out of range, unknown names through flags, variables and pyproject, bad specs, empty
and unusable paths. Each is run ``--repeat`` times; printed per invocation: the median wall
time, exit code and the refusal's first words, then how many are under 1 s, the median and
the maximum, beside the load average before and after. The floor, measured in the same run,
is ``python -c pass`` with the same interpreter: the part of any refusal no code of bench's
can remove.

Run: ``.venv/bin/python benchmarks/refusals.py [--repeat 3]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: (arguments, extra environment); every one must be refused with exit 2
CORPUS: list[tuple[list[str], dict[str, str]]] = [
    (["run", "--ttl", "-1"], {}),
    (["run", "--duration", "0"], {}),
    (["run", "--users", "0"], {}),
    (["run", "--impl", "redis.nope"], {}),
    (["run", "--backend", "mongo"], {}),
    (["run", "--workload", "flash-sail"], {}),
    (["run", "--fault", "meteor"], {}),
    (["run", "--fault", "restart@99999s", "--duration", "2"], {}),
    (["run", "--fencing", "maybe"], {}),
    (["run", "--evidence", "sloppy"], {}),
    (["run", "--suite", "nightly"], {}),
    (["run", "--lock-params", "{not json"], {}),
    (["run", "--lock-params", "[" * 30000], {}),
    (["run", "--redis-url", "http://127.0.0.1:1"], {}),
    (["run"], {"LOCKBENCH_TTL": "-1"}),
    (["run"], {"LOCKBENCH_IMPL": "redis.nope"}),
    (["run"], {"LOCKBENCH_FAULT": "meteor"}),
    (["run"], {"LOCKBENCH_EVIDENCE": "sloppy"}),
    (["run", "--results-dir", ""], {}),
    (["matrix", "--lanes", "0"], {}),
    (["matrix", "--lanes", "17"], {}),
    (["matrix", "--scenario", "nope"], {}),
    (["matrix", "--shard", "5/4"], {}),
    (["matrix"], {"LOCKBENCH_LANES": "0"}),
    (["merge"], {"LOCKBENCH_RESULTS_DIR": ""}),
    (["report", "/nonexistent/folder"], {}),
    (["report", ".", "--out", ""], {}),
    (["history", "--out", ""], {}),
    (["gate", "/nonexistent/a", "/nonexistent/b"], {}),
    (["calibrate", "--backend", "mongo"], {}),
    (["explore", "--impl", "redis.nope"], {}),
    (["explore", "--impl", "redis.set-nx-px-lua", "--budget", "-5m"], {}),
    (["replay", "/nonexistent/schedule.json"], {}),
]


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def _time(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, str]:
    began = time.monotonic()
    r = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    took = time.monotonic() - began
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    return took, r.returncode, (lines[0] if lines else "")[:90]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    base = {**os.environ, "LOCKBENCH_FORBID_SERVERS": "1", "LOCKBENCH_NO_INSTALL": "1"}
    python = str(ROOT / ".venv" / "bin" / "python")
    with tempfile.TemporaryDirectory(prefix="lockbench-refusals-") as tmp:
        cwd = Path(tmp)  # no pyproject here: the defaults, not this checkout's table
        before = _load()
        floor = statistics.median(_time([python, "-c", "pass"], base, cwd)[0] for _ in range(args.repeat))
        rows = []
        for extra_args, extra_env in CORPUS:
            runs = [
                _time([python, "-m", "bench", *extra_args], {**base, **extra_env}, cwd)
                for _ in range(args.repeat)
            ]
            took = statistics.median(t for t, _, _ in runs)
            rows.append((took, runs[-1][1], runs[-1][2], extra_args, extra_env))
        after = _load()
    print(f"floor (python -c pass): {floor:.3f} s; load average {before:.2f} before, {after:.2f} after")
    for took, code, line, extra_args, extra_env in rows:
        shown = " ".join(a if len(a) < 40 else a[:12] + "..." for a in extra_args)
        env = " ".join(f"{k}={v!r}" for k, v in extra_env.items())
        print(f"{took:6.3f} s ({took / floor:4.1f}x floor)  exit {code}  bench {shown} {env}  -> {line}")
    times = [r[0] for r in rows]
    not_refused = [r for r in rows if r[1] != 2]
    print(
        f"{sum(t < 1.0 for t in times)} of {len(times)} under 1 s; median {statistics.median(times):.3f} s, "
        f"max {max(times):.3f} s ({max(times) / floor:.1f}x the floor); "
        f"{len(not_refused)} not refused with exit 2"
    )
    return 1 if not_refused else 0


if __name__ == "__main__":
    sys.exit(main())
