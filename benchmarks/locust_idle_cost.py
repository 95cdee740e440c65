"""What one Locust case costs the machine when its buyers do almost nothing: CPU seconds per second.

The matrix runs tens of Locust processes at once (up to 54 in shard 4, 2026-12-06), and
their CPU, not the servers', fills the two cores. This splits a case's CPU into what it pays per
second whatever its buyers do and what it pays per acquisition:

- **idle**: flash-sale with ``--users`` buyers paced to one purchase every ``1/--pace`` seconds each,
  as one process and as ``--processes 2`` (a master and two workers, as the matrix's
  lease-expiry-world, session-pause and partition cases run);
- **floor**: a plain gevent process with the same number of greenlets sleeping and the
  loop-lag probe running (what any gevent-based generator pays, measured here, same run).

Each is run for a short and a long time, and the CPU (user + system of the whole process tree,
from ``getrusage(RUSAGE_CHILDREN)``) is differenced, so start-up and imports cancel out: the
figure is CPU seconds per wall second of running. Rounds alternate so drift falls on all alike.
Prints one JSON line: the medians, and each side as a ratio to the floor.

    .venv/bin/python benchmarks/locust_idle_cost.py [--rounds 3] [--short 4] [--long 24] [--users 6] [--pace 0.2]

Measure on a quiet machine (load average < 1), nothing else running.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.run.locust import forked_workers_argv  # noqa: E402
from infra.redis_server import RedisServer  # noqa: E402

FLOOR = """
from gevent import monkey; monkey.patch_all()
import sys, time, gevent
sys.path.insert(0, {root!r})
from workloads.harness.loop_lag import PROBE
PROBE.start()
end = time.monotonic() + {seconds}
def client():
    while time.monotonic() < end:
        gevent.sleep({sleep})
gevent.joinall([gevent.spawn(client) for _ in range({users})])
"""


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _run(argv: list[str]) -> float:
    """CPU seconds the command's process tree used (its waited-for children included)."""
    before = _children_cpu()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{argv[:4]} failed ({proc.returncode}): {proc.stderr[-1500:]}")
    return _children_cpu() - before


def _locust(
    seconds: float, processes: int, a: argparse.Namespace, lock: str, res: str, out: Path
) -> list[str]:
    argv = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "workloads" / "flash_sale.py"), "--headless",
        "--users", str(a.users), "--spawn-rate", str(a.users), "--run-time", f"{round(seconds)}s",
        "--stop-timeout", "10", "--exit-code-on-error", "0", "--only-summary", "--loglevel", "WARNING",
        "--lock-impl", "redis.set-nx-px-lua", "--lock-url", lock, "--resource-url", res,
        "--cs", "5ms", "--pace", str(a.pace), "--lockbench-out", str(out), "--lockbench-case", "idle",
        "--lockbench-no-summary",
    ]  # fmt: skip
    if processes > 1:
        argv += forked_workers_argv(processes)
    return argv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--short", type=float, default=4.0, help="seconds of the short run")
    ap.add_argument("--long", type=float, default=24.0, help="seconds of the long run")
    ap.add_argument("--users", type=int, default=6)
    ap.add_argument("--pace", type=float, default=0.2, help="purchases a second per buyer")
    a = ap.parse_args()
    span = a.long - a.short
    per_s: dict[str, list[float]] = {"floor": [], "locust-1": [], "locust-2": []}
    with tempfile.TemporaryDirectory(prefix="locust-idle-") as tmp:
        tmp_path = Path(tmp)
        lock = RedisServer(tmp_path, name="lock").start()
        res = RedisServer(tmp_path, name="resource").start()
        try:
            n = 0
            for _ in range(a.rounds):
                for side in per_s:
                    cpu = []
                    for seconds in (a.short, a.long):
                        n += 1
                        if side == "floor":
                            code = FLOOR.format(
                                root=str(ROOT), seconds=seconds, sleep=1 / a.pace, users=a.users
                            )
                            argv = [sys.executable, "-c", code]
                        else:
                            argv = _locust(seconds, int(side[-1]), a, lock.url, res.url, tmp_path / f"r{n}")
                        cpu.append(_run(argv))
                    per_s[side].append((cpu[1] - cpu[0]) / span)
                    print(f"{side}: {per_s[side][-1]:.4f} CPU s/s", file=sys.stderr)
        finally:
            res.stop()
            lock.stop()
    med = {k: statistics.median(v) for k, v in per_s.items()}
    print(json.dumps({
        "what": "CPU seconds per wall second of a running case, its buyers nearly idle (differenced runs)",
        "users": a.users, "pace_per_buyer_s": a.pace, "rounds": a.rounds,
        "floor_cpu_s_per_s": round(med["floor"], 4),
        "locust_1_process_cpu_s_per_s": round(med["locust-1"], 4),
        "locust_2_workers_cpu_s_per_s": round(med["locust-2"], 4),
        "ratio_1_process_to_floor": round(med["locust-1"] / med["floor"], 1) if med["floor"] > 0 else None,
        "ratio_2_workers_to_floor": round(med["locust-2"] / med["floor"], 1) if med["floor"] > 0 else None,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
