"""Locust glue shared by every workload: options, the per-process recorder, merging at the master.

Importing this module registers Locust event listeners, so each workload module stays a
plain, valid locustfile. The protocol that makes the merge lossless:

* workers ship what they recorded with every stats report (``report_to_master``);
* when a worker's test stops, it sends what is left plus its running totals in a
  ``lockbench_final`` message (same socket, so after every earlier chunk), never before its
  last client has left (so after every sale a client made; with ``--lockbench-stop-waiters``
  the clients still waiting between polls leave at once, their acquires not granted);
* the master's ``test_stop`` asks any worker that has not sent its final chunk to stop
  and flush (``lockbench_flush``: the ``--run-time`` path stops the master before the
  workers), waits for all of them, checks that the totals add up, and writes the case
  output (``recording.json`` + ``history.parquet``) into ``--lockbench-out``.

Workers on other hosts (``--lockbench-align-clocks``): the master measures each worker's
clock offset with ``lockbench_ping`` / ``lockbench_pong`` round trips before the load
starts and again after it ends (``workloads.harness.clock_offsets``), shifts that worker's events
onto its own clock as they arrive, and prefixes their client ids with the worker's id
(``<host>/<pid>-u<n>``) so that clients of two hosts never share an id. A worker that
stops answering mid-case leaves the recording incomplete, and the problem names it.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import gevent
import gevent.event
from gevent import monkey
from locust import events
from locust import runners as locust_runners
from locust.runners import STATE_MISSING, LocalRunner, MasterRunner, WorkerRunner
from locust.user.task import LOCUST_STATE_RUNNING, LOCUST_STATE_STOPPING, LOCUST_STATE_WAITING

from lockimpls.base import DEFAULT_RETRY_INTERVAL, Lock, LockOptions
from lockimpls.registry import resolve
from workloads.checks.stop_rules import EvidenceWatch, StopRule
from workloads.harness import cheap_spawn, cheap_stop, clock_offsets
from workloads.harness.loop_lag import FIGURE_KEYS as LOOP_LAG_KEYS
from workloads.harness.loop_lag import LoopLagProbe
from workloads.harness.netns import enter_own_host
from workloads.harness.prompt_runner import make_prompt
from workloads.harness.recording import (
    HIST_NAMES,
    STALL_CLIENT_PREFIX,
    RecordedLock,
    Recorder,
    StopWaiting,
    shift_times,
)
from workloads.harness.start_gate import wait_at_gate
from workloads.harness.worker_env import CLOCK_SHIFT_ENV, HOST_ENV, RUN_DONE_EXIT

log = logging.getLogger("lockbench")
cheap_stop.install()  # every case's Locust stops at least once: no source read for a DEBUG line
cheap_spawn.install()  # and every worker takes a spawn message: Locust's parser built once, not per option

FINAL_WAIT_S = 60.0
#: How often workers ship their recording while a stop rule waits for evidence (s).
STOP_REPORT_INTERVAL_S = 0.5
#: Heartbeats (one a second) a worker may miss before its master counts it lost; Locust's own is 3.
#: A worker whose process was kept off the CPU for 3-4 s (a crash group on a loaded 2-core
#: machine: 14 Locust processes, 20-30 runnable tasks, stalls of 3.3-4.2 s, shard 4 2026-12-06)
#: was counted lost with its recording, and the cell was unknown. What it costs: a worker that
#: dies without a word is counted lost 11 s after its last heartbeat instead of 4 (the case's end
#: waits that much longer for it); a crash strike is not such a death (the dying worker hands its
#: recording over first), and the master's quit sees a forked worker's exit at once (child_gone).
WORKER_LIVENESS = 10
#: Seconds the master waits for one clock round trip before counting it lost.
PONG_WAIT_S = 1.0
#: Rounds a worker may leave unanswered before its first answer, before it counts as not answering.
PONG_FIRST_TRIES = 3


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
        self.progress: Any = None
        # master, aligning clocks: per worker node id
        self.clock_samples: dict[str, list[clock_offsets.Sample]] = {}
        self.pending_ping: dict[str, tuple[int, int, gevent.event.Event]] = {}
        self.peers: dict[str, dict[str, Any]] = {}  # host, pid, worker id
        self.clock_start: dict[str, clock_offsets.Estimate] = {}
        self.align = False
        # master: workers whose final chunk came before the master began to stop (not crashes)
        self.left_early: set[str] = set()
        self.stopping = False
        #: master: set whenever a worker's final chunk arrives, so the wait for the last one ends at once
        self.final_arrived = gevent.event.Event()
        #: worker or local: the stop is ending the acquires of clients waiting between polls
        self.stopping_waiters = False
        #: master or local: a test started and not yet stopped (its resource reset once, at its start)
        self.test_open = False
        #: master or local: test starts Locust fired while a test was open (ignored: see _on_test_start)
        self.repeated_starts = 0


class CaseContext:
    """What the harness keeps for one case: its state, its recording, its loop-lag probe.

    Why per case and not per process: a group's cases may share one Locust process
    (``workloads/harness/group_locust.py``), each case an Environment of its own, so every
    listener reaches its case through the environment Locust hands it (:func:`context`). A
    process that runs one case (a plain run, a master, every worker) has one context.
    """

    def __init__(self) -> None:
        self.state = _State()
        # a workload keeps a case's own facts (the resets it saw at its start): a copy per case
        self.state.workload = copy.copy(_WORKLOAD[0])
        self.recorder = Recorder()
        #: how late the loop ran over this case's window (the loop is the process's, the window the case's)
        self.probe = LoopLagProbe()
        #: reads of the lock clock (``LockOptions.clock``) by this case's locks, not yet folded into the recording
        self.clock_reads = [0]
        #: the case's own counts (its clients, its critical sections): see :func:`counter`
        self.counters: dict[str, Iterator[int]] = {}

    def record_stall(self, t_ns: int, lag_us: float) -> None:
        """A stall of the loop as a history event: client ``loop:<pid>``, op ``stall``, value ms."""
        self.recorder.event(
            f"{STALL_CLIENT_PREFIX}{os.getpid()}",
            -1,
            "stall",
            "ok",
            "",
            t_ns - int(lag_us * 1000),
            value=int(lag_us // 1000),
        )


#: The workload this process's locustfile runs (:func:`use_workload`): each case gets a copy.
_WORKLOAD: list[Any] = [None]
_CONTEXTS: dict[int, CaseContext] = {}


def context(environment: Any) -> CaseContext:
    """The case ``environment`` runs (made at its first use; environments live as long as the process)."""
    ctx = _CONTEXTS.get(id(environment))
    if ctx is None:
        ctx = _CONTEXTS[id(environment)] = CaseContext()
    return ctx


def _sole() -> CaseContext | None:
    """The case of a process that runs one, for the events Locust fires without an environment.

    Those (a worker's reports, the master's receipt of them, the end of a spawn) exist only
    in processes of one case; None before its environment is known.
    """
    if len(_CONTEXTS) > 1:
        raise RuntimeError("Locust fired a worker's or master's event in a process of several cases")
    return next(iter(_CONTEXTS.values()), None)


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
    g.add_argument(
        "--fault-hold-past-lease", action="store_true", default=False,
        help="the holder keeps the lock for --fault-hold whatever its lease says (a cut-off holder)",
    )  # fmt: skip
    g.add_argument("--acquire-timeout", type=float, default=5.0, help="seconds an acquire may wait")
    g.add_argument("--lock-params", default="{}", help="JSON of impl-specific options")
    g.add_argument("--lockbench-out", default="", help="directory for the merged recording")
    g.add_argument("--lockbench-case", default="", help="case id (labels only)")
    g.add_argument(
        "--lockbench-start-gate",
        default="",
        help="a group's start gate: wait until this file exists before the test starts (start_gate.py)",
    )
    g.add_argument(
        "--lock-namespace",
        default="",
        help="prefix of every lock name: cases that share a lock server side by side (a matrix group) never share a key",
    )
    g.add_argument(
        "--lockbench-urls-file",
        default="",
        help="JSON file with lock_urls and resource_url (bench passes URLs this way so ps does not show passwords)",
    )
    g.add_argument(
        "--lockbench-stop",
        default="",
        help="JSON stop rule (workloads/checks/stop_rules.py): end the test once the fault's evidence is in",
    )

    g.add_argument(
        "--lockbench-netns",
        default="",
        help="comma-separated network namespaces: each forked worker enters one of its own (partition cases)",
    )
    g.add_argument(
        "--lockbench-align-clocks",
        action="store_true",
        default=False,
        help="workers run on other hosts: measure their clock offsets and shift their events",
    )
    g.add_argument(
        "--lockbench-no-summary",
        action="store_true",
        default=False,
        help="skip the verdict line at the end (bench judges the case itself; the line costs a checker pass)",
    )
    g.add_argument(
        "--lockbench-stop-waiters",
        action="store_true",
        default=False,
        help="at the stop, end acquires waiting between polls (recorded as not granted) instead of draining them",
    )
    g.add_argument(
        "--lockbench-last-case",
        action="store_true",
        default=False,
        help="the run's last case: workers started by `bench worker` exit afterwards",
    )


def apply_urls_file(opts: Any) -> None:
    """Take ``--lock-url`` / ``--resource-url`` from ``--lockbench-urls-file`` when given.

    bench writes the file (mode 0600) instead of putting URLs, passwords included, on the
    command line, where ``ps`` shows them to every user of the machine.
    """
    path = getattr(opts, "lockbench_urls_file", "")
    if not path:
        return
    data = json.loads(Path(path).read_text())
    if data.get("lock_urls"):
        opts.lock_url = list(data["lock_urls"])
    if data.get("resource_url"):
        opts.resource_url = data["resource_url"]


def fencing_mode(opts: Any) -> str:
    """The mode in force: an impl without fencing tokens always runs unfenced ("off")."""
    if opts.fencing_mode != "off" and not lock_class(opts).capabilities.fencing:
        return "off"
    return opts.fencing_mode


def lock_options(opts: Any, client_number: int = 0, reads: list[int] | None = None) -> LockOptions:
    """Options for one client; a share of clients get a clock ``--clock-skew`` seconds off.

    The skew is injected into the lock's own clock (``LockOptions.clock``), never into the
    machine's: only algorithms that trust client time can be hurt by it. Every read of the
    clock is counted in ``reads`` (the case's :attr:`CaseContext.clock_reads`) where given.
    """
    reads = reads if reads is not None else [0]
    skew = 0.0
    if opts.clock_skew and opts.skewed_clients > 0:
        every = max(1, round(1 / min(opts.skewed_clients, 1.0)))
        if client_number % every == 0:
            skew = opts.clock_skew

    def clock() -> float:
        # every read is counted: a clock fault reaches only a lock that reads this clock
        # (lockstat_clock_reads; bench calls a skew that no read could see "n/a", never a strike)
        reads[0] += 1
        return time.time() + skew

    clock.skew_s = skew  # type: ignore[attr-defined]  # the harness's own look, not a read by the lock

    return LockOptions(
        ttl=opts.lock_ttl,
        retry_interval=opts.retry_interval,
        fencing=fencing_mode(opts) != "off",
        clock=clock,
        params=json.loads(opts.lock_params or "{}"),
    )


def lock_urls(opts: Any) -> list[str]:
    return list(opts.lock_url or [os.environ.get("LOCKBENCH_REDIS_URL", "redis://127.0.0.1:6379/0")])


_LOCK_CLASSES: dict[str, type] = {}


def lock_class(opts: Any) -> type:
    cls = _LOCK_CLASSES.get(opts.lock_impl)
    if cls is None:
        cls = _LOCK_CLASSES[opts.lock_impl] = resolve(opts.lock_impl)
    return cls


def use_workload(workload: Any) -> None:
    """Tell the harness which workload this locustfile runs (setup, final state, checks)."""
    _WORKLOAD[0] = workload


# --- worker side -------------------------------------------------------------------------
_FORKER = [0]


def _die_with_parent() -> None:
    """A Locust worker dies (SIGKILL) with the process that started it: no orphan outlives bench.

    Locust's ``--processes`` workers are forked by the master, which bench kills with its
    own parent-death signal; without this they would run on, busy, for a minute or more.
    It runs right after the fork (``os.register_at_fork`` below: before the worker even
    connects) and again at ``init`` for workers started as ``locust --worker``. A forked
    worker whose master died before the call leaves at once.
    """
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if _FORKER[0] and os.getppid() != _FORKER[0]:
        os._exit(1)


os.register_at_fork(before=lambda: _FORKER.__setitem__(0, os.getpid()), after_in_child=_die_with_parent)


@events.init.add_listener
def _on_init(environment: Any, **_: Any) -> None:
    # gevent's loop caches "now" and has not run since it was created, before seconds of
    # imports (pandas, pyarrow, lock clients); Locust's --run-time timer, set from that stale
    # "now" right after this event, would fire at once on a busy machine: no load at all
    gevent.get_hub().loop.update_now()
    if environment.parsed_options is not None:
        apply_urls_file(environment.parsed_options)
    runner = environment.runner
    if isinstance(runner, WorkerRunner):
        _die_with_parent()
        hosts = getattr(environment.parsed_options, "lockbench_netns", "")
        if hosts:  # before any user connects: every lock connection then starts on this host
            enter_own_host(hosts.split(","), Path(environment.parsed_options.lockbench_out))
        runner.register_message("lockbench_flush", _on_flush_request)
        runner.register_message("lockbench_ping", _on_ping)
        if getattr(environment.parsed_options, "lockbench_stop", ""):
            # the master judges the evidence from what workers ship: ship it sooner than every 3 s
            locust_runners.WORKER_REPORT_INTERVAL = STOP_REPORT_INTERVAL_S
    elif isinstance(runner, MasterRunner):
        locust_runners.HEARTBEAT_LIVENESS = WORKER_LIVENESS  # read as each worker connects and beats
        runner.register_message("lockbench_final", _on_final)
        runner.register_message("lockbench_pong", _on_pong)
        make_prompt(environment)  # start when the workers are ready, end when they have left
    gate = getattr(environment.parsed_options, "lockbench_start_gate", "")
    if gate and not isinstance(runner, WorkerRunner):
        wait_at_gate(gate, environment.parsed_options.lockbench_out)
        gevent.get_hub().loop.update_now()  # the --run-time timer is set from it, right after this event


def _clock_shift_ns() -> int:
    return int(os.environ.get(CLOCK_SHIFT_ENV) or 0)


def host_label() -> str:
    """What this process's host is called in results: ``$LOCKBENCH_HOST`` or the hostname."""
    label = os.environ.get(HOST_ENV) or socket.gethostname()
    return label.replace("/", "_").replace("#", "_")


def _drain(ctx: CaseContext) -> dict:
    """The case's recording since the last drain, its times as this host's clock reads them."""
    chunk = ctx.recorder.drain()
    shift = _clock_shift_ns()
    if shift:
        for event in chunk["events"]:
            shift_times(event, shift)
    return chunk


def _on_ping(environment: Any, msg: Any, **_: Any) -> None:
    now = time.monotonic_ns() + _clock_shift_ns()
    reply = {"i": msg.data["i"], "t": now, "host": host_label(), "pid": os.getpid()}
    environment.runner.send_message("lockbench_pong", reply)


@events.quitting.add_listener
def _on_quitting(environment: Any, **_: Any) -> None:
    opts = environment.parsed_options
    if isinstance(environment.runner, WorkerRunner) and getattr(opts, "lockbench_last_case", False):
        environment.process_exit_code = RUN_DONE_EXIT


@events.report_to_master.add_listener
def _on_report_to_master(client_id: str, data: dict) -> None:
    ctx = _sole()
    if ctx is not None and not ctx.state.sent_final:
        data["lockbench"] = _drain(ctx)


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def _cpu_share(st: _State) -> float | None:
    """CPU time this process used since the case's test start, as a fraction of one core."""
    if st.cpu_start is None:
        return None
    cpu0, t0 = st.cpu_start
    wall = (time.monotonic_ns() - t0) / 1e9
    return (_cpu_seconds() - cpu0) / wall if wall > 0 else None


#: Keys of a worker's totals that are measurements, not counts the master must match.
MEASURED_TOTALS = ("cpu_share", "cpu_s", "cases_in_process", "nice", *LOOP_LAG_KEYS)


def _cpu_totals(ctx: CaseContext) -> dict[str, Any]:
    """This process's CPU since the case's test start: share of one core, and seconds (bench divides
    them by acquisitions) only where the process ran this case alone (``cases_in_process``): a
    shared process's CPU is its group's, and no share of it is this case's."""
    st = ctx.state
    alone = len(_CONTEXTS) == 1
    cpu_s = None if st.cpu_start is None or not alone else _cpu_seconds() - st.cpu_start[0]
    # and how late its gevent loop ran (workloads/harness/loop_lag.py): bench judges fidelity by it;
    # the nice it ran at says whether the matrix raised it, and by how much (priority.shared_nice)
    return {
        "cpu_share": _cpu_share(st), "cpu_s": cpu_s, "cases_in_process": len(_CONTEXTS),
        "nice": os.getpriority(os.PRIO_PROCESS, 0), **ctx.probe.figures(),
    }  # fmt: skip


def _send_final(environment: Any, crashed: bool = False) -> None:
    ctx = context(environment)
    st, rec = ctx.state, ctx.recorder
    why = "the process was killed mid-operation" if crashed else "its user was stopped mid-operation"
    rec.close_open(time.monotonic_ns(), why)
    chunk = _drain(ctx)
    chunk["crashed"] = crashed
    chunk["totals"] = {**rec.totals, **_cpu_totals(ctx)}
    chunk["lock_stats"] = dict(rec.lock_stats)  # summed by users' on_stop, before this
    chunk["pid"] = os.getpid()
    st.sent_final = True
    environment.runner.send_message("lockbench_final", chunk)


#: Seconds a crashing worker gives libzmq's thread to send its final chunk before SIGKILL.
CRASH_SEND_S = 0.5


def crash_process(environment: Any, record_death: Callable[[int], None] | None = None) -> None:
    """Die now, like a crashed client, after handing the recording so far to the master.

    The moment of death is fixed first (now + :data:`CRASH_SEND_S`) and handed to
    ``record_death`` so the history carries it (the checkers time recovery from it, and the
    dying process's locks are held until it). The final chunk is then queued on the master
    socket, and a sleep that gevent cannot switch away from lets libzmq's own thread send it
    while no other task here runs, until that moment; SIGKILL follows, so nothing (no
    ``finally``, no release) runs after it. Were the send to take longer, the kill would
    come later than recorded, never earlier.
    """
    import signal

    if isinstance(environment.runner, WorkerRunner):
        die_at = time.monotonic_ns() + int(CRASH_SEND_S * 1e9)
        if record_death is not None:
            record_death(die_at)
        _send_final(environment, crashed=True)
        left = (die_at - time.monotonic_ns()) / 1e9
        if left > 0:
            monkey.get_original("time", "sleep")(left)
    elif record_death is not None:
        record_death(time.monotonic_ns())  # nothing is sent: this process's recording dies with it
    os.kill(os.getpid(), signal.SIGKILL)


def _on_flush_request(environment: Any, msg: Any, **_: Any) -> None:
    if context(environment).state.sent_final:
        _send_final(environment)  # totals again; the master ignores a duplicate
    else:
        # mark the users now: the spawned stop runs only after a turn of every busy user's
        # greenlet (60-100 ms under load), and each user that meanwhile starts a new task
        # (a new acquire in the queue) makes the drain longer
        _let_waiting_users_finish(environment)
        gevent.spawn(environment.runner.stop)  # its test_stop sends the final chunk


# --- master side -------------------------------------------------------------------------
def _absorb(ctx: CaseContext, client_id: str, chunk: dict) -> None:
    st = ctx.state
    if st.align:
        _to_master_clock(st, client_id, chunk)
    ctx.recorder.absorb(chunk)
    got = st.received.setdefault(client_id, {"events": 0, **{n: 0 for n in HIST_NAMES}})
    got["events"] += len(chunk.get("events", []))
    for name in HIST_NAMES:
        got[name] += chunk.get("counts", {}).get(name, 0)


@events.worker_report.add_listener
def _on_worker_report(client_id: str, data: dict) -> None:
    chunk = data.get("lockbench")
    ctx = _sole()
    if chunk is None or ctx is None:
        return
    if ctx.state.written:
        if chunk.get("n_events") or any(chunk.get("counts", {}).values()):
            log.warning("lockbench: recording from %s arrived after the case was written", client_id)
        return
    _absorb(ctx, client_id, chunk)


def _to_master_clock(st: _State, node_id: str, chunk: dict) -> None:
    """Shift a remote worker's events onto this clock and give its clients that worker's id."""
    start = st.clock_start.get(node_id)
    # no estimate: its times stay on its own clock, but its clients still carry its worker id,
    # so the checkers know whose clock they were read on (an unknown bound: see _clock_report)
    prefix = _worker_name(st, node_id).replace("/", "_") + "/"
    offset = start.offset_ns if start is not None else 0
    for event in chunk.get("events", []):
        event[0] = prefix + event[0]
        shift_times(event, -offset)


def _on_pong(environment: Any, msg: Any, **_: Any) -> None:
    t1 = time.monotonic_ns()
    st = context(environment).state
    # who answered is known even from a late answer: a worker whose first pong came after
    # PONG_WAIT_S (a loaded runner) was otherwise named by its Locust id, not its host
    st.peers.setdefault(msg.node_id, {"host": msg.data["host"], "pid": msg.data["pid"]})
    pending = st.pending_ping.get(msg.node_id)
    if pending is None or pending[0] != msg.data["i"]:
        return  # an answer that came too late: its round trip is not known exactly
    st.clock_samples.setdefault(msg.node_id, []).append(
        clock_offsets.Sample(pending[1], int(msg.data["t"]), t1)
    )
    pending[2].set()


def _measure_clocks(runner: Any, nodes: list[str]) -> dict[str, clock_offsets.Estimate]:
    """Ping each worker in turn ``ROUNDS`` times; the minimum-round-trip estimate per worker."""
    st = context(runner.environment).state
    out: dict[str, clock_offsets.Estimate] = {}
    for node in nodes:
        st.clock_samples[node] = []
        for i in range(clock_offsets.ROUNDS):
            done = gevent.event.Event()
            st.pending_ping[node] = (i, time.monotonic_ns(), done)
            runner.send_message("lockbench_ping", {"i": i}, client_id=node)
            if not done.wait(PONG_WAIT_S) and i >= PONG_FIRST_TRIES - 1 and not st.clock_samples[node]:
                break  # not answering at all: do not wait out every round
        st.pending_ping.pop(node, None)
        est = clock_offsets.estimate(st.clock_samples[node])
        if est is not None:
            out[node] = est
    return out


def _name_workers(st: _State) -> None:
    """Worker ids for results: the host's name, with ``#k`` where one host runs several."""
    by_host: dict[str, list[tuple[int, str]]] = {}
    for node, peer in st.peers.items():
        by_host.setdefault(peer["host"], []).append((peer["pid"], node))
    for host, members in by_host.items():
        for k, (_, node) in enumerate(sorted(members)):
            st.peers[node]["worker_id"] = host if len(members) == 1 else f"{host}#{k}"


def _live_workers(runner: Any) -> list[str]:
    return [c.id for c in runner.clients.all if c.state != STATE_MISSING]


def _worker_name(st: _State, node: str) -> str:
    return st.peers.get(node, {}).get("worker_id") or node


def _on_final(environment: Any, msg: Any, **_: Any) -> None:
    ctx = context(environment)
    st = ctx.state
    if msg.node_id in st.finals:
        return
    runner = environment.runner
    if not st.align and isinstance(msg.data.get("pid"), int) and hasattr(runner, "lockbench_local_pids"):
        # a worker forked here (--processes): the master's quit need not wait for a message it lost
        runner.lockbench_local_pids = {**(runner.lockbench_local_pids or {}), msg.node_id: msg.data["pid"]}
    _absorb(ctx, msg.node_id, msg.data)
    st.finals[msg.node_id] = msg.data["totals"]
    if not st.stopping and not msg.data.get("crashed"):
        st.left_early.add(msg.node_id)  # its clients stopped while the case went on
    st.final_arrived.set()


@events.test_stopping.add_listener
def _on_test_stopping(environment: Any, **_: Any) -> None:
    ctx = context(environment)
    ctx.state.stopping = True
    ctx.probe.freeze()  # the load window ends here; the figures describe the load, not its teardown
    _let_waiting_users_finish(environment)


def _let_waiting_users_finish(environment: Any) -> None:
    """Stop users between tasks instead of killing them, so no operation is cut in half.

    Locust kills a user it finds waiting (``LOCUST_STATE_WAITING``) and lets a running one
    finish its task; it decides in a greenlet spawned for later. By the time that runs, a
    user that was running may be waiting, and a kill is delivered on a later turn of
    gevent's loop still: a user whose ``wait_time`` is 0 is back in its next task by then,
    and the kill lands inside an acquire (an acquire invoke without completion, seen under
    load). Marking every started user as stopping now makes Locust only wait for them; each
    leaves at the end of its current task or wait. Only with a stop timeout: without one
    Locust kills everyone at once, and past it, those still busy.
    """
    runner = environment.runner
    if runner is None or isinstance(runner, MasterRunner) or not environment.stop_timeout:
        return
    for greenlet in list(getattr(runner, "user_greenlets", ())):
        user = greenlet.args[0] if greenlet.args else None
        if user is not None and getattr(user, "_state", None) in (LOCUST_STATE_RUNNING, LOCUST_STATE_WAITING):
            user._state = LOCUST_STATE_STOPPING
    st = context(environment).state
    if getattr(environment.parsed_options, "lockbench_stop_waiters", False) and not st.stopping_waiters:
        st.stopping_waiters = True
        _end_sleeping_acquires(runner)  # now: a spawned greenlet may wait its turn behind busy clients
        gevent.spawn(_stop_waiters, environment, time.monotonic() + environment.stop_timeout)


#: The frames of a client waiting between two attempts: the lock's wait (gevent's sleep, or a
#: threading primitive's), called by ``Lock._between_attempts``, called through the lock's own
#: frames by the recording wrapper.
_SLEEP_CODE = gevent.sleep.__code__
_BETWEEN_ATTEMPTS_CODE = Lock._between_attempts.__code__
_CONDITION_WAIT_CODE = threading.Condition.wait.__code__
_RECORDED_ACQUIRE_CODE = RecordedLock.acquire.__code__


def _module(frame: Any) -> str:
    return frame.f_globals.get("__name__", "")


def _waiting_between_polls(greenlet: Any) -> bool:
    """Is this client asleep between two attempts of its lock, under its recording?

    There, its last attempt failed and no request of the acquire is in flight
    (``Lock._between_attempts`` says so for every lock that waits through it: the polling
    template, and the locks with their own loop), so ending the acquire leaves a definite
    outcome (not granted). Anywhere else (a command on the wire, a place in a queue, a holder)
    it is left to finish.

    The wait itself is one of: gevent's sleep (a patched ``time.sleep``); a gevent event's wait,
    compiled, so the hook's frame is the top one; a ``threading`` primitive blocked on its
    waiter lock inside ``Condition.wait`` (``Semaphore.acquire``), but not one re-taking its
    condition's lock after a wakeup, where an exception would leave the condition unbalanced.
    Between the hook and the recording only frames of ``lockimpls`` may stand (a lock's own
    loop, a wrapper such as ``test.slowed``), so a user's code that merely calls a lock from
    inside its own wait is never taken for one.
    """
    frame = getattr(greenlet, "gr_frame", None)
    if frame is None:
        return False
    if frame.f_code is _SLEEP_CODE:
        frame = frame.f_back
    elif frame.f_code is not _BETWEEN_ATTEMPTS_CODE:
        while frame is not None and _module(frame).startswith("gevent"):
            frame = frame.f_back  # the waiter lock's acquire
        if frame is None or frame.f_code is not _CONDITION_WAIT_CODE:
            return False
        while frame is not None and _module(frame) == "threading":
            frame = frame.f_back  # Semaphore.acquire, Event.wait
    if frame is None or frame.f_code is not _BETWEEN_ATTEMPTS_CODE:
        return False
    frame = frame.f_back
    while frame is not None and _module(frame).startswith("lockimpls."):
        frame = frame.f_back
    return frame is not None and frame.f_code is _RECORDED_ACQUIRE_CODE


def _stop_waiting(greenlet: Any) -> None:
    # run by the hub: the check and the throw happen with nothing else running in between
    if not greenlet.dead and _waiting_between_polls(greenlet):
        greenlet.throw(StopWaiting())


#: How often the stop looks for clients that went back to sleep between polls (s): well
#: under any retry interval, so each is found within the sleep it starts.
STOP_WAITERS_STEP_S = 0.001


def _stop_waiters(environment: Any, until: float) -> None:
    """End the acquires of clients waiting between polls until every client has stopped.

    Each stopping client otherwise stays until it gets the lock and buys: one by one behind a
    single lock, 0.2-0.35 s of a case's stop. The end is thrown from the hub's callback, which
    checks the client is still asleep there: a client woken meanwhile may have a command in
    flight, and is left to finish its attempt (it is found again at its next sleep).

    A worker sends its final chunk as soon as its last client has left (each client's
    ``on_stop`` has folded its lock counters in by then): Locust's own stop, spawned at the
    flush, may wait 50-200 ms for its turn on a loaded machine, and its ``test_stop`` then
    finds the chunk sent.
    """
    runner = environment.runner
    st = context(environment).state
    greenlets = getattr(runner, "user_greenlets", ())
    try:
        while len(greenlets) and time.monotonic() < until:
            gevent.sleep(STOP_WAITERS_STEP_S)
            _end_sleeping_acquires(runner)
        spawning = getattr(runner, "spawning_greenlet", None)
        spawned = spawning is None or spawning.ready()  # no user can start after the chunk
        if not len(greenlets) and spawned and isinstance(runner, WorkerRunner) and not st.sent_final:
            _send_final(environment)
    finally:
        st.stopping_waiters = False


def _end_sleeping_acquires(runner: Any) -> None:
    loop = gevent.get_hub().loop
    for greenlet in list(getattr(runner, "user_greenlets", ())):
        if _waiting_between_polls(greenlet):
            loop.run_callback(_stop_waiting, greenlet)


def _is_worker(environment: Any) -> bool:
    """Is this process a Locust worker, even while its runner is still being made?

    A worker's runner handles messages before ``WorkerRunner.__init__`` has returned: it waits
    there for the master's ack, and the message loop, already running, takes the first spawn
    if it comes meanwhile (a worker descheduled by a CPU burner, its spawn 40-120 ms after the
    first worker's). ``environment.runner`` is then still None: taken for a master, the worker
    reset the resource under the first worker's buyers (the "ledger-short" cases: the orders
    before that moment gone, the stock kept by a holder mid-sale). A master or local runner
    fires ``test_start`` from its own ``start``, so always exists by then.
    """
    runner = environment.runner
    return (
        runner is None
        or isinstance(runner, WorkerRunner)
        or bool(getattr(environment.parsed_options, "worker", False))
    )


@events.test_start.add_listener
def _on_test_start(environment: Any, **_: Any) -> None:
    worker = _is_worker(environment)
    ctx = context(environment)
    st, probe = ctx.state, ctx.probe
    if not worker:
        if st.test_open:
            # a second start of an open test would reset the resource under buyers already selling
            # (its ledger emptied, its stock kept by a holder mid-sale) and clear what the workers sent
            st.repeated_starts += 1
            return
        st.test_open = True
    st.t_start_ns = time.monotonic_ns()
    st.cpu_start = (_cpu_seconds(), st.t_start_ns)
    probe.start()  # every Locust process, worker or not: its loop lag over this case
    # its long stalls placed in time, so a violation can be judged against the stalls before it
    probe.on_stall = ctx.record_stall
    st.sent_final = False
    if worker:
        return
    st.finals.clear()
    st.received.clear()
    st.written = False
    st.repeated_starts = 0
    st.left_early.clear()
    st.stopping = False
    if st.workload is not None:
        st.workload.setup(environment.parsed_options)
    if st.progress is None:
        _start_progress(environment)

    rule = StopRule.from_json(getattr(environment.parsed_options, "lockbench_stop", ""))
    if rule is not None:
        gevent.spawn(_stop_on_evidence, environment, rule, st.t_start_ns)

    runner = environment.runner
    st.align = isinstance(runner, MasterRunner) and environment.parsed_options.lockbench_align_clocks
    if st.align:
        st.peers.clear()
        st.clock_start = _measure_clocks(runner, _live_workers(runner))
        _name_workers(st)


PROGRESS_FILE = "progress.json"


def _progress_loop(environment: Any, out: Path) -> None:
    """Every second, Locust's own counts of acquires (for bench's live progress line only)."""
    while True:
        gevent.sleep(1.0)
        entry = environment.stats.entries.get(("acquire", "lock"))
        sample = {
            "t": time.monotonic(),
            "acquisitions": (entry.num_requests - entry.num_failures) if entry else 0,
            "errors": entry.num_failures if entry else 0,
            "users": environment.runner.user_count if environment.runner else 0,
        }
        try:
            tmp = out / f".{PROGRESS_FILE}.tmp"
            tmp.write_text(json.dumps(sample))
            os.replace(tmp, out / PROGRESS_FILE)
        except OSError:
            return  # the case folder is gone: nobody is watching


def _start_progress(environment: Any) -> None:
    out = environment.parsed_options.lockbench_out if environment.parsed_options else ""
    if out and not isinstance(environment.runner, WorkerRunner):
        Path(out).mkdir(parents=True, exist_ok=True)
        context(environment).state.progress = gevent.spawn(_progress_loop, environment, Path(out))


def _stop_on_evidence(environment: Any, rule: StopRule, start_ns: int) -> None:
    """End the test (as ``--run-time`` does) once the stop rule's evidence is recorded."""
    watch = EvidenceWatch(rule, start_ns)
    ctx = context(environment)
    st, rec = ctx.state, ctx.recorder
    while True:
        gevent.sleep(0.1)
        if st.written or st.t_start_ns != start_ns:
            return
        watch.feed(rec.events)
        if watch.satisfied(time.monotonic_ns()):
            log.info(
                "lockbench: %s: stop rule met, ending the test", environment.parsed_options.lockbench_case
            )
            environment.runner.quit()
            return


@events.spawning_complete.add_listener
def _on_spawned(user_count: int, **_: Any) -> None:
    # Locust names no environment here: a process of several cases marks each case's spawn itself
    ctx = _sole() if len(_CONTEXTS) <= 1 else None
    if ctx is not None:
        ctx.state.t_spawned_ns = time.monotonic_ns()


@events.test_stop.add_listener
def _on_test_stop(environment: Any, **_: Any) -> None:
    runner = environment.runner
    st = context(environment).state
    st.t_stop_ns = time.monotonic_ns()
    if isinstance(runner, WorkerRunner):
        if not st.sent_final:
            _send_final(environment)
        return
    complete = True
    problems: list[str] = []
    offsets: dict[str, dict[str, Any]] = {}
    if isinstance(runner, MasterRunner):
        workers = set(st.received) | {c.id for c in runner.clients.all} | set(st.clock_start)
        pending = workers - set(st.finals)
        for worker in pending:
            runner.send_message("lockbench_flush", None, client_id=worker)
        deadline = time.monotonic() + FINAL_WAIT_S
        # a worker that stopped answering (no heartbeat) will not send anything: stop waiting
        while True:
            st.final_arrived.clear()  # before the check: a chunk arriving after it sets it again
            if not (set(_live_workers(runner)) - set(st.finals)) or time.monotonic() >= deadline:
                break
            st.final_arrived.wait(0.05)  # wakes on a final chunk; the timeout re-checks lost workers
        lost = {c.id for c in runner.clients.all if c.state == STATE_MISSING} - set(st.finals)
        for worker in sorted(lost):
            problems.append(f"worker {_worker_name(st, worker)} was lost mid-case (no heartbeat)")
        missing = workers - set(st.finals) - lost
        if missing:
            problems.append(
                f"no final recording from {len(missing)} worker(s): {', '.join(sorted(_worker_name(st, w) for w in missing))}"
            )
        for worker in sorted(st.left_early):
            problems.append(
                f"worker {_worker_name(st, worker)} left mid-case (stopped before the case ended)"
            )
        complete = not (lost or missing or st.left_early)
        for worker, totals in st.finals.items():
            got = st.received.get(worker, {})
            for key, value in totals.items():
                if key not in MEASURED_TOTALS and got.get(key, 0) != value:
                    complete = False
                    problems.append(
                        f"{_worker_name(st, worker)}: {key} recorded {value}, received {got.get(key, 0)}"
                    )
        if st.align:
            # a missing estimate is not a missing recording: the checkers treat that worker's
            # times as unaligned (unknown wherever they decide), and the problems say why
            offsets, clock_problems = _clock_report(runner, workers - lost)
            problems += clock_problems
    elif not isinstance(runner, LocalRunner):
        return
    if st.repeated_starts:
        problems.append(f"Locust started the test {st.repeated_starts} more time(s) while it ran (ignored)")
    st.test_open = False
    ended_ns = time.monotonic_ns()
    if DEFERRED_OUTPUTS is not None:  # cases sharing the process: written once all have ended
        DEFERRED_OUTPUTS.append(lambda: _write_output(environment, complete, problems, offsets, ended_ns))
        return
    _write_output(environment, complete, problems, offsets, ended_ns)


def _clock_report(runner: Any, workers: set[str]) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """Each worker's offset and bound, with a second measurement after the load to catch drift."""
    st = context(runner.environment).state
    end = _measure_clocks(runner, sorted(set(_live_workers(runner)) & workers))
    offsets: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for node in sorted(workers):
        start = st.clock_start.get(node)
        name = _worker_name(st, node).replace("/", "_")
        if start is None:
            why = "no clock offset measured at the start: its times cannot be aligned"
            problems.append(f"worker {name}: {why}")
            offsets[name] = {**clock_offsets.unmeasured(why), "host": st.peers.get(node, {}).get("host")}
            continue
        peer = st.peers[node]
        offsets[peer["worker_id"]] = {
            **clock_offsets.combine(start, end.get(node)),
            "host": peer["host"],
            "rtt_ns": start.rtt_ns,
        }
    return offsets, problems


#: Where a process of several cases (``group_locust``) collects each case's output to write after
#: the last case has ended: building and writing a history (50-55 ms of the loop, measured in a
#: group of five) inside the others' load windows stalled their clients. None: written at once.
DEFERRED_OUTPUTS: list[Callable[[], None]] | None = None


def _write_output(
    environment: Any,
    complete: bool,
    problems: list[str],
    offsets: dict[str, dict[str, Any]] | None = None,
    ended_ns: int | None = None,
) -> None:
    opts = environment.parsed_options
    ctx = context(environment)
    st, rec = ctx.state, ctx.recorder
    workload = st.workload
    # every invoke gets exactly one completion: what is still open (a lost worker's last
    # operations, a user killed past the stop timeout) ends as info, outcome unknown
    rec.close_open(ended_ns or time.monotonic_ns(), "no completion arrived before the case ended")
    final_state = workload.final_state(opts) if workload is not None else {}
    if offsets:
        # the checkers need each client's clock bound to tell an overlap from clock error;
        # None: not measured (no estimate, or the end-of-run measurement failed)
        final_state = {
            **final_state,
            "clock_uncertainty_ns": {w: o["uncertainty_ns"] for w, o in offsets.items()},
        }
    history = rec.history_frame()
    totals = dict(rec.totals)
    if isinstance(environment.runner, LocalRunner):
        workers = {str(os.getpid()): {**totals, **_cpu_totals(ctx)}}
    else:
        workers = st.finals
    recording = {
        "case": opts.lockbench_case,
        "impl": opts.lock_impl,
        "workload": getattr(workload, "name", ""),
        "complete": complete,
        "problems": problems,
        "t_start_ns": st.t_start_ns,
        "t_spawned_ns": st.t_spawned_ns,
        "t_stop_ns": st.t_stop_ns,
        "workers": workers,
        "merged_totals": totals,
        "lock_stats": dict(rec.lock_stats),
        "final_state": final_state,
        "histograms": rec.encoded_histograms(),
        "clock_offsets": offsets or {},
    }
    st.written = True
    out = opts.lockbench_out
    if (
        workload is not None
        and hasattr(workload, "summarize")
        and not getattr(opts, "lockbench_no_summary", False)
    ):
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


def fire_request(
    environment: Any, name: str, started_ns: int, exc: Exception | None = None, ended_ns: int | None = None
) -> None:
    """Tell Locust about an operation (ended now, or at ``ended_ns``), for its live UI and totals only.

    Locust's own stats round to milliseconds; lockbench's measurement is the recording.
    A holder fires after its release, so that Locust's bookkeeping is no part of the hold.
    """
    ended = time.monotonic_ns() if ended_ns is None else ended_ns
    environment.events.request.fire(
        request_type="lock",
        name=name,
        response_time=(ended - started_ns) / 1e6,
        response_length=0,
        exception=exc,
        context={},
    )


def close_locks(locks: Iterable[Any], environment: Any) -> None:
    """At a user's stop: fold each lock's own counters into its case's recording, then close it."""
    ctx = context(environment)
    for recorded in locks:
        ctx.recorder.add_lock_stats(recorded.lock.stats())
        recorded.lock.close()
    # the case's reads of the lock clock since the last user stopped (lockstat_clock_reads)
    reads, ctx.clock_reads[0] = ctx.clock_reads[0], 0
    ctx.recorder.add_lock_stats({"clock_reads": reads})


def counter(environment: Any, name: str, start: int = 0) -> Iterator[int]:
    """A count of the case's own, by name (its n-th client, its n-th critical section).

    Why not a module's counter: cases sharing a process would share it, and a workload that
    pauses every n-th section or skews every n-th client would spread that over the cases.
    """
    counters = context(environment).counters
    if name not in counters:
        counters[name] = itertools.count(start)
    return counters[name]


def recorder(environment: Any) -> Recorder:
    """The recording of the case ``environment`` runs: every user's events go there."""
    return context(environment).recorder
