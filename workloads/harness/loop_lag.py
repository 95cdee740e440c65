"""How late this process's gevent loop runs: the load generator's own queue, measured.

Every simulated client of a Locust process shares one gevent loop. When the loop has more
work than one core can do, every client's next step waits for the others: acquire times
grow by the loop's queue, not by the lock. A greenlet that asks to wake every millisecond
and records how late it woke measures that queue directly, in every workload and mode
(closed, open, matrix, ``--processes`` workers, ``bench worker`` hosts, test hosts),
where the solo calibration (bench/measure/fidelity.py) covers only three workloads.

Figures per process, since the probe started (the harness starts it at each test start):

* ``loop_lag_p50_us`` / ``loop_lag_p99_us``: how late a wake-up was (HDR, microseconds);
* ``loop_lag_late_share``: the share of wall time during which the loop ran more than
  :data:`LATE_LIMIT_US` behind. A wake-up ``lag`` late means the loop was busy from the
  due time until it woke, so it was more than the limit behind for ``lag - limit`` of that
  time; summed over wake-ups and divided by the time measured;
* ``loop_lag_wakes``: how many wake-ups the figures rest on.

The probe records, it never judges: bench decides what the figures mean.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
from gevent import Greenlet
from greenlet import getcurrent

from workloads.harness.recording import encode_histogram, new_histogram

#: How often the probe asks to wake (seconds): short enough to see a loop that runs a few
#: milliseconds late, long enough to cost little (benchmarks/loop_lag_cost.py measures it).
INTERVAL_S = 0.001

#: Lag (microseconds) beyond which the loop counts as running late for ``loop_lag_late_share``.
#: 1 ms: an acquire that takes one round trip to a local server (about 0.1 ms) is then held
#: up by the load generator ten times over.
LATE_LIMIT_US = 1000.0


#: A wake-up this late (microseconds) is a stall worth placing in time: the probe hands it to
#: :attr:`LoopLagProbe.on_stall` (the harness writes it into the history as a ``stall`` event),
#: so a violation can be set beside the stalls just before it. 50 ms: a twentieth of the
#: shortest lease the matrix uses (1 s), and rare enough on a healthy loop to cost nothing.
STALL_MARK_US = 50_000.0


class LoopLagProbe:
    """A greenlet waking every :data:`INTERVAL_S`, recording how late it woke.

    Why a greenlet rather than a watcher callback in the hub: a greenlet waits in the same
    run queue as the simulated clients, so it is late exactly when they are.
    """

    def __init__(self, interval_s: float = INTERVAL_S, late_limit_us: float = LATE_LIMIT_US) -> None:
        self.interval_s = interval_s
        self.late_limit_us = late_limit_us
        self.hist = new_histogram()
        self.late_us = 0.0
        self.wakes = 0
        self.t0_ns: int | None = None
        self._greenlet: Greenlet | None = None
        #: a deliberate stop of the whole process not yet taken off a wake-up's lag, and all of them
        self._excused_ns = 0
        self.excused_total_ns = 0
        #: called with (when the wake-up came, monotonic ns; how late, us) for every stall of at
        #: least STALL_MARK_US; None: nobody listens
        self.on_stall: Any = None

    @property
    def running(self) -> bool:
        return self._greenlet is not None and not self._greenlet.dead

    def start(self) -> None:
        """Forget earlier figures and (re)start the probe: one case, one set of figures."""
        self.stop()
        self.hist = new_histogram()
        self.late_us = 0.0
        self.wakes = 0
        self._excused_ns = 0
        self.excused_total_ns = 0
        self.t0_ns = time.monotonic_ns()
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def excuse(self, ns: int) -> None:
        """Take a deliberate stop of this whole process (``ns`` long) out of the figures.

        Why: the lease-expiry workload's "world" pause blocks the process on purpose, as a GC
        pause would; the wake-up after it came seconds late, and counted as the load generator's
        queue it made every such case generator-bound (loop late 60-87% of the time in the
        2026-12-03 matrices) and marked a 2 s "stall" that was the experiment itself. Call it
        right after the stop, before the loop runs again: the next wake-up's lag loses it, and
        the late share's time leaves it out.
        """
        self._excused_ns += ns
        self.excused_total_ns += ns

    def _run(self) -> None:
        """Wake on one repeating timer; each wake-up records how late it came.

        One timer started once, rather than ``gevent.sleep`` (a new timer per wake-up):
        measured on the shared 2-core machine with an idle loop, 0.045 of a core for
        ``gevent.sleep(0.001)`` against 0.025 for this (the rest is the loop's own wake-up).
        The hub switches into this greenlet from the timer's callback, as gevent's own
        ``Waiter`` does, so the probe still queues behind every client the hub runs first.
        """
        interval_ns = int(self.interval_s * 1e9)
        limit = self.late_limit_us
        clock, record = time.monotonic_ns, self.hist.record_value
        hub = gevent.get_hub()
        timer = hub.loop.timer(self.interval_s, self.interval_s)
        timer.start(getcurrent().switch)
        try:
            due = clock() + interval_ns
            while True:
                hub.switch()
                now = clock()
                # gevent's timers run from the loop's cached "now": a wake-up can come a little early
                lag_us = max((now - due - self._excused_ns) / 1000, 0.0)
                self._excused_ns = 0
                due = now + interval_ns
                record(max(1, int(lag_us)))
                self.wakes += 1
                if lag_us > limit:
                    self.late_us += lag_us - limit
                    if lag_us >= STALL_MARK_US and self.on_stall is not None:
                        self.on_stall(now, lag_us)
        finally:
            timer.stop()

    def figures(self) -> dict[str, Any]:
        """This process's figures since :meth:`start` (None each when the probe never ran)."""
        if self.t0_ns is None or not self.wakes:
            return {
                "loop_lag_p50_us": None,
                "loop_lag_p99_us": None,
                "loop_lag_late_share": None,
                "loop_lag_wakes": 0,
            }
        wall_us = (time.monotonic_ns() - self.t0_ns - self.excused_total_ns) / 1000
        return {
            "loop_lag_p50_us": float(self.hist.get_value_at_percentile(50)),
            "loop_lag_p99_us": float(self.hist.get_value_at_percentile(99)),
            "loop_lag_late_share": min(1.0, self.late_us / wall_us) if wall_us > 0 else None,
            "loop_lag_wakes": self.wakes,
            "loop_lag_hist": encode_histogram(self.hist),
        }


#: The one probe of this process.
PROBE = LoopLagProbe()

#: Keys :meth:`LoopLagProbe.figures` adds to a worker's totals (measurements, not counts).
FIGURE_KEYS = ("loop_lag_p50_us", "loop_lag_p99_us", "loop_lag_late_share", "loop_lag_wakes", "loop_lag_hist")
