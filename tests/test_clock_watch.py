"""The wall-clock watcher: a step of the machine's clock is seen, a descheduled read is not a step,
and a failure in a lease the clock shortened by 30% or more is undecided, like one under a stall."""

from __future__ import annotations

import pandas as pd

from bench.measure.stalls import failed_under_stall
from bench.run import clock_watch
from bench.run.case import RunSettings
from bench.run.clock_watch import ClockWatch, Step
from bench.run.judge import clock_step_ms, stall_reason

S = 1_000_000_000
MS = 1_000_000


class _Clocks:
    """A wall clock and a monotonic clock the test moves by hand (the machine's are never touched)."""

    def __init__(self) -> None:
        self.mono = 10 * S
        self.wall = 1_796_000_000 * S
        self.stall_next_read = 0

    def mono_ns(self) -> int:
        now = self.mono
        self.mono += self.stall_next_read  # the watcher's thread descheduled between its two reads
        self.wall += self.stall_next_read
        self.stall_next_read = 0
        return now

    def wall_ns(self) -> int:
        return self.wall

    def tick(self, ns: int) -> None:
        self.mono += ns
        self.wall += ns


def _watched(events: list[tuple[str, int]]) -> ClockWatch:
    clocks = _Clocks()
    watch = ClockWatch(wall_ns=clocks.wall_ns, mono_ns=clocks.mono_ns)
    watch.read()
    for what, ns in events:
        if what == "tick":
            clocks.tick(ns)
        elif what == "step":
            clocks.wall += ns
        elif what == "deschedule":
            clocks.stall_next_read = ns
        watch.read()
    return watch


def test_a_step_of_the_wall_clock_is_seen_and_a_descheduled_read_is_not_one() -> None:
    steady = _watched([("tick", 20 * MS)] * 50)
    assert steady.steps() == []
    stepped = _watched([("tick", 20 * MS), ("step", 250 * MS), ("tick", 20 * MS), ("step", -40 * MS)])
    assert [s.delta_ns for s in stepped.steps()] == [250 * MS, -40 * MS]
    assert stepped.forward_ns(0, 100 * S) == 250 * MS  # backward steps lengthen leases: not counted
    # the thread descheduled 80 ms between its monotonic and wall reads: dropped, not a step
    descheduled = _watched([("tick", 20 * MS), ("deschedule", 80 * MS), ("tick", 20 * MS)])
    assert descheduled.steps() == []
    assert _watched([("step", 4 * MS)]).steps() == []  # under STEP_NS: read jitter, not a step


def _history(t_s: list[float]) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "client": ["1-u0"] * len(t_s),
            "seq": list(range(len(t_s))),
            "op": ["acquire"] * len(t_s),
            "type": ["ok"] * len(t_s),
            "lock": ["L"] * len(t_s),
            "t_ns": [int(t * S) for t in t_s],
            "value": [None] * len(t_s),
        }
    )


def _clock_with(*steps: tuple[float, int]) -> ClockWatch:
    watch = ClockWatch()
    watch._steps = [Step(int(at * S), delta) for at, delta in steps]
    return watch


def test_a_failure_in_a_lease_the_wall_clock_shortened_is_undecided() -> None:
    """Redis keeps a key's expiry as a wall-clock instant: a +350 ms step takes 35% of a 1 s lease."""
    settings = RunSettings(ttl=1.0)
    row = {"verdict": "invalid", "fault": "", "workload": "crash"}
    history = _history([1.0, 9.0, 12.0])
    reason = stall_reason(row, settings, history, int(10.0 * S), _clock_with((9.7, 350 * MS)))
    assert "wall clock stepped +0.35 s in the lease before the violation" in reason
    assert failed_under_stall({**row, "stall_reason": reason})  # re-run once, then "stalled": never red
    # too small, after the violation, long before it, or backward: the verdict stands
    for clock in (
        _clock_with((9.7, 100 * MS)),
        _clock_with((10.5, 350 * MS)),
        _clock_with((5.0, 350 * MS)),
        _clock_with((9.7, -350 * MS)),
        None,
    ):
        assert stall_reason(row, settings, history, int(10.0 * S), clock) == ""
    assert (
        stall_reason(
            {**row, "verdict": "valid"}, settings, history, int(10.0 * S), _clock_with((9.7, 350 * MS))
        )
        == ""
    )
    # every row says how far the clock stepped forward while its case ran
    assert clock_step_ms(history, _clock_with((9.7, 350 * MS), (13.0, 90 * MS))) == 350.0
    assert clock_step_ms(history, None) == 0.0


def test_the_watcher_runs_once_per_process() -> None:
    first = clock_watch.start()
    assert clock_watch.start() is first and clock_watch.current() is first
    assert isinstance(clock_watch.steps_json(), list)
