"""``bench explore`` and ``bench replay``: the commands' outline (plan, run, shrink, write, say).

Why apart from the matrix: the matrix asks "does this lock survive each fault, k times?"; explore
asks "is there a short combination of faults that breaks it?", and answers with a file that
replays it. Exit codes: 0 nothing found within the budget (how many schedules and events were
tried is said), 1 found (the schedule and its replay command are printed), 2 bad input.

The results folder is a normal one (``run.json`` ``kind: explore``): every run of a schedule is a
case (``<impl>__explore__r<n>``) with its history, so the report draws each failing run's
timeline; ``schedule.json`` is the shrunk schedule (``schedules/<impl>.json`` per impl when
several were explored) and run.json ``explore`` says what was tried, found and confirmed.
"""

from __future__ import annotations

import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console

from bench.errors import INTERRUPT, UserError
from bench.explore.draw import Reach, reach, reach_for, schedule_for
from bench.explore.execute import explore_settings, outcome_of, run_schedule, stack_for
from bench.explore.schedule import Event, Schedule
from bench.explore.shrink import Explorer, Finding, Outcome
from bench.results import meta
from bench.results.folder import RunFolder
from bench.results.redact import redact_text
from bench.validate import parse_budget

#: Schedules ``--plan`` prints per impl.
PLAN_SCHEDULES = 10


def choose_impls(impls: list[str], backends: list[str]) -> list[str]:
    """The impls to explore: those named, and every impl of each ``--backend``; UserError when none."""
    from lockimpls.registry import backends as known_backends
    from lockimpls.registry import ids_for_backend

    chosen = list(impls)
    if "all" in backends:
        backends = list(known_backends())
    for b in backends:
        if b not in known_backends():
            raise UserError(f"unknown backend {b!r}; backends are {', '.join(known_backends())}")
        chosen += [i for i in ids_for_backend(b) if not i.startswith("canary.")]
    if not chosen:
        raise UserError("name the lock to explore: --impl ID (see `bench list`) or --backend NAME")
    return list(dict.fromkeys(chosen))


def reaches_of(chosen: list[str], named: list[str], faults: list[str]) -> tuple[list[Reach], list[str]]:
    """Each chosen impl's reach, and a line for each impl a ``--backend`` brought that nothing reaches.

    A lock named with ``--impl`` that nothing reaches is bad input (UserError); one that came with
    its backend is passed over with the reason, unless no lock is left to explore.
    """
    reaches: list[Reach] = []
    passed_over: list[str] = []
    for impl in chosen:
        try:
            reaches.append(reach(impl, faults))
        except UserError as exc:
            if impl in named:
                raise
            passed_over.append(f"{impl}: {exc}")
    if not reaches:
        raise UserError(
            passed_over[0] if len(passed_over) == 1 else f"no chosen lock can be explored: {passed_over[0]}"
        )
    return reaches, passed_over


def _explorer(
    r: Reach, seed: int, budget_s: float, fencing: str, run: Any, progress: Any = None,
    shrink_runs: int | None = None,
) -> Explorer:  # fmt: skip
    settings = explore_settings()

    def make(events: list[Event]) -> Schedule:
        return schedule_for(r, events, seed, settings, {}, fencing)

    return Explorer(r, make, run, seed, budget_s, on_progress=progress, max_shrink_runs=shrink_runs)


def plan_command(
    impls: list[str], seed: int, faults: list[str], fencing: str, n: int = PLAN_SCHEDULES
) -> int:
    """``--plan``: the first schedules each impl's search would run, in order, without a server."""
    for impl in impls:
        r = reach(impl, faults)
        print(
            f"{impl} ({r.backend}{', ' + r.topology if r.topology else ''}): kinds {', '.join(r.kinds)}; seed {seed}"
        )
        for i, schedule in enumerate(_explorer(r, seed, 0, fencing, None).plan(n), 1):
            print(f"  {i:2d}. {schedule.text().split(': ', 1)[1]}")
    return 0


class Progress:
    """The live line: schedules tried, the best failure so far, time left (one line, rewritten on a terminal)."""

    def __init__(self, impl: str, stream: Any = None) -> None:
        self.impl = impl
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.last = ""

    def __call__(self, finding: Finding, left_s: float, what: str) -> None:
        best = finding.shrunk.text().split(": ", 1)[1] if finding.shrunk else "none yet"
        line = (
            f"explore {self.impl}: {finding.tried} schedule(s) tried, {finding.runs} run(s); "
            f"best failure: {best}; {left_s / 60:.1f} min left; {what[:120]}"
        )
        if self.tty:
            width = 160
            self.stream.write("\r" + line[:width].ljust(min(width, len(self.last))))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.last = line

    def done(self) -> None:
        if self.tty and self.last:
            self.stream.write("\n")
            self.stream.flush()


class _Runs:
    """Runs schedules of one impl on servers started once, each run filed as a case of the folder."""

    def __init__(self, r: Reach, folder: RunFolder, scratch: Path, user_urls: dict[str, list[str]]) -> None:
        self.reach = r
        self.folder = folder
        self.scratch = scratch
        self.user_urls = user_urls
        self.stack: Any = None
        self.number = len(folder.rows)
        self.played: dict[str, list[list[str]]] = {}
        #: every run's Locust forks from one warm, pre-imported process (cold once it broke)
        self.launcher: Any = None
        self._warm: Any = None

    def __call__(self, schedule: Schedule) -> Outcome:
        if INTERRUPT.is_set():
            raise KeyboardInterrupt
        if self.stack is None:
            self.stack = stack_for(
                self.reach, self.folder.path / "logs" / "servers", self.user_urls
            ).__enter__()
            endpoints = {**self.folder.meta.get("endpoints", {}), self.reach.impl: sorted(self.stack.urls)}
            self.folder.note("endpoints", endpoints)
            self._start_warm()
        played = run_schedule(schedule, self.stack, self.scratch, self.number, self.launcher)
        self.number += 1
        result = played.result
        result["row"]["explore_schedule"] = schedule.text()
        self.folder.add_case(
            result["row"], result["histograms"], result["history_file"], result["extra"], result.get("log")
        )
        self.played[str(result["row"]["case"])] = played.played
        outcome = outcome_of(result)
        outcome.detail["schedule"] = schedule.as_json()
        return outcome

    def _start_warm(self) -> None:
        from bench.run.runner import Launcher
        from bench.run.timing import RunTiming
        from bench.run.warm import WarmLocust, WarmLocustError

        self._warm = WarmLocust()
        try:
            self._warm.spawn()
            self._warm.wait_ready()
            self.launcher = Launcher(self._warm, RunTiming())
        except WarmLocustError:
            self._warm.close()
            self._warm = self.launcher = None

    def close(self) -> None:
        if self._warm is not None:
            self._warm.close()
            self._warm = None
        if self.stack is not None:
            self.stack.__exit__(None, None, None)
            self.stack = None


def _folder(results_dir: Path, argv: list[str], params: dict[str, Any], impls: list[str]) -> RunFolder:
    return RunFolder(
        results_dir,
        {
            "kind": "explore",
            "started_at": datetime.now(UTC).isoformat(),
            "command": redact_text(" ".join(["bench", *argv[1:]])),
            "git_commit": meta.git_commit(),
            "host": meta.host_info(),
            "versions": {"libraries": meta.library_versions()},
            "params": params,
            "impls": impls,
            "endpoints": {},
            "report": "missing",
        },
    )


def _render(folder: RunFolder, console: Console) -> None:
    try:
        from dashboards import render_report

        render_report([folder.path])
        folder.note("report", "report.html")
    except Exception as exc:  # noqa: BLE001 - the finding and its file stand without the page
        folder.note("report", f"not written: {type(exc).__name__}: {exc}")
        console.print(f"lockbench: report not written ({type(exc).__name__}: {exc})", markup=False)


def explore_command(
    *, impls: list[str], backends: list[str], seed: int, budget: str, faults: list[str], fencing: bool,
    plan: bool, results_dir: Path, user_urls: dict[str, list[str]], argv: list[str], console: Console,
    render: bool = True, shrink_runs: int | None = None,
) -> int:  # fmt: skip
    """Explore each impl for the budget (split evenly); the exit code (0 nothing found, 1 found)."""
    budget_s = parse_budget(budget)
    chosen = choose_impls(impls, backends)
    mode = "enforce" if fencing else "off"
    reaches, passed_over = reaches_of(chosen, impls, faults)  # bad input is said before anything starts
    for line in passed_over:
        console.print(f"lockbench: not explored: {line}", markup=False, soft_wrap=True)
    chosen = [r.impl for r in reaches]
    if plan:
        return plan_command(chosen, seed, faults, mode)
    from infra import install_all

    install_all.ensure(r.backend for r in reaches if not user_urls.get(r.backend))
    params = {
        "seed": seed, "budget_s": budget_s, "shrink_runs": shrink_runs, "faults": faults, "fencing": mode,
        "settings": explore_settings(),
        "reproduction": "a candidate fails when its run fails; the shrunk schedule is confirmed when 2 of 3 runs fail",
    }  # fmt: skip
    folder = _folder(results_dir, argv, params, chosen)
    console.print(f"lockbench: exploring {', '.join(chosen)} (seed {seed}, budget {budget}); results in {folder.path}",
                  markup=False)  # fmt: skip
    summary: dict[str, Any] = {}
    found_any = interrupted = False
    per_impl = budget_s / len(reaches)
    with tempfile.TemporaryDirectory(prefix="lockbench-explore-") as tmp:
        for r in reaches:
            if interrupted:
                break
            runs = _Runs(r, folder, Path(tmp), user_urls)
            progress = Progress(r.impl)
            explorer = _explorer(r, seed, per_impl, mode, runs, progress, shrink_runs)
            t0 = time.monotonic()
            try:
                finding = explorer.explore()
            finally:
                progress.done()
                runs.close()
            interrupted = finding.interrupted or INTERRUPT.is_set()
            summary[r.impl] = _say(finding, r, folder, console, time.monotonic() - t0, len(reaches) > 1)
            found_any = found_any or finding.found
            folder.note("explore", summary)
    folder.finish("incomplete" if interrupted else "complete")
    if render and folder.rows and not interrupted:
        _render(folder, console)
    print(folder.path)
    return 1 if found_any else (130 if interrupted else 0)


def _say(
    finding: Finding, r: Reach, folder: RunFolder, console: Console, wall_s: float, several: bool
) -> dict:
    """Print and file one impl's answer; write its schedule file when something was found."""
    entry: dict[str, Any] = {
        "kinds": list(r.kinds), "topology": r.topology, "schedules_tried": finding.tried,
        "events_tried": finding.events_tried, "runs": finding.runs, "shrink_runs": finding.shrink_steps,
        "wall_s": round(wall_s, 1), "interrupted": finding.interrupted, "found": finding.found,
        "shrink_stopped_at_runs": finding.shrink_out,
    }  # fmt: skip
    if not finding.found or finding.shrunk is None:
        why = "before the interrupt" if finding.interrupted else "within the budget"
        console.print(f"lockbench: {r.impl}: nothing found {why}: {finding.tried} schedule(s) with "
                      f"{finding.events_tried} event(s) tried ({finding.runs} run(s), {wall_s:.0f} s)", markup=False)  # fmt: skip
        return entry
    name = f"schedules/{r.impl.replace(':', '_').replace('/', '_')}.json" if several else "schedule.json"
    path = folder.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    finding.shrunk.write(path)
    if several and not (folder.path / "schedule.json").exists():
        finding.shrunk.write(folder.path / "schedule.json")
    outcome = finding.shrunk_outcome or Outcome(True)
    entry.update({
        "first": finding.first.as_json() if finding.first else None,
        "schedule": finding.shrunk.as_json(), "schedule_file": name, "reason": outcome.reason,
        "case": outcome.detail.get("case"), "confirmed": finding.confirmed, "reproduced": finding.reproduced,
        "replay": f"bench replay {path}",
    })  # fmt: skip
    first = finding.first.text().split(": ", 1)[1] if finding.first else ""
    console.print(
        f"lockbench: {r.impl}: FAILED after {finding.tried} schedule(s) ({finding.runs} run(s), {wall_s:.0f} s)\n"
        f"  found:  {first}\n  shrunk: {finding.shrunk.text().split(': ', 1)[1]} "
        f"({len(finding.shrunk.events)} event(s); {finding.confirmed or 'not confirmed'}"
        f"{f'; shrinking stopped at --shrink-runs {finding.shrink_steps}' if finding.shrink_out else ''})\n"
        f"  why:    {outcome.reason}\n  replay: bench replay {path}",
        markup=False, soft_wrap=True,
    )  # fmt: skip
    return entry


def replay_command(
    *, file: Path, runs: int, results_dir: Path, user_urls: dict[str, list[str]], argv: list[str],
    console: Console, render: bool = False,
) -> int:  # fmt: skip
    """Run exactly the schedule in ``file`` (``runs`` times); exit 1 when the failure reproduces in any run."""
    if runs < 1:
        raise UserError(f"--runs must be at least 1, got {runs}")
    schedule = Schedule.read(file)
    r = reach_for(schedule)
    from infra import install_all

    install_all.ensure([r.backend] if not user_urls.get(r.backend) else [])
    folder = _folder(results_dir, argv, {"replay": str(file), "schedule": schedule.as_json(), "runs": runs},
                     [schedule.impl])  # fmt: skip
    folder.meta["kind"] = "explore"
    console.print(
        f"lockbench: replaying {schedule.text()} ({runs} run(s)); results in {folder.path}", markup=False
    )
    failed = 0
    interrupted = False
    with tempfile.TemporaryDirectory(prefix="lockbench-replay-") as tmp:
        player = _Runs(r, folder, Path(tmp), user_urls)
        try:
            for i in range(runs):
                outcome = player(schedule)
                failed += outcome.failed
                word = "FAILED" if outcome.failed else "passed"
                console.print(f"  run {i + 1}: {word}: {outcome.reason}", markup=False, soft_wrap=True)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            player.close()
    folder.note("explore", {"replay": {"file": str(file), "runs": runs, "failed": failed}})
    folder.finish("incomplete" if interrupted else "complete")
    if render and folder.rows:
        _render(folder, console)
    console.print(
        f"lockbench: the failure {'reproduced' if failed else 'did not reproduce'}: {failed} of "
        f"{runs if not interrupted else 'fewer than ' + str(runs)} run(s) failed",
        markup=False,
    )
    print(folder.path)
    return 1 if failed else (130 if interrupted else 0)
