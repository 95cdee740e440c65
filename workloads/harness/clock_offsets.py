"""Clock offsets between a Locust master and its workers, from timed round trips.

``t_ns`` in a history is ``time.monotonic_ns()`` of the process that recorded it, and
CLOCK_MONOTONIC of two machines have nothing in common. The master pings each worker:
it notes its own send time ``t0``, the worker answers with its clock ``tw``, the master
notes the receive time ``t1``. If the answer was taken halfway through the round trip,
``tw - (t0 + t1) / 2`` is the worker's offset; wherever it was taken, the true offset
lies within half the round trip of that. The sample with the smallest round trip is the
tightest bound, so it is the one kept (the NTP "minimum filter").

Pure functions and plain data only: the Locust glue lives in ``workloads.harness.locust_glue``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: Round trips per worker and measurement (at the start and at the end of a case).
ROUNDS = 24


@dataclass(frozen=True)
class Sample:
    """One round trip: master send time, the worker's clock, master receive time (all ns)."""

    t0_ns: int
    worker_ns: int
    t1_ns: int

    @property
    def rtt_ns(self) -> int:
        return self.t1_ns - self.t0_ns

    @property
    def offset_ns(self) -> int:
        """Worker clock minus master clock, if the worker read its clock mid-trip."""
        return self.worker_ns - (self.t0_ns + self.t1_ns) // 2


@dataclass(frozen=True)
class Estimate:
    """The best sample's offset (worker minus master) and its bound: half its round trip."""

    offset_ns: int
    uncertainty_ns: int
    rtt_ns: int
    samples: int


def estimate(samples: Iterable[Sample]) -> Estimate | None:
    """The minimum-round-trip estimate, or None without a usable sample."""
    good = [s for s in samples if s.rtt_ns >= 0]
    if not good:
        return None
    best = min(good, key=lambda s: s.rtt_ns)
    return Estimate(best.offset_ns, (best.rtt_ns + 1) // 2, best.rtt_ns, len(good))


def combine(start: Estimate, end: Estimate | None) -> dict[str, Any]:
    """The offset applied to a whole case and how far off it can be at any moment of it.

    Events are shifted by the start estimate. At the start that is off by at most its own
    bound; at the end by the drift seen since (end minus start) plus the end's bound. With
    a steady drift in between, no moment is worse than the worse end.

    Without an end estimate (the worker stopped answering after the load) the drift is not
    known, so neither is the bound: ``uncertainty_ns`` and ``drift_ns`` are None and
    ``reason`` says why. Treating the drift as 0 would claim a precision nobody measured.
    """
    if end is None:
        return {
            "offset_ns": start.offset_ns,
            "uncertainty_ns": None,
            "drift_ns": None,
            "start_uncertainty_ns": start.uncertainty_ns,
            "reason": "the end-of-run clock measurement failed: drift unknown, so is the bound",
        }
    drift = end.offset_ns - start.offset_ns
    return {
        "offset_ns": start.offset_ns,
        "uncertainty_ns": max(start.uncertainty_ns, abs(drift) + end.uncertainty_ns),
        "drift_ns": drift,
    }


def unmeasured(reason: str) -> dict[str, Any]:
    """The entry of a worker whose offset was never estimated: no offset applied, no bound known."""
    return {"offset_ns": None, "uncertainty_ns": None, "drift_ns": None, "reason": reason}
