"""Runs a plan of cases: servers up, one Locust subprocess per case, checkers, results folder.

Locust runs as a subprocess (``python -m locust -f workloads/<name>.py --headless``)
so that this process is never gevent-patched and the locustfile a user runs by hand is
the one measured here. Each case writes its merged recording into a scratch folder;
this module judges it and appends it to the run's results folder immediately, so an
interrupted run keeps every finished case.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench import analysis, arrival_metrics
from bench.faults import HOLD_FOR, FaultSpec, FaultThread, FaultWindow
from bench.redact import redact_text, redact_url
from bench.reset import reset_lock_state
from bench.results import RunFolder
from infra import server_stats
from infra.ports import free_port
from infra.process import die_with_parent
from infra.stack import Stack
from lockimpls.base import DEFAULT_RETRY_INTERVAL
from workloads.catalog import WorkloadInfo
from workloads.recording import decode_histogram

#: CPU share of one core above which a Locust process is taken to be the bottleneck.
GENERATOR_BOUND_SHARE = 0.9


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
        return f"{base}__t{self.trial}" if self.params.get("trials", 1) > 1 else base


def locust_argv(
    case: Case, settings: RunSettings, lock_urls: list[str], resource_url: str, out: Path
) -> list[str]:
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
        "--resource-url", resource_url,
        "--lock-ttl", str(settings.ttl),
        "--retry-interval", str(settings.retry_interval),
        "--acquire-timeout", str(settings.acquire_timeout),
        "--lock-params", json.dumps(settings.lock_params),
        "--lockbench-out", str(out),
        "--lockbench-case", case.case_id,
    ]  # fmt: skip
    for url in lock_urls:
        argv += ["--lock-url", url]
    argv += ["--fencing-mode", case.fencing]
    if settings.clock_skew:
        argv += ["--clock-skew", str(settings.clock_skew), "--skewed-clients", str(settings.skewed_clients)]
    if case.fault is not None and case.fault.at_seconds is None:
        argv += ["--fault-signal", "--fault-hold", str(HOLD_FOR[case.fault.kind])]
    for key, flag in case.workload.options.items():
        value = settings.workload_options.get(key)
        if value is not None:
            argv += [flag, str(value)]
    if settings.processes > 1:
        port = free_port()
        argv += [
            "--processes", str(settings.processes),
            "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
            "--master-host", "127.0.0.1", "--master-port", str(port),
        ]  # fmt: skip
    return argv


def _run_locust(argv: list[str], log_path: Path, timeout: float) -> int:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True, preexec_fn=die_with_parent)  # fmt: skip
        try:
            return proc.wait(timeout)
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


def _log_tail(path: Path, lines: int = 4) -> str:
    try:
        text = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return redact_text(" | ".join(text[-lines:]))


def run_case(case: Case, stack: Stack, scratch: Path) -> dict[str, Any]:
    """Run one case in Locust and return its judged, summarised outcome."""
    settings = case.settings
    out = scratch / case.case_id
    out.mkdir(parents=True, exist_ok=True)
    lock_urls = stack.urls[case.backend]
    argv = locust_argv(case, settings, lock_urls, stack.urls["resource"][0], out)
    log_path = out / "locust.log"
    try:
        reset_lock_state(case.backend, lock_urls)
    except Exception as exc:  # noqa: BLE001 - a server that cannot be cleaned cannot be measured
        raise CaseFailed(f"{case.case_id}: could not clear lock state before the case: {exc}") from exc
    before = server_stats.snapshot(case.backend, lock_urls)
    fault = None
    if case.fault is not None:
        server = stack.servers.get(f"{case.backend}-lock") or next(iter(stack.servers.values()))
        fault = FaultThread(case.fault, server, stack.urls["resource"][0], deadline_s=settings.duration)
        fault.start()
    try:
        code = _run_locust(argv, log_path, timeout=settings.duration + 120)
    finally:
        if fault is not None:
            fault.stop()
            fault.join(60)
    commands = server_stats.delta(before, server_stats.snapshot(case.backend, lock_urls))
    rec_path = out / "recording.json"
    if not rec_path.exists():
        raise CaseFailed(
            f"{case.case_id}: Locust exited with code {code} and no recording: {_log_tail(log_path)}"
        )
    recording = json.loads(rec_path.read_text())
    history = pd.read_parquet(out / "history.parquet")
    if fault is not None:
        recording["fault"] = {"spec": case.fault.label, "error": fault.error}
        if fault.window is not None:
            w = fault.window
            recording["fault"].update({"start_ns": w.start_ns, "end_ns": w.end_ns, "detail": w.detail})
            history = with_fault_window(history, w)
            history.to_parquet(out / "history.parquet", index=False)
    recording["server_commands"] = commands
    result = judge(case, settings, recording, history, out / "history.parquet")
    result["log"] = redact_text(log_path.read_text(errors="replace")) if log_path.exists() else None
    return result


def with_fault_window(history: pd.DataFrame, window: FaultWindow) -> pd.DataFrame:
    """The history plus the fault as an invoke/ok pair of op ``fault`` by client ``bench``."""
    rows = pd.DataFrame(
        {
            "client": ["bench", "bench"],
            "seq": [0, 0],
            "op": ["fault", "fault"],
            "type": ["invoke", "ok"],
            "lock": [window.kind, window.kind],
            "t_ns": [window.start_ns, window.end_ns],
            "token": pd.array([None, None], dtype="Int64"),
            "value": pd.array([None, None], dtype="Int64"),
            "error": [window.detail, window.detail],
        }
    )
    merged = pd.concat([history, rows.astype(history.dtypes.to_dict())], ignore_index=True)
    return merged.sort_values("t_ns", kind="stable").reset_index(drop=True)


def judge(
    case: Case, settings: RunSettings, recording: dict[str, Any], history: pd.DataFrame, history_file: Path
) -> dict[str, Any]:
    """Checkers and metrics for one recorded case."""
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
    arrival_columns, arrival_hists = arrival_metrics.arrival_summary(history, recording.get("final_state"))
    row.update(arrival_columns)
    # The lock may fail (overlaps) while the data stays right (fencing refused the stale writes).
    damage = [row.get(k) for k in ("oversold_units", "lost_updates", "stale_writes_accepted")]
    row["data_safe"] = not any(v and v == v for v in damage)
    fault_info = recording.get("fault") or {}
    if fault_info.get("start_ns") is not None:
        row["fault_window_s"] = (fault_info["end_ns"] - fault_info["start_ns"]) / 1e9
    if not recording.get("complete", True):
        row["verdict"] = "unknown"
    if not row.get("acquisitions"):
        # a lock that never granted anything proved nothing: most often it could not even
        # start (bad --lock-params, unreachable server); logs/<case>.log says why
        row["verdict"] = "unknown"
    shares = [
        w.get("cpu_share") for w in recording.get("workers", {}).values() if w.get("cpu_share") is not None
    ]
    row["harness_cpu_max"] = max(shares) if shares else None
    # A load generator at ~one full core cannot issue requests any faster: its figures
    # measure the harness as much as the lock, and the report says so.
    row["generator_bound"] = bool(shares) and max(shares) >= GENERATOR_BOUND_SHARE
    arrival_metrics.schedule_lag_bound(row)
    commands = recording.get("server_commands") or {}
    acquisitions = row.get("acquisitions") or 0
    row["server_cmds_per_acquire"] = (
        sum(commands.values()) / acquisitions if commands and acquisitions else None
    )
    for key, value in sorted((recording.get("lock_stats") or {}).items()):
        row[f"lockstat_{key}"] = value
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
            "lock_stats": recording.get("lock_stats", {}),
            "fault": recording.get("fault"),
            "checks": [
                {"name": r.name, "status": r.status, "counters": r.counters, "detail": r.detail}
                for r in verdict.results
            ],
        },
    }


def run_plan(
    cases: list[Case],
    stack: Stack,
    folder: RunFolder,
    progress: Callable[[Case, int, int], None] | None = None,
    on_failure: Callable[[Case, str], None] | None = None,
) -> list[str]:
    """Run every case into ``folder``; returns the list of failed case messages."""
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lockbench-cases-") as tmp:
        for i, case in enumerate(cases):
            if progress:
                progress(case, i, len(cases))
            try:
                result = run_case(case, stack, Path(tmp))
            except CaseFailed as exc:
                failures.append(str(exc))
                if on_failure:
                    on_failure(case, str(exc))
                continue
            folder.add_case(
                result["row"],
                result["histograms"],
                result["history_file"],
                result["extra"],
                result.get("log"),
            )
            dead = stack.dead()
            if dead:
                raise ServerDied(
                    f"server {', '.join(dead)} died during {case.case_id}; finished cases are kept"
                )
    return failures


def endpoints_for_meta(stack: Stack) -> dict[str, Any]:
    return {
        key: {"urls": [redact_url(u) for u in urls], "source": stack.sources.get(key, "")}
        for key, urls in stack.urls.items()
    }
