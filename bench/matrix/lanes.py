"""Running the matrix's lanes: each lane's servers, its units (lone cases and groups), the tallies.

A lane owns its servers (lock servers and resource Redis), keeps them up across its units and
clears lock state between them; ``run_lanes`` runs ``--lanes`` of them side by side, and
``Shared`` is what they share: the results folder, the tallies and the stop flag.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.matrix.admission import Admission, limits
from bench.matrix.expectations import annotate, observed_outcome
from bench.matrix.plan import Lane, MatrixCase, form_groups
from bench.matrix.rerun import rerun_reason, settle
from bench.matrix.shards import start_order
from bench.measure.evidence import server_died
from bench.results.folder import ResultsWriteError, RunFolder
from bench.run.case import CaseFailed
from bench.run.group import GroupLaunch, run_group, shares_a_process
from bench.run.locust import run_locust as cold_locust
from bench.run.runner import endpoints_for_meta, run_case
from bench.run.warm import WarmLocust, WarmLocustError
from infra.errors import InfraError
from infra.stack import Stack
from infra.testhosts import TestHostNet
from workloads.checks.stop_rules import EvidenceWatch, StopRule
from workloads.harness.priority import shared_nice

#: A lane whose servers died or did not start gets fresh ones this many times before it stops.
MAX_LANE_RESTARTS = 1
#: Where a matrix keeps its servers' logs: ``logs/servers/<lane>/<server>.log`` in the results folder.
SERVER_LOGS = Path("logs") / "servers"  # resultsio.schema.SERVER_LOGS (not imported: pandera costs 0.6 s)


def lane_log_dir(folder: Path, lane: Lane) -> Path:
    """The folder a lane's server logs are kept in (``#`` of a lane's name is no character for a path)."""
    return folder / SERVER_LOGS / lane.name.replace("#", "-").replace("/", "-")


def lost_row(case: MatrixCase, reason: str) -> dict[str, Any]:
    """The row of a case that could not run or finish (its servers did not start, or died, or its
    Locust failed): verdict ``unknown`` with the reason, every column a real row has that says what
    the case was, and zero for the counts nothing was there to count (none is a finding)."""
    from resultsio.schema import COLUMNS, VIOLATION_COLUMNS

    row: dict[str, Any] = {
        "case": case.case_id, "impl": case.impl, "backend": case.backend, "workload": case.workload.name,
        "scenario": case.scenario, "fencing": case.fencing, "fault": case.fault.label if case.fault else "",
        "trial": case.trial, "users": case.settings.users, "processes": case.settings.processes,
        "duration_s": 0.0, "throughput_acq_s": 0.0, "acquisitions": 0, "acquire_timeouts": 0,
        "acquire_unknown": 0, "releases_not_owned": 0, "purchases": 0, "units_sold": 0,
        "verdict": "unknown", "verdict_reason": reason, "evidence": "unknown",
    }  # fmt: skip
    row.update({name: 0 for name in VIOLATION_COLUMNS})
    # and every other count a row must have (resultsio's schema: a column that may not be empty)
    for name, column in COLUMNS.items():
        if not column.regex and not column.nullable and name not in row:
            row[name] = 0
    return row


def strike_cycles(cycles: dict[str, dict[str, list[dict[str, float]]]]) -> dict[str, dict[str, Any]]:
    """Per scenario: strikes, strike series, and the mean seconds of each part of a strike's cycle.

    claim (arming until the holders claimed), strike (the action), service back (from the action's
    start), holder wait (the holder kept its lock after the action), heal and grants (before the
    next strike: the heal, and the purchases the service had to grant, side by side since round 6;
    ``between_s`` is their wall time), and their sum per strike.
    """
    out: dict[str, dict[str, Any]] = {}
    for scenario, series in cycles.items():
        every = [c for strikes_ in series.values() for c in strikes_]
        if not every:
            continue
        parts = ("claim_s", "strike_s", "service_back_s", "holder_wait_s", "heal_s", "grants_s", "between_s")
        mean = {p: round(sum(c.get(p, 0.0) for c in every) / len(every), 3) for p in parts}
        # heal and grants overlap: their wall time is between_s (older cycles: their sum)
        between = sum(c.get("between_s", c.get("heal_s", 0.0) + c.get("grants_s", 0.0)) for c in every)
        per = mean["claim_s"] + mean["strike_s"] + mean["holder_wait_s"] + between / len(every)
        out[scenario] = {
            "strikes": len(every),
            "series": len(series),
            "mean": mean,
            "per_strike_s": round(per, 3),
        }
    return out


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


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


#: The time left is first estimated once this share of the cases' caps has run.
ETA_AFTER = 0.05


class Shared:
    """What lanes running in threads share: the results folder, the tallies, the stop flag."""

    def __init__(
        self,
        folder: RunFolder,
        console: Console,
        total: int,
        caps_s: float = 0.0,
        slots: int = 1,
        nice: int | None = None,
        realtime: bool = False,
    ) -> None:
        self.folder = folder
        #: the nice value of every case's Locust session (machine.py generator_priority); None: not
        #: raised. A raised case's Locust also goes real-time where the kernel lets it (priority.py).
        self.nice = nice
        self.console = console
        self.total = total
        self.done = 0
        #: the cases' caps (their durations) added up, and those of the finished ones: the time left
        #: is the elapsed time scaled by the share of caps still to run
        self.caps_s = caps_s
        self.caps_done_s = 0.0
        self.started = time.monotonic()
        self.failures: list[str] = []
        #: "impl x scenario" of every case recorded unknown because it got no result (shared.lose)
        self.lost: list[str] = []
        #: what went wrong without costing a case (a start that failed, then worked on fresh servers)
        self.incidents: list[str] = []
        self.timings: dict[str, dict[str, Any]] = {}
        self.endpoints: dict[str, Any] = {}
        self.versions: dict[str, str] = {}
        self.cancel = threading.Event()
        #: scenario -> strike series (a group, or a lone case) -> where each strike's time went
        self.cycles: dict[str, dict[str, list[dict[str, float]]]] = {}
        #: the lane slots the running units take, by the rule for generators real-time or not (admission.py)
        max_heavy, beside_heavy, alone_as_heavy = limits(realtime)
        self.admission = Admission(slots, max_heavy, beside_heavy, alone_as_heavy=alone_as_heavy)
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

    def lose(self, lane: Lane, case: MatrixCase, reason: str, log: str | None = None) -> None:
        """Record a case that got no result as ``unknown`` with ``reason`` (a row like any other).

        ``log``: its Locust output where one exists (a case whose buyers never started twice),
        kept as ``logs/<case>.log`` like a finished case's.
        """
        from workloads.harness.recording import history_frame

        reason = " ".join(reason.split())
        row = lost_row(case, reason)
        row.update(annotate(row, case.impl, case.matrix_scenario, fenced=case.fencing == "enforce"))
        row.update({"matrix_scenario": case.matrix_scenario, "role": case.role, "control_impl": case.control_impl,
                    "group_id": case.group, "group_size": 0})  # fmt: skip
        row["observed_outcome"] = observed_outcome(row)
        with self._lock:
            self.failures.append(f"{case.case_id}: {reason}")
            self.lost.append(f"{case.impl} x {case.scenario}")
            # an empty history and no histograms: every row of a folder rests on its files (resultsio)
            empty = Path(self.folder.path) / "history" / f".{case.case_id}.empty.parquet"
            try:
                history_frame([]).to_parquet(empty, index=False)
                self.folder.add_case(row, {}, empty, {"lost": reason}, log)
            finally:
                empty.unlink(missing_ok=True)
            self.done += 1
            self.caps_done_s += case.settings.duration
            if self.cancel.is_set():
                return
            self.console.print(
                f"[{self.done}/{self.total}] {lane.name}: {case.impl} x {case.scenario}: unknown ({reason}) · "
                f"{self.time_left()}",
                markup=False,
                soft_wrap=True,
            )

    def time_left(self) -> str:
        """``3m10s elapsed, about 9m left``: elapsed time scaled by the caps still to run."""
        elapsed = time.monotonic() - self.started
        text = f"{_clock(elapsed)} elapsed"
        if self.caps_done_s < ETA_AFTER * self.caps_s:
            # a few short cases say little about the rest (round 4 opened with "about 28m30s left" for a
            # run that took 5m40s): no estimate before a twentieth of the caps has run
            return text + ", estimating the time left" if self.caps_s else text
        if self.caps_s > self.caps_done_s:
            text += f", about {_clock(elapsed * (self.caps_s - self.caps_done_s) / self.caps_done_s)} left"
        return text

    def fail(self, message: str) -> None:
        """A lane's failure that is not one case's (its servers died): in run.json ``failures``, printed."""
        with self._lock:
            self.failures.append(message)
            if self.cancel.is_set():
                return
            self.console.print(f"  failed: {message}", markup=False, soft_wrap=True)

    def incident(self, message: str) -> None:
        """Something went wrong and cost no case (a start that failed once, then worked): run.json ``incidents``."""
        with self._lock:
            self.incidents.append(message)
            if self.cancel.is_set():
                return
            self.console.print(f"  note: {message}", markup=False, soft_wrap=True)

    def recorded(self) -> set[str]:
        """Case ids that have a row already."""
        with self._lock:
            return {str(r.get("case")) for r in self.folder.rows}


def _launcher(warm: WarmLocust | None, nice: int | None) -> Callable[[list[str], Path, float], int]:
    """Start a case's Locust from the warm process, or cold when there is none or it broke."""

    def launch(argv: list[str], log_path: Path, timeout: float) -> int:
        if warm is not None:
            try:
                return warm.run(argv, log_path, timeout)
            except WarmLocustError:
                warm.close()
        return cold_locust(argv, log_path, timeout, nice=nice)

    return launch


class _Launchers:
    """A lane's warm Locust processes: one for its lone cases, as many as its largest group needs.

    Why a context manager: every warm process must end with the lane, whatever ends it.
    """

    def __init__(self, warm: bool, nice: int | None = None) -> None:
        self.warm = warm
        self.nice = nice
        self._pool: list[WarmLocust] = []

    def get(self, n: int) -> list[Callable[[list[str], Path, float], int]]:
        if not self.warm:
            return [_launcher(None, self.nice) for _ in range(n)]
        while len(self._pool) < n:
            proc = WarmLocust(self.nice)
            proc.spawn()  # the imports of a whole group overlap
            self._pool.append(proc)
        return [_launcher(p, self.nice) for p in self._pool[:n]]

    def in_one(self) -> GroupLaunch:
        """Run a group's cases in one Locust process: forked from the lane's first warm process, or cold."""
        warm = None
        if self.warm:
            if not self._pool:
                self._pool.append(WarmLocust(self.nice))
            warm = self._pool[0]
        base = self.nice

        def launch(argvs: list[list[str]], log_path: Path, timeout: float) -> int:
            # the one process weighs in the CPU queue as the sessions of its cases would have
            nice = None if base is None else shared_nice(base, len(argvs))
            if warm is not None:
                try:
                    return warm.run_group(argvs, log_path, timeout, nice)
                except WarmLocustError:
                    warm.close()
            spec = log_path.with_suffix(".argv.json")
            spec.write_text(json.dumps([argv[3:] for argv in argvs]))
            cold = [sys.executable, "-m", "workloads.harness.group_locust", str(spec)]
            return cold_locust(cold, log_path, timeout, nice=nice)

        return launch

    def __enter__(self) -> _Launchers:
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._pool:
            proc.close()


def _run_lane(
    lane: Lane,
    shared: Shared,
    user_urls: dict[str, list[str]],
    resource_url: str | None,
    scratch: Path,
    warm: bool,
) -> None:
    try:
        with contextlib.ExitStack() as ctx:
            net = None
            if (
                lane.hosts
            ):  # a partition lane: its servers and clients on test hosts, this thread on "control"
                net = ctx.enter_context(TestHostNet(0))
                ctx.enter_context(net.enter(net.add_host("control")))
            launchers = ctx.enter_context(
                _Launchers(warm, shared.nice)
            )  # on test hosts too: workers fork, then enter their hosts
            _LaneRun(lane, shared, user_urls, resource_url, scratch, launchers, net).run()
    except ResultsWriteError:
        raise  # the folder cannot take a row: nothing to go on with
    except Exception as exc:  # noqa: BLE001 - whatever broke this lane costs its own cases, not the matrix's
        if shared.cancel.is_set():
            raise
        what = str(exc) if isinstance(exc, InfraError) else f"{type(exc).__name__}: {exc}"
        _lose_rest(lane, shared, lane.units or form_groups(lane), f"lane {lane.name} stopped: {what}")


def _lose_rest(lane: Lane, shared: Shared, units: list[list[MatrixCase]], reason: str) -> None:
    """Every case of ``units`` without a row yet becomes an ``unknown`` row with ``reason``."""
    have = shared.recorded()
    for unit in units:
        for case in unit:
            if case.case_id not in have and not shared.cancel.is_set():
                shared.lose(lane, case, reason)


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
    if shares_a_process(unit):
        return run_group(unit, stack, scratch, [], in_one=launchers.in_one())
    return run_group(unit, stack, scratch, launchers.get(len(unit)))


class _LaneRun:
    """One lane's cases on servers kept up across them (on test hosts when ``net`` is given).

    A server-fault scenario's cases run as groups under one nemesis (:func:`form_groups`). A
    Sentinel group cannot fail over twice (its old master is gone and nobody is left to
    promote), so a failover lane gets fresh servers for every case or group instead.

    A start that fails or a server that dies costs only the cases it serves: their rows are
    ``unknown`` with the reason, naming the server's log as kept in the results folder
    (``logs/servers/<lane>/``); the lane tries once more with fresh servers on fresh ports and,
    when that fails too, records its remaining cases as ``unknown`` and stops. Other lanes go on.
    A case whose buyers never started, or whose failure a stall could explain, runs once more
    before anything is recorded (bench/matrix/rerun.py).
    """

    def __init__(
        self,
        lane: Lane,
        shared: Shared,
        user_urls: dict[str, list[str]],
        resource_url: str | None,
        scratch: Path,
        launchers: _Launchers,
        net: TestHostNet | None = None,
    ) -> None:
        self.lane, self.shared, self.user_urls, self.resource_url = lane, shared, user_urls, resource_url
        self.scratch, self.launchers, self.net = scratch, launchers, net
        self.timing: dict[str, Any] = {
            "cases": 0, "groups": 0, "reruns": 0, "wall_s": 0.0, "case_s": 0.0, "locust_startup_s": 0.0,
            "load_s": 0.0, "server_start_s": 0.0,
        }  # fmt: skip
        shared.timings[lane.name] = self.timing
        self.fresh_each = lane.topology == "sentinel"
        self.logs = lane_log_dir(shared.folder.path, lane)
        #: the units not run yet, in the lane's order (a unit that does not fit now waits its turn)
        self.pending = list(lane.units or form_groups(lane))
        self.stack: Stack | None = None
        self.restarts = 0

    def run(self) -> None:
        t0 = time.monotonic()
        admission = self.shared.admission
        try:
            while self.pending:
                if self.shared.cancel.is_set():
                    return
                if self.stack is None and not self._start():
                    return
                # the first unit of the lane's that fits beside what the other lanes run now
                at = admission.take(self.pending, self.shared.cancel)
                if at is None:
                    return
                unit = self.pending.pop(at)
                try:
                    going_on = self._unit(unit)
                finally:
                    admission.give_back(unit)
                if not going_on:
                    return
        finally:
            if self.stack is not None:
                self.stack.close()
            self.timing["wall_s"] = time.monotonic() - t0

    def _start(self) -> bool:
        """Start the lane's servers, a second time on fresh ports if the first start failed.

        False when they could not be started: the lane's remaining cases are then lost.
        """
        lane = self.lane
        while True:
            t_up = time.monotonic()
            try:
                self.stack = Stack(
                    [lane.backend],
                    user_urls=self.user_urls,
                    resource_url=self.resource_url,
                    reuse_infra_up=False,
                    servers_per_backend={lane.backend: lane.servers_needed()},
                    topology={lane.backend: lane.topology} if lane.topology else {},
                    hosts=self.net,
                    keep_logs=self.logs,
                ).__enter__()
                break
            except InfraError as exc:
                self.restarts += 1
                what = f"lane {lane.name}: its servers did not start: {' '.join(str(exc).split())}"
                if self.user_urls.get(lane.backend) or self.restarts > MAX_LANE_RESTARTS:
                    _lose_rest(lane, self.shared, self.pending, what)
                    return False
                self.shared.incident(f"{what}; trying once more with fresh servers on fresh ports")
            finally:
                self.timing["server_start_s"] += time.monotonic() - t_up
        self.shared.endpoints[lane.name] = endpoints_for_meta(self.stack)
        self.shared.versions.update({f"{lane.backend} {k}": v for k, v in self.stack.versions.items()})
        return True

    def _dead(self) -> list[str]:
        # a server that died on its own (the fault thread heals what it broke) makes the case
        # unknown: checked before any heal, which would bring it back and hide it
        assert self.stack is not None
        return [] if self.fresh_each else self.stack.dead()

    def _attempt(self, unit: list[MatrixCase]) -> tuple[list[dict[str, Any] | Exception], list[str]]:
        """Run ``unit`` and, once, the cases of it whose answer was the harness's (rerun.py)."""
        assert self.stack is not None
        results = _run_unit(unit, self.stack, self.scratch, self.launchers)
        dead = self._dead()
        again = {i: why for i, r in enumerate(results) if (why := rerun_reason(r))}
        if not again or dead or self.shared.cancel.is_set():
            return results, dead
        self.timing["reruns"] += len(again)
        self.shared.incident(
            f"lane {self.lane.name}: running once more: "
            + "; ".join(f"{unit[i].case_id} ({why})" for i, why in again.items())
        )
        if not self.fresh_each:
            _heal(self.stack)
        second = _run_unit([unit[i] for i in again], self.stack, self.scratch, self.launchers)
        for (i, why), result in zip(again.items(), second, strict=True):
            before = results[i]
            results[i] = settle(why, result, before.get("log") if isinstance(before, dict) else None)
        return results, self._dead()

    def _unit(self, unit: list[MatrixCase]) -> bool:
        """Run one unit, record its cases, get the lane ready for the next; False when the lane stops."""
        assert self.stack is not None
        t_unit = time.monotonic()
        results, dead = self._attempt(unit)
        where = _kept_logs(self.stack.keep_logs(dead, why="died")) if dead else f" (server logs: {self.logs})"
        for case, result in zip(unit, results, strict=True):
            self._record(case, result, dead, where)
        self.timing["unit_s"] = self.timing.get("unit_s", 0.0) + time.monotonic() - t_unit
        self.timing["groups"] += 1 if unit[0].group else 0
        if self.fresh_each:
            self.stack.close()
            self.stack = None
            return True
        if not dead:
            try:
                _heal(self.stack)
            except InfraError as exc:  # a member that does not come back: as good as dead
                self.shared.fail(
                    f"lane {self.lane.name}: heal after {unit[0].case_id} failed: "
                    f"{self.stack.naming_logs(str(exc))}"
                )
                dead = ["(heal)"]
            dead = list(self.stack.dead()) or dead
            if dead:
                live = [d for d in dead if d in self.stack.servers]
                where = _kept_logs(self.stack.keep_logs(live, why="died"))
        return not dead or self._after_death(unit, dead, where)

    def _record(
        self, case: MatrixCase, result: dict[str, Any] | Exception, dead: list[str], where: str
    ) -> None:
        assert self.stack is not None
        if isinstance(result, Exception):
            # a ServerDied names the kept log itself (runner.dead_servers_text); a failed
            # restart names the server's log in the scratch folder: the kept copy instead
            said = self.stack.naming_logs(str(result))
            log = result.log if isinstance(result, CaseFailed) else None
            self.shared.lose(self.lane, case, said if str(self.logs) in said else f"{said}{where}", log)
            return
        row = result["row"]
        if isinstance(row.get("verdict_reason"), str):
            row["verdict_reason"] = self.stack.naming_logs(row["verdict_reason"])
        if dead:
            server_died(row, dead)
            if row.get("verdict") == "unknown":
                row["verdict_reason"] = f"{row['verdict_reason']}{where}"
        self.shared.add(self.lane, case, result)
        t = result.get("timing") or {}
        self.timing["cases"] += 1
        self.timing["case_s"] += (t["ended_ns"] - t["launched_ns"]) / 1e9
        if t.get("test_start_ns") and t.get("test_stop_ns"):
            self.timing["locust_startup_s"] += (t["test_start_ns"] - t["launched_ns"]) / 1e9
            self.timing["load_s"] += (t["test_stop_ns"] - t["test_start_ns"]) / 1e9

    def _after_death(self, unit: list[MatrixCase], dead: list[str], where: str) -> bool:
        """Fresh servers for the lane's next case after a death; False when the lane stops.

        A nightly matrix should not lose a lane's later cases to one death: its cases are marked
        (unknown, server died), the lane gets fresh servers and goes on, unless the servers are
        the user's own or they died before (twice is a pattern).
        """
        assert self.stack is not None
        lane = self.lane
        self.restarts += 1
        what = f"lane {lane.name}: server {', '.join(dead)} died during {unit[0].case_id}{where}"
        self.stack.close()
        self.stack = None
        if self.user_urls.get(lane.backend) or self.restarts > MAX_LANE_RESTARTS:
            self.shared.fail(f"{what}; lane stopped")
            _lose_rest(lane, self.shared, self.pending, f"{what}; lane stopped (fresh servers failed before)")
            return False
        if self.pending:
            self.shared.fail(f"{what}; the lane's servers were started afresh for its next case")
        else:
            self.shared.fail(what)
        return True


def _kept_logs(kept: dict[str, Path]) -> str:
    """`` (log: results/<run>/logs/servers/<lane>/redis-lock.died-1.log)``: where the dead servers' logs are."""
    return f" (log: {', '.join(str(p) for p in kept.values())})" if kept else ""


def run_lanes(
    lanes: list[Lane],
    shared: Shared,
    parallel: int,
    user_urls: dict[str, list[str]],
    resource_url: str | None,
    scratch: Path,
    warm: bool = True,
) -> None:
    """Run the lanes, ``parallel`` at a time, most slot-seconds first (bench/matrix/shards.py
    :func:`~bench.matrix.shards.start_order`); Ctrl-C lets each lane finish its current case."""
    pool = ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="lane")
    futures = [
        pool.submit(_run_lane, lane, shared, user_urls, resource_url, scratch, warm)
        for lane in start_order(lanes)
    ]
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
