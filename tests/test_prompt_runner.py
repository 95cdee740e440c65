"""A distributed Locust case starts when its workers are ready and ends when they have left.

``workloads/harness/prompt_runner.py`` replaces Locust's fixed sleeps (a second before the
test, half a second three times after it) with waits for the events themselves. What can
go wrong is an outcome, not a time: the master starting before its workers, or ending
before their last stats and goodbyes arrive. Locust's DEBUG log says which happened.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from infra.redis_server import RedisServer
from tests.helpers import locust

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.server


def _run(redis_url: str, resource_url: str, out: Path) -> tuple[int, str]:
    """The case's exit code and Locust's output (stdout and stderr, in one log)."""
    argv = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "workloads" / "flash_sale.py"), "--headless",
        "--processes", "2", "--users", "6", "--spawn-rate", "6", "--run-time", "2s", "--stop-timeout", "30",
        "--exit-code-on-error", "0", "--loglevel", "DEBUG",
        "--lock-impl", "redis.set-nx-px-lua", "--lock-url", redis_url, "--resource-url", resource_url,
        "--cs", "1ms", "--lockbench-out", str(out), "--lockbench-case", "prompt",
    ]  # fmt: skip
    log = out.parent / "locust.log"
    code = locust(argv, log)
    return code, log.read_text()


def test_master_starts_on_ready_workers_and_ends_after_their_goodbyes(
    redis_url: str, resource_server: RedisServer, tmp_path: Path
) -> None:
    code, log = _run(redis_url, resource_server.url, tmp_path / "case")
    assert code == 0, log[-2000:]
    # Locust's start loop logs each look that found too few workers, then sleeps a second;
    # with the workers already waited for, it never looks in vain
    assert "Waiting for workers to be ready" not in log
    assert log.count("reported as ready") == 2
    # the master's quit ran once (Locust runs it three times per shut-down), and only after
    # both workers had said goodbye: their last stats came before it on the same socket
    master_quits = [ln for ln in log.splitlines() if "locust.runners: Quitting..." in ln]
    assert len(master_quits) == 1, master_quits
    assert log.count("quit. ") == 2, [ln for ln in log.splitlines() if " quit" in ln]
    recording = json.loads((tmp_path / "case" / "recording.json").read_text())
    assert recording["complete"], recording["problems"]
    assert len(recording["workers"]) == 2
    # Locust's own count (the summary table) got every acquire the recording holds: the
    # workers' final stats arrived before the master printed it
    acquires = sum(w["acquire_ok"] + w["acquire_timeout"] for w in recording["workers"].values())
    row = next(ln for ln in log.splitlines() if ln.split()[:2] == ["lock", "acquire"])
    assert int(row.split()[2]) == acquires, row
