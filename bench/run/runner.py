"""Runs a plan of cases: servers up, one Locust subprocess per case, checkers, results folder.

Locust runs as a subprocess (``python -m locust -f workloads/<name>.py --headless``)
so that this process is never gevent-patched and the locustfile a user runs by hand is
the one measured here. Each case writes its merged recording into a scratch folder;
this module judges it and appends it to the run's results folder immediately, so an
interrupted run keeps every finished case.
"""

from __future__ import annotations

import functools
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pandas as pd

from bench.errors import raise_if_interrupted
from bench.measure import evidence, fidelity
from bench.measure.floors import floors as measure_floors
from bench.nemesis import partitions
from bench.nemesis.faults import FaultThread, namespace
from bench.results.folder import RunFolder
from bench.results.redact import redact_text, redact_url
from bench.run import clock_watch
from bench.run.calibration_cache import CalibrationCache
from bench.run.case import (
    Case,
    CaseFailed,
    ServerDied,
)
from bench.run.judge import judge, with_fault_windows
from bench.run.locust import (
    PROGRESS_FILE,
    _poll_progress,
    client_hosts_of,
    locust_argv,
    run_locust,
)
from bench.run.reset import reset_lock_state
from bench.run.timing import RunTiming, load_window_ns
from bench.run.warm import WarmLocust, WarmLocustError
from infra import server_stats
from infra.stack import Stack
from workloads.harness.netns import clear_claims


def dead_servers_text(stack: Stack, dead: list[str]) -> str:
    """``the resource server (redis redis://127.0.0.1:4242/0)``: which server died, in words."""
    parts = []
    for name in dead:
        server = stack.servers.get(name)
        kind = type(server).__name__.removesuffix("Server").lower() if server is not None else "server"
        url = redact_url(str(getattr(server, "url", ""))) if server is not None else ""
        role = "the resource server" if name == "resource" else f"the lock server {name}"
        kept = stack.keep_logs([name], why="died") if hasattr(stack, "keep_logs") else {}
        log = f"; log: {', '.join(str(p) for p in kept.values())}" if kept else ""
        parts.append(f"{role} ({kind}{' ' + url if url else ''}{log})")
    return ", ".join(parts)


def _read_log(path: Path) -> str | None:
    """A case's Locust output, passwords stripped (None: it wrote none)."""
    try:
        return redact_text(path.read_text(errors="replace"))
    except OSError:
        return None


def _log_tail(text: str | None, lines: int = 4) -> str:
    """The last non-empty lines of a log, on one line."""
    kept = [ln for ln in (text or "").splitlines() if ln.strip()]
    return " | ".join(kept[-lines:])


def _server_pids(stack: Stack, backend: str) -> list[int]:
    """Processes of the lock servers this stack started for ``backend`` (none for reused ones)."""
    pids: list[int] = []
    for key, server in stack.servers.items():
        if key == f"{backend}-lock" or key.startswith(f"{backend}-lock-"):
            for member in [server, *getattr(server, "nodes", [])]:
                pid = getattr(getattr(member, "process", None), "pid", None)
                if pid:
                    pids.append(pid)
    return list(dict.fromkeys(pids))  # a cluster's own process is its first member's


def run_case(
    case: Case,
    stack: Stack,
    scratch: Path,
    solo: fidelity.Solo | None = None,
    on_tick: Callable[[dict[str, Any]], None] | None = None,
    launch: Callable[[list[str], Path, float], int] | None = None,
    last_case: bool = False,
    nemesis: Callable[[Case, Stack, str], FaultThread | None] | None = None,
) -> dict[str, Any]:
    """Run one case in Locust and return its judged, summarised outcome.

    ``launch(argv, log_path, timeout)`` starts Locust and returns its exit code; default a
    cold ``python -m locust`` subprocess (``bench run`` and ``bench matrix`` pass a warm one,
    bench/run/warm.py). ``nemesis(case, stack, resource_url)`` makes the case's fault thread
    instead of :func:`fault_thread` (``bench explore`` plays a schedule of several kinds).
    """
    clock_watch.start()  # wall-clock steps during the case (judge.stall_reason)
    begun_ns = time.monotonic_ns()
    settings = case.settings
    out = scratch / case.case_id
    out.mkdir(parents=True, exist_ok=True)
    clear_claims(out)  # an earlier attempt's dead workers still hold its hosts
    lock_urls = stack.urls[case.backend]
    on_hosts = case.fault is not None and case.fault.is_partition
    ns = namespace("0") if case.fault is not None else ""
    hosts = [h.name for h in client_hosts_of(stack, settings.processes)] if on_hosts else None
    argv = locust_argv(case, settings, lock_urls, stack.urls["resource"][0], out, last_case, ns, hosts)
    log_path = out / "locust.log"
    try:
        reset_lock_state(case.backend, lock_urls)
    except Exception as exc:  # noqa: BLE001 - a server that cannot be cleaned cannot be measured
        raise CaseFailed(f"{case.case_id}: could not clear lock state before the case: {exc}") from exc
    before = server_stats.snapshot(case.backend, lock_urls)
    pids = _server_pids(stack, case.backend)
    cpu_before = server_stats.cpu_snapshot(case.backend, lock_urls, pids)
    fault = None
    ground = None
    if case.fault is not None:
        if on_hosts:
            ground = partitions.PartitionGround(
                stack.hosts, lock_servers_of(stack, case.backend), claim_dirs=[out]
            )
        if nemesis is not None:
            fault = nemesis(case, stack, stack.urls["resource"][0])
        else:
            fault = fault_thread([case], stack, [stack.urls["resource"][0]], ground)
    if fault is not None:
        fault.start()
    launched_ns = time.monotonic_ns()
    try:
        if launch is not None:
            code = launch(argv, log_path, settings.duration + 120)
        else:
            wait = settings.workers_wait_s if settings.master_bind else 0
            code = run_locust(argv, log_path, timeout=settings.duration + 120 + wait, on_tick=on_tick)
    finally:
        exited_ns = time.monotonic_ns()
        if fault is not None:
            fault.stop()
            fault.join(60)
    commands = server_stats.delta(before, server_stats.snapshot(case.backend, lock_urls))
    server_cpu = server_stats.cpu_delta(cpu_before, server_stats.cpu_snapshot(case.backend, lock_urls, pids))
    timing = {"begun_ns": begun_ns, "launched_ns": launched_ns, "exited_ns": exited_ns}
    return finish_case(
        case, stack, out, code, fault, "0", commands, server_cpu, timing, solo=solo, ground=ground
    )


def quorum_keys(cases: list[Case]) -> dict[str, list[str]]:
    """Per case label, the keys its lock takes on each master, for impls that declare them (RedLock's).

    The fault that arranges a bare majority (bench/nemesis/faults.py ``_redlock_restart``)
    gives these keys to a phantom owner on two masters. Server faults run the flash-sale
    workload, whose lock names are ``<namespace>flash-sale:item-<n>``.
    """
    from lockimpls.registry import resolve

    out: dict[str, list[str]] = {}
    for i, case in enumerate(cases):
        key_of = getattr(resolve(case.impl), "quorum_key", None)
        if key_of is None:
            continue
        items = int(case.settings.workload_options.get("items", 1) or 1)
        out[str(i)] = [key_of(f"{namespace(str(i))}flash-sale:item-{n}") for n in range(items)]
    return out


def fault_thread(
    cases: list[Case], stack: Stack, resources: list[str], ground: partitions.PartitionGround | None = None
) -> FaultThread | None:
    """One nemesis for ``cases`` (a lone case, or a group: case ``i`` is mailbox ``"i"`` on
    ``resources[i]``) on the stack's lock servers; None when they take no server fault."""
    first = cases[0]
    if first.fault is None:
        return None
    servers = lock_servers_of(stack, first.backend)
    server = stack.servers.get(f"{first.backend}-lock") or (
        servers[0] if servers else next(iter(stack.servers.values()))
    )
    settings = first.settings
    return FaultThread(
        first.fault, server, resources, deadline_s=max(c.settings.duration for c in cases), ground=ground,
        strikes=settings.strikes, grants_between=settings.grants_between, lease_s=settings.ttl,
        labels=[str(i) for i in range(len(cases))], servers=servers,
        session_s=settings.lock_params.get("session_timeout"), quorum_keys=quorum_keys(cases),
    )  # fmt: skip


def lock_servers_of(stack: Stack, backend: str) -> list[Any]:
    """The lock servers bench started for ``backend`` (RedLock's masters in order; empty for a user's)."""
    return [s for k, s in stack.servers.items() if k == f"{backend}-lock" or k.startswith(f"{backend}-lock-")]


def finish_case(
    case: Case,
    stack: Stack,
    out: Path,
    code: int,
    fault: FaultThread | None,
    label: str,
    commands: Any,
    server_cpu: Any,
    timing: dict[str, Any],
    solo: fidelity.Solo | None = None,
    ground: partitions.PartitionGround | None = None,
) -> dict[str, Any]:
    """Read a finished case's recording, add what its fault did to it, judge it.

    ``label`` names the case's mailbox in ``fault`` (a group's member; "0" for a lone case):
    each strike is marked in the case's history as counted or missed, with the reason.
    """
    settings = case.settings
    log_path = out / "locust.log"
    on_hosts = case.fault is not None and case.fault.is_partition
    rec_path = out / "recording.json"
    dead = stack.dead()
    if dead and not rec_path.exists():
        # say what failed: a dead server, not Locust's exit code and a fragment of its table
        raise ServerDied(
            f"{dead_servers_text(stack, dead)} died during {case.case_id}; finished cases are kept"
        )
    if not rec_path.exists():
        kept = _read_log(log_path)
        where = f" (its Locust output: logs/{case.case_id}.log)" if kept is not None else ""
        raise CaseFailed(
            f"{case.case_id}: Locust exited with code {code} and no recording{where}: {_log_tail(kept)}",
            log=kept,
        )
    recording = json.loads(rec_path.read_text())
    history = pd.read_parquet(out / "history.parquet")
    if fault is not None:
        box = fault.mailbox(label)
        marks = {m.strike: m for m in box.marks}
        recording["fault"] = {
            "spec": case.fault.label, "error": fault.error, "holder": fault.holder, "strikes_asked": fault.strikes,
            "stopped_early": box.stopped or fault.stopped_early, "group": len(fault.mailboxes),
            "cycles": fault.cycles,
            "windows": [
                {
                    "start_ns": w.start_ns, "end_ns": w.end_ns, "detail": w.detail,
                    "holder": marks[i].holder if i in marks else h,
                    "hit": marks[i].hit if i in marks else None,
                    "missed": marks[i].reason if i in marks else "the case had ended",
                }
                for i, (w, h) in enumerate(zip(fault.windows, fault.holders, strict=True))
            ],
        }  # fmt: skip
        if fault.window is not None:
            w = fault.window
            recording["fault"].update({"start_ns": w.start_ns, "end_ns": w.end_ns, "detail": w.detail})
            if on_hosts:
                recording["fault"]["hosts"] = {
                    str(pid): host.name for pid, host in (ground.client_hosts if ground else {}).items()
                }
                first = marks.get(0)  # this case's holder of the first cut (a group's cases each have one)
                recording["partition"] = partitions.after_heal_columns(
                    history, w.start_ns, w.end_ns, first.holder if first and first.holder else fault.holder
                )
            history = with_fault_windows(history, fault.windows, box.marks)
            history.to_parquet(out / "history.parquet", index=False)
    recording["server_commands"] = commands
    if server_cpu is not None:
        recording["server_cpu"] = {"seconds": server_cpu.seconds, "source": server_cpu.source}
    result = judge(case, settings, recording, history, out / "history.parquet", solo)
    result["log"] = _read_log(log_path)
    # where a case's wall time goes: Locust start-up (launch -> test start), load, shut-down
    result["timing"] = {
        **timing,
        "test_start_ns": recording.get("t_start_ns"),
        "test_stop_ns": recording.get("t_stop_ns"),
        "ended_ns": time.monotonic_ns(),
    }
    return result


class Launcher:
    """Starts a case's Locust from a warm process, cold once the warm one broke (``run_case``'s ``launch``).

    Why: a cold ``python -m locust`` spends seconds importing before its first user; the
    warm child runs the same argv, so what is measured does not change (bench/run/warm.py).
    """

    def __init__(self, warm: WarmLocust, timing: RunTiming) -> None:
        self.warm: WarmLocust | None = warm
        self.timing = timing
        timing.launcher = "warm"

    def __call__(
        self,
        argv: list[str],
        log_path: Path,
        timeout: float,
        on_tick: Callable[[dict[str, Any]], None] | None = None,
    ) -> int:
        if self.warm is not None:
            tick = on_tick
            poll = (lambda: _poll_progress(log_path.parent / PROGRESS_FILE, tick)) if tick else None
            try:
                return self.warm.run(argv, log_path, timeout, poll)
            except WarmLocustError as exc:
                self.warm.close()
                self.warm = None
                self.timing.launcher = f"warm, then cold: {exc}"
        return run_locust(argv, log_path, timeout, on_tick)


def run_plan(
    cases: list[Case],
    stack: Stack,
    folder: RunFolder,
    progress: Callable[[Case, int, int], None] | None = None,
    on_failure: Callable[[Case, str], None] | None = None,
    on_tick: Callable[[dict[str, Any]], None] | None = None,
    warm: WarmLocust | None = None,
    timing: RunTiming | None = None,
    kept: CalibrationCache | None = None,
) -> list[str]:
    """Run every case into ``folder``; returns the list of failed case messages.

    ``kept``: calibrations kept by earlier runs of this commit (bench/run/calibration_cache.py); a
    fresh one that matches a calibration case replaces its measurement, a new measurement is kept.

    Floors are measured first; solo calibration cases (``case.solo``) go into run.json's
    ``calibration``, never into the case table, and calibrate the cases after them.
    ``warm`` (spawned by the caller, local cases only) starts every case's and every
    calibration's Locust; it is waited for before the floors, so its imports never share
    the CPU with a measurement. Cases run one after another, each judged and written
    before the next starts: nothing of bench's runs during a load window. ``timing``
    collects where the time went (run.json ``timing``).
    """
    plan = _PlanRun(stack, folder, on_failure, on_tick, timing if timing is not None else RunTiming(), kept)
    if getattr(stack, "keep_logs_dir", False) is None:
        # the servers' logs stay with the run (logs/servers/), not in the scratch folder bench deletes
        stack.keep_logs_dir = folder.path / "logs" / "servers"  # resultsio.schema.SERVER_LOGS
    plan.start(warm, cases)
    with tempfile.TemporaryDirectory(prefix="lockbench-cases-") as tmp:
        for i, case in enumerate(cases):
            raise_if_interrupted()
            if progress:
                progress(case, i, len(cases))
            if case.solo:
                plan.calibrate(case, Path(tmp))
            else:
                plan.measure(case, Path(tmp), last_case=i == len(cases) - 1)
    return plan.failures


class _PlanRun:
    """The state :func:`run_plan` carries from case to case: floors, solo figures, failures, timing.

    Why a class: a calibration case feeds the measured cases after it, and every case adds to
    the same run.json ``calibration`` and ``timing``.
    """

    def __init__(
        self,
        stack: Stack,
        folder: RunFolder,
        on_failure: Callable[[Case, str], None] | None,
        on_tick: Callable[[dict[str, Any]], None] | None,
        timing: RunTiming,
        kept: CalibrationCache | None,
    ) -> None:
        self.stack, self.folder, self.on_failure, self.on_tick = stack, folder, on_failure, on_tick
        self.timing, self.kept = timing, kept
        self.failures: list[str] = []
        self.launcher: Launcher | None = None
        self.calibration: dict[str, Any] = {}
        self.solos: dict[tuple[str, str, str], fidelity.Solo] = {}

    def start(self, warm: WarmLocust | None, cases: list[Case]) -> None:
        """Wait for the warm Locust, then measure the backends' floors (nothing else runs meanwhile)."""
        if warm is not None:
            with self.timing.phase("warm_start"):
                try:
                    warm.wait_ready()
                    self.launcher = Launcher(warm, self.timing)
                except WarmLocustError as exc:
                    self.timing.launcher = f"cold: {exc}"
        backends = list(dict.fromkeys(c.backend for c in cases))
        with self.timing.phase("floors"):
            self.calibration = new_calibration(measure_floors(self.stack.urls, backends))
        self.folder.note("calibration", self.calibration)

    def calibrate(self, case: Case, scratch: Path) -> None:
        """A solo calibration case: kept from an earlier run of this commit, or measured now.

        Not a case: a failed calibration leaves its impl's cases on the CPU fallback.
        """
        begun_ns = time.monotonic_ns()
        hit = self.kept.lookup(case) if self.kept is not None else None
        if hit is not None:
            self.solos[case.calibration_key] = hit[0]
            record_kept(self.calibration, case, hit[0], hit[1])
            self.folder.note("calibration", self.calibration)
            return
        attempts: list[dict[str, Any]] = []
        solo = calibrate_solo(case, self.stack, scratch, self.calibration, self.launcher, attempts)
        if solo is not None:
            self.solos[case.calibration_key] = solo
            if self.kept is not None:
                self.kept.keep(case, solo, self.folder.path.name)
        elif self.on_failure:
            self.on_failure(case, self.calibration["errors"][-1])
        self.timing.add_case(case, attempts, begun_ns, time.monotonic_ns())
        self.folder.meta["timing"] = self.timing.as_json()  # so far: written with the calibration
        self.folder.note("calibration", self.calibration)
        _stop_if_a_server_died(self.stack, case)

    def measure(self, case: Case, scratch: Path, last_case: bool) -> None:
        """A measured case: run, judged and written before the next starts."""
        begun_ns = time.monotonic_ns()
        solo = self.solos.get(case.calibration_key)
        if solo is None and case.workload.name in fidelity.CALIBRATED_WORKLOADS:
            same_steps = [s for k, s in self.solos.items() if k[1:] == case.calibration_key[1:]]
            solo = fidelity.pooled(same_steps)
        launch = functools.partial(self.launcher, on_tick=self.on_tick) if self.launcher is not None else None
        try:
            result = run_case(
                case, self.stack, scratch, solo, self.on_tick, launch=launch, last_case=last_case
            )
        except CaseFailed as exc:
            self.timing.add_case(case, [], begun_ns, time.monotonic_ns())
            if exc.log is not None:
                self.folder.keep_log(case.case_id, exc.log)
            self.failures.append(str(exc))
            if self.on_failure:
                self.on_failure(case, str(exc))
            return
        record_case(self.calibration, case.backend, result)
        dead = self.stack.dead()
        if dead:
            evidence.server_died(result["row"], dead)
        folder = self.folder
        folder.add_case(
            result["row"], result["histograms"], result["history_file"], result["extra"], result.get("log")
        )
        self.timing.add_case(case, [result["timing"]], begun_ns, time.monotonic_ns())
        folder.meta["timing"] = self.timing.as_json()  # so far: written with the calibration
        folder.note("calibration", self.calibration)
        if result["extra"].get("clock_offsets"):
            # the latest measurement per worker; every case keeps its own in hist/<case>.json
            folder.note(
                "clock_offsets", {**folder.meta.get("clock_offsets", {}), **result["extra"]["clock_offsets"]}
            )
        if dead:
            raise ServerDied(
                f"{dead_servers_text(self.stack, dead)} died during {case.case_id}; finished cases are kept"
            )


def _stop_if_a_server_died(stack: Stack, case: Case) -> None:
    dead = stack.dead()
    if dead:
        raise ServerDied(
            f"{dead_servers_text(stack, dead)} died during {case.case_id}; finished cases are kept"
        )


def calibrate_solo(
    case: Case,
    stack: Stack,
    scratch: Path,
    calibration: dict[str, Any],
    launch: Callable[[list[str], Path, float], int] | None = None,
    timings: list[dict[str, Any]] | None = None,
) -> fidelity.Solo | None:
    """Run a solo calibration, once more and twice as long when it got too few acquisitions.

    On a busy machine Locust's start-up can eat most of a short window (measured with a
    load average of 12 on 2 cores: 0 and 38 acquisitions in 3 s where about 500 are
    usual), and a p50 of a handful of holds is noise. The result goes into ``calibration``.
    ``launch`` as in :func:`run_case` (``bench run`` passes its warm launcher, so a
    calibration costs its seconds of load and no Locust start-up); each attempt's
    ``timing`` is appended to ``timings``.
    """
    solo, result, problem = None, None, ""
    longer = replace(case, settings=replace(case.settings, duration=2 * case.settings.duration))
    for attempt in (case, longer):
        try:
            result = run_case(attempt, stack, scratch, launch=launch)
            if timings is not None:
                timings.append(result["timing"])
        except CaseFailed as exc:
            problem = str(exc)
            continue
        got = fidelity.solo_from(result["row"])
        if got is not None and (solo is None or got.acquisitions > solo.acquisitions):
            solo = got
        if solo is not None and solo.acquisitions >= fidelity.MIN_SOLO_ACQUISITIONS:
            break
        got_n = solo.acquisitions if solo else 0
        problem = f"{case.case_id}: {got_n} acquisitions in {attempt.settings.duration:g}s"
    if solo is None or solo.acquisitions < fidelity.MIN_SOLO_ACQUISITIONS:
        calibration["errors"].append(f"solo calibration unusable: {problem}")
        solo = None
    if result is not None:
        record_solo(calibration, case, solo, result)
    return solo


def new_calibration(floors: dict[str, dict]) -> dict[str, Any]:
    """run.json's ``calibration``: floors, solo holds and how generator-bound cases are judged."""
    return {
        "floors": floors,
        "solo": {},
        "solo_by_scenario": {},
        "errors": [],
        "server_cpu_sources": {},
        "generator_bound": {
            "inflation_threshold": fidelity.INFLATION_THRESHOLD,
            "cpu_share_fallback": fidelity.CPU_BOUND_SHARE,
            "schedule_lag_limit_us": fidelity.SCHEDULE_LAG_LIMIT_US,
            "calibrated_workloads": sorted(fidelity.CALIBRATED_WORKLOADS),
            "meaning": f"a generator-bound case's {fidelity.BOUND_MEANING}",
            "cases": [],
        },
    }


def record_solo(
    calibration: dict[str, Any], case: Case, solo: fidelity.Solo | None, result: dict[str, Any]
) -> None:
    """File one solo calibration: ``solo[impl]`` (its first scenario) and ``solo_by_scenario``."""
    window = load_window_ns(result.get("timing") or {})
    entry = {
        **(solo.as_json() if solo else {"hold_p50_us": None, "acquire_p50_us": None, "acquisitions": 0}),
        "workload": case.workload.name,
        "scenario": case.scenario,
        # the window it really ran: its stop rule may end it before its duration
        "duration_s": round((window[1] - window[0]) / 1e9, 3) if window else case.settings.duration,
        "verdict": result["row"].get("verdict"),
        "source": "measured in this run",
    }
    calibration["solo"].setdefault(case.impl, entry)
    calibration["solo_by_scenario"].setdefault(case.scenario, {})[case.impl] = entry


def record_kept(calibration: dict[str, Any], case: Case, solo: fidelity.Solo, entry: dict[str, Any]) -> None:
    """File a calibration reused from an earlier run, saying where it came from and how old it is."""
    age_h = float(entry.get("age_s", 0.0)) / 3600
    kept = {
        **solo.as_json(), "workload": case.workload.name, "scenario": case.scenario,
        "source": f"reused: measured in run {entry.get('run_id', '?')}, {age_h:.1f} h ago, same commit and parameters",
        "reused_from": entry.get("run_id"), "age_s": entry.get("age_s"),
    }  # fmt: skip
    calibration["solo"].setdefault(case.impl, kept)
    calibration["solo_by_scenario"].setdefault(case.scenario, {})[case.impl] = kept


def record_case(calibration: dict[str, Any], backend: str, result: dict[str, Any]) -> None:
    """Note a finished case's server CPU source and, when it is generator-bound, its reason."""
    source = (result["extra"].get("server_cpu") or {}).get("source")
    if source:
        calibration["server_cpu_sources"][backend] = source
    row = result["row"]
    if row.get("generator_bound"):
        calibration["generator_bound"]["cases"].append(
            {"case": row["case"], "reason": row.get("generator_bound_reason", "")}
        )


def endpoints_for_meta(stack: Stack) -> dict[str, Any]:
    return {
        key: {"urls": [redact_url(u) for u in urls], "source": stack.sources.get(key, "")}
        for key, urls in stack.urls.items()
    }
