"""Arrival processes of the open model (``--arrivals``): parsing and the schedule, pure.

Grammar (rates in arrivals per second, ``/s`` optional; durations need a unit):

* ``constant:R``: one buyer every 1/R s, evenly spaced (the i-th at i/R).
* ``poisson:R``: a Poisson process of rate R (exponential gaps of mean 1/R).
* ``spike:PEAK@RAMP`` or ``spike:PEAK@RAMP:DECAY``: a sale opening. The intensity rises
  linearly from 0 to PEAK/s over RAMP, then decays exponentially with time constant DECAY
  (default: RAMP)::

      rate(t) = PEAK * t / RAMP                      for t < RAMP
      rate(t) = PEAK * exp(-(t - RAMP) / DECAY)      for t >= RAMP

  It holds PEAK*RAMP/2 + PEAK*DECAY buyers in all (``spike:5000@1s``: 2,500 in the ramp,
  5,000 in the tail, 63% of those within the first second after the peak). Arrivals are
  deterministic: the i-th comes when the expected count reaches i (the inverse of the
  cumulative rate), so every impl meets the very same crowd.

Across ``--processes``: deterministic schedules are dealt round-robin (process k of P
takes arrivals k, k+P, k+2P, ...), so together they keep the exact schedule; a Poisson
process is split into P independent Poisson processes of rate R/P, whose sum is again a
Poisson process of rate R.
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

from workloads.harness.distributions import SpecError, parse_duration

KINDS = ("constant", "poisson", "spike")
#: Most arrivals per second a spec may ask for (a peak, for a spike): far beyond what one
#: machine's Locust processes can start, so a larger number can only be a typo, and one
#: that saturates every worker process (``constant:1e999`` is infinite).
MAX_RATE = 100_000.0
#: Longest ramp or decay of a spike, in seconds.
MAX_SPAN_S = 3_600.0
GRAMMAR = "constant:R, poisson:R or spike:PEAK@RAMP[:DECAY] (e.g. constant:200, poisson:500/s, spike:5000@1s)"


@dataclass(frozen=True)
class ArrivalSpec:
    """One arrival process as parsed from ``--arrivals``: a kind, a rate and, for a spike, its shape."""

    kind: str
    rate: float  # per second; the peak for a spike
    ramp_s: float = 0.0
    decay_s: float = 0.0

    @property
    def total(self) -> float:
        """Expected buyers over all time (infinite except for a spike)."""
        if self.kind == "spike":
            return self.rate * self.ramp_s / 2 + self.rate * self.decay_s
        return math.inf

    def rate_at(self, t_s: float) -> float:
        """The intensity at ``t_s`` seconds after the opening (arrivals per second)."""
        if t_s < 0:
            return 0.0
        if self.kind != "spike":
            return self.rate
        if t_s < self.ramp_s:
            return self.rate * t_s / self.ramp_s
        return self.rate * math.exp(-(t_s - self.ramp_s) / self.decay_s)

    def expected(self, t_s: float) -> float:
        """Expected number of arrivals in [0, t_s]: the cumulative intensity."""
        if t_s <= 0:
            return 0.0
        if self.kind != "spike":
            return self.rate * t_s
        if t_s < self.ramp_s:
            return self.rate * t_s * t_s / (2 * self.ramp_s)
        tail = self.rate * self.decay_s * (1 - math.exp(-(t_s - self.ramp_s) / self.decay_s))
        return self.rate * self.ramp_s / 2 + tail

    def time_of(self, n: float) -> float:
        """When the expected count reaches ``n`` (inf when it never does)."""
        if self.kind != "spike":
            return n / self.rate
        ramp_count = self.rate * self.ramp_s / 2
        if n <= ramp_count:
            return math.sqrt(2 * self.ramp_s * n / self.rate)
        x = (n - ramp_count) / (self.rate * self.decay_s)
        return math.inf if x >= 1 else self.ramp_s - self.decay_s * math.log1p(-x)

    def schedule(self, share: int = 0, shares: int = 1, rng: random.Random | None = None) -> Iterator[float]:
        """Intended arrival times (seconds after the opening) of process ``share`` of ``shares``, in order."""
        if not 0 <= share < shares:
            raise ValueError(f"share {share} not in 0..{shares - 1}")
        if self.kind == "poisson":
            rng = rng or random.Random()
            rate = self.rate / shares
            t = 0.0
            while True:
                t += rng.expovariate(rate)
                yield t
        i = share
        while True:
            t = self.time_of(i)
            if math.isinf(t):
                return
            yield t
            i += shares


def _rate(text: str, spec: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*(?:/s)?\s*", text)
    if not m or not 0 < float(m.group(1)) <= MAX_RATE:
        raise SpecError(
            f"bad rate {text!r} in --arrivals {spec!r}: a number per second above 0, at most "
            f"{MAX_RATE:,.0f}; use {GRAMMAR}"
        )
    return float(m.group(1))


def _span(text: str, spec: str) -> float:
    if not re.search(r"(us|ms|s)\s*$", text):
        raise SpecError(f"{text!r} in --arrivals {spec!r} needs a unit (ms or s), e.g. spike:5000@1s")
    value = parse_duration(text)
    if not 0 < value <= MAX_SPAN_S:
        raise SpecError(f"{text!r} in --arrivals {spec!r} must be longer than 0 and at most {MAX_SPAN_S:g}s")
    return value


def parse_arrivals(spec: str) -> ArrivalSpec:
    """``spike:5000@1s`` -> ArrivalSpec; SpecError (one line naming the grammar) when it does not parse."""
    kind, sep, rest = spec.strip().partition(":")
    if not sep or kind not in KINDS or not rest:
        raise SpecError(f"bad --arrivals {spec!r}; use {GRAMMAR}")
    if kind in ("constant", "poisson"):
        return ArrivalSpec(kind, _rate(rest, spec))
    peak, at, shape = rest.partition("@")
    if not at:
        raise SpecError(f"bad --arrivals {spec!r}: a spike is PEAK@RAMP[:DECAY], e.g. spike:5000@1s")
    ramp, _, decay = shape.partition(":")
    ramp_s = _span(ramp, spec)
    return ArrivalSpec(kind, _rate(peak, spec), ramp_s, _span(decay, spec) if decay else ramp_s)
