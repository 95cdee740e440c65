"""``bench matrix``: every selected impl under every safety scenario, one folder, one report.

The scenarios are the rows of ``bench/nemesis/scenarios.py``; what the catalog expects of each
impl in each is ``bench/matrix/expectations.py``. Three things keep the whole matrix short:

* every case ends once its event happened and its checker has the evidence
  (``workloads/checks/stop_rules.py``), not after a fixed duration;
* cases run in *lanes*: a lane is a group of cases of one backend and topology with its own
  servers (lock servers and resource Redis), kept up across its cases and reset between
  them (``bench/run/reset.py``);
* lanes share no server, so ``--parallel`` of them run side by side (why that is sound:
  docs/architecture.md, "The safety matrix").
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.errors import Interrupted, UserError
from bench.matrix import controls
from bench.matrix.controls import control_for
from bench.matrix.expectations import annotate, observed_outcome
from bench.matrix.shards import Shard, auto_lanes, deal
from bench.matrix.tables import markdown_table, print_summary, timing_summary, undecided
from bench.measure.evidence import server_died
from bench.measure.strikes import DEFAULT_TARGET, LEVELS, EvidenceTarget
from bench.nemesis.faults import parse_fault
from bench.nemesis.scenarios import USERS, Scenario, scenarios_at
from bench.results import meta
from bench.results.folder import RunFolder, atomic_write_text
from bench.results.redact import redact_text
from bench.run.case import Case, CaseFailed, RunSettings
from bench.run.command import _check_user_dsns, plan_impls, with_recovery_bound
from bench.run.group import group_size, groupable, run_group
from bench.run.locust import _run_locust as cold_locust
from bench.run.runner import endpoints_for_meta, run_case
from bench.run.warm import WarmLocust, WarmLocustError
from bench.validate import did_you_mean
from infra.stack import Stack
from infra.testhosts import NetnsUnavailable, TestHostNet, check_available
from workloads.checks.stop_rules import EvidenceWatch, StopRule
from workloads.harness.catalog import WORKLOADS

#: A lane of more cases than this, or whose cases may take longer than this in all (their caps
#: added up), is split by impl, so no single lane sets the matrix's pace.
LANE_CASES = 400
LANE_BUDGET_S = 900.0


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
    for impl_id, backend, cls in planned:
        servers = int(getattr(cls, "servers", 1))
        for scenario in chosen:
            if (
                scenario.needs_lease
                and not cls.capabilities.ttl
                and scenario.applies_to(impl_id, backend, servers)
            ):
                if not_run is not None:
                    not_run.append(
                        {"impl": impl_id, "scenario": scenario.name, "word": "n/a",
                         "reason": "the lock has no lease: a hold cannot outlive it, so this scenario cannot break it"}
                    )  # fmt: skip
                continue
            if not scenario.applies_to(impl_id, backend, servers, bool(cls.capabilities.ttl)):
                continue
            if scenario.needs_root and not root:
                skipped.append(f"{impl_id} x {scenario.name}: needs root (network namespaces); not tested")
                if not_run is not None:
                    not_run.append(
                        {"impl": impl_id, "scenario": scenario.name, "word": "needs root",
                         "reason": "partitions need network namespaces: run bench matrix as root"}
                    )  # fmt: skip
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


def strike_cycles(cycles: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, dict[str, Any]]:
    """Per scenario: strikes, strike series, and the mean seconds of each part of a strike's cycle.

    claim (arming until the holders claimed), strike (the action), service back (from the action's
    start), holder wait (the holder kept its lock after the action), heal and grants (before the
    next strike: the heal, then the purchases the service had to grant), and their sum per strike.
    """
    out: dict[str, dict[str, Any]] = {}
    for scenario, series in cycles.items():
        every = [c for strikes_ in series.values() for c in strikes_]
        if not every:
            continue
        parts = ("claim_s", "strike_s", "service_back_s", "holder_wait_s", "heal_s", "grants_s")
        mean = {p: round(sum(c.get(p, 0.0) for c in every) / len(every), 3) for p in parts}
        per = sum(v for p, v in mean.items() if p != "service_back_s")
        out[scenario] = {
            "strikes": len(every),
            "series": len(series),
            "mean": mean,
            "per_strike_s": round(per, 3),
        }
    return out


def _load_average() -> list[float]:
    """The 1, 5 and 15 minute load averages (the matrix's figures are read beside them)."""
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:
        return []


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def _can_make_hosts() -> bool:
    try:
        check_available()
    except NetnsUnavailable:
        return False
    return True


def _capped_s(cases: list[MatrixCase]) -> float:
    """How long ``cases`` may take in one lane: a group's cases run side by side (its longest counts)."""
    groups: dict[tuple[str, int], float] = {}
    alone = 0.0
    for c in cases:
        if groupable(c):
            key = (c.matrix_scenario, c.trial)
            groups[key] = max(groups.get(key, 0.0), c.settings.duration)
        else:
            alone += c.settings.duration
    return alone + sum(groups.values())


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
        # a shared nemesis needs its control inside each group; a workload's own strikes do not
        control = members[0].control_impl if members[0].fault is not None else ""
        subjects = [c for c in members if not (control and c.impl == control)]
        own = [c for c in members if control and c.impl == control]
        size = group_size(item[0])
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
                        template, impl=control, fencing="off", role="control", copy=j + 1,
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


def evidence(case: MatrixCase, result: dict[str, Any]) -> dict[str, Any]:
    """How much the case saw of its scenario's event, and the verdict when it never came.

    ``scenario_events``: events of the scenario's kind in the history (pauses, crashes, fault
    holds, holds past the lease); ``acquisitions_after_event``: acquisitions after the
    event that started the stop rule (0 when fewer events came than the rule asks). A case
    whose event never happened at all (or whose server fault never struck) and found nothing
    wrong proved nothing: its verdict is ``unknown``, with ``verdict_reason`` saying why. A
    case with fewer strikes than asked is graded thin, not unknown. A violation stays a violation.
    """
    import pandas as pd

    rule = StopRule.from_json(case.settings.stop_rule) or StopRule()
    history = pd.read_parquet(result["history_file"])
    start = int(history["t_ns"].min()) if len(history) else 0
    watch = EvidenceWatch(rule, start)
    watch.feed(list(history.itertuples(index=False, name=None)))
    out: dict[str, Any] = {
        "scenario_events": watch.hits,
        "acquisitions_after_event": watch.after if watch.trigger_ns is not None else 0,
    }
    reason = ""
    fault = (result.get("extra") or {}).get("fault") or {}
    if case.fault is not None and fault.get("start_ns") is None:
        reason = f"the {case.fault.kind} fault did not strike" + (
            f": {fault['error']}" if fault.get("error") else ""
        )
    elif watch.hits == 0 and rule.event != "start":
        # fewer strikes than asked is thin evidence (bench/measure/strikes.py), not no evidence
        reason = f"the scenario's event ({rule.event}) never happened"
    row = result["row"]
    already = row.get("verdict") == "unknown" and row.get("verdict_reason")  # e.g. a server died: say that
    if reason and row.get("verdict") != "invalid" and not already:
        out.update({"verdict": "unknown", "verdict_reason": reason})
    return out


class _Shared:
    """What lanes running in threads share: the results folder, the tallies, the stop flag."""

    def __init__(self, folder: RunFolder, console: Console, total: int, caps_s: float = 0.0) -> None:
        self.folder = folder
        self.console = console
        self.total = total
        self.done = 0
        #: the cases' caps (their durations) added up, and those of the finished ones: the time left
        #: is the elapsed time scaled by the share of caps still to run
        self.caps_s = caps_s
        self.caps_done_s = 0.0
        self.started = time.monotonic()
        self.failures: list[str] = []
        self.timings: dict[str, dict[str, Any]] = {}
        self.endpoints: dict[str, Any] = {}
        self.versions: dict[str, str] = {}
        self.cancel = threading.Event()
        #: scenario -> strike series (a group, or a lone case) -> where each strike's time went
        self.cycles: dict[str, dict[str, list[dict[str, float]]]] = {}
        self._lock = threading.Lock()

    def add(self, lane: Lane, case: MatrixCase, result: dict[str, Any]) -> None:
        row = result["row"]
        row.update(evidence(case, result))
        row.update(annotate(row, case.impl, case.matrix_scenario, fenced=case.fencing == "enforce"))
        row["matrix_scenario"] = case.matrix_scenario
        row["backend"] = case.backend
        row["role"] = case.role
        row["control_impl"] = case.control_impl
        row["group_id"] = case.group
        row["group_size"] = (result.get("timing") or {}).get("group", 1)
        t = result.get("timing") or {}
        row["case_wall_s"] = (t["ended_ns"] - t["launched_ns"]) / 1e9 if t.get("ended_ns") else None
        row["locust_shutdown_s"] = (
            (t["exited_ns"] - t["test_stop_ns"]) / 1e9
            if t.get("test_stop_ns") and t.get("exited_ns")
            else None
        )
        row["bench_judge_s"] = (t["ended_ns"] - t["exited_ns"]) / 1e9 if t.get("exited_ns") else None
        row["locust_startup_s"] = (
            (t["test_start_ns"] - t["launched_ns"]) / 1e9
            if t.get("test_start_ns") and t.get("launched_ns")
            else None
        )
        row["observed_outcome"] = observed_outcome(row)
        cycles = ((result.get("extra") or {}).get("fault") or {}).get("cycles") or []
        with self._lock:
            if cycles:  # one series per strike series: the cases of a group share theirs
                self.cycles.setdefault(case.matrix_scenario, {}).setdefault(
                    case.group or case.case_id, cycles
                )
            self.folder.add_case(
                row, result["histograms"], result["history_file"], result["extra"], result.get("log")
            )
            self.done += 1
            self.caps_done_s += case.settings.duration
            if self.cancel.is_set():
                return  # interrupted: the one line about the folder is all that is printed
            flag = "  CONTRADICTS THE CATALOG" if row["contradicts_catalog"] else ""
            # "n/a" means "does not apply" in the grid's legend; here the catalog simply has no entry
            expected = (
                f"expected {row['expected_outcome']}"
                if row["expected_outcome"]
                else "the catalog says nothing"
            )
            self.console.print(
                f"[{self.done}/{self.total}] {lane.name}: {case.impl} x {case.scenario}: "
                f"{row['observed_outcome']} ({expected}){flag} · "
                f"{self.time_left()}",
                markup=False,
            )

    def time_left(self) -> str:
        """``3m10s elapsed, about 9m left``: elapsed time scaled by the caps still to run."""
        elapsed = time.monotonic() - self.started
        text = f"{_clock(elapsed)} elapsed"
        if self.caps_done_s > 0 and self.caps_s > self.caps_done_s:
            text += f", about {_clock(elapsed * (self.caps_s - self.caps_done_s) / self.caps_done_s)} left"
        return text

    def fail(self, message: str) -> None:
        with self._lock:
            self.failures.append(message)
            self.done += 1
            if self.cancel.is_set():
                return
            self.console.print(f"  case failed: {message}", markup=False)


def _launcher(warm: WarmLocust | None) -> Callable[[list[str], Path, float], int]:
    """Start a case's Locust from the warm process, or cold when there is none or it broke."""

    def launch(argv: list[str], log_path: Path, timeout: float) -> int:
        if warm is not None:
            try:
                return warm.run(argv, log_path, timeout)
            except WarmLocustError:
                warm.close()
        return cold_locust(argv, log_path, timeout)

    return launch


class _Launchers:
    """A lane's warm Locust processes: one for its lone cases, as many as its largest group needs.

    Why a context manager: every warm process must end with the lane, whatever ends it.
    """

    def __init__(self, warm: bool) -> None:
        self.warm = warm
        self._pool: list[WarmLocust] = []

    def get(self, n: int) -> list[Callable[[list[str], Path, float], int]]:
        if not self.warm:
            return [_launcher(None) for _ in range(n)]
        while len(self._pool) < n:
            proc = WarmLocust()
            proc.spawn()  # the imports of a whole group overlap
            self._pool.append(proc)
        return [_launcher(p) for p in self._pool[:n]]

    def __enter__(self) -> _Launchers:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._pool:
            proc.close()


def _run_lane(
    lane: Lane,
    shared: _Shared,
    user_urls: dict[str, list[str]],
    resource_url: str | None,
    scratch: Path,
    warm: bool,
) -> None:
    with contextlib.ExitStack() as ctx:
        net = None
        if lane.hosts:  # a partition lane: its servers and clients on test hosts, this thread on "control"
            net = ctx.enter_context(TestHostNet(0))
            ctx.enter_context(net.enter(net.add_host("control")))
        launchers = ctx.enter_context(_Launchers(warm and not lane.hosts))
        _run_lane_cases(lane, shared, user_urls, resource_url, scratch, launchers, net)


def _heal(stack: Stack) -> None:
    """Bring back ensemble members a fault killed, so the lane's next case finds a whole cluster."""
    for server in stack.servers.values():
        if hasattr(server, "heal"):
            server.heal()


def _run_unit(
    unit: list[MatrixCase], stack: Stack, scratch: Path, launchers: _Launchers
) -> list[dict[str, Any] | Exception]:
    if len(unit) == 1 and not unit[0].group:
        try:
            return [run_case(unit[0], stack, scratch, launch=launchers.get(1)[0])]
        except CaseFailed as exc:
            return [exc]
    return run_group(unit, stack, scratch, launchers.get(len(unit)))


def _run_lane_cases(
    lane: Lane,
    shared: _Shared,
    user_urls: dict[str, list[str]],
    resource_url: str | None,
    scratch: Path,
    launchers: _Launchers,
    net: TestHostNet | None = None,
) -> None:
    """Run a lane's cases on servers kept up across them (on test hosts when ``net`` is given).

    A server-fault scenario's cases run as groups under one nemesis (:func:`form_groups`). A
    Sentinel group cannot fail over twice (its old master is gone and nobody is left to
    promote), so a failover lane gets fresh servers for every case or group instead.
    """
    t0 = time.monotonic()
    timing = {
        "cases": 0,
        "groups": 0,
        "wall_s": 0.0,
        "case_s": 0.0,
        "locust_startup_s": 0.0,
        "load_s": 0.0,
        "server_start_s": 0.0,
    }
    shared.timings[lane.name] = timing
    fresh_each = lane.topology == "sentinel"
    stack: Stack | None = None
    try:
        for unit in lane.units or form_groups(lane):
            if shared.cancel.is_set():
                return
            if stack is None:
                t_up = time.monotonic()
                stack = Stack(
                    [lane.backend],
                    user_urls=user_urls,
                    resource_url=resource_url,
                    reuse_infra_up=False,
                    servers_per_backend={lane.backend: lane.servers_needed()},
                    topology={lane.backend: lane.topology} if lane.topology else {},
                    hosts=net,
                ).__enter__()
                timing["server_start_s"] += time.monotonic() - t_up
                shared.endpoints[lane.name] = endpoints_for_meta(stack)
                shared.versions.update({f"{lane.backend} {k}": v for k, v in stack.versions.items()})
            t_unit = time.monotonic()
            results = _run_unit(unit, stack, scratch, launchers)
            # a server that died on its own (the fault thread heals what it broke) makes the case
            # unknown: checked before any heal, which would bring it back and hide it
            dead = [] if fresh_each else stack.dead()
            for case, result in zip(unit, results, strict=True):
                if isinstance(result, Exception):
                    shared.fail(str(result))
                    continue
                if dead:
                    server_died(result["row"], dead)
                shared.add(lane, case, result)
                t = result.get("timing") or {}
                timing["cases"] += 1
                timing["case_s"] += (t["ended_ns"] - t["launched_ns"]) / 1e9
                if t.get("test_start_ns") and t.get("test_stop_ns"):
                    timing["locust_startup_s"] += (t["test_start_ns"] - t["launched_ns"]) / 1e9
                    timing["load_s"] += (t["test_stop_ns"] - t["test_start_ns"]) / 1e9
            timing["unit_s"] = timing.get("unit_s", 0.0) + time.monotonic() - t_unit
            timing["groups"] += 1 if unit[0].group else 0
            if fresh_each:
                stack.close()
                stack = None
                continue
            if not dead:
                _heal(stack)
                dead = stack.dead()
            if dead:
                shared.fail(
                    f"lane {lane.name}: server {', '.join(dead)} died during {unit[0].case_id}; lane stopped"
                )
                return
    finally:
        if stack is not None:
            stack.close()
        timing["wall_s"] = time.monotonic() - t0


def run_lanes(
    lanes: list[Lane],
    shared: _Shared,
    parallel: int,
    user_urls: dict[str, list[str]],
    resource_url: str | None,
    scratch: Path,
    warm: bool = True,
) -> None:
    """Run the lanes, ``parallel`` at a time; Ctrl-C lets each lane finish its current case."""
    pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="lane")
    futures = [pool.submit(_run_lane, lane, shared, user_urls, resource_url, scratch, warm) for lane in lanes]
    try:
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        for future in done:
            future.result()
    except BaseException:
        shared.cancel.set()
        for future in futures:
            future.cancel()
        raise
    finally:
        pool.shutdown(wait=True)


def matrix_command(
    *,
    backends: list[str],
    impls: list[str],
    scenarios: list[str],
    parallel: int | None,
    user_urls: dict[str, list[str]],
    resource_url: str | None,
    results_dir: Path,
    warm: bool = True,
    render: bool,
    shard: Shard | None = None,
    argv: list[str],
    console: Console,
    slo_us: float | None = None,
    evidence: str = "standard",
    strikes: int | None = None,
) -> int:
    """Run the safety matrix; returns the exit code (0 ok, 1 a case could not run, 130 interrupted).

    ``evidence`` names the target a survived cell needs (bench/measure/strikes.py LEVELS);
    ``strikes`` runs that many strikes per cell instead of the target's k.
    """
    lanes_why = "given"
    if parallel is None:
        parallel, lanes_why = auto_lanes()
    if parallel < 1:
        raise UserError(f"--parallel must be at least 1, got {parallel}")
    _check_user_dsns(user_urls)
    fixed = {b for b, urls in user_urls.items() if urls}
    if evidence not in LEVELS:
        raise UserError(f"--evidence must be one of {', '.join(LEVELS)}, got {evidence!r}")
    target = LEVELS[evidence]
    level = EvidenceTarget(strikes, target.acquisitions) if strikes else target
    not_run: list[dict[str, str]] = []
    cases, skipped = plan_matrix(
        backends, impls, scenarios, fixed, level=level, target=target, not_run=not_run
    )
    sized = scenarios_at(level)
    for line in skipped:
        console.print(f"lockbench: skipping {line}", markup=False)
    lanes = plan_lanes(cases, fixed)
    for lane in lanes:
        lane.units = form_groups(lane)
    whole = [c for lane in lanes for unit in lane.units for c in unit]
    plan = [c.case_id for c in whole]
    if shard is not None:
        mine = deal(lanes, shard.of)[shard.index - 1]
        lanes = [ln for ln in lanes if ln in mine]
    cases = [c for lane in lanes for unit in lane.units for c in unit]
    load_start = _load_average()
    if resource_url:
        parallel = 1  # every lane would share the user's resource server
    planned = {c.matrix_scenario for c in whole} | {n["scenario"] for n in not_run}
    used = [name for name in sized if name in planned]  # the scenario table's order: the grid's columns
    params = {
        "scenarios": {
            name: {
                "workload": sized[name].workload, "fault": sized[name].fault or "",
                "summary": sized[name].summary, "stop": sized[name].stop.to_json(),
                "settings": sized[name].settings, "options": sized[name].options,
                "trials": sized[name].trials(level), "target": sized[name].target(target).text(),
            }
            for name in used
        },
        "users": USERS, "parallel": parallel, "lanes_why": lanes_why, "lanes": len(lanes), "warm_locust": warm,
        "shard": (
            {"index": shard.index, "of": shard.of, "lanes": [ln.name for ln in lanes], "plan": plan}
            if shard is not None else None
        ),
        "evidence": evidence, "strikes": level.strikes, "evidence_target": target.text(),
        "impls": list(dict.fromkeys(c.impl for c in whole if c.role == "subject")), "not_run": not_run,
    }  # fmt: skip
    started = datetime.now(UTC).isoformat()
    folder = RunFolder(
        results_dir,
        {
            "kind": "matrix",
            "started_at": started,
            "command": redact_text(" ".join(["bench", *argv[1:]])),
            "git_commit": meta.git_commit(),
            "host": meta.host_info(),
            "versions": {"libraries": meta.library_versions()},
            "params": params,
            "impls": list(dict.fromkeys(c.impl for c in whole if c.role == "subject")),
            "endpoints": {},
        },
    )
    slice_ = f" (shard {shard.text}: {len(cases)} of {len(plan)} cases)" if shard is not None else ""
    try:  # a signal from here on finds run.json saying so, never 'running'
        console.print(
            f"lockbench: matrix of {len(cases)} cases ({len(used)} scenarios) in {len(lanes)} lanes{slice_}, "
            f"{parallel} side by side ({lanes_why}); results in {folder.path}",
            markup=False,
        )
        shared = _Shared(folder, console, len(cases), sum(c.settings.duration for c in cases))
    except BaseException:
        folder.finish("incomplete")
        raise
    status = "complete"
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="lockbench-matrix-") as tmp:
            run_lanes(lanes, shared, parallel, user_urls, resource_url, Path(tmp), warm)
    except KeyboardInterrupt:
        status = "incomplete"  # one line, from main(), once the folder is consistent; nothing rendered
    except BaseException as exc:  # a lane could not start (a server missing and not installable ...)
        status = "failed"  # never 'complete' with cases missing
        shared.failures.append(f"matrix stopped: {' '.join(str(exc).split())}")
        raise
    finally:
        wall = time.monotonic() - t0
        if status == "complete" and shared.failures:
            status = "complete-with-failures"
        if shared.failures:
            folder.note("failures", shared.failures)
        if status in ("failed", "incomplete"):  # the grid and report name every planned case that did not run
            ran = {str(r.get("case")) for r in folder.rows}
            why = "interrupted" if status == "incomplete" else shared.failures[-1]
            folder.meta["params"]["not_run"] = not_run + [
                {"impl": c.impl, "scenario": c.matrix_scenario, "word": "not run", "reason": why}
                for c in cases
                if c.case_id not in ran
            ]
        folder.note("matrix", {**timing_summary(shared.timings, wall, parallel),
                               "load_average": {"start": load_start, "end": _load_average()},
                               "strike_cycles": strike_cycles(shared.cycles)})  # fmt: skip
        folder.note("endpoints", shared.endpoints)
        folder.note("versions", {"servers": shared.versions, "libraries": meta.library_versions()})
        folder.finish(status)
    if status == "incomplete":
        raise Interrupted(
            f"interrupted; finished cases in {folder.path} ({len(folder.rows)} of {len(cases)} finished; "
            f"render them with: bench report {folder.path})"
        )
    # planned cases that never ran (a lane stopped after a server died) are "not run", never n/a
    ran = {str(r.get("case")) for r in folder.rows}
    reason = "; ".join(shared.failures) or "its lane stopped"
    for c in cases:
        if c.case_id not in ran and not any(
            n["impl"] == c.impl and n["scenario"] == c.matrix_scenario for n in not_run
        ):
            not_run.append(
                {"impl": c.impl, "scenario": c.matrix_scenario, "word": "not run", "reason": reason}
            )
    folder.meta["params"]["not_run"] = not_run
    folder.meta["params"]["controls"] = controls.annotate(folder.rows)
    folder.rewrite_rows()
    contradictions = print_summary(folder.rows, console, not_run)
    folder.note("contradictions", contradictions)
    if folder.rows:
        atomic_write_text(folder.path / "matrix.md", markdown_table(folder.rows, not_run))
    timing = folder.meta["matrix"]
    console.print(
        f"lockbench: matrix wall time {timing['wall_s']:.0f} s; Locust start-up took "
        f"{timing['locust_startup_share']:.0%} of the case time",
        markup=False,
    )
    report_path = folder.path / "report.html"
    if render and folder.rows:
        from dashboards import render_report

        report_path = render_report([folder.path], slo_us=slo_us)
    print(report_path if render and folder.rows else folder.path)
    if status == "incomplete":
        return 130
    open_cells = undecided(folder.rows, not_run)
    folder.note("undecided", open_cells)
    for line in open_cells[:40]:
        console.print(f"  undecided: {line}", markup=False)
    if len(open_cells) > 40:
        console.print(f"  ... and {len(open_cells) - 40} more (run.json 'undecided')", markup=False)
    stopped = [f"{n['impl']} x {n['scenario']}" for n in not_run if n.get("word") == "not run"]
    if shared.failures or open_cells or contradictions:  # the last line says why the exit is 1
        parts = [f"{len(open_cells)} cell(s) undecided", f"{len(contradictions)} contradicting the catalog"]
        if shared.failures:
            names = ", ".join(stopped[:5]) + (f" (+{len(stopped) - 5} more)" if len(stopped) > 5 else "")
            parts.insert(0, f"{len(shared.failures)} failure(s), cases that could not run: {names or 'none'} "
                         f"({' '.join(shared.failures[0].split())})")  # fmt: skip
        console.print(f"lockbench: exit 1: {'; '.join(parts)}", markup=False, soft_wrap=True)
    return 1 if shared.failures or open_cells or contradictions else 0
