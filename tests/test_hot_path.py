"""The client hot path stays exact: every operation recorded once, every reply its own command's.

Pins the optimisations of docs/architecture.md "Client hot path": raw Redis commands on
``DirectCommands``, Locust's request events fired after the release, holder-first
scheduling. None of them may lose, duplicate or mismatch an event.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import redis

from infra.redis_server import RedisServer
from lockimpls.redis_conn import DirectCommands
from tests.helpers import locust
from workloads.harness.recording import decode_histogram

ROOT = Path(__file__).resolve().parent.parent


def test_contended_locust_run_records_every_operation_exactly_once(
    redis_url: str, resource_server: RedisServer, tmp_path: Path
) -> None:
    out = tmp_path / "case"
    argv = [
        sys.executable, "-m", "locust", "-f", str(ROOT / "workloads" / "flash_sale.py"), "--headless",
        "--users", "10", "--spawn-rate", "10", "--run-time", "3s", "--stop-timeout", "30",
        "--exit-code-on-error", "0", "--only-summary", "--loglevel", "WARNING",
        "--lock-impl", "redis.set-nx-px-lua", "--lock-url", redis_url,
        "--resource-url", resource_server.url, "--cs", "1ms",
        "--lockbench-out", str(out), "--lockbench-case", "hot-path",
    ]  # fmt: skip
    log = tmp_path / "locust.log"
    code = locust(argv, log)
    output = log.read_text()  # Locust's stdout and stderr
    assert code == 0, output[-2000:]
    recording = json.loads((out / "recording.json").read_text())
    history = pd.read_parquet(out / "history.parquet")
    # an operation cut by a forced stop has no completion by design; 30 s covers the 5 s
    # acquire timeout many times over
    assert "Not all users finished" not in output
    assert recording["complete"], recording["problems"]
    assert recording["merged_totals"]["events"] == len(history)

    # every invoke has exactly one completion, under the same (client, seq)
    for op in ("acquire", "release", "purchase"):
        rows = history[history["op"] == op]
        per_call = rows.groupby(["client", "seq"])["type"].agg(list)
        assert len(per_call) > 0, op
        bad = per_call[[not (len(types) == 2 and types[0] == "invoke") for types in per_call]]
        assert bad.empty, (op, bad.head())

    def count(op: str, type_: str) -> int:
        return int(((history["op"] == op) & (history["type"] == type_)).sum())

    hists = {name: decode_histogram(text).get_total_count() for name, text in recording["histograms"].items()}
    acquired = count("acquire", "ok")
    assert acquired > 10
    assert hists["acquire_ok"] == acquired
    assert hists["hold"] == hists["cs"] == count("release", "invoke") == acquired
    assert hists["release"] == count("release", "ok") == acquired
    assert count("purchase", "invoke") == count("witness", "ok") == acquired

    # Locust's own counters (fired after the release now) still see every operation once.
    # Its final summary, not its CSV: the CSV is written before stopping users finish.
    summary = dict(re.findall(r"^lock\s+(acquire|release)\s+(\d+)\s", output, re.MULTILINE)[:2])
    finished_acquires = int(((history["op"] == "acquire") & (history["type"] != "invoke")).sum())
    assert int(summary["acquire"]) == finished_acquires
    assert int(summary["release"]) == count("release", "ok") + count("release", "info")

    # the checker agrees nothing overlapped
    assert "verdict: valid" in output


@pytest.fixture
def paused_server(server_dir: Path) -> RedisServer:
    server = RedisServer(server_dir, name="redis-direct").start()
    try:
        yield server
    finally:
        server.process.kill(signal.SIGCONT)
        server.stop()


def test_direct_commands_never_read_a_late_reply_as_the_next_answer(paused_server: RedisServer) -> None:
    """A command whose reply timed out drops its connection; the next command reads its own reply."""
    client = redis.Redis.from_url(paused_server.url, socket_timeout=0.3)
    direct = DirectCommands(client)
    assert direct.execute("SET", "b", "mine") == b"OK"
    paused_server.process.kill(signal.SIGSTOP)
    try:
        with pytest.raises(redis.TimeoutError):
            direct.execute("INCR", "a")
    finally:
        paused_server.process.kill(signal.SIGCONT)
    # the INCR's reply (1) arrives late on the old connection; it must never answer this GET
    assert direct.execute("GET", "b") == b"mine"
    assert direct.execute("GET", "a") == b"1"
    direct.close()
    client.close()


HOLDER_FIRST_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()
    import sys, time
    import gevent
    from workloads.harness import holder_first
    from workloads.harness.resource import FlashSaleResource

    holder_first.install()
    res = FlashSaleResource(sys.argv[1])
    order, priorities = [], {}

    def waiter():
        gevent.sleep(0.05)
        order.append("waiter")
        res.witness_enter("x")
        priorities["waiter"] = res._direct._idle[-1]._sock._read_event.priority

    def holder():
        with holder_first.holding():
            holder_first.holder_sleep(0.05)
            order.append("holder")
            res.witness_enter("x")
            priorities["holder"] = res._direct._idle[-1]._sock._read_event.priority

    t0 = time.monotonic()
    greenlets = [gevent.spawn(waiter), gevent.spawn(holder)]
    gevent.sleep(0)  # both start their timers, the waiter's first
    monkey.get_original("time", "sleep")(0.1)  # the loop stalls: both are due in one turn
    gevent.joinall(greenlets, raise_error=True)
    assert time.monotonic() - t0 >= 0.05
    print(order[0], priorities["holder"], priorities["waiter"])
    """
)


def test_holder_wakes_before_a_waiter_due_in_the_same_loop_turn(resource_server: RedisServer) -> None:
    out = subprocess.run(
        [sys.executable, "-c", HOLDER_FIRST_SCRIPT, resource_server.url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # the holder's timer and its command's reply outrank a waiter's; the waiter's do not
    assert out.stdout.split() == ["holder", "2", "0"]
