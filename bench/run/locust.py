"""Locust for a case: its command line, and starting it here or on test hosts.

bench never imports Locust: a case's Locust runs as a subprocess (``python -m locust -f
workloads/<name>.py --headless``), or as a fork of the warm process (bench/run/warm.py)
with the same argv. The URLs go to a 0600 file, never onto the command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.errors import raise_if_interrupted
from bench.nemesis import partitions
from bench.nemesis.faults import HOLD_FOR
from bench.run.case import (
    Case,
    RunSettings,
)
from infra.ports import free_port
from infra.process import die_with_parent
from infra.stack import Stack
from workloads.harness.priority import raise_generator

#: File the Locust child rewrites every second with its progress (see workloads/harness/locust_glue.py).
PROGRESS_FILE = "progress.json"
#: File in a case's scratch folder (mode 0600) that carries the server URLs to Locust.
URLS_FILE = "urls.json"
#: Workloads whose cases end the acquires still waiting at the stop instead of draining them
#: (``--lockbench-stop-waiters``): a waiter has nothing left to show once the load window is over.
#: Fault and crash cases keep the drain: their waits after the stop are evidence (a stuck lock).
STOP_WAITERS_WORKLOADS = frozenset({"flash-sale"})


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
    netns: list[str] | None = None,
) -> list[str]:
    """Locust's command line for a case; the URLs go into a 0600 file in ``out``, never on it.

    ``netns``: a partition case's client hosts; Locust forks one worker a host
    (``settings.processes`` of them) and each enters its own (workloads/harness/netns.py).
    """
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
        # INFO: the kept log of a case that went wrong says when its workers connected, when users
        # were sent to them and why Locust stopped (a few lines a case; WARNING alone left a case
        # whose buyers never started with nothing but an empty table, P 2026-12-06)
        "--loglevel", "INFO",
        "--lock-impl", case.impl,
        "--lockbench-urls-file", str(urls_file),
        "--lock-ttl", str(settings.ttl),
        "--retry-interval", str(settings.retry_interval),
        "--acquire-timeout", str(settings.acquire_timeout),
        "--lock-params", json.dumps(settings.lock_params),
        "--lockbench-out", str(out),
        "--lockbench-case", case.case_id,
        "--lockbench-no-summary",  # bench judges the case itself: no checker pass inside Locust's stop
    ]  # fmt: skip
    argv += ["--fencing-mode", case.fencing]
    if case.fault is None and case.workload.name in STOP_WAITERS_WORKLOADS:
        argv.append("--lockbench-stop-waiters")
    if lock_namespace:
        argv += ["--lock-namespace", lock_namespace]
    if netns:
        argv += ["--lockbench-netns", ",".join(netns)]
    if settings.stop_rule:
        argv += ["--lockbench-stop", settings.stop_rule]
    if settings.clock_skew:
        argv += ["--clock-skew", str(settings.clock_skew), "--skewed-clients", str(settings.skewed_clients)]
    if case.fault is not None and case.fault.at_seconds is None:
        hold, past_lease = HOLD_FOR[case.fault.kind], []
        if case.fault.is_partition:  # work through the cut, past the lease, and write just before its heal
            hold = partitions.cut_seconds(settings.ttl, settings.lock_params.get("session_timeout")) - 1.0
            past_lease = ["--fault-hold-past-lease"]
        argv += ["--fault-signal", "--fault-hold", f"{hold:g}", *past_lease]
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
        argv += forked_workers_argv(settings.processes)
    return argv


def forked_workers_argv(processes: int) -> list[str]:
    """Locust's flags for a master that forks ``processes`` workers, talking over a free loopback port."""
    port = free_port()
    return [
        "--processes", str(processes),
        "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
        "--master-host", "127.0.0.1", "--master-port", str(port),
    ]  # fmt: skip


def _poll_progress(path: Path, on_tick: Callable[[dict[str, Any]], None]) -> None:
    try:
        sample = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # not written yet, or caught mid-replace: the next poll gets it
    on_tick(sample)


def run_locust(
    argv: list[str],
    log_path: Path,
    timeout: float,
    on_tick: Callable[[dict[str, Any]], None] | None = None,
    nice: int | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> int:
    """Run a case's Locust cold (``python -m locust`` argv) to its end; return its exit code.

    ``on_tick`` gets the progress file's sample about once a second. Ctrl-C, the timeout or
    any error stops Locust and its forked workers for good before it propagates. ``nice``
    raises its session as the warm launch does (set while it imports, before any worker forks), and
    puts it in the real-time class where the kernel lets it (workloads/harness/priority.py).
    ``env`` and ``cwd``: Locust's environment and directory (None: ours), as ``bench worker`` sets them.
    """
    env = {**(env or os.environ), "PYTHONUNBUFFERED": "1"}
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=cwd, start_new_session=True, preexec_fn=die_with_parent)  # fmt: skip
        if nice is not None:
            raise_generator(proc.pid, nice)
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


def client_hosts_of(stack: Stack, n: int, prefix: str = "") -> list[Any]:
    """``n`` client hosts of the run's test hosts (made on first use, then reused).

    ``prefix`` keeps a group's cases apart (``m1-client-1``): each case has client hosts of its
    own, so a cut of its holder's host leaves its other clients with the majority.
    """
    net = stack.hosts
    hosts = []
    for i in range(1, n + 1):
        try:
            hosts.append(net.host(f"{prefix}client-{i}"))
        except KeyError:
            hosts.append(net.add_host(f"{prefix}client-{i}"))
    return hosts
