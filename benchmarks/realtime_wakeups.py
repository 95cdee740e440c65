"""How late a sleeping loop wakes beside busy neighbours: normal class at nice 0, at nice -5, and real-time.

Why: a matrix case's Locust loop sleeps most of the time and must wake on time; beside servers and
other cases on two cores it waited for a CPU (workloads/harness/priority.py). This reproduces that
without a matrix: ``BURNERS`` processes, each in a session of its own at nice -5 (as a matrix's
servers and other cases run), busy half of every 20 ms; and a probe process, in a session of its
own, that wakes every 50 ms (the loop-lag probe's grid, workloads/harness/loop_lag.py), works
0.3 ms and sleeps again. The probe runs ``DURATION_S`` in each class, the classes alternating for
``ROUNDS`` rounds so that drift of the machine falls on all alike. Prints one JSON line: per
class the share of wake-ups more than 2 ms late (the loop-lag probe's limit) and the 50th and
99th percentile lateness (ms), medians over the rounds, and each class's late share as a ratio
against nice 0's (the floor, measured in the same run).

    .venv/bin/python benchmarks/realtime_wakeups.py [DURATION_S] [ROUNDS] [BURNERS]

Needs root (nice below 0 and SCHED_FIFO). Measure on a quiet machine (load average < 1.5).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workloads.harness.loop_lag import INTERVAL_S, LATE_LIMIT_US  # noqa: E402
from workloads.harness.priority import raise_priority, raise_realtime  # noqa: E402

CLASSES = ("nice 0", "nice -5", "real-time")
#: Each burner is busy this share of every period.
DUTY = 0.5
PERIOD_S = 0.02
WORK_S = 0.0003


def _burner() -> None:
    os.setsid()
    raise_priority(0, -5)
    while True:
        start = time.monotonic()
        while time.monotonic() - start < DUTY * PERIOD_S:
            pass
        time.sleep((1 - DUTY) * PERIOD_S)


def _probe(kind: str, duration_s: float) -> None:
    """Run as a child: wake on a fixed grid, print the lateness of every wake-up (microseconds)."""
    os.setsid()
    if kind == "nice -5":
        raise_priority(0, -5)
    elif kind == "real-time" and not raise_realtime(0):
        raise SystemExit("SCHED_FIFO refused: run as root")
    lags = []
    due = time.monotonic()
    end = due + duration_s
    while due < end:
        due += INTERVAL_S
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        lags.append((time.monotonic() - due) * 1e6)
        busy = time.monotonic()
        while time.monotonic() - busy < WORK_S:
            pass
    print(json.dumps(lags))


def _figures(lags: list[float]) -> dict[str, float]:
    ordered = sorted(lags)
    return {
        "late_share": sum(1 for v in lags if v > LATE_LIMIT_US) / len(lags),
        "p50_ms": ordered[len(ordered) // 2] / 1e3,
        "p99_ms": ordered[int(len(ordered) * 0.99)] / 1e3,
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--probe":
        _probe(sys.argv[2], float(sys.argv[3]))
        return
    duration_s = float(sys.argv[1]) if len(sys.argv) > 1 else 20.0
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    burners = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    load = [round(v, 2) for v in os.getloadavg()]  # before the burners add theirs
    pids = []
    for _ in range(burners):
        pid = os.fork()
        if pid == 0:
            _burner()
        pids.append(pid)
    per: dict[str, list[dict[str, float]]] = {k: [] for k in CLASSES}
    try:
        time.sleep(1.0)
        for _ in range(rounds):
            for kind in CLASSES:
                out = subprocess.run(
                    [sys.executable, __file__, "--probe", kind, str(duration_s)],
                    capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
                per[kind].append(_figures(json.loads(out)))
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    med = {k: {f: round(statistics.median(r[f] for r in v), 4) for f in v[0]} for k, v in per.items()}
    floor = med["nice 0"]["late_share"]
    for k in CLASSES:
        med[k]["late_vs_nice0"] = round(med[k]["late_share"] / floor, 3) if floor else None
    print(json.dumps({
        "what": f"a 50 ms sleep loop beside {burners} burners at nice -5 ({DUTY:.0%} busy each): wake-ups > 2 ms late",
        "duration_s": duration_s, "rounds": rounds, "load_average_at_start": load,
        "classes": med,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
