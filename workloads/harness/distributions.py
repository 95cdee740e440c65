"""Critical-section time distributions from a short text spec (``--cs``).

Grammar: ``1ms`` or ``fixed:1ms`` (constant), ``exp:1ms`` (exponential with that mean),
``uniform:0.5ms:2ms``, ``pareto:1ms:1.5`` (scale, shape: a heavy tail), ``lognormal:1ms:0.5``
(median, sigma). Units: ``us``, ``ms``, ``s`` (a bare number is milliseconds).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}

#: Longest critical-section time a spec may name (seconds): beyond it a case never ends.
MAX_SECONDS = 3600.0


class SpecError(ValueError):
    """A distribution spec that does not parse; the message shows the grammar."""


def parse_duration(text: str) -> float:
    """'1ms' -> 0.001 seconds; a bare number is milliseconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(us|ms|s)?\s*", text)
    if not m:
        raise SpecError(f"bad duration {text!r}; use e.g. 500us, 1ms, 2s")
    seconds = float(m.group(1)) * _UNITS[m.group(2) or "ms"]
    if seconds > MAX_SECONDS:
        raise SpecError(f"duration {text!r} is longer than {MAX_SECONDS:g} s")
    return seconds


def _parameter(text: str, what: str, low: float, high: float, closed: bool = False) -> float:
    """A shape parameter: finite, ``low`` < value (``<=`` when ``closed``) <= ``high``; never NaN."""
    value = float(text)
    if not ((low <= value if closed else low < value) and value <= high):
        raise SpecError(f"{what} must be {'>=' if closed else '>'} {low:g} and <= {high:g}, got {text}")
    return value


def parse_distribution(spec: str, rng: random.Random | None = None) -> Callable[[], float]:
    """A function returning one sample in seconds per call."""
    rng = rng or random.Random()
    kind, _, rest = spec.partition(":") if ":" in spec else ("fixed", "", spec)
    args = [a for a in rest.split(":") if a] if rest else []
    try:
        if kind == "fixed" and len(args) == 1:
            v = parse_duration(args[0])
            return lambda: v
        if kind == "exp" and len(args) == 1:
            mean = parse_duration(args[0])
            return lambda: rng.expovariate(1 / mean) if mean > 0 else 0.0
        if kind == "uniform" and len(args) == 2:
            lo, hi = parse_duration(args[0]), parse_duration(args[1])
            if lo > hi:
                raise SpecError(f"uniform's low {args[0]} is above its high {args[1]}")
            return lambda: rng.uniform(lo, hi)
        if kind == "pareto" and len(args) == 2:
            scale, shape = parse_duration(args[0]), _parameter(args[1], "pareto shape", 0, 100)
            return lambda: scale * rng.paretovariate(shape)
        if kind == "lognormal" and len(args) == 2:
            import math

            median, sigma = (
                parse_duration(args[0]),
                _parameter(args[1], "lognormal sigma", 0, 10, closed=True),
            )
            if median <= 0:
                raise SpecError("lognormal median must be above 0")
            return lambda: rng.lognormvariate(math.log(median), sigma)
    except (SpecError, ValueError) as exc:
        raise SpecError(f"bad distribution {spec!r}: {exc}") from None
    raise SpecError(
        f"bad distribution {spec!r}; use 1ms, exp:1ms, uniform:0.5ms:2ms, pareto:1ms:1.5 or lognormal:1ms:0.5"
    )


def zipf_weights(n: int, skew: float) -> list[float]:
    """Popularity of n items: weight of item k is 1/(k+1)^skew (skew 0 = uniform)."""
    return [1.0 / (k + 1) ** skew for k in range(n)]
