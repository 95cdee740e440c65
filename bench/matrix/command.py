"""``bench matrix``: every selected impl under every safety scenario, one folder, one report.

The scenarios are the rows of ``bench/nemesis/scenarios.py``; what the catalog expects of each
impl in each is ``bench/matrix/expectations.py``. Three things keep the whole matrix short:

* every case ends once its event happened and its checker has the evidence
  (``workloads/checks/stop_rules.py``), not after a fixed duration;
* cases run in *lanes*: a lane is a group of cases of one backend and topology with its own
  servers (lock servers and resource Redis), kept up across its cases and reset between
  them (``bench/run/reset.py``);
* lanes share no server, so ``--lanes`` of them run side by side (why that is sound:
  docs/architecture.md, "The safety matrix"), and within a lane the cases of one scenario run
  side by side as a group, under one nemesis for a server fault (bench/run/group.py).

This module is the command's outline: plan (bench/matrix/plan.py), open the folder, run the
lanes (bench/matrix/lanes.py), then judge the whole (controls, undecided cells,
contradictions) and say it (bench/matrix/tables.py).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.errors import Interrupted, UserError, raise_if_interrupted
from bench.matrix import controls
from bench.matrix.lanes import Shared, run_lanes, strike_cycles
from bench.matrix.machine import (
    GeneratorPriority,
    auto_lanes,
    busy_cores,
    cpu_ticks,
    generator_priority,
    load_average,
    steal_cores,
)
from bench.matrix.plan import Lane, MatrixCase, form_groups, plan_lanes, plan_matrix
from bench.matrix.request import MatrixRequest
from bench.matrix.shards import Shard, deal
from bench.matrix.tables import markdown_table, occupancy_words, print_summary, timing_summary, undecided
from bench.measure.strikes import LEVELS, EvidenceTarget
from bench.nemesis.scenarios import USERS, scenarios_at
from bench.results import meta
from bench.results.folder import RunFolder, atomic_write_text
from bench.results.redact import redact_text
from bench.run import clock_watch
from bench.run.command import check_user_servers, plan_impls, refuse_before_start
from bench.run.request import from_text, with_source
from infra import install_all
from infra.process import ServerProcess, on_every_start
from workloads.harness.priority import raise_priority, raise_realtime


def matrix_command(request: MatrixRequest, console: Console) -> int:
    """Run the safety matrix; returns the exit code (0 every cell decided, 1 not, 130 interrupted).

    ``request.evidence`` names the target a survived cell needs (bench/measure/strikes.py LEVELS);
    ``request.strikes`` runs that many strikes per cell instead of the target's k.
    """
    try:
        plan, parallel, lanes_why, priority = _plan(request, console)
    except UserError as exc:  # name where the refused value came from (flag, variable, pyproject)
        raise UserError(with_source(str(exc), request.sources)) from None
    folder = _open_folder(request, plan, parallel, lanes_why, priority)
    shard = request.shard
    slice_ = f" (shard {shard.text}: {len(plan.cases)} of {len(plan.ids)} cases)" if shard is not None else ""
    try:  # a signal from here on finds run.json saying so, never 'running'
        console.print(
            f"lockbench: matrix of {len(plan.cases)} cases ({len(plan.used)} scenarios) in {len(plan.lanes)} "
            f"lanes{slice_}, {parallel} side by side ({lanes_why}); results in {folder.path}",
            markup=False,
        )
        shared = Shared(
            folder,
            console,
            len(plan.cases),
            sum(c.settings.duration for c in plan.cases),
            parallel,
            priority.nice,
            priority.realtime,
        )
    except KeyboardInterrupt:
        folder.finish("incomplete")
        raise Interrupted(
            f"interrupted; nothing finished in {folder.path} (0 of {len(plan.cases)} cases); "
            f"run the matrix again (the folder can be removed)"
        ) from None
    except BaseException:
        folder.finish("incomplete")
        raise
    with contextlib.ExitStack() as raised:
        if priority.nice is not None:  # servers as high as the cases' Locust: neither starves the other
            raised.enter_context(on_every_start(lambda server: _raise_server(server, priority)))
        status = _run(plan, folder, shared, parallel, request)
    if status == "incomplete":
        raise Interrupted(
            f"interrupted; finished cases in {folder.path} ({len(folder.rows)} of {len(plan.cases)} finished; "
            f"render them with: bench report {folder.path})"
        )
    try:
        return _judge_whole(plan, folder, shared, console, request.render, request.slo_us)
    except KeyboardInterrupt:
        # every case is in the folder and run.json says how the lanes ended; what is missing is the
        # judging of the whole (controls, matrix.md) and the report, which bench report makes
        raise Interrupted(
            f"interrupted; every case is in {folder.path} (report.html not written: run `bench report {folder.path}`)"
        ) from None


def _raise_server(server: ServerProcess, priority: GeneratorPriority) -> None:
    """A server as high as the cases' Locust, so that neither starves the other: at their nice, and
    real-time beside them where its threads allow (``ServerProcess.realtime``)."""
    if server.pid is None or priority.nice is None:  # the hook is only set with a nice value
        return
    raise_priority(server.pid, priority.nice)
    if priority.realtime and server.realtime:
        raise_realtime(server.pid)


def _plan(request: MatrixRequest, console: Console) -> tuple[_Plan, int, str, GeneratorPriority]:
    """The plan, the lanes side by side and why, where the cases' Locust stands in the CPU queue;
    everything that can refuse the matrix, before it starts."""
    priority = generator_priority()
    parallel, lanes_why = request.parallel, "given"
    if parallel is None:
        parallel, lanes_why = auto_lanes(lane_cpu=priority.lane_cpu)
    lanes_why = f"{lanes_why}; {priority.why}"
    if parallel < 1:
        raise UserError(f"--lanes must be at least 1, got {parallel}{from_text(request.sources, 'lanes')}")
    if request.evidence not in LEVELS:
        raise UserError(
            f"--evidence must be one of {', '.join(LEVELS)}, got {request.evidence!r}"
            f"{from_text(request.sources, 'evidence')}"
        )
    user_urls = dict(request.user_urls)
    check_user_servers(user_urls, plan_impls(request.backends, request.impls), request.impls)
    if request.resource_url:
        parallel = 1  # every lane would share the user's resource server
    plan = _Plan.make(request, LEVELS[request.evidence], console)
    # a server the user named that nobody answers at is bad input: one line and exit 2 before any case,
    # never a lane lost after others ran (a lane's own servers that fail cost only its cases)
    refuse_before_start(
        list(dict.fromkeys(lane.backend for lane in plan.lanes)), user_urls, request.resource_url
    )
    # what the lanes need, installed once before they start side by side (parallel apt-get races on dpkg)
    install_all.ensure(lane.backend for lane in plan.lanes if not user_urls.get(lane.backend))
    return plan, parallel, lanes_why, priority


def _open_folder(
    request: MatrixRequest, plan: _Plan, parallel: int, lanes_why: str, priority: GeneratorPriority
) -> RunFolder:
    """The matrix's results folder, its run.json saying what was asked ('report': missing until written)."""
    return RunFolder(
        request.results_dir,
        {
            "kind": "matrix",
            "started_at": datetime.now(UTC).isoformat(),
            "command": redact_text(" ".join(["bench", *request.argv[1:]])),
            "git_commit": meta.git_commit(),
            "host": meta.host_info(),
            "versions": {"libraries": meta.library_versions()},
            "params": {
                **plan.params(request.evidence, parallel, lanes_why, request.warm),
                "generator_nice": priority.nice,
                "generator_realtime": priority.realtime,
            },
            "impls": plan.subjects,
            "endpoints": {},
            "report": "missing",  # until report.html is written (an interrupt while rendering leaves it so)
        },
    )


@dataclass
class _Plan:
    """The matrix as planned: its lanes (this shard's), their cases, and the whole plan's case ids."""

    lanes: list[Lane]
    cases: list[MatrixCase]
    whole: list[MatrixCase]
    not_run: list[dict[str, str]]
    level: EvidenceTarget
    target: EvidenceTarget
    shard: Shard | None
    used: list[str] = field(default_factory=list)

    @property
    def ids(self) -> list[str]:
        return [c.case_id for c in self.whole]

    @property
    def subjects(self) -> list[str]:
        return list(dict.fromkeys(c.impl for c in self.whole if c.role == "subject"))

    @classmethod
    def make(cls, request: MatrixRequest, target: EvidenceTarget, console: Console) -> _Plan:
        """The plan of ``request`` at evidence ``target`` (this shard's lanes, the whole plan's ids)."""
        backends, impls, scenarios = list(request.backends), list(request.impls), list(request.scenarios)
        strikes, shard = request.strikes, request.shard
        fixed = {b for b, urls in request.user_urls.items() if urls}
        level = EvidenceTarget(strikes, target.acquisitions) if strikes else target
        not_run: list[dict[str, str]] = []
        cases, skipped = plan_matrix(
            backends, impls, scenarios, fixed, level=level, target=target, not_run=not_run
        )
        for line in skipped:
            console.print(f"lockbench: skipping {line}", markup=False)
        lanes = plan_lanes(cases, fixed)
        for lane in lanes:
            lane.units = form_groups(lane)
        whole = [c for lane in lanes for unit in lane.units for c in unit]
        if shard is not None:
            mine = deal(lanes, shard.of)[shard.index - 1]
            lanes = [ln for ln in lanes if ln in mine]
        plan = cls(
            lanes, [c for ln in lanes for u in ln.units for c in u], whole, not_run, level, target, shard
        )
        planned = {c.matrix_scenario for c in whole} | {n["scenario"] for n in not_run}
        plan.used = [name for name in scenarios_at(level) if name in planned]  # the grid's columns, in order
        return plan

    def params(self, evidence: str, parallel: int, lanes_why: str, warm: bool) -> dict[str, Any]:
        """run.json ``params``: the scenarios as sized, the evidence, the slice, the lanes."""
        sized = scenarios_at(self.level)
        return {
            "scenarios": {
                name: {
                    "workload": sized[name].workload, "fault": sized[name].fault or "",
                    "summary": sized[name].summary, "stop": sized[name].stop.to_json(),
                    "settings": sized[name].settings, "options": sized[name].options,
                    "trials": sized[name].trials(self.level), "target": sized[name].target(self.target).text(),
                }
                for name in self.used
            },
            "users": USERS, "parallel": parallel, "lanes_why": lanes_why, "lanes": len(self.lanes),
            "warm_locust": warm,
            "shard": (
                {"index": self.shard.index, "of": self.shard.of, "lanes": [ln.name for ln in self.lanes],
                 "plan": self.ids}
                if self.shard is not None else None
            ),
            "evidence": evidence, "strikes": self.level.strikes, "evidence_target": self.target.text(),
            "impls": self.subjects, "not_run": self.not_run, "applicable": self.applicable(),
        }  # fmt: skip

    def applicable(self) -> dict[str, list[str]]:
        """impl -> every fault scenario the whole plan (all shards) runs on it: what a pick needs decided."""
        sized = scenarios_at(self.level)
        out: dict[str, list[str]] = {}
        for c in self.whole:
            if c.role == "subject" and sized[c.matrix_scenario].strike:
                out.setdefault(c.impl, [])
                if c.matrix_scenario not in out[c.impl]:
                    out[c.impl].append(c.matrix_scenario)
        return out


def _run(plan: _Plan, folder: RunFolder, shared: Shared, parallel: int, request: MatrixRequest) -> str:
    """Run the lanes; the folder's status: complete, complete-with-failures, failed or incomplete."""
    user_urls, resource_url, warm = dict(request.user_urls), request.resource_url, request.warm
    status = "complete"
    load_start = load_average()
    ticks = cpu_ticks()
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="lockbench-matrix-") as tmp:
            run_lanes(plan.lanes, shared, parallel, user_urls, resource_url, Path(tmp), warm)
    except KeyboardInterrupt:
        status = "incomplete"  # one line, from main(), once the folder is consistent; nothing rendered
    except BaseException as exc:  # a bug, a full disk: lanes catch what servers do (bench/matrix/lanes.py)
        status = "failed"  # never 'complete' with cases missing
        shared.failures.append(f"matrix stopped: {' '.join(str(exc).split())}")
        if not folder.rows or folder.broken is not None:
            raise
        # cases have run: they are judged, drawn and reported like any others (exit 1, never 2)
    finally:
        wall = time.monotonic() - t0
        if status == "complete" and shared.failures:
            status = "complete-with-failures"
        if shared.failures:
            folder.note("failures", shared.failures)
        if shared.incidents:
            folder.note("incidents", shared.incidents)
        if steps := clock_watch.steps_json():
            folder.note("clock_steps", steps)
        if status in ("failed", "incomplete"):  # the grid and report name every planned case that did not run
            ran = {str(r.get("case")) for r in folder.rows}
            why = "interrupted" if status == "incomplete" else shared.failures[-1]
            folder.meta["params"]["not_run"] = plan.not_run + [
                {"impl": c.impl, "scenario": c.matrix_scenario, "word": "not run", "reason": why}
                for c in plan.cases
                if c.case_id not in ran
            ]
        folder.note("matrix", {**timing_summary(shared.timings, wall, parallel),
                               "load_average": {"start": load_start, "end": load_average()},
                               "busy_cores": busy_cores(ticks, ticks_end := cpu_ticks()),
                               "steal_cores": steal_cores(ticks, ticks_end),
                               "admission_wait_s": round(shared.admission.waited_s, 1),
                               "occupancy": shared.admission.occupancy(),
                               "strike_cycles": strike_cycles(shared.cycles)})  # fmt: skip
        folder.note("endpoints", shared.endpoints)
        folder.note("versions", {"servers": shared.versions, "libraries": meta.library_versions()})
        folder.finish(status)
    return "complete-with-failures" if status == "failed" else status


def _judge_whole(
    plan: _Plan, folder: RunFolder, shared: Shared, console: Console, render: bool, slo_us: float | None
) -> int:
    """After the lanes: controls, contradictions and undecided cells over every row; the report; the exit code."""
    not_run = plan.not_run
    # planned cases that never ran (a lane stopped after a server died) are "not run", never n/a
    ran = {str(r.get("case")) for r in folder.rows}
    reason = "; ".join(shared.failures) or "its lane stopped"
    for c in plan.cases:
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
        f"lockbench: matrix wall time {timing['wall_s']:.0f} s{occupancy_words(timing)}; Locust start-up took "
        f"{timing['locust_startup_share']:.0%} of the case time",
        markup=False,
    )
    report_path = folder.path / "report.html"
    if render and folder.rows:
        from dashboards import render_report

        raise_if_interrupted()
        report_path = render_report([folder.path], slo_us=slo_us)
        folder.note("report", "report.html")
    elif not render:
        folder.note("report", "not requested (--no-report): bench report <folder> makes it")
    print(report_path if render and folder.rows else folder.path)
    open_cells = undecided(folder.rows, not_run)
    folder.note("undecided", open_cells)
    for line in open_cells[:40]:
        console.print(f"  undecided: {line}", markup=False)
    if len(open_cells) > 40:
        console.print(f"  ... and {len(open_cells) - 40} more (run.json 'undecided')", markup=False)
    stopped = [f"{n['impl']} x {n['scenario']}" for n in not_run if n.get("word") == "not run"] + shared.lost
    if shared.failures or open_cells or contradictions:  # the last line says why the exit is 1
        parts = [f"{len(open_cells)} cell(s) undecided", f"{len(contradictions)} contradicting the catalog"]
        if shared.failures:
            names = ", ".join(stopped[:5]) + (f" (+{len(stopped) - 5} more)" if len(stopped) > 5 else "")
            parts.insert(0, f"{len(shared.failures)} failure(s), cases without a result: {names or 'none'} "
                         f"({' '.join(shared.failures[0].split())})")  # fmt: skip
        console.print(f"lockbench: exit 1: {'; '.join(parts)}", markup=False, soft_wrap=True)
    return 1 if shared.failures or open_cells or contradictions else 0
