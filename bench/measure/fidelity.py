"""Does a case describe the lock, or the load generator? Pure functions, no I/O.

One rule, three answers (``generator_bound``: True, False, or None = not measured):

* **the loop-lag probe** (workloads/harness/loop_lag.py) in every Locust process: a greenlet
  that wakes on a fixed 10 ms grid records how late it woke. A process whose loop ran
  more than 2 ms late for more than :data:`LATE_SHARE_LIMIT` of the time was a queue of its
  own: every simulated client waited for the others. The worst process decides, and only
  where a process ran more than one client. It runs in every workload and mode;
* **hold inflation**, where a solo calibration exists (flash-sale, reentrant, read-mostly):
  the critical section is fixed (``--cs``), so a hold p50 far above the same impl's solo
  hold p50 (one client, same steps, same run) means the holder was kept from its own steps;
* **arrival schedule lag** of an open-model workload: arrivals that ran late did not offer
  the load asked for.

Bound when any measured signal says so. Not bound when at least one was measured and
none says so. Not measured (None, with a reason starting "not measured: ") when none of
the three exists, e.g. a recording from before the probe or a process that sent no figures:
such a figure is no "no", and the gate treats it as "not enough data", as it does a bound one.

The busiest process's CPU share is given in the reason for context and decides nothing:
on a shared machine it read 0.09-0.38 while holds were inflated 6-25x (docs/architecture.md,
"Fidelity").
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

#: Contended hold p50 / solo hold p50 above which a case is generator-bound. Quiet machine
#: (2026-12-01, load average 0.3-1.6): the default Redis run's nine unbound impls 1.03-1.29,
#: redis.redlock 1.45; bound cases 2.39-2.90 (flash-sale at 500 users) and 2.50
#: (redis.pottery-redlock at 50, its loop late 56% of the time). 2.0 lies in the gap.
INFLATION_THRESHOLD = 2.0

#: Share of a case's time one Locust process's loop may run more than 2 ms late
#: (``loop_lag_late_share``, workloads/harness/loop_lag.py LATE_LIMIT_US) before the case is
#: generator-bound. Quiet machine (2026-12-01, load average 0.3-1.6): the default Redis run
#: 0.024-0.043 for nine impls and 0.071 for redis.redlock (5-master fan-out, hold inflation
#: 1.45); bound: flash-sale at 500 users 0.54-0.62, lock-pairs at 200 users 0.75-0.77,
#: redis.pottery-redlock at 50 users 0.56. 0.15 sits in the gap, 2x above redlock.
LATE_SHARE_LIMIT = 0.15

#: Kept for run.json's record of the rule: CPU share no longer decides (see the module doc).
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

#: How the reason of a case whose fidelity was not measured starts (never shown as "no").
NOT_MEASURED = "not measured: "

#: cases.csv columns this module fills, in order.
COLUMNS = (
    "solo_hold_p50_us",
    "hold_inflation",
    "client_cpu_ms_per_acq",
    "polls_per_acq",
    "server_cpu_us_per_acq",
    "model_acq_s",
    "loop_lag_p50_us",
    "loop_lag_p99_us",
    "loop_lag_late_share",
    "loop_lag_processes",
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
    #: the solo hold's mean (NaN when unknown): what the model needs, a rate being a mean
    hold_mean_us: float = NAN

    def as_json(self) -> dict[str, Any]:
        return {
            "hold_p50_us": self.hold_p50_us,
            "acquire_p50_us": self.acquire_p50_us,
            "acquisitions": self.acquisitions,
            "hold_mean_us": self.hold_mean_us,
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
    means = [m for m in (_finite(s.hold_mean_us) for s in own) if m]
    mean = statistics.median(means) if means else NAN
    return Solo(
        median, NAN, 0, borrowed_from=f"median of {len(own)} other impls' solo holds", hold_mean_us=mean
    )


def _finite(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _ms(us: float) -> str:
    return f"{us / 1000:.3g} ms"


@dataclass(frozen=True)
class LoopLag:
    """The loop-lag probe's figures of a case: the worst Locust process for each."""

    p50_us: float
    p99_us: float
    late_share: float
    processes: int


def loop_lag_of(workers: dict[str, dict[str, Any]]) -> LoopLag | None:
    """The worst process's probe figures (workers' totals, recording.json), or None without any.

    The worst, not the mean: one process whose loop is saturated delays every client it
    runs, however idle the others are.
    """
    probed = [
        w
        for w in workers.values()
        if _finite(w.get("loop_lag_p99_us")) is not None and w.get("loop_lag_wakes")
    ]
    if not probed:
        return None
    shares = [s for s in (_finite(w.get("loop_lag_late_share")) for w in probed) if s is not None]
    return LoopLag(
        p50_us=max(float(w["loop_lag_p50_us"]) for w in probed),
        p99_us=max(float(w["loop_lag_p99_us"]) for w in probed),
        late_share=max(shares) if shares else NAN,
        processes=len(probed),
    )


def judge_bound(
    hold_p50_us: float | None,
    solo: Solo | None,
    cpu_share_max: float | None,
    calibrated: bool,
    schedule_lag_p99_us: float | None = None,
    threshold: float = INFLATION_THRESHOLD,
    loop: LoopLag | None = None,
    users: int | None = None,
    dropped: float | None = None,
) -> tuple[bool | None, str]:
    """(generator_bound, reason): True / False / None (not measured), the reason in words with numbers.

    "" when not bound; starts with :data:`NOT_MEASURED` when no signal was measured. The
    loop lag counts only where a process ran more than one client (``users`` over the
    processes that reported): a lone client that keeps its loop busy delays nobody but the
    probe, and its own latencies are timed around each call (measured: one lock-pairs client
    running flat out kept its loop over 1 ms late 40% of the time at an acquire p50 of 64 us).
    """
    reasons: list[str] = []
    measured: list[str] = []
    lag = _finite(schedule_lag_p99_us)
    if lag is not None:
        measured.append("arrivals")
        if lag > SCHEDULE_LAG_LIMIT_US:
            reasons.append(f"arrivals ran late: schedule lag p99 {_ms(lag)} > {_ms(SCHEDULE_LAG_LIMIT_US)}")
    lost = _finite(dropped)
    if lost:
        # arrivals due before the stop that never started: the offered rate was not held
        measured.append("arrivals")
        reasons.append(f"{lost:,.0f} arrivals were never launched (dropped): the offered rate was not held")
    if loop is not None:
        measured.append("probe")
        late = _finite(loop.late_share)
        shared = users is None or users > loop.processes
        if shared and late is not None and late > LATE_SHARE_LIMIT:
            reasons.append(
                f"a Locust process's loop ran over 2 ms late {late:.0%} of the time "
                f"(limit {LATE_SHARE_LIMIT:.0%}; lag p99 {_ms(loop.p99_us)})"
            )
    hold = _finite(hold_p50_us)
    solo_hold = _finite(solo.hold_p50_us) if solo is not None else None
    if hold is not None and solo_hold:
        measured.append("solo")
        inflation = hold / solo_hold
        if inflation > threshold:
            borrowed = f", {solo.borrowed_from}" if solo is not None and solo.borrowed_from else ""
            reasons.append(
                f"hold inflated {inflation:.1f}x over solo {_ms(solo_hold)}{borrowed} (threshold {threshold:g}x)"
            )
    if reasons:
        cpu = _finite(cpu_share_max)
        context = f" (busiest Locust process: {cpu:.2f} of a core)" if cpu is not None else ""
        return True, "; ".join(reasons) + f"{context}: {BOUND_MEANING}"
    if measured:
        return False, ""
    solo_why = "no solo calibration for this workload" if not calibrated else "no usable solo hold"
    return None, f"{NOT_MEASURED}no loop-lag figures from the Locust processes and {solo_why}"


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
    solo_hold = _finite(solo.hold_p50_us) if solo is not None else None
    cpu_seconds = [_finite(w.get("cpu_s")) for w in workers.values()]
    shares = [s for s in (_finite(w.get("cpu_share")) for w in workers.values()) if s is not None]
    attempts = lock_stats.get("attempts")

    def per_acq(total: float | None, scale: float) -> float:
        return total * scale / acquisitions if total is not None and acquisitions else NAN

    loop = loop_lag_of(workers)
    bound, reason = judge_bound(
        hold, solo, max(shares) if shares else None, calibrated, row.get("arrival_schedule_lag_p99_us"),
        loop=loop, users=int(users) if (users := _finite(row.get("users"))) is not None else None,
        dropped=row.get("arrival_dropped"),
    )  # fmt: skip
    return {
        "solo_hold_p50_us": solo_hold if solo_hold is not None else NAN,
        "hold_inflation": hold / solo_hold if hold is not None and solo_hold else NAN,
        "client_cpu_ms_per_acq": per_acq(
            sum(c for c in cpu_seconds if c is not None) if cpu_seconds and None not in cpu_seconds else None,
            1e3,
        ),
        "polls_per_acq": per_acq(float(attempts), 1.0) if attempts else NAN,
        "server_cpu_us_per_acq": per_acq(server_cpu_s, 1e6),
        "model_acq_s": model_rate(solo, row),
        "loop_lag_p50_us": loop.p50_us if loop is not None else NAN,
        "loop_lag_p99_us": loop.p99_us if loop is not None else NAN,
        "loop_lag_late_share": loop.late_share if loop is not None else NAN,
        "loop_lag_processes": loop.processes if loop is not None else 0,
        "generator_bound": bound,
        "generator_bound_reason": reason,
    }


#: What the model is, in the words every caption uses.
MODEL_MEANING = (
    "model: independent clients = 1 / (mean solo hold + mean handoff gap), the rate one lock "
    "would sustain if each grant followed the last by the measured mean gap; not stated without both means"
)


def model_rate(solo: Solo | None, row: dict[str, Any]) -> float:
    """Acquisitions/s independent clients would get: 1e6 / (mean solo hold + mean handoff gap), in us.

    A rate is a count over time, so it needs means: from medians it overstated (the handoff
    gap's p99 of redis.setnx-expire is 16x its p50, and the tail is where the time goes).
    NaN when either mean is unknown (an old calibration, a case without handoffs): better no
    model than a wrong one.
    """
    hold = _finite(solo.hold_mean_us) if solo is not None else None
    handoff = _finite(row.get("handoff_mean_us"))
    if not hold or handoff is None:
        return NAN
    return 1e6 / (hold + handoff)


def solo_from(row: dict[str, Any]) -> Solo | None:
    """The calibration of a one-client case row, or None when it acquired nothing."""
    hold = _finite(row.get("hold_p50_us"))
    if not row.get("acquisitions") or hold is None:
        return None
    acquire = _finite(row.get("acquire_p50_us"))
    mean = _finite(row.get("hold_mean_us"))
    return Solo(
        hold,
        acquire if acquire is not None else NAN,
        int(row["acquisitions"]),
        hold_mean_us=mean if mean else NAN,
    )


#: Share of one core a Locust process may use and still keep its loop on time: the sizing
#: target of :func:`processes_needed`. Quiet machine (2026-12-01): processes at 0.35-0.59 of
#: a core kept their loop late under 7% of the time; at 0.68-0.84 it was late 54-77%.
PROCESS_CPU_TARGET = 0.5


@dataclass(frozen=True)
class ScaleOut:
    """How many Locust processes would keep the bound cases' loops on time, and where they fit."""

    bound_cases: int
    cases: int
    processes: int
    #: hosts of ``cores_per_host`` cores the processes need (1: this host is enough)
    hosts: int
    cores_per_host: int
    #: the case the estimate comes from (the one needing most processes)
    case: str
    cpu_ms_per_acq: float
    acq_s: float


def processes_needed(rows: list[dict[str, Any]], cores_per_host: int) -> ScaleOut | None:
    """From the bound rows' client CPU per acquisition, the processes that would run them on time.

    Each bound case needs ``client_cpu_ms_per_acq`` x its measured rate CPU-milliseconds per
    second (the measured rate, never the model: a model of 122/s against a measured 14/s sized
    14 processes for a run whose Locust processes were nearly idle). At
    :data:`PROCESS_CPU_TARGET` of a core per process, and never fewer than one more process
    than the case had (it was bound with those). None when no row is bound; a bound case
    without client CPU figures is counted but cannot be sized.
    """
    bound = [r for r in rows if r.get("generator_bound") is True or str(r.get("generator_bound")) == "True"]
    if not bound:
        return None
    best: ScaleOut | None = None
    for r in bound:
        cpu = _finite(r.get("client_cpu_ms_per_acq"))
        rate = _finite(r.get("throughput_acq_s")) or 0.0
        if cpu is None or not rate:
            continue
        had = int(_finite(r.get("processes")) or 1)
        need = max(math.ceil(cpu * rate / 1000 / PROCESS_CPU_TARGET), had + 1)
        if best is None or need > best.processes:
            best = ScaleOut(
                len(bound), len(rows), need, math.ceil(need / max(1, cores_per_host)), max(1, cores_per_host),
                str(r.get("case", "")), cpu, rate,
            )  # fmt: skip
    if best is None:
        return ScaleOut(len(bound), len(rows), 0, 0, max(1, cores_per_host), "", NAN, NAN)
    return best


def scale_out_line(advice: ScaleOut) -> str:
    """The one line ``bench run`` ends with when figures are bound: how many, and what would fix it."""
    head = f"lockbench: {advice.bound_cases} of {advice.cases} case(s) generator-bound ({BOUND_MEANING})"
    if not advice.processes:
        return (
            head + "; no client CPU per acquisition was measured to size the fix: try more Locust processes"
        )
    size = (
        f"; at {advice.cpu_ms_per_acq:.2g} ms client CPU per acquisition and {advice.acq_s:,.0f} acq/s "
        f"({advice.case}) about {advice.processes} Locust processes at {PROCESS_CPU_TARGET:.0%} of a core each "
        "would keep the loop lag under 1 ms"
    )
    if advice.hosts <= 1:
        return head + size + f": rerun with --processes {advice.processes}"
    return (
        head + size + f": {advice.hosts} hosts of {advice.cores_per_host} cores; on each run "
        f"`bench worker --master THIS_HOST:5557 --processes {advice.cores_per_host}`, and here "
        f"`bench run ... --master-bind 0.0.0.0:5557 --expect-workers {advice.hosts * advice.cores_per_host}`"
    )


@dataclass(frozen=True)
class MachineLoad:
    """How busy the machine was while the cases ran: the run's own Locust processes included.

    Why it is measured: a generator-bound case on a machine whose load average is above its
    cores, or whose CPU is stolen by the hypervisor, was starved by the machine, not by
    Locust; more Locust processes or hosts would not fix that, a quieter machine would.
    """

    load_avg_max: float
    cores: int
    steal_share: float = 0.0  # share of CPU time stolen by the hypervisor while the cases ran


def busiest_process_share(rows: list[dict[str, Any]]) -> float | None:
    """The largest share of one core a Locust process of a bound case used (client CPU x measured rate)."""
    shares = []
    for r in rows:
        if not (r.get("generator_bound") is True or str(r.get("generator_bound")) == "True"):
            continue
        cpu, rate = _finite(r.get("client_cpu_ms_per_acq")), _finite(r.get("throughput_acq_s"))
        if cpu is None or rate is None:
            continue
        shares.append(cpu * rate / 1000 / max(1, int(_finite(r.get("processes")) or 1)))
    return max(shares) if shares else None


def bottleneck_line(
    rows: list[dict[str, Any]], cores_per_host: int, machine: MachineLoad | None
) -> str | None:
    """The line ``bench run`` ends with when figures are bound, naming what was really short.

    Generator-bound (Locust's own processes at their limit, :data:`PROCESS_CPU_TARGET`): how many
    processes or hosts, sized from the measured rate. Machine-bound (load average above the cores
    or CPU stolen, Locust's processes below their limit): the machine, and that more processes
    would not help. Neither: the figures are bound but CPU is not why. None when nothing is bound.
    """
    advice = processes_needed(rows, cores_per_host)
    if advice is None:
        return None
    busiest = busiest_process_share(rows)
    head = f"lockbench: {advice.bound_cases} of {advice.cases} case(s) generator-bound ({BOUND_MEANING})"
    at_limit = busiest is not None and busiest >= PROCESS_CPU_TARGET
    if busiest is None or at_limit:
        return scale_out_line(advice)
    used = f"Locust's busiest process used {busiest:.2f} of a core (its limit {PROCESS_CPU_TARGET:g})"
    short = machine is not None and (machine.load_avg_max > machine.cores or machine.steal_share > 0.1)
    if short and machine is not None:
        steal = (
            f", {machine.steal_share:.0%} of CPU stolen by the hypervisor"
            if machine.steal_share > 0.01
            else ""
        )
        return (
            f"{head}: the machine was short of CPU, not Locust: load average up to {machine.load_avg_max:.1f} "
            f"on {machine.cores} cores{steal}, while {used}; more processes or hosts would not help, "
            "a quieter machine would (other processes: `top`)"
        )
    load = f"; load average up to {machine.load_avg_max:.1f} on {machine.cores} cores" if machine else ""
    return f"{head}, but not for CPU: {used}{load}; the reasons are in the report's fidelity section"
