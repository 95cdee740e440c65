"""Runs a plan of cases: servers up, one Locust subprocess per case, checkers, results folder.

Locust runs as a subprocess (``python -m locust -f workloads/<name>.py --headless``)
so that this process is never gevent-patched and the locustfile a user runs by hand is
the one measured here. Each case writes its merged recording into a scratch folder;
this module judges it and appends it to the run's results folder immediately, so an
interrupted run keeps every finished case.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from bench.errors import raise_if_interrupted
from bench.measure import analysis, arrival_metrics, evidence, fidelity, strikes
from bench.measure.evidence import checker_reason
from bench.measure.floors import floors as measure_floors
from bench.measure.strikes import EvidenceTarget
from bench.nemesis import partitions
from bench.nemesis.faults import HOLD_FOR, FaultSpec, FaultThread, FaultWindow, StrikeMark, namespace
from bench.results.folder import RunFolder, process_start
from bench.results.redact import redact_text, redact_url
from bench.run.reset import reset_lock_state
from bench.run.warm import WarmLocust, WarmLocustError
from infra import server_stats
from infra.ports import free_port
from infra.process import die_with_parent
from infra.stack import Stack
from lockimpls.base import DEFAULT_RETRY_INTERVAL
from workloads.checks.recovery import server_recovery_columns
from workloads.checks.stop_rules import StopRule
from workloads.harness.catalog import WorkloadInfo
from workloads.harness.recording import decode_histogram

#: Longest load window of a solo calibration case (one client): it ends sooner, as soon as
#: it holds :data:`SOLO_ACQUISITIONS` (bench/run/runner.py ``calibration_case``).
CALIBRATION_S = 3.0
#: Acquisitions that end a solo calibration early. The hold p50 of 500 samples lies, with 95%
#: confidence, between the sample's 45.6th and 54.4th percentiles (binomial order statistics):
#: a few percent of a hold, against the 2x by which a case is judged inflated. One client of
#: a 1 ms critical section reaches it in about a second (Redis, quiet machine: 1,200-1,700
#: acquisitions in 3 s; pottery-redlock 550, which runs the whole 3 s).
SOLO_ACQUISITIONS = 500


class ServerDied(Exception):
    """A server the run started is gone: the remaining cases would measure nothing."""


class CaseFailed(Exception):
    """A case produced no usable recording (Locust crashed, a server died)."""


@dataclass
class RunSettings:
    """Everything about how to drive Locust that is the same for every case of a run."""

    users: int = 50
    spawn_rate: float = 50.0
    duration: float = 8.0
    processes: int = 1
    ttl: float = 10.0
    retry_interval: float = DEFAULT_RETRY_INTERVAL
    acquire_timeout: float = 5.0
    clock_skew: float = 0.0
    skewed_clients: float = 0.0
    lock_params: dict[str, Any] = field(default_factory=dict)
    workload_options: dict[str, Any] = field(default_factory=dict)
    #: JSON of a workloads.checks.stop_rules.StopRule: end the case once its evidence is in ("" = run the duration)
    stop_rule: str = ""
    #: master mode: Locust listens here and waits for ``expect_workers`` remote workers
    master_bind: tuple[str, int] | None = None
    expect_workers: int = 0
    #: seconds a master waits for its workers before the case fails
    workers_wait_s: float = 120.0
    #: how often a server fault strikes in one case (bench/nemesis/faults.py), and the purchases
    #: the service must grant between two strikes
    strikes: int = 1
    grants_between: int = 0
    #: what a survived fault case needs to be shown as survived (bench/measure/strikes.py)
    evidence: EvidenceTarget = field(default_factory=EvidenceTarget)


@dataclass
class Case:
    """One impl x one workload x one parameter set x one trial."""

    impl: str
    backend: str
    workload: WorkloadInfo
    trial: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    fencing: str = "off"  # off | observe (unfenced, stale writes counted) | enforce (fenced)
    fault: FaultSpec | None = None
    settings: RunSettings = field(default_factory=RunSettings)
    #: a one-client calibration of the impl (bench/measure/fidelity.py), not a case of the results
    solo: bool = False

    @property
    def scenario(self) -> str:
        """What the case puts the lock through: workload, fault and fencing, e.g. ``long-cs+fenced``."""
        parts = [self.workload.name]
        if self.fault:
            parts.append(self.fault.label)
        if self.fencing != "off":
            parts.append("fenced" if self.fencing == "enforce" else "unfenced")
        return "+".join(parts)

    @property
    def case_id(self) -> str:
        safe = self.impl.replace(":", "_").replace("/", "_")
        base = f"{safe}__{self.scenario.replace('+', '__').replace('@', '-')}"
        if self.solo:
            return f"{base}__solo"
        return f"{base}__t{self.trial}" if self.params.get("trials", 1) > 1 else base

    @property
    def calibration_key(self) -> tuple[str, str, str]:
        """Cases that share a solo calibration: same impl, workload steps and fencing mode."""
        return (self.impl, self.workload.name, self.fencing)


def calibration_case(case: Case) -> Case:
    """The one-client, short, fault-free twin of ``case``: its solo calibration.

    It ends after :data:`SOLO_ACQUISITIONS` acquisitions (a stop rule, as the matrix's cases
    end on their evidence) or after :data:`CALIBRATION_S`, whichever comes first.
    """
    duration = min(CALIBRATION_S, case.settings.duration)  # never longer than the case itself
    rule = StopRule("start", acquisitions=SOLO_ACQUISITIONS).to_json()
    settings = replace(case.settings, users=1, spawn_rate=1.0, processes=1, duration=duration, stop_rule=rule)
    return replace(case, fault=None, trial=0, settings=settings, solo=True)


def with_calibration(cases: list[Case]) -> list[Case]:
    """``cases`` with each impl's solo calibration just before its first contended case.

    Interleaved rather than all at the start, so a calibration sees the same machine as
    the cases it calibrates. Only workloads whose steps one client reproduces are
    calibrated (:data:`bench.measure.fidelity.CALIBRATED_WORKLOADS`).
    """
    out: list[Case] = []
    seen: set[tuple[str, str, str]] = set()
    for case in cases:
        key = case.calibration_key
        if case.workload.name in fidelity.CALIBRATED_WORKLOADS and key not in seen:
            seen.add(key)
            out.append(calibration_case(case))
        out.append(case)
    return out


#: File the Locust child rewrites every second with its progress (see workloads/harness/locust_glue.py).
PROGRESS_FILE = "progress.json"
#: File in a case's scratch folder (mode 0600) that carries the server URLs to Locust.
URLS_FILE = "urls.json"


def write_urls_file(out: Path, lock_urls: list[str], resource_url: str) -> Path:
    """The URLs, passwords included, in a file only this user can read: ``ps`` shows argv to all."""
    path = out / URLS_FILE
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"lock_urls": list(lock_urls), "resource_url": resource_url}, fh)
    os.chmod(path, 0o600)  # an existing file keeps its mode through O_CREAT
    return path


def locust_argv(
    case: Case,
    settings: RunSettings,
    lock_urls: list[str],
    resource_url: str,
    out: Path,
    last_case: bool = False,
    lock_namespace: str = "",
) -> list[str]:
    """Locust's command line for a case; the URLs go into a 0600 file in ``out``, never on it."""
    urls_file = write_urls_file(out, lock_urls, resource_url)
    argv = [
        sys.executable, "-m", "locust",
        "-f", str(case.workload.path),
        "--headless",
        "--users", str(settings.users),
        "--spawn-rate", str(settings.spawn_rate),
        "--run-time", f"{max(1, round(settings.duration))}s",
        "--stop-timeout", "10",
        "--exit-code-on-error", "0",
        "--only-summary",
        "--loglevel", "WARNING",
        "--lock-impl", case.impl,
        "--lockbench-urls-file", str(urls_file),
        "--lock-ttl", str(settings.ttl),
        "--retry-interval", str(settings.retry_interval),
        "--acquire-timeout", str(settings.acquire_timeout),
        "--lock-params", json.dumps(settings.lock_params),
        "--lockbench-out", str(out),
        "--lockbench-case", case.case_id,
    ]  # fmt: skip
    argv += ["--fencing-mode", case.fencing]
    if lock_namespace:
        argv += ["--lock-namespace", lock_namespace]
    if settings.stop_rule:
        argv += ["--lockbench-stop", settings.stop_rule]
    if settings.clock_skew:
        argv += ["--clock-skew", str(settings.clock_skew), "--skewed-clients", str(settings.skewed_clients)]
    if case.fault is not None and case.fault.at_seconds is None:
        hold = HOLD_FOR[case.fault.kind]
        if case.fault.is_partition:  # work through the cut, write just before its heal
            hold = partitions.cut_seconds(settings.ttl, settings.lock_params.get("session_timeout")) - 1.0
        argv += ["--fault-signal", "--fault-hold", f"{hold:g}"]
    for key, flag in case.workload.options.items():
        value = settings.workload_options.get(key)
        if value is not None:
            argv += [flag, str(value)]
    if settings.master_bind is not None:
        host, port = settings.master_bind
        argv += [
            "--master", "--master-bind-host", host, "--master-bind-port", str(port),
            "--expect-workers", str(settings.expect_workers),
            "--expect-workers-max-wait", str(round(settings.workers_wait_s)),
            "--lockbench-align-clocks",
        ]  # fmt: skip
        if last_case:
            argv.append("--lockbench-last-case")
    elif settings.processes > 1:
        port = free_port()
        argv += [
            "--processes", str(settings.processes),
            "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
            "--master-host", "127.0.0.1", "--master-port", str(port),
        ]  # fmt: skip
    return argv


def _poll_progress(path: Path, on_tick: Callable[[dict[str, Any]], None]) -> None:
    try:
        sample = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # not written yet, or caught mid-replace: the next poll gets it
    on_tick(sample)


def _run_locust(
    argv: list[str], log_path: Path, timeout: float, on_tick: Callable[[dict[str, Any]], None] | None = None
) -> int:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True, preexec_fn=die_with_parent)  # fmt: skip
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    code = proc.wait(min(1.0, max(0.0, deadline - time.monotonic())))
                    # a worker Locust forked (--processes) that outlived its master: stop it too
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    return code
                except subprocess.TimeoutExpired:
                    raise_if_interrupted()
                    if time.monotonic() >= deadline:
                        raise
                    if on_tick is not None:
                        _poll_progress(log_path.parent / PROGRESS_FILE, on_tick)
        except BaseException:
            # Ctrl-C, timeout or any error: stop Locust (and its forked workers) for good.
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
                try:
                    os.killpg(proc.pid, sig)
                    proc.wait(wait)
                    break
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    continue
            raise


def _client_hosts(stack: Stack, n: int) -> list[Any]:
    """``n`` client hosts of the run's test hosts (made on first use, then reused)."""
    net = stack.hosts
    hosts = []
    for i in range(1, n + 1):
        try:
            hosts.append(net.host(f"client-{i}"))
        except KeyError:
            hosts.append(net.add_host(f"client-{i}"))
    return hosts


def _run_locust_on_hosts(
    argv: list[str],
    stack: Stack,
    workers: int,
    log_path: Path,
    timeout: float,
    client_hosts: dict[int, Any],
) -> int:
    """Locust's master here (bench's control host), one worker process on each client host.

    Why not ``--processes``: its workers share one host, so cutting the holder's host off
    would cut every client; here each worker can be cut alone. ``client_hosts`` receives
    ``{worker pid: client host}`` as the workers start.
    """
    net = stack.hosts
    control = net.host("control")
    port = free_port()
    hosts = _client_hosts(stack, workers)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    master_argv = [*argv, "--master", "--expect-workers", str(workers),
                   "--master-bind-host", control.addr, "--master-bind-port", str(port)]  # fmt: skip
    worker_argv = [*argv, "--worker", "--master-host", control.addr, "--master-port", str(port)]
    procs: list[subprocess.Popen] = []
    with open(log_path, "wb") as log:
        try:
            master = subprocess.Popen(master_argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=env, start_new_session=True, preexec_fn=die_with_parent)  # fmt: skip
            procs.append(master)
            for host in hosts:
                procs.append(net.popen(host, worker_argv, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=env))  # fmt: skip
            client_hosts.update({p.pid: h for p, h in zip(procs[1:], hosts, strict=True)})
            code = master.wait(timeout)
            for proc in procs[1:]:
                # a worker stuck in a client library's shutdown has already sent its
                # recording (or the master marked the case incomplete): stop it
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(15)
            return code
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(5)


def dead_servers_text(stack: Stack, dead: list[str]) -> str:
    """``the resource server (redis redis://127.0.0.1:4242/0)``: which server died, in words."""
    parts = []
    for name in dead:
        server = stack.servers.get(name)
        kind = type(server).__name__.removesuffix("Server").lower() if server is not None else "server"
        url = redact_url(str(getattr(server, "url", ""))) if server is not None else ""
        role = "the resource server" if name == "resource" else f"the lock server {name}"
        parts.append(f"{role} ({kind}{' ' + url if url else ''})")
    return ", ".join(parts)


def _log_tail(path: Path, lines: int = 4) -> str:
    try:
        text = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return redact_text(" | ".join(text[-lines:]))


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
) -> dict[str, Any]:
    """Run one case in Locust and return its judged, summarised outcome.

    ``launch(argv, log_path, timeout)`` starts Locust and returns its exit code; default a
    cold ``python -m locust`` subprocess (``bench run`` and ``bench matrix`` pass a warm one,
    bench/run/warm.py).
    """
    begun_ns = time.monotonic_ns()
    settings = case.settings
    out = scratch / case.case_id
    out.mkdir(parents=True, exist_ok=True)
    lock_urls = stack.urls[case.backend]
    on_hosts = case.fault is not None and case.fault.is_partition
    argv_settings = replace(settings, processes=1) if on_hosts else settings
    ns = namespace("0") if case.fault is not None else ""
    argv = locust_argv(case, argv_settings, lock_urls, stack.urls["resource"][0], out, last_case, ns)
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
        server = stack.servers.get(f"{case.backend}-lock") or next(iter(stack.servers.values()))
        if on_hosts:
            lock_servers = [s for k, s in stack.servers.items() if k.startswith(f"{case.backend}-lock")]
            ground = partitions.PartitionGround(stack.hosts, lock_servers)
        fault = FaultThread(
            case.fault, server, stack.urls["resource"][0], deadline_s=settings.duration, ground=ground,
            strikes=settings.strikes, grants_between=settings.grants_between, lease_s=settings.ttl,
            servers=lock_servers_of(stack, case.backend), session_s=settings.lock_params.get("session_timeout"),
            quorum_keys=quorum_keys([case]),
        )  # fmt: skip
    if fault is not None:
        fault.start()
    launched_ns = time.monotonic_ns()
    try:
        if on_hosts:
            code = _run_locust_on_hosts(
                argv, stack, settings.processes, log_path, settings.duration + 120, ground.client_hosts
            )
        elif launch is not None:
            code = launch(argv, log_path, settings.duration + 120)
        else:
            wait = settings.workers_wait_s if settings.master_bind else 0
            code = _run_locust(argv, log_path, timeout=settings.duration + 120 + wait, on_tick=on_tick)
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
        raise CaseFailed(
            f"{case.case_id}: Locust exited with code {code} and no recording: {_log_tail(log_path)}"
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
                recording["partition"] = partitions.after_heal_columns(
                    history, w.start_ns, w.end_ns, fault.holder
                )
            history = with_fault_windows(history, fault.windows, box.marks)
            history.to_parquet(out / "history.parquet", index=False)
    recording["server_commands"] = commands
    if server_cpu is not None:
        recording["server_cpu"] = {"seconds": server_cpu.seconds, "source": server_cpu.source}
    result = judge(case, settings, recording, history, out / "history.parquet", solo)
    result["log"] = redact_text(log_path.read_text(errors="replace")) if log_path.exists() else None
    # where a case's wall time goes: Locust start-up (launch -> test start), load, shut-down
    result["timing"] = {
        **timing,
        "test_start_ns": recording.get("t_start_ns"),
        "test_stop_ns": recording.get("t_stop_ns"),
        "ended_ns": time.monotonic_ns(),
    }
    return result


def with_fault_windows(
    history: pd.DataFrame, windows: list[FaultWindow], marks: list[StrikeMark] | None = None
) -> pd.DataFrame:
    """The history plus every strike as an invoke/ok pair of op ``fault`` by client ``bench`` (seq = strike).

    With ``marks`` (what each strike was to this case), each strike also gets a ``strike``
    row at its start: ``ok`` when its precondition held (the case's holder was inside, on the
    struck server), ``fail`` with the reason when it missed; the holder's client id is in
    ``lock``. Without marks (an older history) every strike counts, as it did.
    """
    if not windows:
        return history
    n = len(windows)
    frames = {
        "client": ["bench"] * (2 * n),
        "seq": [i for i in range(n) for _ in (0, 1)],
        "op": ["fault"] * (2 * n),
        "type": ["invoke", "ok"] * n,
        "lock": [w.kind for w in windows for _ in (0, 1)],
        "t_ns": [t for w in windows for t in (w.start_ns, w.end_ns)],
        "error": [w.detail for w in windows for _ in (0, 1)],
    }
    for i, w in enumerate(windows):  # when the struck service answered again (recovery counts from it)
        frames["client"].append("bench")
        frames["seq"].append(i)
        frames["op"].append("service")
        frames["type"].append("ok")
        frames["lock"].append(w.kind)
        frames["t_ns"].append(w.service_ns)
        frames["error"].append("")
    by_strike = {m.strike: m for m in marks or []}
    if marks is not None:
        for i, w in enumerate(windows):
            mark = by_strike.get(i)
            frames["client"].append("bench")
            frames["seq"].append(i)
            frames["op"].append("strike")
            frames["type"].append("ok" if mark is not None and mark.hit else "fail")
            frames["lock"].append((mark.holder if mark else None) or "")
            frames["t_ns"].append(w.start_ns)
            frames["error"].append(
                "" if mark is not None and mark.hit else (mark.reason if mark else "the case had ended")
            )
    rows = pd.DataFrame(frames)
    rows["token"] = pd.array([None] * len(rows), dtype="Int64")
    rows["value"] = pd.array([None] * len(rows), dtype="Int64")
    rows = rows[list(history.columns)] if set(history.columns) == set(rows.columns) else rows
    merged = pd.concat([history, rows.astype(history.dtypes.to_dict())], ignore_index=True)
    return merged.sort_values("t_ns", kind="stable").reset_index(drop=True)


def judge(
    case: Case,
    settings: RunSettings,
    recording: dict[str, Any],
    history: pd.DataFrame,
    history_file: Path,
    solo: fidelity.Solo | None = None,
) -> dict[str, Any]:
    """Checkers and metrics for one recorded case; ``solo`` is its impl's calibration, if any."""
    verdict = case.workload.check_function()(history, recording["final_state"])
    hists = {name: decode_histogram(text) for name, text in recording["histograms"].items()}
    window = analysis.steady_window(history)
    params = {**case.params, "trial": case.trial, "users": settings.users, "processes": settings.processes}
    row = analysis.case_row(
        case.case_id, case.impl, case.workload.name, params, history, hists, verdict, window
    )
    row["scenario"] = case.scenario
    row["fencing"] = (recording.get("final_state") or {}).get("fencing", {}).get("mode", "off")
    row["fault"] = case.fault.label if case.fault else ""
    arrival_columns, arrival_hists = arrival_metrics.arrival_summary(
        history, recording.get("final_state"), settings.workload_options.get("patience")
    )
    row.update(arrival_columns)
    # The lock may fail (overlaps) while the data stays right (fencing refused the stale writes);
    # tokens out of grant order void that claim: the resource trusted an order that was not there.
    # tokens out of order count against the data only where the resource trusted them (fencing on)
    fenced_columns = ("fencing_order_violations", "legit_writes_refused") if row["fencing"] != "off" else ()
    damage = [
        row.get(k) for k in ("oversold_units", "lost_updates", "stale_writes_accepted", *fenced_columns)
    ]
    row["data_safe"] = not any(v and v == v for v in damage)
    fault_info = recording.get("fault") or {}
    if fault_info.get("start_ns") is not None:
        row["fault_window_s"] = (fault_info["end_ns"] - fault_info["start_ns"]) / 1e9
    # how much of its fault the case saw, and whether a "survived" is earned (bench/measure/strikes.py)
    skewed = bool(settings.clock_skew and settings.skewed_clients)
    fault_case = case.fault is not None or case.workload.name in strikes.FAULT_WORKLOADS or skewed
    if fault_case:
        kind = "clock-skew" if skewed and case.fault is None else case.workload.name
        times, missed = strikes.strike_record(history, kind, settings.ttl, case.fault is not None)
        row.update(strikes.columns(history, times, missed))
        if case.fault is not None and case.fault.at_seconds is None:
            row.update(server_recovery_columns(history))
    if case.workload.name == "crash":
        row["stuck_bound_s"] = settings.workload_options.get("stuck_bound")
    for key in ("recovery_expected_s", "recovery_by"):
        if key in case.params:
            value = case.params[key]
            # a lock that never frees a dead holder: empty here, and recovery_by says "never"
            row[key] = None if isinstance(value, float) and value == float("inf") else value
    if recording.get("partition") is not None and fault_info.get("start_ns") is not None:
        # judged again with the workers' clock bounds: a grant within them of the cut or heal is undecided
        row.update(
            partitions.after_heal_columns(
                history, fault_info["start_ns"], fault_info["end_ns"], fault_info.get("holder"),
                (recording.get("final_state") or {}).get("clock_uncertainty_ns"),
            )
        )  # fmt: skip
    row["indeterminate_purchases"] = int(verdict.counters.get("indeterminate_purchases", 0))
    row["verdict_reason"] = checker_reason(verdict.results, row["verdict"])
    # a verdict needs evidence (bench/measure/evidence.py): enough acquisitions, not mostly server errors
    evidence.apply(
        row, history, fault_injected=case.fault is not None, recording_complete=recording.get("complete", True),
        recording_problems=recording.get("problems", []), duration_s=settings.duration,
        spawn_s=settings.users / settings.spawn_rate if settings.spawn_rate else None,
    )  # fmt: skip
    if fault_case:
        row["evidence"] = strikes.grade(row, settings.evidence, fault_case=True)
        row["evidence_target"] = settings.evidence.text()
        row["evidence_target_k"] = settings.evidence.strikes
        row["evidence_target_n"] = settings.evidence.acquisitions
        if row["evidence"] == "not-struck":
            what = case.fault.label if case.fault else f"the {case.workload.name} event"
            why = (
                fault_info.get("error")
                or row.get("strikes_missed_reason")
                or fault_info.get("stopped_early")
                or "no holder claimed it in time"
            )
            row["verdict"] = "unknown"
            row["verdict_reason"] = f"{what} did not strike ({why}): not tested"
    shares = [
        w.get("cpu_share") for w in recording.get("workers", {}).values() if w.get("cpu_share") is not None
    ]
    row["harness_cpu_max"] = max(shares) if shares else None
    commands = recording.get("server_commands")
    commands = {} if commands is None else commands
    acquisitions = row.get("acquisitions") or 0
    # a failed read or a counter reset (server restart) leaves no count: n/a with its reason, never a number
    row["server_cmds_reason"] = getattr(commands, "error", "")
    row["server_cmds_per_acquire"] = (
        sum(commands.values()) / acquisitions
        if commands and acquisitions and not row["server_cmds_reason"]
        else None
    )
    # Does the row describe the lock or the load generator? (bench/measure/fidelity.py)
    row.update(
        fidelity.columns(
            row,
            solo,
            case.workload.name in fidelity.CALIBRATED_WORKLOADS,
            recording.get("workers", {}),
            recording.get("lock_stats") or {},
            (recording.get("server_cpu") or {}).get("seconds"),
        )
    )
    for key, value in sorted((recording.get("lock_stats") or {}).items()):
        row[f"lockstat_{key}"] = value
    row["stall_reason"] = stall_reason(row, settings)
    return {
        "row": row,
        "histograms": {**recording["histograms"], **arrival_hists},
        "history_file": history_file,
        "extra": {
            "recording_complete": recording.get("complete", True),
            "recording_problems": recording.get("problems", []),
            "workers": recording.get("workers", {}),
            "merged_totals": recording.get("merged_totals", {}),
            "final_state": recording.get("final_state", {}),
            "server_commands": recording.get("server_commands", {}),
            "server_cpu": recording.get("server_cpu"),
            "lock_stats": recording.get("lock_stats", {}),
            "fault": recording.get("fault"),
            "clock_offsets": recording.get("clock_offsets") or {},
            "checks": [
                {"name": r.name, "status": r.status, "counters": r.counters, "detail": r.detail}
                for r in verdict.results
            ],
        },
    }


def stall_reason(row: dict[str, Any], settings: RunSettings) -> str:
    """Why a failed case's violation may be a stall of the load generator's own process, "" if not.

    A holder whose Locust loop ran late longer than its lease or session (or late most of the
    time) was paused, whatever fault the case was about: the violation is real (a pause breaks
    a lease lock) but it is not the scenario's fault's doing, and the reader must be told.
    """
    if row.get("verdict") != "invalid":
        return ""
    late = row.get("loop_lag_late_share")
    p99_us = row.get("loop_lag_p99_us")
    lease = settings.lock_params.get("session_timeout") or settings.ttl
    what = "session" if settings.lock_params.get("session_timeout") else "lease"
    late_ok = isinstance(late, int | float) and late == late
    p99_ok = isinstance(p99_us, int | float) and p99_us == p99_us
    over_share = late_ok and late > fidelity.LATE_SHARE_LIMIT
    over_lease = p99_ok and lease and p99_us / 1e6 > float(lease)
    if not (over_share or over_lease):
        return ""
    parts = []
    if late_ok:
        parts.append(f"loop late {late:.0%}")
    if p99_ok:
        parts.append(f"lag p99 {p99_us / 1e6:.2g} s")
    cause = (
        f"the scenario's {row.get('fault') or row.get('workload')}" if row.get("fault") else "the scenario"
    )
    return (
        f"a Locust process stalled ({', '.join(parts)}) against a {float(lease):g} s {what}: the violation may be "
        f"a pause of the load generator, not {cause}"
    )


#: A case's phases in run.json ``timing``, in the order a case goes through them: clearing lock
#: state and snapshots, Locust's start (launch to its first user), the load window, Locust's
#: shut-down, reading and judging the recording, writing the case into the results folder.
CASE_PHASES = ("prepare", "locust_start", "load", "locust_stop", "judge", "write")
#: The run's phases: bench's own start (imports, option checks), servers up, waiting for the warm
#: Locust's imports, floors, solo calibrations (whole), the cases' phases summed, servers down,
#: summary and report.html. ``other`` is what is left of the wall time (progress, gaps).
RUN_PHASES = ("bench_start", "server_start", "warm_start", "floors", "calibration", *CASE_PHASES,
              "server_stop", "render")  # fmt: skip
#: Longest plausible gap between this process's start and the run's start: beyond it the
#: process start read from /proc is not trusted (a time namespace) and the run starts now.
_MAX_BENCH_START_S = 120.0


def _process_started() -> float:
    """When this process started, on the monotonic clock: bench's imports belong to the run's wall time."""
    now = time.monotonic()
    ticks = process_start(os.getpid())
    if ticks is None:
        return now
    age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return now - age if 0 <= age <= _MAX_BENCH_START_S else now


def load_window_ns(timing: dict[str, Any]) -> tuple[int, int] | None:
    """Locust's test start and stop of one attempt (``timing`` from :func:`run_case`); None if it never started."""
    start, stop = timing.get("test_start_ns"), timing.get("test_stop_ns")
    return (start, stop) if start is not None and stop is not None else None


def case_phases(timing: dict[str, Any], begun_ns: int, written_ns: int) -> dict[str, float]:
    """One attempt's phases in seconds (``timing`` from :func:`run_case`); ``write`` is the rest of its wall."""
    launched, exited, ended = timing["launched_ns"], timing["exited_ns"], timing["ended_ns"]
    # Locust never started its test: all of it was start-up
    start, stop = load_window_ns(timing) or (exited, exited)
    parts = {
        "prepare": launched - timing["begun_ns"],
        "locust_start": start - launched,
        "load": stop - start,
        "locust_stop": exited - stop,
        "judge": ended - exited,
        "write": written_ns - ended,
    }
    parts["prepare"] += timing["begun_ns"] - begun_ns  # an earlier attempt's tail, if any
    return {k: v / 1e9 for k, v in parts.items()}


class RunTiming:
    """Where a run's wall time goes: run.json ``timing`` and the console's last line.

    Why: the first report's wait is mostly not load (issue 25: 170 s for 80 s of load);
    named phases show which part to cut, and every later change can be checked against
    them. Monotonic clock throughout; the wall time starts when the bench process did.
    """

    def __init__(self) -> None:
        self.t0 = _process_started()
        self.phases: dict[str, float] = dict.fromkeys(RUN_PHASES, 0.0)
        self.cases: dict[str, dict[str, Any]] = {}
        #: how the cases' Locust started: warm, cold, or warm then cold (and why)
        self.launcher = "cold"

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the block's wall time to phase ``name``."""
        start = time.monotonic()
        try:
            yield
        finally:
            self.phases[name] += time.monotonic() - start

    def add_case(self, case: Case, attempts: list[dict[str, Any]], begun_ns: int, written_ns: int) -> None:
        """File a case (or a solo calibration with its retries) that ran from ``begun_ns`` to ``written_ns``."""
        wall = (written_ns - begun_ns) / 1e9
        entry: dict[str, Any] = {"wall_s": round(wall, 4), "solo": case.solo, "attempts": len(attempts)}
        if attempts:
            sums = dict.fromkeys(CASE_PHASES, 0.0)
            for i, t in enumerate(attempts):
                end = attempts[i + 1]["begun_ns"] if i + 1 < len(attempts) else written_ns
                start = begun_ns if i == 0 else t["begun_ns"]
                for k, v in case_phases(t, start, end).items():
                    sums[k] += v
            entry.update({f"{k}_s": round(v, 4) for k, v in sums.items()})
        else:
            entry["failed"] = True
        self.cases[case.case_id] = entry
        if case.solo:
            self.phases["calibration"] += wall
        elif attempts:
            for k in CASE_PHASES:
                self.phases[k] += entry[f"{k}_s"]

    def as_json(self) -> dict[str, Any]:
        """run.json ``timing``: the run's wall time, its phases, ``overhead_share`` = wall / load, the cases."""
        wall = time.monotonic() - self.t0
        load = self.phases["load"]
        out: dict[str, Any] = {"wall_s": round(wall, 3), "load_s": round(load, 3)}
        out["overhead_s"] = round(wall - load, 3)
        out["overhead_share"] = round(wall / load, 3) if load > 0 else None
        out["launcher"] = self.launcher
        out.update({f"{k}_s": round(v, 3) for k, v in self.phases.items()})
        out["other_s"] = round(max(0.0, wall - sum(self.phases.values())), 3)
        out["cases"] = self.cases
        return out

    def last_line(self) -> str:
        """The console's last line: the run's wall time and its overhead share."""
        t = self.as_json()
        wall = t["wall_s"]
        text = f"{int(wall // 60)}m {wall % 60:04.1f}s" if wall >= 60 else f"{wall:.1f}s"
        share = f"{t['overhead_share']:.2f}" if t["overhead_share"] is not None else "n/a (no load)"
        return (
            f"lockbench: wall time {text} for {t['load_s']:.1f}s of load: overhead share (wall / load) "
            f"{share}; where the time went: run.json timing"
        )


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
        return _run_locust(argv, log_path, timeout, on_tick)


def run_plan(
    cases: list[Case],
    stack: Stack,
    folder: RunFolder,
    progress: Callable[[Case, int, int], None] | None = None,
    on_failure: Callable[[Case, str], None] | None = None,
    on_tick: Callable[[dict[str, Any]], None] | None = None,
    warm: WarmLocust | None = None,
    timing: RunTiming | None = None,
) -> list[str]:
    """Run every case into ``folder``; returns the list of failed case messages.

    Floors are measured first; solo calibration cases (``case.solo``) go into run.json's
    ``calibration``, never into the case table, and calibrate the cases after them.
    ``warm`` (spawned by the caller, local cases only) starts every case's and every
    calibration's Locust; it is waited for before the floors, so its imports never share
    the CPU with a measurement. Cases run one after another, each judged and written
    before the next starts: nothing of bench's runs during a load window. ``timing``
    collects where the time went (run.json ``timing``).
    """
    failures: list[str] = []
    timing = timing if timing is not None else RunTiming()
    launcher: Launcher | None = None
    if warm is not None:
        with timing.phase("warm_start"):
            try:
                warm.wait_ready()
                launcher = Launcher(warm, timing)
            except WarmLocustError as exc:
                timing.launcher = f"cold: {exc}"
    backends = list(dict.fromkeys(c.backend for c in cases))
    with timing.phase("floors"):
        calibration = new_calibration(measure_floors(stack.urls, backends))
    folder.note("calibration", calibration)
    solos: dict[tuple[str, str, str], fidelity.Solo] = {}
    with tempfile.TemporaryDirectory(prefix="lockbench-cases-") as tmp:
        for i, case in enumerate(cases):
            raise_if_interrupted()
            if progress:
                progress(case, i, len(cases))
            begun_ns = time.monotonic_ns()
            attempts: list[dict[str, Any]] = []
            if case.solo:
                # not a case: a failed calibration leaves its impl's cases on the CPU fallback
                solo = calibrate_solo(case, stack, Path(tmp), calibration, launcher, attempts)
                if solo is not None:
                    solos[case.calibration_key] = solo
                elif on_failure:
                    on_failure(case, calibration["errors"][-1])
                timing.add_case(case, attempts, begun_ns, time.monotonic_ns())
                folder.meta["timing"] = timing.as_json()  # so far: written with the calibration
                folder.note("calibration", calibration)
                _stop_if_a_server_died(stack, case)
                continue
            solo = solos.get(case.calibration_key)
            if solo is None and case.workload.name in fidelity.CALIBRATED_WORKLOADS:
                same_steps = [s for k, s in solos.items() if k[1:] == case.calibration_key[1:]]
                solo = fidelity.pooled(same_steps)
            launch = functools.partial(launcher, on_tick=on_tick) if launcher is not None else None
            try:
                result = run_case(
                    case, stack, Path(tmp), solo, on_tick, launch=launch, last_case=i == len(cases) - 1
                )
            except CaseFailed as exc:
                timing.add_case(case, attempts, begun_ns, time.monotonic_ns())
                failures.append(str(exc))
                if on_failure:
                    on_failure(case, str(exc))
                continue
            record_case(calibration, case.backend, result)
            dead = stack.dead()
            if dead:
                evidence.server_died(result["row"], dead)
            folder.add_case(
                result["row"],
                result["histograms"],
                result["history_file"],
                result["extra"],
                result.get("log"),
            )
            timing.add_case(case, [result["timing"]], begun_ns, time.monotonic_ns())
            folder.meta["timing"] = timing.as_json()  # so far: written with the calibration
            folder.note("calibration", calibration)
            if result["extra"].get("clock_offsets"):
                # the latest measurement per worker; every case keeps its own in hist/<case>.json
                offsets = {**folder.meta.get("clock_offsets", {}), **result["extra"]["clock_offsets"]}
                folder.note("clock_offsets", offsets)
            if dead:
                raise ServerDied(
                    f"{dead_servers_text(stack, dead)} died during {case.case_id}; finished cases are kept"
                )
    return failures


def _stop_if_a_server_died(stack: Stack, case: Case) -> None:
    dead = stack.dead()
    if dead:
        raise ServerDied(f"server {', '.join(dead)} died during {case.case_id}; finished cases are kept")


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
    }
    calibration["solo"].setdefault(case.impl, entry)
    calibration["solo_by_scenario"].setdefault(case.scenario, {})[case.impl] = entry


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
