"""How late this process's gevent loop runs: the load generator's own queue, measured.

Every simulated client of a Locust process shares one gevent loop. When the loop has more
work than one core can do, every client's next step waits for the others: acquire times
grow by the loop's queue, not by the lock. A greenlet that asks to wake at fixed times
and records how late it woke measures that queue directly, in every workload and mode
(closed, open, matrix, ``--processes`` workers, ``bench worker`` hosts, test hosts),
where the solo calibration (bench/measure/fidelity.py) covers only three workloads.

Figures per process, since the probe started (the harness starts it at each test start):

* ``loop_lag_p50_us`` / ``loop_lag_p99_us``: how late a wake-up was (HDR, microseconds);
* ``loop_lag_late_share``: the share of the load window during which the loop ran more than
  :data:`LATE_LIMIT_US` behind, sampled: the probe's due times form a fixed grid
  (:data:`INTERVAL_S` apart), and a grid point is late when the probe woke more than the limit
  after it. A wake-up after a long stall accounts for every grid point the stall covered;
* ``loop_lag_wakes``: how many grid points (samples) the figures rest on.

The window opens at the test's start (:meth:`LoopLagProbe.start`) and closes when Locust
begins to stop the users (:meth:`LoopLagProbe.freeze`).

The probe records, it never judges: bench decides what the figures mean.
"""

from __future__ import annotations

import time
from typing import Any

import gevent
from gevent import Greenlet

from workloads.harness.recording import encode_histogram, new_histogram

#: How often the probe samples the loop (seconds). Each sample is one point of a fixed grid, so
#: the late share is the share of grid points at which the loop was behind: the same quantity
#: at any spacing, only with fewer samples (20 a second: a 4 s case has 80).
#: Every wake-up of a gevent loop that had blocked costs about 0.19 ms of CPU on these machines
#: (plain ``time.sleep``: 0.06 ms), so at 10 ms the probe cost 0.018-0.019 of a core per process
#: (benchmarks/loop_lag_cost.py, load 0.6, 2026-12-06), 0.010 at 25 ms and 0.005 at 50 ms. A
#: matrix shard ran 26 Locust processes at a time on average (up to 54; shard 4/4, 2026-12-06),
#: so at 10 ms the probe took about 0.4 of the 0.87 cores its Locust processes used: the harness
#: watching itself was a quarter of the machine it was saturating. (At 1 ms it cost 0.025 a
#: process, with the loop mostly awake.) What a coarser grid gives up: a stall's lag is
#: measured from the first grid point inside it, so a greenlet due earlier in the interval may
#: have waited up to one interval (50 ms) longer than the stall mark says.
INTERVAL_S = 0.05

#: Lag (microseconds) beyond which the loop counts as running late for ``loop_lag_late_share``.
#: 2 ms: 1 ms beyond what an idle loop shows. gevent's loop (libev on epoll) sleeps in whole
#: milliseconds, rounded up, so an idle process's wake-ups come 0.5 ms late at the median and
#: 1.07 ms at the 99th percentile (one process, nothing else running, 2026-12-05). With a 1 ms
#: limit 7-9% of an idle loop's samples counted as "late", and any process that shared a core
#: for a moment crossed the 15% that makes a case generator-bound. Beyond 2 ms an acquire
#: that takes one round trip to a local server (about 0.1 ms) is held up by the load
#: generator ten times over, as the old 1 ms limit meant to say.
LATE_LIMIT_US = 2000.0


#: A wake-up this late (microseconds) is a stall worth placing in time: the probe hands it to
#: :attr:`LoopLagProbe.on_stall` (the harness writes it into the history as a ``stall`` event),
#: so a violation can be set beside the stalls just before it. 50 ms: a twentieth of the
#: shortest lease the matrix uses (1 s), and rare enough on a healthy loop to cost nothing.
STALL_MARK_US = 50_000.0


class LoopLagProbe:
    """A greenlet sampling the loop every :data:`INTERVAL_S`, recording how late it woke.

    Why a greenlet rather than a watcher callback in the hub: a greenlet waits in the same
    run queue as the simulated clients, so it is late exactly when they are.
    """

    def __init__(self, interval_s: float = INTERVAL_S, late_limit_us: float = LATE_LIMIT_US) -> None:
        self.interval_s = interval_s
        self.late_limit_us = late_limit_us
        self.hist = new_histogram()
        self.late = 0
        self.wakes = 0
        self.t0_ns: int | None = None
        self._greenlet: Greenlet | None = None
        #: a deliberate stop of the whole process not yet taken off the grid
        self._excused_ns = 0
        #: called with (when the wake-up came, monotonic ns; how late, us) for every stall of at
        #: least STALL_MARK_US; None: nobody listens
        self.on_stall: Any = None
        #: the figures as they were when the load window closed (:meth:`freeze`); None: still open
        self._frozen: dict[str, Any] | None = None

    @property
    def late_us(self) -> float:
        """Time the loop ran more than the limit behind (microseconds): each late sample stands for its interval."""
        return self.late * self.interval_s * 1e6

    @property
    def running(self) -> bool:
        return self._greenlet is not None and not self._greenlet.dead

    def start(self) -> None:
        """Forget earlier figures and (re)start the probe: one case, one set of figures."""
        self.stop()
        self.hist = new_histogram()
        self.late = 0
        self.wakes = 0
        self._excused_ns = 0
        self._frozen = None
        self.t0_ns = time.monotonic_ns()
        self._greenlet = gevent.spawn(self._run)

    def stop(self) -> None:
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
            self._greenlet = None

    def freeze(self) -> None:
        """Close the figures' window: the load is over, what follows is the harness taking it down.

        Why: stopping users, closing their locks and writing the history ran up to 150 ms of
        one process's loop after cases whose load lasted 0.2 s (the matrix's fault-free
        controls end on their evidence), so half of such a case's "late" time was its own
        teardown. The probe keeps running, so a stall in the stop is still marked in the history.
        """
        if self._frozen is None:
            self._frozen = self._figures()

    def excuse(self, ns: int) -> None:
        """Take a deliberate stop of this whole process (``ns`` long) out of the figures.

        Why: the lease-expiry workload's "world" pause blocks the process on purpose, as a GC
        pause would; the wake-up after it came seconds late, and counted as the load generator's
        queue it made every such case generator-bound (loop late 60-87% of the time in the
        2026-12-03 matrices) and marked a 2 s "stall" that was the experiment itself. Call it
        right after the stop, before the loop runs again: the grid moves past it, so none of
        its points is a sample.
        """
        self._excused_ns += ns

    def _run(self) -> None:
        """Wake at each point of the grid; each grid point passed is one sample of the lag.

        A one-shot timer armed for the next grid point each time, not libev's repeating timer:
        after a late wake-up libev moves its repeating timer's schedule, and samples taken
        against a grid it no longer kept read as late for ever after (76% "late" on an idle
        stretch). ``hub.wait`` switches back from the timer's callback, as gevent's own
        ``Waiter`` does, so the probe still queues behind every client the hub runs first.
        """
        interval_ns = int(self.interval_s * 1e9)
        limit_ns = int(self.late_limit_us * 1000)
        clock, record = time.monotonic_ns, self.hist.record_value
        hub = gevent.get_hub()
        loop = hub.loop
        due = clock() + interval_ns
        while True:
            timer = loop.timer(max(due - clock(), 0) / 1e9)
            try:
                hub.wait(timer)
            finally:
                timer.close()
            now = clock()
            if self._excused_ns:  # the points of the grid inside a deliberate stop are no samples
                due += self._excused_ns
                self._excused_ns = 0
            if due > now:  # the loop's cached "now" started the timer a little early: wait the rest
                continue
            first_lag_ns = now - due
            while due <= now:
                lag_ns = now - due
                record(max(1, lag_ns // 1000))
                self.wakes += 1
                if lag_ns > limit_ns:
                    self.late += 1
                due += interval_ns
            if first_lag_ns >= STALL_MARK_US * 1000 and self.on_stall is not None:
                self.on_stall(now, first_lag_ns / 1000)

    def figures(self) -> dict[str, Any]:
        """This process's figures from :meth:`start` to :meth:`freeze` or now (None each when it never ran)."""
        return self._frozen if self._frozen is not None else self._figures()

    def _figures(self) -> dict[str, Any]:
        if self.t0_ns is None or not self.wakes:
            return {
                "loop_lag_p50_us": None,
                "loop_lag_p99_us": None,
                "loop_lag_late_share": None,
                "loop_lag_wakes": 0,
            }
        return {
            "loop_lag_p50_us": float(self.hist.get_value_at_percentile(50)),
            "loop_lag_p99_us": float(self.hist.get_value_at_percentile(99)),
            "loop_lag_late_share": self.late / self.wakes,
            "loop_lag_wakes": self.wakes,
            "loop_lag_hist": encode_histogram(self.hist),
        }


#: Keys :meth:`LoopLagProbe.figures` adds to a worker's totals (measurements, not counts).
FIGURE_KEYS = ("loop_lag_p50_us", "loop_lag_p99_us", "loop_lag_late_share", "loop_lag_wakes", "loop_lag_hist")
