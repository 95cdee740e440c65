"""Does a case describe the lock, or the load generator? Pure functions, no I/O.

The measure is the holder's own hold time: the critical section is fixed (``--cs``), so a
hold p50 far above the same impl's solo hold p50 (one client, same steps, same run) means
the holder was kept from running its own steps: simulated waiters in the same process
(polling greenlets), a saturated core. Independent clients on their own machines would not
see that, so such a case's throughput is only a lower bound and its latencies an upper
bound. ``docs/architecture.md`` ("Fidelity") gives the measurements behind the threshold.

A workload without a solo calibration falls back to the Locust workers' CPU share.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: Contended hold p50 / solo hold p50 above which a case is generator-bound. Measured on
#: the shared 2-core machine (docs/architecture.md, "Fidelity"): where the generator is
#: clearly not the limit (one client per Locust process, or one client against its own
#: calibration) the ratio stayed within 0.44-2.00; polling locks with 50 clients in one
#: process reached 2.3-23.6 (main) and 6.1-14.0 (this branch, --processes 1).
INFLATION_THRESHOLD = 2.0

#: CPU share of one core above which a Locust worker is taken to be the bottleneck: the
#: only signal for workloads without a solo calibration.
CPU_BOUND_SHARE = 0.9

#: An open-model workload whose arrivals ran this late (p99, microseconds) did not offer
#: the load it was asked to.
SCHEDULE_LAG_LIMIT_US = 1000.0

#: Workloads whose steps a one-client run reproduces. Left out: lock-pairs (its hold has
#: no steps, only the recording between acquire and release: a few microseconds whose
#: ratio is noise) and the fault workloads long-cs, lease-expiry and crash (their holds
#: are meant to be long or cut short by the fault; a solo crash run would kill its only
#: client), so a solo hold p50 says nothing about what contention did to them.
CALIBRATED_WORKLOADS = frozenset({"flash-sale", "reentrant", "read-mostly"})

#: Fewest acquisitions of a usable solo calibration: below, its hold p50 is noise.
MIN_SOLO_ACQUISITIONS = 20

#: What a bound case's figures mean; the reason column ends with it.
BOUND_MEANING = "throughput is a lower bound, latencies an upper bound"

#: cases.csv columns this module fills, in order.
COLUMNS = (
    "solo_hold_p50_us",
    "hold_inflation",
    "client_cpu_ms_per_acq",
    "polls_per_acq",
    "server_cpu_us_per_acq",
    "model_acq_s",
    "generator_bound",
    "generator_bound_reason",
)

NAN = float("nan")


@dataclass(frozen=True)
class Solo:
    """One impl's calibration: a single client, the same steps, in the same run."""

    hold_p50_us: float
    acquire_p50_us: float
    acquisitions: int
    #: "" for the impl's own calibration; else where the figure was borrowed from
    borrowed_from: str = ""

    def as_json(self) -> dict[str, Any]:
        return {
            "hold_p50_us": self.hold_p50_us,
            "acquire_p50_us": self.acquire_p50_us,
            "acquisitions": self.acquisitions,
        }


def pooled(solos: list[Solo]) -> Solo | None:
    """A stand-in for an impl whose own calibration failed: the median of the others'.

    The hold (acquire ok -> release invoke) holds the workload's steps, not the lock's, so
    impls of one workload and fencing mode have nearly the same solo hold (measured: 2.8 to
    3.8 ms for the ten Redis impls, flash-sale, 1 ms cs).
    """
    own = [s for s in solos if not s.borrowed_from]
    if not own:
        return None
    holds = sorted(s.hold_p50_us for s in own)
    mid = len(holds) // 2
    median = holds[mid] if len(holds) % 2 else (holds[mid - 1] + holds[mid]) / 2
    return Solo(median, NAN, 0, borrowed_from=f"median of {len(own)} other impls' solo holds")


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _ms(us: float) -> str:
    return f"{us / 1000:.3g} ms"


def judge_bound(
    hold_p50_us: float | None,
    solo: Solo | None,
    cpu_share_max: float | None,
    calibrated: bool,
    schedule_lag_p99_us: float | None = None,
    threshold: float = INFLATION_THRESHOLD,
) -> tuple[bool, str]:
    """(generator_bound, reason). The reason says why in words, with the numbers; "" when not bound."""
    reasons: list[str] = []
    lag = _finite(schedule_lag_p99_us)
    if lag is not None and lag > SCHEDULE_LAG_LIMIT_US:
        reasons.append(f"arrivals ran late: schedule lag p99 {_ms(lag)} > {_ms(SCHEDULE_LAG_LIMIT_US)}")
    hold = _finite(hold_p50_us)
    solo_hold = _finite(solo.hold_p50_us) if solo is not None else None
    if hold is not None and solo_hold:
        inflation = hold / solo_hold
        if inflation > threshold:
            borrowed = f", {solo.borrowed_from}" if solo is not None and solo.borrowed_from else ""
            reasons.append(
                f"hold inflated {inflation:.1f}x over solo {_ms(solo_hold)}{borrowed} (threshold {threshold:g}x)"
            )
    else:
        cpu = _finite(cpu_share_max)
        why = "no calibration for this workload" if not calibrated else "no solo hold to compare"
        if cpu is not None and cpu >= CPU_BOUND_SHARE:
            reasons.append(f"{why}; a Locust worker used {cpu:.2f} of a core (>= {CPU_BOUND_SHARE:g})")
    if not reasons:
        return False, ""
    return True, "; ".join(reasons) + f": {BOUND_MEANING}"


def columns(
    row: dict[str, Any],
    solo: Solo | None,
    calibrated: bool,
    workers: dict[str, dict[str, Any]],
    lock_stats: dict[str, int],
    server_cpu_s: float | None,
) -> dict[str, Any]:
    """The fidelity columns of one case row (see :data:`COLUMNS`), from its recorded figures."""
    acquisitions = int(row.get("acquisitions") or 0)
    hold = _finite(row.get("hold_p50_us"))
    handoff = _finite(row.get("handoff_p50_us"))
    solo_hold = _finite(solo.hold_p50_us) if solo is not None else None
    cpu_seconds = [_finite(w.get("cpu_s")) for w in workers.values()]
    shares = [s for s in (_finite(w.get("cpu_share")) for w in workers.values()) if s is not None]
    attempts = lock_stats.get("attempts")

    def per_acq(total: float | None, scale: float) -> float:
        return total * scale / acquisitions if total is not None and acquisitions else NAN

    bound, reason = judge_bound(
        hold, solo, max(shares) if shares else None, calibrated, row.get("arrival_schedule_lag_p99_us")
    )
    return {
        "solo_hold_p50_us": solo_hold if solo_hold is not None else NAN,
        "hold_inflation": hold / solo_hold if hold is not None and solo_hold else NAN,
        "client_cpu_ms_per_acq": per_acq(
            sum(c for c in cpu_seconds if c is not None) if cpu_seconds and None not in cpu_seconds else None,
            1e3,
        ),
        "polls_per_acq": per_acq(float(attempts), 1.0) if attempts else NAN,
        "server_cpu_us_per_acq": per_acq(server_cpu_s, 1e6),
        "model_acq_s": 1e6 / (solo_hold + handoff) if solo_hold and handoff is not None else NAN,
        "generator_bound": bound,
        "generator_bound_reason": reason,
    }


def solo_from(row: dict[str, Any]) -> Solo | None:
    """The calibration of a one-client case row, or None when it acquired nothing."""
    hold = _finite(row.get("hold_p50_us"))
    if not row.get("acquisitions") or hold is None:
        return None
    acquire = _finite(row.get("acquire_p50_us"))
    return Solo(hold, acquire if acquire is not None else NAN, int(row["acquisitions"]))
