"""Search a lock's schedule space from a seed, and shrink the first failure with Hypothesis.

Why Hypothesis runs the whole search: a ``@given`` property seeded with ``hypothesis.seed(N)``
draws the same schedules for the same seed and selection, and when one fails it shrinks it the
way it shrinks any input (fewer events, weaker kinds, shorter pauses, earlier times), re-running
each candidate on the real servers. This module knows nothing of servers: it is handed
``run(schedule) -> Outcome``, which :mod:`bench.explore.execute` makes by running a case; a test
hands it a deterministic one.

The reproduction rule (docs/guide.md, "Explore"):

* while searching and shrinking, a schedule fails when its run fails (one case, the schedule
  played ``rounds`` times in it, each round on a fresh grant: the case's verdict is ``invalid``).
  A schedule's outcome is remembered for the session, so Hypothesis asking for the same schedule
  again costs nothing;
* the shrunk schedule is then confirmed: it is reproduced when 2 of 3 further runs fail (stopped
  as soon as 2 failed or 2 passed). If it is not (a shrunk schedule sits on the edge of what
  breaks the lock: a pause a tenth of a second longer than the one that passed), the next smallest
  failures seen are confirmed the same way, up to :data:`CONFIRM_CANDIDATES`, then the failure
  first found; the first that reproduces is reported, and the report says the smaller ones did not.

The first failure's events are thinned first, one deletion at a time (a real run each), so that
the rest of the shrinking starts from the events the failure needs. Once a failure is in hand, a
schedule no smaller than it (:meth:`Schedule.size`) counts as passing
without a run: it could not improve the answer, and a run costs tens of seconds.

Budget: once it is spent, every schedule Hypothesis asks for counts as passing without a run,
so its generation and shrinking end at once; what was found is kept. Ctrl-C does the same, and
so does ``--shrink-runs N`` once N runs have gone into shrinking a failure: a bound in runs, not
seconds, says how hard to shrink whatever the machine's load.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity, given, settings
from hypothesis.errors import Flaky, HypothesisException

from bench.explore.draw import Reach, events_strategy
from bench.explore.schedule import Event, Schedule

#: Runs that confirm a shrunk schedule, and how many of them must fail.
CONFIRM_RUNS = 3
CONFIRM_FAILS = 2
#: Failures confirmed, smallest first, before the first one found is tried.
CONFIRM_CANDIDATES = 3
#: Most schedules Hypothesis may draw in one exploration (the budget usually ends it first).
MAX_SCHEDULES = 500


@dataclass
class Outcome:
    """What one run of a schedule said: failed or not, in words, and what the run left (a case row)."""

    failed: bool
    reason: str = ""
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass
class Finding:
    """The exploration's answer: what was tried, the failure first found, the shrunk one, their confirmation."""

    tried: int = 0
    events_tried: int = 0
    runs: int = 0
    first: Schedule | None = None
    first_outcome: Outcome | None = None
    shrunk: Schedule | None = None
    shrunk_outcome: Outcome | None = None
    confirmed: str = ""  # "2 of 3 runs failed", ...
    reproduced: bool = False
    interrupted: bool = False
    budget_out: bool = False
    shrink_steps: int = 0
    #: shrinking ended at ``--shrink-runs`` runs, before the budget
    shrink_out: bool = False
    #: every failing schedule seen, in the order seen (the confirmation's candidates)
    failures: list[Schedule] = field(default_factory=list)

    @property
    def found(self) -> bool:
        return self.shrunk is not None


class _Enough(Exception):
    """``--plan`` has drawn the schedules it prints."""


class _Failed(Exception):
    """A schedule failed: raised inside the property so Hypothesis shrinks it."""


def _key(events: list[Event]) -> tuple:
    return tuple(sorted((e.kind, e.at, tuple(sorted(e.params.items()))) for e in events))


class Explorer:
    """One exploration: a lock's reach, a seed, a budget, and a way to run a schedule.

    Why a class: the search, the shrinking and the progress line share the counters (schedules
    tried, the best failure so far, time left) and the outcomes already known.
    """

    def __init__(
        self,
        reach: Reach,
        make: Callable[[list[Event]], Schedule],
        run: Callable[[Schedule], Outcome],
        seed: int,
        budget_s: float,
        on_progress: Callable[[Finding, float, str], None] | None = None,
        max_schedules: int = MAX_SCHEDULES,
        max_events: int | None = None,
        max_shrink_runs: int | None = None,
    ) -> None:
        self.reach = reach
        self.make = make
        self.run_one = run
        self.seed = seed
        self.budget_s = budget_s
        self.on_progress = on_progress
        self.max_schedules = max_schedules
        self.max_events = max_events
        #: runs spent shrinking a failure at most (None: the budget decides)
        self.max_shrink_runs = max_shrink_runs
        self.finding = Finding()
        self._known: dict[tuple, Outcome] = {}
        self._deadline = 0.0
        self._stop = False

    def strategy(self) -> Any:
        kw = {"max_events": self.max_events} if self.max_events else {}
        return events_strategy(self.reach.kinds, pause_max_s=self.reach.pause_max_s, **kw)

    def _settings(self, n: int, phases: tuple[Phase, ...]) -> settings:
        return settings(
            database=None, max_examples=n, deadline=None, phases=phases, derandomize=False,
            suppress_health_check=list(HealthCheck), report_multiple_bugs=False, print_blob=False,
            verbosity=Verbosity.quiet,
        )  # fmt: skip

    def plan(self, n: int) -> list[Schedule]:
        """The first ``n`` schedules this seed draws (``--plan``): what a search runs, in order, until a failure.

        Drawn with the search's own settings (Hypothesis draws differently for another
        ``max_examples``), stopped once ``n`` are in.
        """
        drawn: list[Schedule] = []

        def record(events: list[Event]) -> None:
            if len(drawn) >= n:
                raise _Enough()
            drawn.append(self.make(events))

        try:
            self._drive(record, self.max_schedules, (Phase.generate,))
        except (_Enough, Flaky, HypothesisException):
            pass
        except BaseException as exc:  # an ExceptionGroup from Hypothesis's final replay
            if not isinstance(exc, Exception):
                raise
        return drawn[:n]

    def left_s(self) -> float:
        return max(0.0, self._deadline - time.monotonic())

    def _progress(self, what: str) -> None:
        if self.on_progress is not None:
            self.on_progress(self.finding, self.left_s(), what)

    def _run(self, schedule: Schedule) -> Outcome:
        self.finding.runs += 1
        return self.run_one(schedule)

    def _check(self, events: list[Event]) -> None:
        """The property: the schedule of ``events`` must not break the lock.

        One ``raise`` only: Hypothesis tells failures apart by where they were raised.
        """
        if self._outcome(events):
            raise _Failed()

    def _outcome(self, events: list[Event]) -> bool:
        """Did the schedule of ``events`` fail (a remembered outcome, or a run now)?"""
        key = _key(events)
        if key in self._known:
            return self._known[key].failed
        if self._stop or time.monotonic() >= self._deadline:
            self.finding.budget_out = not self._stop
            return False  # the budget is spent (or Ctrl-C): every schedule passes, Hypothesis ends
        f = self.finding
        if self._shrunk_enough():
            f.shrink_out = True
            return False  # as the budget's end: the failure in hand is kept and confirmed
        schedule = self.make(events)
        shrinking = f.first is not None
        if f.shrunk is not None and schedule.size() >= f.shrunk.size():
            return False  # no smaller than the failure in hand: not worth a run (Hypothesis moves on)
        self._progress(f"{'shrinking' if shrinking else 'running'} {schedule.text()}")
        try:
            outcome = self._run(schedule)
        except KeyboardInterrupt:
            self._stop, f.interrupted = True, True
            return False
        if not shrinking:
            f.tried += 1
            f.events_tried += len(events)
        else:
            f.shrink_steps += 1
        self._known[key] = outcome
        if outcome.failed:
            f.failures.append(schedule)
            if f.shrunk is None or schedule.size() < f.shrunk.size():
                f.shrunk, f.shrunk_outcome = schedule, outcome
            self._progress(f"failed: {schedule.text()} ({outcome.reason})")
            if f.first is None:
                f.first, f.first_outcome = schedule, outcome
                self._fewer_events(events)
        return outcome.failed

    def _shrunk_enough(self) -> bool:
        f = self.finding
        return (
            f.first is not None
            and self.max_shrink_runs is not None
            and f.shrink_steps >= self.max_shrink_runs
        )

    def _fewer_events(self, events: list[Event]) -> None:
        """Drop the events a failure does not need, one at a time, before Hypothesis shrinks the rest.

        Why before: each candidate is a real run of tens of seconds, and Hypothesis's shrinker tries
        many changes of times and lengths before it tries deleting an event; a failure of 4 events
        needs at most 4 + 3 + 2 runs here to keep only the events it needs. The failures found
        become the failure in hand, so Hypothesis then runs only candidates smaller than them.
        """
        current = list(events)
        shrunk = True
        while shrunk and len(current) > 1 and not self._stop and time.monotonic() < self._deadline:
            shrunk = False
            for i in range(len(current)):
                fewer = current[:i] + current[i + 1 :]
                if self._outcome(fewer):
                    current, shrunk = fewer, True
                    break

    def _drive(self, body: Callable[[list[Event]], None], n: int, phases: tuple[Phase, ...]) -> None:
        @self._settings(n, phases)
        @hypothesis.seed(self.seed)
        @given(self.strategy())
        def prop(events: list[Event]) -> None:
            body(events)

        prop()

    def explore(self) -> Finding:
        """Search until a failure (then shrink it and confirm it), the budget, or Ctrl-C."""
        from hypothesis.internal.conjecture import engine

        self._deadline = time.monotonic() + self.budget_s
        # Hypothesis stops shrinking after 300 s; a real run takes tens of seconds: the budget decides
        engine.MAX_SHRINKING_SECONDS = max(engine.MAX_SHRINKING_SECONDS, int(self.budget_s) + 60)
        try:
            self._drive(self._check, self.max_schedules, (Phase.generate, Phase.shrink))
        except (_Failed, Flaky, HypothesisException):
            pass  # Hypothesis re-raises the shrunk failure (or says it was flaky): ours is in self.finding
        except KeyboardInterrupt:
            self.finding.interrupted = True
        except BaseException as exc:  # an ExceptionGroup of a flaky failure
            if not isinstance(exc, Exception):
                raise
        if self.finding.found and not self.finding.interrupted:
            self._confirm()
        return self.finding

    def _candidates(self) -> list[Schedule]:
        """The schedules to confirm, in order: the smallest failures seen, then the first one found."""
        f = self.finding
        by_size = sorted(f.failures, key=lambda s: s.size())
        out: list[Schedule] = []
        for s in by_size:
            if len(out) < CONFIRM_CANDIDATES and all(_key(s.events) != _key(o.events) for o in out):
                out.append(s)
        if f.first is not None and all(_key(f.first.events) != _key(o.events) for o in out):
            out.append(f.first)
        return out or [s for s in (f.shrunk,) if s is not None]

    def _confirm(self) -> None:
        """The rule: a schedule is reproduced when 2 of 3 runs fail; the smallest failure that is gets reported."""
        f = self.finding
        smallest = f.shrunk
        for schedule in self._candidates():
            fails = passes = 0
            outcome: Outcome | None = None
            try:
                for i in range(CONFIRM_RUNS):
                    self._progress(f"confirming ({i + 1}/{CONFIRM_RUNS}) {schedule.text()}")
                    result = self._run(schedule)
                    if result.failed:
                        fails += 1
                        outcome = outcome or result
                    else:
                        passes += 1
                    if fails >= CONFIRM_FAILS or passes > CONFIRM_RUNS - CONFIRM_FAILS:
                        break
            except KeyboardInterrupt:
                f.interrupted = True
                f.confirmed = f"interrupted while confirming ({fails} failed, {passes} passed)"
                return
            f.confirmed = f"{fails} of {fails + passes} confirming runs failed"
            if fails >= CONFIRM_FAILS:
                f.reproduced = True
                if schedule is not smallest:
                    f.confirmed += (
                        "; the smaller failing schedules did not reproduce, so the smallest that did is kept"
                        if schedule is not f.first
                        else "; the shrunk schedule did not reproduce, so the first one found is kept"
                    )
                    f.shrunk, f.shrunk_outcome = schedule, outcome or self._known.get(_key(schedule.events))
                return
