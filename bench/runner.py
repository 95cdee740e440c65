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

from bench import analysis
from bench.redact import redact_text, redact_url
from bench.results import RunFolder
from infra import server_stats
from infra.ports import free_port
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
class Case:
    """One impl x one workload x one parameter set x one trial."""

    impl: str
    backend: str
    workload: WorkloadInfo
    trial: int = 0
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def case_id(self) -> str:
        safe = self.impl.replace(":", "_").replace("/", "_")
        base = f"{safe}__{self.workload.name}"
        return f"{base}__t{self.trial}" if self.params.get("trials", 1) > 1 else base


@dataclass
class RunSettings:
    """Everything about how to drive Locust that is the same for every case of a run."""

    users: int = 50
    spawn_rate: float = 50.0
    duration: float = 10.0
    processes: int = 1
    ttl: float = 10.0
    retry_interval: float = DEFAULT_RETRY_INTERVAL
    acquire_timeout: float = 5.0
    fencing: bool = False
    lock_params: dict[str, Any] = field(default_factory=dict)
    workload_options: dict[str, Any] = field(default_factory=dict)


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
    if settings.fencing:
        argv.append("--fencing")
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
                                env=env, start_new_session=True)  # fmt: skip
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


def run_case(case: Case, settings: RunSettings, stack: Stack, scratch: Path) -> dict[str, Any]:
    """Run one case in Locust and return its judged, summarised outcome."""
    out = scratch / case.case_id
    out.mkdir(parents=True, exist_ok=True)
    lock_urls = stack.urls[case.backend]
    argv = locust_argv(case, settings, lock_urls, stack.urls["resource"][0], out)
    log_path = out / "locust.log"
    before = server_stats.snapshot(case.backend, lock_urls)
    code = _run_locust(argv, log_path, timeout=settings.duration + 120)
    commands = server_stats.delta(before, server_stats.snapshot(case.backend, lock_urls))
    rec_path = out / "recording.json"
    if not rec_path.exists():
        raise CaseFailed(
            f"{case.case_id}: Locust exited with code {code} and no recording: {_log_tail(log_path)}"
        )
    recording = json.loads(rec_path.read_text())
    history = pd.read_parquet(out / "history.parquet")
    recording["server_commands"] = commands
    return judge(case, settings, recording, history, out / "history.parquet")


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
    if not recording.get("complete", True):
        row["verdict"] = "unknown"
    shares = [
        w.get("cpu_share") for w in recording.get("workers", {}).values() if w.get("cpu_share") is not None
    ]
    row["harness_cpu_max"] = max(shares) if shares else None
    # A load generator at ~one full core cannot issue requests any faster: its figures
    # measure the harness as much as the lock, and the report says so.
    row["generator_bound"] = bool(shares) and max(shares) >= GENERATOR_BOUND_SHARE
    commands = recording.get("server_commands") or {}
    acquisitions = row.get("acquisitions") or 0
    row["server_cmds_per_acquire"] = (
        sum(commands.values()) / acquisitions if commands and acquisitions else None
    )
    for key, value in sorted((recording.get("lock_stats") or {}).items()):
        row[f"lockstat_{key}"] = value
    return {
        "row": row,
        "histograms": recording["histograms"],
        "history_file": history_file,
        "extra": {
            "recording_complete": recording.get("complete", True),
            "recording_problems": recording.get("problems", []),
            "workers": recording.get("workers", {}),
            "merged_totals": recording.get("merged_totals", {}),
            "final_state": recording.get("final_state", {}),
            "server_commands": recording.get("server_commands", {}),
            "lock_stats": recording.get("lock_stats", {}),
            "checks": [
                {"name": r.name, "status": r.status, "counters": r.counters, "detail": r.detail}
                for r in verdict.results
            ],
        },
    }


def run_plan(
    cases: list[Case],
    settings: RunSettings,
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
                result = run_case(case, settings, stack, Path(tmp))
            except CaseFailed as exc:
                failures.append(str(exc))
                if on_failure:
                    on_failure(case, str(exc))
                continue
            folder.add_case(result["row"], result["histograms"], result["history_file"], result["extra"])
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
