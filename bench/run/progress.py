"""Live progress of a run on the terminal: the case, acquisitions/s, elapsed time, an ETA.

The Locust child writes ``progress.json`` (acquisitions and errors so far, from Locust's
own counters: fine for a progress line, never a measurement) into its case folder every
second; the runner polls it and calls :meth:`LiveProgress.tick`. Without a terminal
(CI, tests) only the one line per case is printed.
"""

from __future__ import annotations

import time
from collections import deque
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.status import Status

from workloads.checks.stop_rules import StopRule

#: Seconds a case takes beyond its load (Locust start, checkers, writing) until one is measured.
FIRST_GUESS_OVERHEAD_S = 4.0

#: Seconds of samples the live rate is averaged over. Locust's master counts a worker's
#: acquisitions when the worker reports (every 3 s), so per-second differences jump
#: 0, 276, 0, 808 for a case that averages 292/s: a window longer than one report
#: interval shows the rate, not the reporting rhythm.
RATE_WINDOW_S = 5.0


def _clock(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class LiveProgress:
    """A one-line live status under the per-case lines (rich), with an ETA for the whole run.

    Why a class: the ETA needs what earlier cases cost beyond their load time, and the
    rate needs the samples of the last few seconds.
    """

    def __init__(self, console: Console, cases: list[Any]) -> None:
        self.console = console
        self.cases = cases
        self.started = time.monotonic()
        self.case_index = -1
        self.case_t0 = self.started
        self.overheads: list[float] = []
        #: wall seconds of each finished solo calibration: it ends on its acquisitions, not its duration
        self.solo_walls: list[float] = []
        #: (t, acquisitions) samples of the current case within the last RATE_WINDOW_S
        self.samples: deque[tuple[float, int]] = deque()
        self.rate = 0.0
        self.status: Status | None = None

    def __enter__(self) -> LiveProgress:
        if self.console.is_terminal:
            self.status = self.console.status("lockbench: starting the first case")
            self.status.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.status is not None:
            self.status.stop()

    def case_started(self, case: Any, index: int, total: int) -> None:
        """Called before each case: prints its line, and books what the previous case cost."""
        now = time.monotonic()
        if self.case_index >= 0:
            previous = self.cases[self.case_index]
            if getattr(previous, "solo", False):
                self.solo_walls.append(now - self.case_t0)
            else:
                self.overheads.append(max(0.0, now - self.case_t0 - previous.settings.duration))
        self.case_index, self.case_t0, self.rate = index, now, 0.0
        self.samples.clear()
        trials = case.params.get("trials", 1)
        # the case id counts from 0 (results/README.md: __tN); say both, so neither surprises
        trial = f" (trial {case.trial + 1} of {trials}, case id __t{case.trial})" if trials > 1 else ""
        procs = case.settings.processes
        users = f"{case.settings.users} user{'s' if case.settings.users != 1 else ''}"
        if getattr(case, "solo", False):
            rule = StopRule.from_json(case.settings.stop_rule)
            enough = f" or {rule.acquisitions} acquisitions" if rule is not None and rule.acquisitions else ""
            what = f" solo calibration: {users}, up to {case.settings.duration:g}s{enough}"
        else:
            what = f"{trial}: {case.settings.duration:g}s, {users}"
            what += f", {procs} processes" if isinstance(procs, int) and procs > 1 else ""
        self.console.print(f"[{index + 1}/{total}] {case.impl} x {case.scenario}{what}")
        self._show()

    def eta_s(self, now: float | None = None) -> float:
        """Seconds until the whole run ends: the load still to run plus each case's measured overhead."""
        now = time.monotonic() if now is None else now
        overhead = sum(self.overheads) / len(self.overheads) if self.overheads else FIRST_GUESS_OVERHEAD_S

        def wall(case: Any) -> float:
            if getattr(case, "solo", False) and self.solo_walls:
                return sum(self.solo_walls) / len(self.solo_walls)
            return case.settings.duration + overhead

        current = self.cases[self.case_index] if self.case_index >= 0 else None
        left_now = max(0.0, wall(current) - (now - self.case_t0)) if current else 0.0
        return left_now + sum(wall(c) for c in self.cases[self.case_index + 1 :])

    def tick(self, sample: dict[str, Any]) -> None:
        """A sample from the case's progress.json: ``{"t": seconds, "acquisitions": n, "errors": n}``."""
        t, n = float(sample.get("t", time.monotonic())), int(sample.get("acquisitions", 0))
        self.rate = self.smoothed(t, n)
        self._show(int(sample.get("errors", 0)))

    def smoothed(self, t: float, n: int) -> float:
        """Acquisitions/s over the last :data:`RATE_WINDOW_S` of samples, ``n`` acquisitions at ``t``.

        The oldest sample kept is the last one at or before ``t - RATE_WINDOW_S``, so the
        rate always spans at least one worker report once the case has run that long.
        """
        if not self.samples or t > self.samples[-1][0]:  # else a repeated sample: the file was not rewritten
            self.samples.append((t, n))
            while len(self.samples) > 2 and self.samples[1][0] <= t - RATE_WINDOW_S:
                self.samples.popleft()
        (t0, n0), (t1, n1) = self.samples[0], self.samples[-1]
        return max(0.0, (n1 - n0) / (t1 - t0)) if t1 > t0 else 0.0

    def text(self, errors: int = 0) -> str:
        now = time.monotonic()
        case = self.cases[self.case_index] if self.case_index >= 0 else None
        label = f"{case.impl} x {case.scenario}" if case else "starting"
        errs = f", {errors:,} errors" if errors else ""
        if self.console.width < 100:  # one line at 80 columns: the case's time and what is left
            return f"{label}: {self.rate:,.0f} acq/s{errs} | {_clock(now - self.case_t0)} | ~{_clock(self.eta_s(now))} left"
        return (
            f"{label}: {self.rate:,.0f} acq/s{errs} | case {_clock(now - self.case_t0)} | "
            f"run {_clock(now - self.started)}, about {_clock(self.eta_s(now))} left"
        )

    def _show(self, errors: int = 0) -> None:
        if self.status is not None:
            self.status.update(self.text(errors))
