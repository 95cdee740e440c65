"""Ctrl-C during bench explore keeps what was found (issue 41): the failure in hand is written.

A real search on a real Redis: ``redis.set-nx-px-lua`` fails under seed 3's second schedule (a
restart), then explore shrinks and confirms; a SIGINT as soon as the failure is printed must
leave the folder with that schedule, its replay line, and run.json saying the search was cut.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import bench_popen

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.server
def test_ctrl_c_after_a_failure_keeps_its_schedule(tmp_path: Path) -> None:
    # as from a terminal: SIGINT raises KeyboardInterrupt (a forked bench child is set so, as a fresh one)
    proc = bench_popen(
        "explore", "--impl", "redis.set-nx-px-lua", "--seed", "3", "--budget", "5m", "--no-report",
        "--results-dir", str(tmp_path),
    )  # fmt: skip
    lines: list[str] = []
    seen = threading.Event()

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "failed:" in line:
                seen.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert seen.wait(240), "".join(lines)[-3000:]
    time.sleep(0.5)  # into the shrinking or confirming runs
    proc.send_signal(signal.SIGINT)
    # stderr belongs to the reader thread alone: communicate() would read it too and keep the
    # lines it took (the replay line among them)
    proc.wait(timeout=180)
    reader.join(10)
    assert proc.stdout is not None
    out = proc.stdout.read()
    err = "".join(lines)
    assert proc.returncode == 1, (proc.returncode, err[-3000:])  # found: 1, whatever cut the search
    assert "Traceback" not in err
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    schedule = json.loads((folder / "schedule.json").read_text())
    assert [e["kind"] for e in schedule["events"]] == ["restart"]
    meta = json.loads((folder / "run.json").read_text())
    assert meta["status"] == "incomplete" and meta["explore"]["redis.set-nx-px-lua"]["interrupted"]
    assert f"bench replay {folder / 'schedule.json'}" in err + out
