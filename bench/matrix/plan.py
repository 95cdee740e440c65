"""The matrix's plan: which cases run (impl x scenario x fencing x trial, and the controls), in which lanes,
and which of them share a group.

Pure planning, no server: ``bench matrix`` and ``bench merge`` (through the plan's case ids)
and the shards (bench/matrix/shards.py) all rest on the same plan, so the plan must come out
the same for the same commit and options on every machine.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from bench.errors import UserError
from bench.matrix.controls import control_for
from bench.measure.strikes import DEFAULT_TARGET, EvidenceTarget, recovery_bound_s
from bench.nemesis.faults import parse_fault
from bench.nemesis.restart import RESTART
from bench.nemesis.scenarios import USERS, Scenario, scenarios_at
from bench.run.case import Case, RunSettings
from bench.run.command import plan_impls, with_recovery_bound
from bench.run.group import group_size, groupable
from bench.validate import did_you_mean
from infra.testhosts import NetnsUnavailable, check_available
from workloads.checks.stop_rules import StopRule
from workloads.harness.catalog import WORKLOADS

#: A lane of more cases than this, or whose cases may take longer than this in all (their caps
#: added up), is split by impl, so no single lane sets the matrix's pace.
LANE_CASES = 400
LANE_BUDGET_S = 1000.0


@dataclass
class MatrixCase(Case):
    """A case named by its matrix scenario (``lease-expiry-world+fenced``), not its workload."""

    matrix_scenario: str = ""
    #: "subject" (an impl the user selected) or "control" (a scenario's positive control only)
    role: str = "subject"
    #: the scenario's positive control on this backend (bench/matrix/controls.py), "" for none
    control_impl: str = ""
    #: the group this case shares its strikes with ("" for a case run alone: bench/run/group.py)
    group: str = ""
    #: a control copied into a further group of the same scenario and trial (its case id says which)
    copy: int = 0

    @property
    def scenario(self) -> str:
        if self.fencing == "off":
            return self.matrix_scenario
        return f"{self.matrix_scenario}+{'fenced' if self.fencing == 'enforce' else 'unfenced'}"

    @property
    def case_id(self) -> str:
        base = super().case_id
        return f"{base}__g{self.copy}" if self.copy else base


@dataclass
class Lane:
    """Cases that share servers: one backend, one topology, run one after the other."""

    backend: str
    topology: str | None
    cases: list[MatrixCase] = field(default_factory=list)
    index: int = 0
    #: servers and clients on network-namespace test hosts (partition scenarios)
    hosts: bool = False
    #: the cases as they run: alone, or groups under one nemesis (:func:`form_groups`)
    units: list[list[MatrixCase]] = field(default_factory=list)

    @property
    def name(self) -> str:
        where = "@hosts" if self.hosts else ""
        return f"{self.backend}{'/' + self.topology if self.topology else ''}{where}#{self.index}"

    def servers_needed(self) -> int:
        return max((int(c.params.get("servers", 1)) for c in self.cases), default=1)


def _settings(scenario: Scenario, level: EvidenceTarget, backend: str = "") -> RunSettings:
    info = WORKLOADS[scenario.workload]
    defaults = {k: v for k, v in info.defaults.items() if k in ("ttl", "duration", "processes")}
    values: dict[str, Any] = {"users": USERS, **defaults, **scenario.settings}
    if (cap := scenario.cap_on(backend)) is not None:
        values["duration"] = cap
    options = {
        "items": 1, "skew": 1.0, "stock": 100_000, "max_qty": 3,
        **{k: v for k, v in info.defaults.items() if k == "cs"}, **scenario.options,
    }  # fmt: skip
    return RunSettings(
        spawn_rate=float(values["users"]) * 20,  # all users within 50 ms: the event comes sooner
        workload_options=options,
        stop_rule=scenario.stop.to_json(),
        evidence=scenario.target(level),
        lock_params=dict(scenario.lock_params.get(backend, {})),
        **values,
    )


def plan_matrix(
    backends: list[str],
    impls: list[str],
    scenarios: list[str],
    fixed_servers: set[str],
    level: EvidenceTarget = DEFAULT_TARGET,
    target: EvidenceTarget | None = None,
    root: bool | None = None,
    not_run: list[dict[str, str]] | None = None,
) -> tuple[list[MatrixCase], list[str]]:
    """Every applicable (impl, scenario, fencing mode, trial) as a case, and what was left out and why.

    Scenarios are sized for ``level`` (bench/nemesis/scenarios.py ``Scenario.at``): strikes per
    case, and as many trials as a scenario needs when one case cannot bring them all. Survived
    cases are graded against ``target`` (default: ``level``).
    """
    target = target or level
    if root is None:
        root = _can_make_hosts()
    sized = scenarios_at(level)
    unknown = [s for s in scenarios if s not in sized]
    if unknown:
        hint = did_you_mean(unknown[0], sized, "`bench list`")
        raise UserError(f"unknown scenario {unknown[0]!r}{hint}")
    chosen = [sized[s] for s in (scenarios or sized)]
    planned = plan_impls(backends, impls)
    cases: list[MatrixCase] = []
    skipped: list[str] = []
    not_run = not_run if not_run is not None else []
    for impl_id, backend, cls in planned:
        servers = int(getattr(cls, "servers", 1))
        for scenario in chosen:
            leaseless = scenario.needs_lease and not cls.capabilities.ttl
            if leaseless and scenario.applies_to(impl_id, backend, servers):
                why = "the lock has no lease: a hold cannot outlive it, so this scenario cannot break it"
                not_run.append({"impl": impl_id, "scenario": scenario.name, "word": "n/a", "reason": why})
                continue
            if backend in scenario.unreachable and scenario.applies_to(impl_id, backend, servers):
                why = scenario.unreachable[backend]
                not_run.append({"impl": impl_id, "scenario": scenario.name, "word": "n/a", "reason": why})
                continue
            if scenario.name == RESTART and servers > 1 and backend == "redis":
                why = "a lock on several masters is struck by the RedLock arms (restart-bare, -aof, -delayed) instead"
                not_run.append({"impl": impl_id, "scenario": scenario.name, "word": "n/a", "reason": why})
                continue
            if not scenario.applies_to(impl_id, backend, servers, bool(cls.capabilities.ttl)):
                continue
            if scenario.needs_clock and not getattr(cls, "reads_clock", False):
                why = (
                    "the lock never reads the client clock this fault skews (it times leases with a monotonic "
                    "clock or the server's): the fault cannot reach it"
                )
                not_run.append({"impl": impl_id, "scenario": scenario.name, "word": "n/a", "reason": why})
                continue
            if scenario.needs_root and not root:
                skipped.append(f"{impl_id} x {scenario.name}: needs root (network namespaces); not tested")
                why = "partitions need network namespaces: run bench matrix as root"
                not_run.append(
                    {"impl": impl_id, "scenario": scenario.name, "word": "needs root", "reason": why}
                )
                continue
            if scenario.fault and backend in fixed_servers:
                skipped.append(f"{impl_id} x {scenario.name}: bench does not break a server it did not start")
                continue
            fault = parse_fault(scenario.fault) if scenario.fault else None
            modes = ["observe", "enforce"] if scenario.fencing and cls.capabilities.fencing else ["off"]
            trials = scenario.trials(level)
            for mode in modes:
                for trial in range(trials):
                    cases.append(
                        _sized_for_recovery(
                            cls,
                            MatrixCase(
                                impl=impl_id,
                                backend=backend,
                                workload=WORKLOADS[scenario.workload],
                                trial=trial,
                                params={"servers": servers, "trials": trials},
                                fencing=mode,
                                fault=fault,
                                settings=_settings(scenario, target, backend),
                                matrix_scenario=scenario.name,
                            ),
                        )  # fmt: skip
                    )
    if not cases:
        lease = next((n for n in not_run or [] if n.get("word") == "n/a"), None)
        why = f" ({lease['impl']} x {lease['scenario']}: {lease['reason']})" if lease else ""
        raise UserError(
            f"no scenario applies to the impls selected{why}; see 'bench matrix --help' for the scenarios"
        )
    return with_controls(cases, target, level), skipped


def with_controls(cases: list[MatrixCase], target: EvidenceTarget, level: EvidenceTarget) -> list[MatrixCase]:
    """Every case names its scenario's positive control; a control nobody selected is added as a case.

    Server-fault scenarios get their control inside each group instead (:func:`form_groups`).
    """
    from lockimpls.registry import resolve

    sized = scenarios_at(level)
    out: list[MatrixCase] = []
    present = {(c.impl, c.matrix_scenario, c.backend) for c in cases}
    added: set[tuple[str, str, str]] = set()
    for case in cases:
        control = control_for(case.matrix_scenario, case.backend)
        if control is None:
            out.append(case)
            continue
        out.append(replace(case, control_impl=control))
        key = (control, case.matrix_scenario, case.backend)
        if key in present or key in added or sized[case.matrix_scenario].strike == "server":
            continue
        added.add(key)
        cls = resolve(control)
        scenario = sized[case.matrix_scenario]
        for trial in range(scenario.trials(level)):
            out.append(
                _sized_for_recovery(
                    cls,
                    replace(
                        case, impl=control, trial=trial, fencing="off", role="control", control_impl=control,
                        params={"servers": int(getattr(cls, "servers", 1)), "trials": scenario.trials(level)},
                        settings=_settings(scenario, target, case.backend),
                    ),
                )
            )  # fmt: skip
    return out


def _sized_for_recovery(cls: type, case: MatrixCase) -> MatrixCase:
    """A crash case waits for recovery up to the lock's own bound (bench.run.command.with_recovery_bound).

    Its stop rule then waits that long without a grant before it calls the lock stuck, and its
    cap grows by that much per strike.
    """
    if case.fault is not None and case.fault.at_seconds is None:
        return _server_recovery_bound(cls, case)
    sized = with_recovery_bound(case, cls)
    if sized is case:
        return case
    bound = float(sized.settings.workload_options["stuck_bound"])
    rule = StopRule.from_json(sized.settings.stop_rule) or StopRule()
    stop = replace(rule, or_after_s=bound + 1.5)
    strikes = int(sized.settings.workload_options.get("crashes", 1))
    settings = replace(
        sized.settings, stop_rule=stop.to_json(), duration=sized.settings.duration + strikes * bound
    )
    return replace(sized, settings=settings)


def _server_recovery_bound(cls: type, case: MatrixCase) -> MatrixCase:
    """A server-fault case's stop rule waits for its lock's own recovery bound after the last strike."""
    bound = recovery_bound_s(cls, case.settings.ttl, case.settings.lock_params)
    rule = StopRule.from_json(case.settings.stop_rule) or StopRule()
    stop = replace(rule, or_after_s=bound)
    settings = replace(case.settings, stop_rule=stop.to_json(), duration=case.settings.duration + bound)
    return replace(case, settings=settings, params={**case.params, "recovery_bound_s": bound})


def _can_make_hosts() -> bool:
    try:
        check_available()
    except NetnsUnavailable:
        return False
    return True


def _capped_s(cases: list[MatrixCase]) -> float:
    """How long ``cases`` may take in one lane: a group's cases run side by side (its longest
    counts), and a scenario with more cases than a group holds runs as several groups."""
    groups: dict[tuple[str, str, int], list[float]] = {}
    alone = 0.0
    for c in cases:
        if groupable(c):
            groups.setdefault((c.matrix_scenario, c.backend, c.trial), []).append(c.settings.duration)
        else:
            alone += c.settings.duration
    return alone + sum(
        max(caps) * math.ceil(len(caps) / group_size(scenario, backend))
        for (scenario, backend, _), caps in groups.items()
    )


def plan_lanes(cases: list[MatrixCase], fixed_servers: set[str]) -> list[Lane]:
    """Cases grouped into lanes of one backend and topology, large groups split by impl.

    A backend whose servers the user gave (``--redis-url`` ...) stays one lane: its cases
    share that server and must not overlap.
    """
    groups: dict[tuple[str, str | None, bool], list[MatrixCase]] = {}
    for case in cases:
        topology = case.fault.topology(case.backend) if case.fault else None
        hosted = case.fault is not None and case.fault.is_partition
        groups.setdefault((case.backend, topology, hosted), []).append(case)
    lanes: list[Lane] = []
    for (backend, topology, hosted), members in groups.items():
        impls = list(dict.fromkeys(c.impl for c in members))
        capped_s = _capped_s(members)
        wanted = max(math.ceil(len(members) / LANE_CASES), math.ceil(capped_s / LANE_BUDGET_S))
        chunks = 1 if backend in fixed_servers else min(len(impls), wanted)
        per = math.ceil(len(impls) / chunks)
        for i in range(chunks):
            mine = set(impls[i * per : (i + 1) * per])
            lane = Lane(backend, topology, [c for c in members if c.impl in mine], index=i, hosts=hosted)
            if lane.cases:
                lanes.append(lane)
    # longest first: the lane that starts last should be a short one
    return sorted(lanes, key=lambda ln: -sum(c.settings.duration for c in ln.cases))


def form_groups(lane: Lane) -> list[list[MatrixCase]]:
    """The lane's cases as units to run: a server-fault scenario's cases of one trial share a group.

    Each group holds at most ``GROUP_MAX`` cases, one of them the scenario's positive control
    (added as a copy where the group lacks one), so every group proves its strikes could bite.
    Other cases run alone, in the lane's order.
    """
    from lockimpls.registry import resolve

    units: list[list[MatrixCase]] = []
    buckets: dict[tuple[str, int], list[MatrixCase]] = {}
    order: list[tuple[str, int] | MatrixCase] = []
    for case in lane.cases:
        if groupable(case):
            key = (case.matrix_scenario, case.trial)
            if key not in buckets:
                buckets[key] = []
                order.append(key)
            buckets[key].append(case)
        else:
            order.append(case)
    for item in order:
        if isinstance(item, MatrixCase):
            units.append([item])
            continue
        members = buckets[item]
        # every group carries its own control, under the same strikes and on the same machine load
        # (a workload fault's too: a control in another group saw other pauses, crashes and stalls)
        control = members[0].control_impl
        subjects = [c for c in members if not (control and c.impl == control)]
        own = [c for c in members if control and c.impl == control]
        size = group_size(item[0], lane.backend)
        room = max(1, size - 1 if control else size)
        chunks = [subjects[i : i + room] for i in range(0, len(subjects), room)] or [[]]
        for j, chunk in enumerate(chunks):
            group = f"{lane.name}/{item[0]}/t{item[1]}/g{j}"
            if control:
                if own:
                    chunk = [own.pop(0), *chunk]
                else:
                    cls = resolve(control)
                    template = (chunk or members)[0]
                    copy = replace(
                        # unique in the whole plan: a backend split into lanes copies its control into
                        # each lane's groups (a merge refused two shards holding "__g2" of one scenario)
                        template, impl=control, fencing="off", role="control", copy=lane.index * 100 + j + 1,
                        params={**template.params, "servers": int(getattr(cls, "servers", 1))},
                    )  # fmt: skip
                    chunk = [copy, *chunk]
            if len(chunk) == 1:
                units.append(chunk)  # alone: run as a lone case (its server's command counts are its own)
                continue
            units.append([replace(c, group=group) for c in chunk])
        for rest in own:  # a control selected in both fencing modes: its other mode joins the last group
            units[-1].append(replace(rest, group=units[-1][0].group))
    return units
