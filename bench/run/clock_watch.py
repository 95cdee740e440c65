"""The machine's wall clock, watched against its monotonic clock while cases run.

Why: the lock servers time their leases by the wall clock (Redis keeps a key's expiry as a
wall-clock instant, a PostgreSQL expiry row compares ``now()``), while the harness times holds,
deadlines and strikes by the monotonic clock. A step of the wall clock forward shortens every
lease running at that moment by the step: the fault the clock-skew scenario injects on purpose.
Coming from the machine it is no lock's failure, and a verdict must not rest on it
(bench/run/judge.py ``stall_reason``). Measured on this 2-core VM on 2026-12-05, by a monitor
reading both clocks every 10 ms while a redis + postgres matrix ran: the wall clock stepped
+0.88 s, +0.47 s and +7.4 s against the monotonic clock within 27 s (20:13:45-20:14:12), every
Redis lease running then shortened by as much; earlier the same day +0.25 s between two sessions.

One watcher per process (``start`` is idempotent): a daemon thread reads both clocks every
:data:`INTERVAL_S` and keeps every change of their difference larger than :data:`STEP_NS`. A read
whose two monotonic samples lie far apart (the thread was descheduled between them) is dropped,
so a stall of the watcher is never taken for a step.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

#: A change of (wall - monotonic) larger than this between two reads is a step (reads jitter by µs).
STEP_NS = 5_000_000
#: How often the clocks are read.
INTERVAL_S = 0.02
#: A read whose bracketing monotonic samples differ by more than this was descheduled: dropped.
READ_SPREAD_NS = 1_000_000


@dataclass(frozen=True)
class Step:
    """The wall clock jumped by ``delta_ns`` (positive: forward) around monotonic time ``at_ns``."""

    at_ns: int
    delta_ns: int

    def as_json(self) -> dict[str, float]:
        return {"at_monotonic_s": round(self.at_ns / 1e9, 3), "step_ms": round(self.delta_ns / 1e6, 1)}


class ClockWatch:
    """Wall-clock steps seen since it started (see the module docstring for why)."""

    def __init__(
        self,
        wall_ns: Callable[[], int] = time.time_ns,
        mono_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self._wall, self._mono = wall_ns, mono_ns
        self._offset: int | None = None
        self._steps: list[Step] = []
        self._guard = threading.Lock()

    def read(self) -> None:
        """One read of both clocks; a step is kept when the difference moved past :data:`STEP_NS`."""
        before = self._mono()
        wall = self._wall()
        after = self._mono()
        if after - before > READ_SPREAD_NS:
            return
        offset = wall - (before + after) // 2
        if self._offset is not None and abs(offset - self._offset) > STEP_NS:
            with self._guard:
                self._steps.append(Step(after, offset - self._offset))
        self._offset = offset

    def steps(self) -> list[Step]:
        with self._guard:
            return list(self._steps)

    def forward_ns(self, start_ns: int, end_ns: int) -> int:
        """The wall clock's forward steps between two monotonic instants, added up (ns)."""
        return sum(s.delta_ns for s in self.steps() if start_ns <= s.at_ns <= end_ns and s.delta_ns > 0)


_WATCH: ClockWatch | None = None
_START = threading.Lock()


def _loop(watch: ClockWatch) -> None:
    while True:
        watch.read()
        time.sleep(INTERVAL_S)


def start() -> ClockWatch:
    """This process's watcher, started on the first call."""
    global _WATCH
    with _START:
        if _WATCH is None:
            _WATCH = ClockWatch()
            _WATCH.read()
            threading.Thread(target=_loop, args=(_WATCH,), name="clock-watch", daemon=True).start()
        return _WATCH


def current() -> ClockWatch | None:
    """This process's watcher, or None when no case has run here."""
    return _WATCH


def steps_json() -> list[dict[str, float]]:
    """This process's steps for run.json ``clock_steps`` ([] when none, or no watcher)."""
    return [s.as_json() for s in _WATCH.steps()] if _WATCH is not None else []
