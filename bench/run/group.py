"""Several cases on the same servers side by side, under one nemesis where there is one: a group.

Why: a server-fault strike costs seconds (a restart, a heal, the holder's wait, the grants
after it) and does not care how many locks it breaks. Paying that once per impl made the
standard matrix an hour long. So every case of a lane that takes the same fault (the same
scenario and trial, every impl and fencing mode, and the scenario's positive control) runs
side by side, as Jepsen's ``independent`` runs many keys under one nemesis:

* each case keeps its own users, its own lock names (``--lock-namespace m<i>:``), its own
  resource (Redis database ``i`` of the lane's resource server), and so its own history,
  recording and checker; where nothing in the cases stops their process
  (:func:`shares_a_process`) they run in one Locust process, each as an environment of its
  own (``workloads/harness/group_locust.py``), else each in a Locust process of its own;
* one :class:`~bench.nemesis.faults.FaultThread` arms every case's mailbox, waits until the
  holders have claimed the strike (or :data:`~bench.nemesis.faults.CLAIM_WINDOW_S`), strikes
  once, and marks per case whether that strike's precondition held
  (:class:`~bench.nemesis.faults.StrikeMark`); a case counts only the strikes that hit it;
* a case that has its evidence ends (its stop rule), and the fault strikes the others on.

A partition's group runs on test hosts: each case's Locust workers on client hosts of its own
(``m<i>-client-<j>``), so one cut takes every case's holder host and leaves each case's other
clients on the far side.

Cases of a workload fault (long-cs, the lease pauses, crash, clock-skew) and the fault-free row
have no shared nemesis (each makes its own strikes), but they too run side by side: they
wait on sleeps, leases and stuck bounds far more than on the CPU, so a lane takes about its
longest case per group instead of the sum of them (:data:`GROUP_SIZES` keeps heavy ones small).

The server's command counts cannot be split between the cases, so a grouped case has no
``server_cmds_per_acquire`` (the matrix measures safety; cost belongs to ``bench run``).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from bench.nemesis import partitions
from bench.nemesis.faults import FaultThread, namespace
from bench.run import clock_watch
from bench.run.case import Case, CaseFailed, ServerDied
from bench.run.locust import client_hosts_of, locust_argv
from bench.run.reset import reset_lock_state
from bench.run.runner import fault_thread, finish_case, lock_servers_of
from infra import server_stats
from infra.stack import Stack
from workloads.harness.netns import clear_claims
from workloads.harness.start_gate import EXIT_FILE, GATE_WAIT_S, POLL_S, READY_FILE

#: At most this many cases share one strike: every impl and fencing mode of a ZooKeeper or
#: etcd lane with its control (11), so each of their strikes is paid once. Each case has six
#: users (in a process of its own, or in the group's one): the loop-lag probe says when that
#: made the generator late, and :data:`GROUP_SIZES` keeps the heavy scenarios smaller.
#: ``LOCKBENCH_GROUP_MAX`` overrides it (a measurement knob: 1 runs every case alone beside its control).
GROUP_MAX = int(os.environ.get("LOCKBENCH_GROUP_MAX", "12") or 12)
#: A Redis server has 16 databases; each case of a group takes one for its resource.
_DATABASES = 16

Launch = Callable[[list[str], Path, float], int]
#: Runs several cases' Locust argvs in one process (workloads/harness/group_locust.py); its exit code.
GroupLaunch = Callable[[list[list[str]], Path, float], int]


#: Why a grouped case has no server command counts.
SHARED_COUNTS = (
    "the server was shared by the cases of a group (one nemesis for several locks): no count per case"
)


def resource_db(url: str, index: int) -> str:
    """The resource URL pointed at Redis database ``index`` (each case of a group has its own)."""
    if index >= _DATABASES:
        raise ValueError(f"a group has at most {_DATABASES} cases")
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{index}", parts.query, parts.fragment))


#: Smaller groups where each case is heavy for the generator: a crash case runs a Locust process
#: per crash (six at five strikes; four cases side by side, 24 workers, lost workers' heartbeats
#: on a loaded machine and two groups never started their buyers); clock-skew is contended flat
#: out. The fault-free row runs alone: it has no strike to share, and its cases were 60 purchases
#: (0.1-0.3 s of load; 600 since, bench/nemesis/scenarios.py), so a group's start took longer than its cases (1.9-4.4 s waiting at the
#: gate for the others' warm processes, against 0.03 s for a lone case's start) and four cases
#: buying at once from a standing start kept their loops late 16-20% of that short window
#: (loop late 0-15% alone; the redis+postgres matrix, 2026-12-05). A lease-expiry-world case is
#: three Locust processes (a master and two workers) contending flat out for one lock: seven
#: side by side kept 16 of 18 cases generator-bound (loops late 24-29%), four side by side none
#: of 20 (late 2-10%), at 84 s against 135 s and the same 11 cells (redis and etcd, 2 lanes,
#: load 0.7-2.1 at the start, 2026-12-05). A ZooKeeper ensemble's member kills share two cores
#: with three JVMs: eleven cases under one kill were all generator-bound (loops late 22%), two
#: groups of six none of 12, kill-member in 113 s against 92 s with the same 5 cells; kill-leader
#: in groups of six, none of 12 (152 s; one lane, load 1.8-5.5 at the start, 2026-12-05).
#: PostgreSQL's restart reconnects every case's pool at once: its group of twelve came out 6 of
#: 12 generator-bound with no other unit beside it (loop late 16%; full matrix, 3 lanes,
#: 2026-12-05), where Redis's group of ten stayed unbound; restarts go in groups of eight.
GROUP_SIZES = {
    "crash": 2,
    "clock-skew": 4,
    "flash-sale": 1,
    "kill-leader": 6,
    "kill-member": 6,
    "lease-expiry-world": 4,
    "restart": 8,
    "session-pause": 4,
}


def groupable(case: Case) -> bool:
    """Cases that may run side by side on a lane's servers: all but faults timed by the clock
    rather than by a holder. A partition's group gives each case client hosts of its own, and
    one cut takes every case's holder host (:func:`bench.nemesis.partitions.sides`)."""
    if case.fault is None:
        return True
    return case.fault.at_seconds is None


#: Smaller still on one backend. PostgreSQL forks a server process for every connection, so its
#: restart makes each case's six users reconnect through a fork each, all at once. Its group of
#: eight alone on a quiet machine kept loops late 5-8% of the time (a group of four 2-3%; load
#: average 0.57 at the start, 2026-12-06), but beside one light unit at three lanes 16-18%: 9, 8
#: and 7 of its 8 cases came out generator-bound in three full matrices (R3, P5, B4, 2026-12-05/06),
#: a quarter to a half of all bound cases. In fours it is no heavy unit (admission.BIG_GROUP).
BACKEND_GROUP_SIZES = {("postgres", "restart"): 4}


def group_size(scenario: str, backend: str = "") -> int:
    """At most this many cases of ``scenario`` side by side on ``backend`` (GROUP_MAX, smaller for heavy cases)."""
    size = BACKEND_GROUP_SIZES.get((backend, scenario), GROUP_SIZES.get(scenario, GROUP_MAX))
    return max(1, min(GROUP_MAX, size))


#: ``LOCKBENCH_GROUP_PROCESS=0`` gives every case of a group its own Locust process again (a
#: measurement knob: the layout before 2026-12-07). Read at each call: a forked bench inherits
#: the modules of a process that had another environment.
SHARE_PROCESS_ENV = "LOCKBENCH_GROUP_PROCESS"


def shares_a_process(cases: list[Case]) -> bool:
    """May these cases' users run in one Locust process (``workloads/harness/group_locust.py``)?

    Not where a case is several processes (``--processes``, a master, workers on test hosts),
    nor where its workload stops or kills its own process (crash, a world or session pause):
    that would stop every case beside it. All must run one locustfile.
    """
    if (
        os.environ.get(SHARE_PROCESS_ENV, "1") == "0"
        or len(cases) < 2
        or len({c.workload.path for c in cases}) != 1
    ):
        return False
    for case in cases:
        settings = case.settings
        if settings.processes > 1 or settings.master_bind is not None:
            return False
        if case.fault is not None and case.fault.is_partition:
            return False
        if case.workload.name == "crash" or settings.workload_options.get("pause_kind") == "world":
            return False
    return True


def run_group(
    cases: list[Case],
    stack: Stack,
    scratch: Path,
    launches: list[Launch],
    in_one: GroupLaunch | None = None,
) -> list[dict[str, Any] | Exception]:
    """Run ``cases`` side by side under one fault; each gets its result, or the exception that ended it.

    ``launches[i]`` starts case ``i``'s Locust and returns its exit code (a warm process of its own).
    ``in_one``, where given, runs them all in one Locust process instead: the caller has checked
    that they may share one (:func:`shares_a_process`).
    """
    if not cases:
        return []
    if in_one is None and len(launches) < len(cases):
        raise ValueError(f"{len(cases)} cases need as many launchers, got {len(launches)}")
    clock_watch.start()  # wall-clock steps during the case (judge.stall_reason)
    begun_ns = time.monotonic_ns()
    backend = cases[0].backend
    try:
        reset_lock_state(backend, stack.urls[backend])
    except Exception as exc:  # noqa: BLE001 - a server that cannot be cleaned cannot be measured
        return [CaseFailed(f"{c.case_id}: could not clear lock state before the case: {exc}") for c in cases]
    resources = [resource_db(stack.urls["resource"][0], i) for i in range(len(cases))]
    on_hosts = cases[0].fault is not None and cases[0].fault.is_partition
    ground = partitions.PartitionGround(stack.hosts, lock_servers_of(stack, backend)) if on_hosts else None
    outs, argvs = _prepare(cases, stack, scratch, resources, ground)
    # a server fault or a cut: one nemesis for every case of the group
    fault = fault_thread(cases, stack, resources, ground)
    if in_one is not None:
        launched_ns, codes, exited = _launch_in_one_process(cases, in_one, argvs, outs, fault)
    else:
        launched_ns, codes, exited = _launch_side_by_side(cases, launches, argvs, outs, fault)
    interrupted = next((c for c in codes if isinstance(c, KeyboardInterrupt)), None)
    if interrupted is not None:
        raise interrupted
    results: list[dict[str, Any] | Exception] = []
    for i, case in enumerate(cases):
        code = codes[i]
        if isinstance(code, BaseException):
            results.append(CaseFailed(f"{case.case_id}: Locust could not run: {code}"))
            continue
        timing = {
            "begun_ns": begun_ns,
            "launched_ns": launched_ns,
            "exited_ns": exited[i],
            "group": len(cases),
        }
        shared = server_stats.Commands(error=SHARED_COUNTS)
        try:
            results.append(
                finish_case(case, stack, outs[i], code, fault, str(i), shared, None, timing, ground=ground)
            )
        except (CaseFailed, ServerDied) as exc:
            results.append(exc)
    return results


def _prepare(
    cases: list[Case],
    stack: Stack,
    scratch: Path,
    resources: list[str],
    ground: partitions.PartitionGround | None,
) -> tuple[list[Path], list[list[str]]]:
    """Each case's scratch folder and Locust command line (its own namespace, resource and hosts)."""
    lock_urls = stack.urls[cases[0].backend]
    outs: list[Path] = []
    argvs: list[list[str]] = []
    for i, case in enumerate(cases):
        out = scratch / case.case_id
        out.mkdir(parents=True, exist_ok=True)
        clear_claims(out)  # an earlier attempt's dead workers still hold its hosts
        outs.append(out)
        hosts = None
        if ground is not None:  # a case's Locust workers, each on a client host of the case's own
            hosts = [h.name for h in client_hosts_of(stack, case.settings.processes, f"m{i}-")]
            ground.claim_dirs.append(out)
        argv = locust_argv(
            case, case.settings, lock_urls, resources[i], out, lock_namespace=namespace(str(i)), netns=hosts
        )
        argvs.append(argv)
    return outs, argvs


def _launch_side_by_side(
    cases: list[Case],
    launches: list[Launch],
    argvs: list[list[str]],
    outs: list[Path],
    fault: FaultThread | None,
) -> tuple[int, list[int | BaseException], list[int]]:
    """Start every case's Locust in a thread of its own under the one nemesis; wait for all.

    Returns when they were launched, each one's exit code (or the exception that ended it) and
    when each exited; the nemesis is told as each case finishes, and stopped at the end.
    """
    codes: list[int | BaseException] = [0] * len(cases)
    exited: list[int] = [0] * len(cases)
    gate = StartGate(outs) if len(cases) > 1 else None
    if gate is not None:
        argvs = [[*argv, "--lockbench-start-gate", str(gate.path)] for argv in argvs]

    def one(i: int) -> None:
        try:
            codes[i] = launches[i](argvs[i], outs[i] / "locust.log", cases[i].settings.duration + 120)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller with the case
            codes[i] = exc
        finally:
            exited[i] = time.monotonic_ns()
            if fault is not None:
                fault.finished(str(i))

    if fault is not None:
        fault.start()
    launched_ns = time.monotonic_ns()
    threads = [
        threading.Thread(target=one, args=(i,), name=f"group-{i}", daemon=True) for i in range(len(cases))
    ]
    try:
        for t in threads:
            t.start()
        if gate is not None:
            gate.open_when_ready(threads)
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    finally:
        if gate is not None:
            gate.open()
        if fault is not None:
            fault.stop()
            fault.join(60)
    return launched_ns, codes, exited


#: How often bench looks for the end of each case of a shared process (s): a case's end stops the
#: strikes on it, and the fault thread waits on nothing else from it.
CASE_END_POLL_S = 0.1


def _launch_in_one_process(
    cases: list[Case],
    in_one: GroupLaunch,
    argvs: list[list[str]],
    outs: list[Path],
    fault: FaultThread | None,
) -> tuple[int, list[int | BaseException], list[int]]:
    """Run every case in one Locust process under the one nemesis; as :func:`_launch_side_by_side` returns.

    Each case's end is its exit file (``group_locust.EXIT_FILE``), written as it ends while the
    others go on; a case that wrote none ends with the process. The process's output is every
    case's log (``locust.log`` in each case's folder), so a failed case keeps it.
    """
    n = len(cases)
    codes: list[int | BaseException | None] = [None] * n
    exited: list[int] = [0] * n
    for out in outs:  # a re-run case's folder may keep the end of its first run
        (out / EXIT_FILE).unlink(missing_ok=True)
    log_path = outs[0].parent / f".group-{os.getpid()}-{time.monotonic_ns()}.log"
    ended: list[int | BaseException] = []

    def run() -> None:
        try:
            ended.append(in_one(argvs, log_path, max(c.settings.duration for c in cases) + 120))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller with each unfinished case
            ended.append(exc)

    def end(i: int, code: int | BaseException) -> None:
        codes[i], exited[i] = code, time.monotonic_ns()
        if fault is not None:
            fault.finished(str(i))

    if fault is not None:
        fault.start()
    launched_ns = time.monotonic_ns()
    thread = threading.Thread(target=run, name="group-process", daemon=True)
    try:
        thread.start()
        while any(code is None for code in codes):
            thread.join(CASE_END_POLL_S)
            for i, out in enumerate(outs):
                if codes[i] is None and (out / EXIT_FILE).exists():
                    end(i, _exit_code(out / EXIT_FILE))
            if not thread.is_alive():
                for i in range(n):
                    if codes[i] is None:
                        end(i, ended[0] if ended else 1)
    finally:
        if fault is not None:
            fault.stop()
            fault.join(60)
        thread.join(5)
        _share_log(log_path, outs)
    return launched_ns, [c if c is not None else 1 for c in codes], exited


def _exit_code(path: Path) -> int:
    try:
        return int(json.loads(path.read_text())["exit"])
    except (OSError, ValueError, KeyError, TypeError):
        return 1


def _share_log(log_path: Path, outs: list[Path]) -> None:
    """The shared process's output as every case's ``locust.log``; the group's own copy goes."""
    try:
        text = log_path.read_bytes()
    except OSError:
        return
    for out in outs:
        with contextlib.suppress(OSError):
            (out / "locust.log").write_bytes(text)
    log_path.unlink(missing_ok=True)


class StartGate:
    """The start gate of a group (workloads/harness/start_gate.py): opened once every case is set up.

    Why: cases launched together and started one by one as each got ready, so the first ran
    their buyers through the others' start-up (forks, imports, connections), and their loops
    ran late for it. Opening one gate for all moves that burst out of every case's window.
    """

    def __init__(self, outs: list[Path]) -> None:
        self.outs = outs
        self.path = outs[0].parent / f".start-gate-{os.getpid()}-{time.monotonic_ns()}"
        for out in outs:  # a re-run case's folder may keep the mark of its first run
            (out / READY_FILE).unlink(missing_ok=True)

    def ready(self, threads: list[threading.Thread]) -> bool:
        """Is every case waiting at the gate, or over (a Locust that failed to start waits for nothing)?"""
        return all(
            (out / READY_FILE).exists() or not thread.is_alive()
            for out, thread in zip(self.outs, threads, strict=True)
        )

    def open_when_ready(self, threads: list[threading.Thread]) -> None:
        """Wait until every case is ready (at most the gate's own bound), then open it."""
        started = time.monotonic()
        while not self.ready(threads) and time.monotonic() - started < GATE_WAIT_S:
            time.sleep(POLL_S)
        self.open()

    def open(self) -> None:
        if not self.path.exists():
            self.path.touch()
