"""The rule grammar of ``bench gate``: ``METRIC:THRESHOLD``, e.g. ``acquire.p99:+10%``.

    rule       := metric ":" threshold | "violations:0"
    metric     := "throughput" | "throughput.ops" | FAMILY "." PCT | "utilization" | "fairness"
                | "round-trips" | ARRIVAL | RECOVERY
    FAMILY     := "acquire" | "release" | "hold" | "handoff" | "arrival" | "arrival-served"
                | "arrival-start"
    PCT        := "p50" | "p90" | "p99" | "p999" | "max"   (the others: p50, p99)
    ARRIVAL    := "arrival.served" | "arrival.gave-up" | "arrival.dropped"
                | "arrival.inversions" | "arrival.sellout"
    RECOVERY   := "recovery.max" | "recovery.p50"   (ms; fault cases only)

``arrival.*`` metrics exist for open-model cases (``--arrivals``): ``arrival.p99`` is the
intended arrival -> leaving latency over every arrival (a buyer not served: gave up, failed,
turned away or dropped, counts at its patience), ``arrival-served.p99`` the same over served buyers only,
``arrival-start.p99`` actual start -> purchase;
``arrival.served`` / ``arrival.gave-up`` / ``arrival.dropped`` count buyers, ``arrival.inversions`` is the
fraction of grants that overtook an earlier waiting arrival, ``arrival.sellout`` the
seconds to sell out.
    threshold  := SIGN NUMBER ("%" | UNIT)?

The sign says which way is worse, and must match the metric: latencies and round trips get
worse upwards (``+``), throughput, utilization and fairness downwards (``-``). ``%`` is
relative to the baseline's median; latencies also take an absolute ``us``/``ms``/``s``,
the other metrics a bare number in their own unit. ``violations:0`` is the only safety
rule: a lock that became unsafe never passes, so it is always on and takes no tolerance.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.errors import UserError

#: The rules used when none is given. Thresholds sit above the run-to-run drift of a busy
#: machine (benchmarks/gate_truth.py: results/README.md), so that the significance test,
#: which sees trials within a run, is not the only guard; safety is always included.
DEFAULT_RULES = ("throughput:-10%", "acquire.p99:+20%", "violations:0")

_UNITS_US = {"us": 1.0, "ms": 1_000.0, "s": 1_000_000.0}


@dataclass(frozen=True)
class MetricInfo:
    """A gateable metric: its cases.csv column, which way is worse, how to print it."""

    column: str
    worse: int  # +1: larger is worse, -1: smaller is worse
    unit: str
    latency: bool = False
    #: only some cases have it (open-model ``arrival_*``): a group without the column skips the rule
    optional: bool = False


def _latency_metrics() -> dict[str, MetricInfo]:
    out: dict[str, MetricInfo] = {}
    for family, pcts in (
        ("acquire", ("p50", "p90", "p99", "p999", "max")),
        ("release", ("p50", "p99")),
        ("hold", ("p50", "p99")),
        ("handoff", ("p50", "p99")),
        ("arrival", ("p50", "p99")),
        ("arrival-served", ("p50", "p99")),
        ("arrival-start", ("p50", "p99")),
    ):
        for pct in pcts:
            # arrival.*: every arrival, buyers not served (gave up, failed, turned away, dropped) at their patience
            # (a lock that loses customers must not look faster); arrival-served.*: served only
            names = {"arrival": f"arrival_all_{pct}_us", "arrival-served": f"arrival_{pct}_us"}
            column = names.get(family, f"{family.replace('-', '_')}_{pct}_us")
            optional = family.startswith("arrival")
            out[f"{family}.{pct}"] = MetricInfo(column, +1, "us", latency=True, optional=optional)
    return out


METRICS: dict[str, MetricInfo] = {
    "throughput": MetricInfo("throughput_acq_s", -1, "acq/s"),
    "throughput.ops": MetricInfo("throughput_ops_s", -1, "ops/s"),
    **_latency_metrics(),
    "utilization": MetricInfo("utilization", -1, ""),
    "fairness": MetricInfo("jain_index", -1, ""),
    "round-trips": MetricInfo("server_cmds_per_acquire", +1, "cmds/acq"),
    "arrival.served": MetricInfo("arrival_served", -1, "buyers", optional=True),
    "arrival.gave-up": MetricInfo("arrival_gave_up", +1, "buyers", optional=True),
    "arrival.dropped": MetricInfo("arrival_dropped", +1, "buyers", optional=True),
    "arrival.inversions": MetricInfo("arrival_order_inversion_frac", +1, "", optional=True),
    "arrival.sellout": MetricInfo("arrival_sellout_s", +1, "s", optional=True),
    # recovery after a fault (a crashed holder's process died, a struck service answered again ->
    # the next grant), worst strike: fault cases only; a slower recovery is a liveness regression
    "recovery.max": MetricInfo("recovery_ms_max", +1, "ms", optional=True),
    "recovery.p50": MetricInfo("recovery_ms_p50", +1, "ms", optional=True),
}

SAFETY = "violations"

_RULE = re.compile(
    r"^(?P<metric>[a-z][a-z0-9.\-]*):(?P<sign>[+-])?(?P<num>\d+(?:\.\d+)?)(?P<unit>%|us|ms|s)?$"
)


@dataclass(frozen=True)
class Rule:
    """One performance rule: a metric and how far it may move the bad way before it counts."""

    text: str
    metric: str
    info: MetricInfo
    threshold: float  # relative (0.10 for 10%) or absolute in the metric's unit (us for latencies)
    relative: bool

    def beyond(self, base: float, cand: float) -> bool:
        """Is the move from base to cand worse than the threshold allows?"""
        return self.worse_by(base, cand) > self.threshold

    def better_beyond(self, base: float, cand: float) -> bool:
        return -self.worse_by(base, cand) > self.threshold

    def worse_by(self, base: float, cand: float) -> float:
        """How much worse cand is than base, in the rule's terms (negative when better)."""
        delta = (cand - base) * self.info.worse
        if not self.relative:
            return delta
        if base == 0:
            return 0.0 if delta == 0 else (float("inf") if delta > 0 else float("-inf"))
        return delta / abs(base)


def _fail(text: str, why: str) -> UserError:
    return UserError(f"malformed gate rule {text!r}: {why}")


def parse_rule(text: str) -> Rule | None:
    """A Rule, or None for the safety rule ``violations:0``; UserError (one line) when malformed."""
    raw = text.strip()
    m = _RULE.match(raw)
    if not m:
        name = raw.split(":", 1)[0]
        if ":" not in raw:
            why = "expected METRIC:THRESHOLD, e.g. acquire.p99:+10% or throughput:-5%"
        elif name not in METRICS and name != SAFETY:
            why = f"unknown metric {name!r}; valid: {', '.join([*METRICS, SAFETY])}"
        else:
            why = "the threshold must look like +10%, -5%, +200us or 0"
        raise _fail(raw, why)
    metric, sign, number, unit = m["metric"], m["sign"], float(m["num"]), m["unit"]
    if metric == SAFETY:
        if sign or unit or number != 0:
            raise _fail(raw, "the only safety rule is violations:0 (a lock that became unsafe never passes)")
        return None
    info = METRICS.get(metric)
    if info is None:
        raise _fail(raw, f"unknown metric {metric!r}; valid: {', '.join([*METRICS, SAFETY])}")
    want = "+" if info.worse > 0 else "-"
    if sign != want and number != 0:
        direction = "upwards" if info.worse > 0 else "downwards"
        raise _fail(raw, f"{metric} gets worse {direction}; write {metric}:{want}{m['num']}{unit or '%'}")
    if unit == "%":
        return Rule(raw, metric, info, number / 100.0, relative=True)
    if unit in _UNITS_US:
        if not info.latency:
            raise _fail(
                raw, f"{metric} is not a latency; use % or a bare number in {info.unit or 'its unit'}"
            )
        return Rule(raw, metric, info, number * _UNITS_US[unit], relative=False)
    if info.latency:
        raise _fail(raw, "a latency threshold needs a unit: %, us, ms or s")
    return Rule(raw, metric, info, number, relative=False)


def parse_rules(texts: list[str] | tuple[str, ...]) -> list[Rule]:
    """Parse every rule; the same metric twice is an error. ``violations:0`` is implied."""
    rules: list[Rule] = []
    seen: set[str] = set()
    for text in texts:
        rule = parse_rule(text)
        if rule is None:
            continue
        if rule.metric in seen:
            raise _fail(text.strip(), f"a rule for {rule.metric} is given twice")
        seen.add(rule.metric)
        rules.append(rule)
    return rules
