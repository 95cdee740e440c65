"""Timing a whole command as a fresh process, for the benchmarks that compare it with a floor."""

from __future__ import annotations

import resource
import subprocess
import time
from pathlib import Path


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as /proc/loadavg says them."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def timed(args: list[str], ok: tuple[int, ...] = (0,)) -> tuple[float, float, str, str]:
    """Wall and CPU (user + sys) seconds of ``args`` as a fresh process, and the load average before and after.

    An exit code outside ``ok`` ends the benchmark with the command's last words.
    """
    before = load_average()
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode not in ok:
        raise SystemExit(f"{' '.join(args[:4])} ... failed ({r.returncode}): {r.stderr[-2000:]}")
    cpu = (after.ru_utime - usage.ru_utime) + (after.ru_stime - usage.ru_stime)
    return wall, cpu, before, load_average()
