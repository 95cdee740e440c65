"""Where a run's time goes: its phases and its cases', in run.json ``timing``."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from bench.results.proc import process_start
from bench.run.case import (
    Case,
)

#: A case's phases in run.json ``timing``, in the order a case goes through them: clearing lock
#: state and snapshots, Locust's start (launch to its first user), the load window, Locust's
#: shut-down, reading and judging the recording, writing the case into the results folder.
CASE_PHASES = ("prepare", "locust_start", "load", "locust_stop", "judge", "write")
#: The run's phases: bench's own start (imports, option checks), servers up, waiting for the warm
#: Locust's imports, floors, solo calibrations (whole), the cases' phases summed, servers down,
#: summary and report.html. ``other`` is what is left of the wall time (progress, gaps).
RUN_PHASES = ("bench_start", "server_start", "warm_start", "floors", "calibration", *CASE_PHASES,
              "server_stop", "render")  # fmt: skip
#: Longest plausible gap between this process's start and the run's start: beyond it the
#: process start read from /proc is not trusted (a time namespace) and the run starts now.
_MAX_BENCH_START_S = 120.0


def _process_started() -> float:
    """When this process started, on the monotonic clock: bench's imports belong to the run's wall time."""
    now = time.monotonic()
    ticks = process_start(os.getpid())
    if ticks is None:
        return now
    boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
    age = boot_now - ticks / os.sysconf("SC_CLK_TCK")
    # scripts/bench sets up .venv, then execs bench in the same process: that set-up is not the run's
    setup_done = os.environ.get("LOCKBENCH_SETUP_DONE_S", "")
    with contextlib.suppress(ValueError):
        age = min(age, max(0.0, boot_now - float(setup_done)))
    return now - age if 0 <= age <= _MAX_BENCH_START_S else now


def load_window_ns(timing: dict[str, Any]) -> tuple[int, int] | None:
    """Locust's test start and stop of one attempt (``timing`` from :func:`run_case`); None if it never started."""
    start, stop = timing.get("test_start_ns"), timing.get("test_stop_ns")
    return (start, stop) if start is not None and stop is not None else None


def case_phases(timing: dict[str, Any], begun_ns: int, written_ns: int) -> dict[str, float]:
    """One attempt's phases in seconds (``timing`` from :func:`run_case`); ``write`` is the rest of its wall."""
    launched, exited, ended = timing["launched_ns"], timing["exited_ns"], timing["ended_ns"]
    # Locust never started its test: all of it was start-up
    start, stop = load_window_ns(timing) or (exited, exited)
    parts = {
        "prepare": launched - timing["begun_ns"],
        "locust_start": start - launched,
        "load": stop - start,
        "locust_stop": exited - stop,
        "judge": ended - exited,
        "write": written_ns - ended,
    }
    parts["prepare"] += timing["begun_ns"] - begun_ns  # an earlier attempt's tail, if any
    return {k: v / 1e9 for k, v in parts.items()}


class RunTiming:
    """Where a run's wall time goes: run.json ``timing`` and the console's last line.

    Why: the first report's wait is mostly not load (issue 25: 170 s for 80 s of load);
    named phases show which part to cut, and every later change can be checked against
    them. Monotonic clock throughout; the wall time starts when the bench process did.
    """

    def __init__(self) -> None:
        self.t0 = _process_started()
        self.phases: dict[str, float] = dict.fromkeys(RUN_PHASES, 0.0)
        self.cases: dict[str, dict[str, Any]] = {}
        #: how the cases' Locust started: warm, cold, or warm then cold (and why)
        self.launcher = "cold"

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the block's wall time to phase ``name``."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] += time.monotonic() - start

    def add_case(self, case: Case, attempts: list[dict[str, Any]], begun_ns: int, written_ns: int) -> None:
        """File a case (or a solo calibration with its retries) that ran from ``begun_ns`` to ``written_ns``."""
        wall = (written_ns - begun_ns) / 1e9
        entry: dict[str, Any] = {"wall_s": round(wall, 4), "solo": case.solo, "attempts": len(attempts)}
        if attempts:
            sums = dict.fromkeys(CASE_PHASES, 0.0)
            for i, t in enumerate(attempts):
                end = attempts[i + 1]["begun_ns"] if i + 1 < len(attempts) else written_ns
                start = begun_ns if i == 0 else t["begun_ns"]
                for k, v in case_phases(t, start, end).items():
                    sums[k] += v
            entry.update({f"{k}_s": round(v, 4) for k, v in sums.items()})
        else:
            entry["failed"] = True
        self.cases[case.case_id] = entry
        if case.solo:
            self.phases["calibration"] += wall
        elif attempts:
            for k in CASE_PHASES:
                self.phases[k] += entry[f"{k}_s"]

    def as_json(self) -> dict[str, Any]:
        """run.json ``timing``: the run's wall time, its phases, ``overhead_share`` = wall / load, the cases."""
        wall = time.monotonic() - self.t0
        load = self.phases["load"]
        out: dict[str, Any] = {"wall_s": round(wall, 3), "load_s": round(load, 3)}
        out["overhead_s"] = round(wall - load, 3)
        out["overhead_share"] = round(wall / load, 3) if load > 0 else None
        out["launcher"] = self.launcher
        out.update({f"{k}_s": round(v, 3) for k, v in self.phases.items()})
        out["other_s"] = round(max(0.0, wall - sum(self.phases.values())), 3)
        out["cases"] = self.cases
        return out

    def last_line(self) -> str:
        """The console's last line: the run's wall time and its overhead share."""
        t = self.as_json()
        wall = t["wall_s"]
        text = f"{int(wall // 60)}m {wall % 60:04.1f}s" if wall >= 60 else f"{wall:.1f}s"
        share = f"{t['overhead_share']:.2f}" if t["overhead_share"] is not None else "n/a (no load)"
        return (
            f"lockbench: wall time {text} for {t['load_s']:.1f}s of load: overhead share (wall / load) "
            f"{share}; where the time went: run.json timing"
        )
