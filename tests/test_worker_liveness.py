"""A worker kept off the CPU for a few seconds is not counted lost (locust_glue.WORKER_LIVENESS).

On a loaded 2-core machine a crash group's Locust processes stalled 3.3-4.2 s; Locust's master
counts a worker lost after 4 s without a heartbeat, and the case's recording was then incomplete
(the cell unknown). Here one of two forked workers is stopped (SIGSTOP) for 6 s mid-case: its
recording must still arrive whole.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

from infra.procfs import stat_fields
from infra.redis_server import RedisServer
from tests.helpers import FORK_SERVER, two_worker_locust

ROOT = Path(__file__).resolve().parent.parent


def _children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Locust's forked workers), lowest pid first."""
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := stat_fields(int(entry.name))) and fields[1] == str(pid):
            kids.append(int(entry.name))
    return sorted(kids)


def test_a_worker_stopped_for_six_seconds_is_not_lost(
    redis_url: str, resource_server: RedisServer, tmp_path: Path
) -> None:
    out = tmp_path / "case"
    out.mkdir()
    argv = two_worker_locust(ROOT / "workloads" / "flash_sale.py", out, "liveness", [
        "--users", "4", "--spawn-rate", "4", "--run-time", "10s", "--loglevel", "INFO",
        "--lock-impl", "redis.set-nx-px-lua", "--lock-url", redis_url,
        "--resource-url", resource_server.url, "--cs", "1ms", "--pace", "20",
    ])  # fmt: skip
    log = out / "locust.log"
    codes: list[int] = []
    with FORK_SERVER.warm_locust() as warm:  # bench's default launcher (tests.helpers.locust)
        case = threading.Thread(target=lambda: codes.append(warm.run(argv, log, timeout=120)))
        case.start()
        try:
            deadline = time.monotonic() + 60
            workers: list[int] = []
            while time.monotonic() < deadline:
                # the warm process's child is the case's Locust master; its children, the workers
                masters = _children(warm.proc.pid) if warm.proc is not None else []
                if len(workers := [w for m in masters for w in _children(m)]) >= 2:
                    break
                time.sleep(0.1)
            assert len(workers) == 2, log.read_text()[-2000:] if log.exists() else "no log"
            time.sleep(2.0)  # the test is under way
            os.kill(workers[0], signal.SIGSTOP)
            time.sleep(6.0)
            os.kill(workers[0], signal.SIGCONT)
        finally:
            case.join(150)
    assert codes == [0], log.read_text()[-2000:]
    recording = json.loads((out / "recording.json").read_text())
    assert recording["complete"], recording["problems"]
    assert not any("lost" in p for p in recording["problems"])
    assert len(recording["workers"]) == 2
    assert "failed to send heartbeat" not in log.read_text()
