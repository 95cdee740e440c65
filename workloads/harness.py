"""Locust glue shared by every workload: options, the per-process recorder, merging at the master.

Importing this module registers Locust event listeners, so each workload module stays a
plain, valid locustfile. The protocol that makes the merge lossless:

* workers ship what they recorded with every stats report (``report_to_master``);
* when a worker's test stops, it sends what is left plus its running totals in a
  ``lockbench_final`` message (same socket, so after every earlier chunk);
* the master's ``test_stop`` asks any worker that has not sent its final chunk to stop
  and flush (``lockbench_flush``: the ``--run-time`` path stops the master before the
  workers), waits for all of them, checks that the totals add up, and writes the case
  output (``recording.json`` + ``history.parquet``) into ``--lockbench-out``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gevent
from gevent import monkey
from locust import events
from locust.runners import LocalRunner, MasterRunner, WorkerRunner

from lockimpls.base import DEFAULT_RETRY_INTERVAL, LockOptions
from lockimpls.registry import resolve
from workloads.recording import HIST_NAMES, Recorder

log = logging.getLogger("lockbench")

FINAL_WAIT_S = 60.0

RECORDER = Recorder()


class _State:
    """Process-wide state of the harness (one per Locust process)."""

    def __init__(self) -> None:
        self.finals: dict[str, dict] = {}
        self.received: dict[str, dict[str, int]] = {}
        self.sent_final = False
        self.t_start_ns: int | None = None
        self.cpu_start: tuple[float, int] | None = None
        self.t_spawned_ns: int | None = None
        self.t_stop_ns: int | None = None
        self.written = False
        self.workload: Any = None
        self.lock_class: type | None = None


STATE = _State()


# --- options -----------------------------------------------------------------------------
@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    g = parser.add_argument_group("lockbench")
    g.add_argument("--lock-impl", default="redis.set-nx-px-lua", help="lock impl id or module:Class")
    g.add_argument("--lock-url", action="append", default=None, help="lock server URL (repeatable)")
    g.add_argument("--resource-url", default=None, help="Redis URL of the protected resource")
    g.add_argument("--lock-ttl", type=float, default=10.0, help="lease (TTL) seconds")
    g.add_argument(
        "--retry-interval",
        type=float,
        default=DEFAULT_RETRY_INTERVAL,
        help="seconds between polling attempts",
    )
    g.add_argument(
        "--fencing-mode",
        choices=("off", "observe", "enforce"),
        default="off",
        help="off: no tokens; observe: tokens, the resource counts stale ones; enforce: it refuses them",
    )
    g.add_argument("--clock-skew", type=float, default=0.0, help="seconds added to skewed clients' clocks")
    g.add_argument(
        "--skewed-clients", type=float, default=0.0, help="fraction of clients with a skewed clock"
    )
    g.add_argument("--fault-signal", action="store_true", default=False, help="holders answer armed faults")
    g.add_argument("--fault-hold", type=float, default=3.0, help="seconds a signalling holder keeps the lock")
    g.add_argument("--acquire-timeout", type=float, default=5.0, help="seconds an acquire may wait")
    g.add_argument("--lock-params", default="{}", help="JSON of impl-specific options")
    g.add_argument("--lockbench-out", default="", help="directory for the merged recording")
    g.add_argument("--lockbench-case", default="", help="case id (labels only)")


def fencing_mode(opts: Any) -> str:
    """The mode in force: an impl without fencing tokens always runs unfenced ("off")."""
    if opts.fencing_mode != "off" and not lock_class(opts).capabilities.fencing:
        return "off"
    return opts.fencing_mode


def lock_options(opts: Any, client_number: int = 0) -> LockOptions:
    """Options for one client; a share of clients get a clock ``--clock-skew`` seconds off.

    The skew is injected into the lock's own clock (``LockOptions.clock``), never into the
    machine's: only algorithms that trust client time can be hurt by it.
    """
    clock = time.time
    if opts.clock_skew and opts.skewed_clients > 0:
        every = max(1, round(1 / min(opts.skewed_clients, 1.0)))
        if client_number % every == 0:
            skew = opts.clock_skew

            def clock() -> float:
                return time.time() + skew

    return LockOptions(
        ttl=opts.lock_ttl,
        retry_interval=opts.retry_interval,
        fencing=fencing_mode(opts) != "off",
        clock=clock,
        params=json.loads(opts.lock_params or "{}"),
    )


def lock_urls(opts: Any) -> list[str]:
    return list(opts.lock_url or [os.environ.get("LOCKBENCH_REDIS_URL", "redis://127.0.0.1:6379/0")])


def lock_class(opts: Any) -> type:
    if STATE.lock_class is None:
        STATE.lock_class = resolve(opts.lock_impl)
    return STATE.lock_class


def use_workload(workload: Any) -> None:
    """Tell the harness which workload this locustfile runs (setup, final state, checks)."""
    STATE.workload = workload


# --- worker side -------------------------------------------------------------------------
@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    # gevent's loop caches "now" from its creation at import; Locust arms --run-time from
    # that stale clock, so seconds spent importing (a busy machine: 5 s) were cut from the run
    gevent.get_hub().loop.update_now()
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        runner.register_message("lockbench_flush", _on_flush_request)
    elif isinstance(runner, MasterRunner):
        runner.register_message("lockbench_final", _on_final)


@events.report_to_master.add_listener
def _on_report_to_master(client_id: str, data: dict) -> None:
    if not STATE.sent_final:
        data["lockbench"] = RECORDER.drain()


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def _cpu_share() -> float | None:
    """CPU time this process used since test start, as a fraction of one core."""
    if STATE.cpu_start is None:
        return None
    cpu0, t0 = STATE.cpu_start
    wall = (time.monotonic_ns() - t0) / 1e9
    return (_cpu_seconds() - cpu0) / wall if wall > 0 else None


def _send_final(environment: Any, crashed: bool = False) -> None:
    chunk = RECORDER.drain()
    chunk["crashed"] = crashed
    chunk["totals"] = {**RECORDER.totals, "cpu_share": _cpu_share()}
    chunk["pid"] = os.getpid()
    STATE.sent_final = True
    environment.runner.send_message("lockbench_final", chunk)


def crash_process(environment: Any) -> None:
    """Die now, like a crashed client, after handing the recording so far to the master.

    The final chunk is queued on the master socket, then a sleep that gevent cannot switch
    away from lets libzmq's own thread send it while no other task here runs; SIGKILL
    follows, so nothing (no ``finally``, no release) runs after it.
    """
    import signal

    if isinstance(environment.runner, WorkerRunner):
        _send_final(environment, crashed=True)
        monkey.get_original("time", "sleep")(0.5)
    os.kill(os.getpid(), signal.SIGKILL)


def _on_flush_request(environment: Any, msg: Any, **_: Any) -> None:
    if STATE.sent_final:
        _send_final(environment)  # totals again; the master ignores a duplicate
    else:
        gevent.spawn(environment.runner.stop)  # its test_stop sends the final chunk


# --- master side -------------------------------------------------------------------------
def _absorb(client_id: str, chunk: dict) -> None:
    RECORDER.absorb(chunk)
    got = STATE.received.setdefault(client_id, {"events": 0, **{n: 0 for n in HIST_NAMES}})
    got["events"] += len(chunk.get("events", []))
    for name in HIST_NAMES:
        got[name] += chunk.get("counts", {}).get(name, 0)


@events.worker_report.add_listener
def _on_worker_report(client_id: str, data: dict) -> None:
    chunk = data.get("lockbench")
    if chunk is None:
        return
    if STATE.written:
        if chunk.get("n_events") or any(chunk.get("counts", {}).values()):
            log.warning("lockbench: recording from %s arrived after the case was written", client_id)
        return
    _absorb(client_id, chunk)


def _on_final(environment: Any, msg: Any, **_: Any) -> None:
    if msg.node_id in STATE.finals:
        return
    _absorb(msg.node_id, msg.data)
    STATE.finals[msg.node_id] = msg.data["totals"]


@events.test_start.add_listener
def _on_test_start(environment: Any, **_: Any) -> None:
    STATE.t_start_ns = time.monotonic_ns()
    STATE.cpu_start = (_cpu_seconds(), STATE.t_start_ns)
    STATE.sent_final = False
    if isinstance(environment.runner, WorkerRunner):
        return
    STATE.finals.clear()
    STATE.received.clear()
    STATE.written = False
    if STATE.workload is not None:
        STATE.workload.setup(environment.parsed_options)


@events.spawning_complete.add_listener
def _on_spawned(user_count: int, **_: Any) -> None:
    STATE.t_spawned_ns = time.monotonic_ns()


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_: Any) -> None:
    runner = environment.runner
    STATE.t_stop_ns = time.monotonic_ns()
    if isinstance(runner, WorkerRunner):
        if not STATE.sent_final:
            _send_final(environment)
        return
    complete = True
    problems: list[str] = []
    if isinstance(runner, MasterRunner):
        workers = set(STATE.received) | {c.id for c in runner.clients.all}
        pending = workers - set(STATE.finals)
        for worker in pending:
            runner.send_message("lockbench_flush", None, client_id=worker)
        deadline = time.monotonic() + FINAL_WAIT_S
        while (workers - set(STATE.finals)) and time.monotonic() < deadline:
            gevent.sleep(0.05)
        missing = workers - set(STATE.finals)
        if missing:
            complete = False
            problems.append(f"no final recording from {len(missing)} worker(s)")
        for worker, totals in STATE.finals.items():
            got = STATE.received.get(worker, {})
            for key, value in totals.items():
                if key != "cpu_share" and got.get(key, 0) != value:
                    complete = False
                    problems.append(f"{worker}: {key} recorded {value}, received {got.get(key, 0)}")
    elif not isinstance(runner, LocalRunner):
        return
    _write_output(environment, complete, problems)


def _write_output(environment: Any, complete: bool, problems: list[str]) -> None:
    opts = environment.parsed_options
    workload = STATE.workload
    final_state = workload.final_state(opts) if workload is not None else {}
    history = RECORDER.history_frame()
    totals = dict(RECORDER.totals)
    if isinstance(environment.runner, LocalRunner):
        workers = {str(os.getpid()): {**totals, "cpu_share": _cpu_share()}}
    else:
        workers = STATE.finals
    recording = {
        "case": opts.lockbench_case,
        "impl": opts.lock_impl,
        "workload": getattr(workload, "name", ""),
        "complete": complete,
        "problems": problems,
        "t_start_ns": STATE.t_start_ns,
        "t_spawned_ns": STATE.t_spawned_ns,
        "t_stop_ns": STATE.t_stop_ns,
        "workers": workers,
        "merged_totals": totals,
        "lock_stats": dict(RECORDER.lock_stats),
        "final_state": final_state,
        "histograms": RECORDER.encoded_histograms(),
    }
    STATE.written = True
    out = opts.lockbench_out
    if workload is not None and hasattr(workload, "summarize"):
        sys.stderr.write(workload.summarize(history, final_state) + "\n")
    if not out:
        return
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    tmp = path / "history.parquet.tmp"
    history.to_parquet(tmp, index=False)
    os.replace(tmp, path / "history.parquet")
    tmp = path / "recording.json.tmp"
    tmp.write_text(json.dumps(recording))
    os.replace(tmp, path / "recording.json")


def fire_request(environment: Any, name: str, started_ns: int, exc: Exception | None = None) -> None:
    """Tell Locust about an operation, for its live UI and totals only.

    Locust's own stats round to milliseconds; lockbench's measurement is the recording.
    """
    environment.events.request.fire(
        request_type="lock",
        name=name,
        response_time=(time.monotonic_ns() - started_ns) / 1e6,
        response_length=0,
        exception=exc,
        context={},
    )


def close_locks(locks: Iterable[Any]) -> None:
    """At a user's stop: fold each lock's own counters into the recording, then close it."""
    for recorded in locks:
        RECORDER.add_lock_stats(recorded.lock.stats())
        recorded.lock.close()
