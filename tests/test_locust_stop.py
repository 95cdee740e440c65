"""A case's Locust stop loses no history row, through either launcher (issue 42 item 3).

The stop was cut (workers mark their users stopping as the flush request arrives, the master
wakes on each final chunk, bench's cases skip the in-Locust verdict pass, and with
``--lockbench-stop-waiters`` the acquires still waiting between polls end at once, as not
granted, instead of queueing for the lock one by one); these tests pin that every event a
worker's clients recorded reaches the case's history parquet, that no operation is cut short
by the stop, and that only waits asleep between polls are ended.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.run.locust import run_locust
from bench.run.warm import WarmLocust
from infra.ports import free_port
from infra.redis_server import RedisServer
from tests.helpers import locust
from workloads.checks.core import check_flash_sale
from workloads.harness.recording import INTERRUPTED, STOPPED, UNFINISHED, without_stopped_waits
from workloads.harness.worker_env import child_gone

ROOT = Path(__file__).resolve().parent.parent


def _argv(
    redis_url: str, resource_url: str, out: Path, impl: str = "redis.set-nx-px-lua", masters: int = 1
) -> list[str]:
    port = free_port()
    # several masters: databases 1..n of the one lock server, each its own keyspace
    urls = (
        [redis_url] if masters == 1 else [redis_url.rsplit("/", 1)[0] + f"/{i + 1}" for i in range(masters)]
    )
    return [
        sys.executable, "-m", "locust", "-f", str(ROOT / "workloads" / "flash_sale.py"), "--headless",
        "--users", "20", "--spawn-rate", "20", "--run-time", "3s", "--stop-timeout", "10",
        "--exit-code-on-error", "0", "--only-summary", "--loglevel", "WARNING",
        "--lock-impl", impl, *[a for url in urls for a in ("--lock-url", url)],
        "--resource-url", resource_url, "--cs", "1ms",
        "--lockbench-out", str(out), "--lockbench-case", "stop", "--lockbench-no-summary",
        "--lockbench-stop-waiters",
        "--processes", "2",
        "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port),
        "--master-host", "127.0.0.1", "--master-port", str(port),
    ]  # fmt: skip


def _pid_of(client: str) -> str:
    """The process a history row came from: clients are ``<pid>-u<n>``, loop stalls ``loop:<pid>``."""
    return client.removeprefix("loop:").split("-u")[0]


@pytest.mark.parametrize("launcher", ["warm", "cold"])
def test_every_row_the_workers_recorded_reaches_the_history(
    launcher: str, redis_url: str, resource_server: RedisServer, tmp_path: Path
) -> None:
    out = tmp_path / "case"
    out.mkdir()
    argv = _argv(redis_url, resource_server.url, out)
    log = out / "locust.log"
    if launcher == "warm":
        with WarmLocust() as warm:
            code = warm.run(argv, log, timeout=120)
    else:
        code = run_locust(argv, log, timeout=120)
    assert code == 0, log.read_text()[-2000:]
    _assert_every_row_kept_and_only_waits_stopped(out, log)


#: Locks with an acquire loop of their own (not the polling template), and their masters.
OWN_LOOPS = {"redis.reentrant": 1, "redis.redlock": 5, "redis.redis-py": 1, "redis.pottery-redlock": 5}


@pytest.mark.parametrize("impl", sorted(OWN_LOOPS))
def test_a_lock_with_its_own_loop_has_its_waiters_stopped_and_loses_no_row(
    impl: str, redis_url: str, resource_server: RedisServer, tmp_path: Path
) -> None:
    """Their waiters wait in ``Lock._between_attempts`` too, so the stop ends them (issue 42 item 3):
    each ended acquire a ``fail`` with ``stopped:``, no row lost, no purchase half-done."""
    out = tmp_path / "case"
    out.mkdir()
    argv = _argv(redis_url, resource_server.url, out, impl, OWN_LOOPS[impl])
    log = out / "locust.log"
    code = locust(argv, log)
    assert code == 0, log.read_text()[-2000:]
    _assert_every_row_kept_and_only_waits_stopped(out, log)


def _assert_every_row_kept_and_only_waits_stopped(out: Path, log: Path) -> None:
    recording = json.loads((out / "recording.json").read_text())
    history = pd.read_parquet(out / "history.parquet")
    assert recording["complete"], recording["problems"]
    workers = recording["workers"]
    assert len(workers) == 2

    # rows per process: each worker's own count of what its clients recorded, against the parquet
    worker_pids = {_pid_of(c) for c in history["client"].unique() if "-u" in c}
    assert len(worker_pids) == 2, worker_pids
    from_workers = history[history["client"].map(_pid_of).isin(worker_pids)]
    recorded = sum(int(w["events"]) for w in workers.values())
    assert recorded > 100
    assert len(from_workers) == recorded
    assert len(history) == recording["merged_totals"]["events"]

    # the stop let every operation finish: one completion per invoke, none closed as unfinished
    calls = history[~history["client"].str.startswith("loop:")].groupby(["client", "seq"])["type"].agg(list)
    assert all(types[0] == "invoke" and len(types) == 2 for types in calls if types[0] == "invoke")
    errors = history["error"].dropna()
    assert not errors.str.startswith(UNFINISHED).any(), errors[errors.str.startswith(UNFINISHED)].head()
    assert not errors.str.startswith(INTERRUPTED).any(), errors[errors.str.startswith(INTERRUPTED)].head()

    # the waiters at the stop (20 clients, one lock) ended as acquires not granted, nothing else did
    stopped = history[history["error"].fillna("").str.startswith(STOPPED)]
    assert len(stopped) > 0
    assert set(stopped["op"]) == {"acquire"} and set(stopped["type"]) == {"fail"}
    assert len(without_stopped_waits(history)) == len(history) - 2 * len(stopped)
    verdict = check_flash_sale(history, recording["final_state"])
    assert verdict.status == "valid", [(r.name, r.status, r.detail) for r in verdict.results]

    # bench judges the case itself: the in-Locust verdict pass is skipped on request
    assert "verdict:" not in log.read_text()


def test_a_forked_worker_that_exited_is_gone_to_the_master() -> None:
    """The master's quit stops waiting for a forked worker once its process has exited (a zombie),
    whether or not its last message arrived; a running child, or an unknown one, is waited for."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert not child_gone(child.pid)
        assert not child_gone(None)
        assert child.stdin is not None
        child.stdin.close()
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
        assert child_gone(child.pid)
    finally:
        child.wait()
    assert child_gone(child.pid)  # reaped: no such process
    assert child_gone(os.getppid())  # alive, but not this process's child
