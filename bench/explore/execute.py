"""Play one schedule as a case on the existing machinery: one Locust case, its mailbox's claim as time zero.

Why a case: a schedule is judged exactly as a matrix cell is (the same flash-sale workload, the
same checkers, the ownership probe after every round), and it lands in the results folder as a
case row with its history, so the report draws its timeline.

How a round goes (:class:`ScheduleThread`, a :class:`~bench.nemesis.faults.FaultThread` that plays
a schedule instead of one kind): arm the case's mailbox, wait for a holder granted after the
arming to claim it (time zero), play every event at its offset (a server event by its kind's
action: :func:`~bench.nemesis.restart.restart_server` on the server holding the holder's key,
``server.kill_member()``, ``server.kill_leader()``, ``server.lose_writes_failover``; a holder
event as a ``pause:`` command on the mailbox, which the holder obeys), wait until the last pause
ended, then let the holder go as after any strike (once another client bought, or after
:data:`REGRANT_S`), heal what needs healing, let the service grant its purchases, and go again:
``rounds`` rounds a case. The case fails when its verdict is ``invalid`` (a lost lock, an overlap,
oversold stock, a stale write accepted), or when the lock is *stuck*: after a round's events nobody
got it within the lock's own recovery bound (:func:`recovery_bound_s`, the matrix's rule for a
server fault: 3x the lock's own timeout, at least 10 s). No fixed wait decides it: the case's stop
rule waits that bound without a grant before it ends, and :func:`stuck_after` measures, per round,
from the service being back (else the round's end) to the next grant in the history.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.explore.draw import TTL_S, Reach
from bench.explore.schedule import HOLDER_KINDS, TASK_PAUSE, Event, Schedule
from bench.explore.shrink import Outcome
from bench.measure import strikes as strike_rules
from bench.nemesis.faults import FaultSpec, FaultThread
from bench.nemesis.kinds import SERVER_KINDS
from bench.nemesis.members import KILL_LEADER, KILL_MEMBER, leader_again
from bench.nemesis.restart import restart_server, restart_target
from bench.nemesis.window import FaultWindow
from bench.run.case import Case, RunSettings
from workloads.checks.recovery import strike_windows
from workloads.checks.stop_rules import StopRule
from workloads.harness.catalog import WORKLOADS
from workloads.harness.resource import PAUSE_PREFIX

#: The fault kind a schedule's case is filed under (its events say what it really did).
EXPLORE = "explore"
#: Rounds of the schedule in one case (each on a fresh grant).
ROUNDS = 2
#: After the last event (a pause's end), how long the holder keeps its lock at most (s); never
#: more than half the lease: a hold past its lease proves nothing of the schedule.
REGRANT_S = 2.0
#: How long after bench sees the claim its time zero is (s). The holder's ``fault-hold`` carries
#: the time it took before telling bench, so any strike counts; the settle keeps a "+0s" event a
#: moment after the claim rather than racing the holder's own next step.
CLAIM_SETTLE_S = 0.05
#: Buyers, and purchases a second each (the matrix's fault cases: bench/nemesis/scenarios.py).
USERS = 6
PACE = 10.0
#: Longest a schedule's case may run (s) before the lock's recovery bound is added; its stop rule
#: ends it once its rounds and grants are in, or once nobody got the lock for the bound.
CASE_CAP_S = 90.0


def explore_settings(ttl: float = TTL_S, rounds: int = ROUNDS) -> dict[str, Any]:
    """The settings every schedule's case runs with (kept in ``schedule.json`` so a replay uses them)."""
    return {"ttl": ttl, "rounds": rounds, "users": USERS, "pace": PACE, "cap_s": CASE_CAP_S}


class ExploreCase(Case):
    """A case that plays a schedule; why its own class: its id says so (``<impl>__explore__r<n>``)."""

    @property
    def scenario(self) -> str:
        return "flash-sale+explore" + ("+fenced" if self.fencing == "enforce" else "")

    @property
    def case_id(self) -> str:
        safe = self.impl.replace(":", "_").replace("/", "_")
        return f"{safe}__explore__r{self.trial}"


def recovery_bound_s(impl: str, ttl: float, lock_params: dict[str, Any]) -> float:
    """How long after a round's events nobody may get the lock before it is stuck (s).

    The matrix's rule (bench/measure/strikes.py :func:`~bench.measure.strikes.recovery_bound_s`),
    for the lock named ``impl``.
    """
    from lockimpls.registry import resolve

    return strike_rules.recovery_bound_s(resolve(impl), ttl, lock_params)


def make_case(schedule: Schedule, number: int) -> ExploreCase:
    """The case that plays ``schedule`` (the ``number``-th run of this exploration)."""
    s = {**explore_settings(), **schedule.settings}
    rounds = int(s["rounds"])
    bound = recovery_bound_s(schedule.impl, float(s["ttl"]), dict(schedule.lock_params))
    # a round whose lock nobody gets any more brings no further round: the case ends once nobody
    # got it for the bound after the last holder let go (stall_after_any), never at a fixed wait
    stop = StopRule("fault", count=rounds, acquisitions=5, or_after_s=bound, stall_after_any=True)
    settings = RunSettings(
        users=int(s["users"]), spawn_rate=float(s["users"]) * 20, duration=float(s["cap_s"]) + bound,
        ttl=float(s["ttl"]), strikes=rounds, grants_between=5, stop_rule=stop.to_json(),
        lock_params=dict(schedule.lock_params),
        workload_options={"items": 1, "skew": 1.0, "stock": 100_000, "max_qty": 3, "pace": float(s["pace"])},
    )  # fmt: skip
    return ExploreCase(
        impl=schedule.impl, backend=schedule.backend, workload=WORKLOADS["flash-sale"], trial=number,
        fencing=schedule.fencing, fault=FaultSpec("restart", "held"), settings=settings,
        params={"recovery_bound_s": bound},
    )  # fmt: skip


def hold_cap_s(schedule: Schedule) -> float:
    """The holder's ``--fault-hold``: the events, the pauses, the regrant wait, and a slow restart."""
    return schedule.span_s + REGRANT_S + 30.0


class ScheduleThread(FaultThread):
    """Plays a schedule each round on the claimed holder; why a FaultThread: the claim, the marks,
    the release, the heal and the pacing between rounds are the matrix's, unchanged."""

    def __init__(self, schedule: Schedule, server: Any, servers: list[Any], resource_url: str,
                 settings: RunSettings) -> None:  # fmt: skip
        super().__init__(
            FaultSpec("restart", "held"), server, resource_url, deadline_s=settings.duration,
            strikes=settings.strikes, grants_between=settings.grants_between, lease_s=settings.ttl,
            labels=["0"], servers=servers,
        )  # fmt: skip
        self.schedule = schedule
        #: what each round's events did, in words (also each window's detail)
        self.played: list[list[str]] = []

    def regrant_wait_s(self) -> float:
        return min(REGRANT_S, self.lease_s / 2) if self.lease_s else REGRANT_S

    def _heal_topology(self) -> None:
        heals = any(e.kind not in HOLDER_KINDS and SERVER_KINDS[e.kind].heals for e in self.schedule.events)
        if heals and hasattr(self.server, "heal"):
            self.server.heal()

    def _strike(self) -> FaultWindow | None:
        if not self._wait_for_holder():
            return None
        box = self.mailboxes[0]
        # time zero a moment after bench saw the claim (CLAIM_SETTLE_S)
        zero = (box.claimed_ns or time.monotonic_ns()) + int(CLAIM_SETTLE_S * 1e9)
        self._sleep_until(zero)
        start = time.monotonic_ns()
        done: list[str] = []
        for event in self.schedule.sorted_events():
            if self._sleep_until(zero + int(event.at * 1e9)):
                break
            done.append(f"+{(time.monotonic_ns() - zero) / 1e9:.2f}s {self._play(event, box)}")
        self._sleep_until(zero + int(self.schedule.span_s * 1e9))  # every pause has ended
        self.played.append(done)
        # the window's kind names the schedule: the report's timeline labels the strike with it
        label = f"{EXPLORE}: {self.schedule.text().split(': ', 1)[1]}"
        return FaultWindow(label, start, time.monotonic_ns(), "; ".join(done) or "no event played")

    def _sleep_until(self, due_ns: int) -> bool:
        """Wait until ``due_ns`` (monotonic); True when the case ended first."""
        left = (due_ns - time.monotonic_ns()) / 1e9
        return left > 0 and self.wait(left)

    def _play(self, event: Event, box: Any) -> str:
        """One event, now; what it did, in words."""
        if event.kind in HOLDER_KINDS:
            what = "task" if event.kind == TASK_PAUSE else "world"
            box.client.rpush("lockbench:res:healed", f"{PAUSE_PREFIX}{what}:{round(event.seconds * 1000)}")
            return f"told the holder: {event.kind} {event.seconds:g}s"
        if event.kind == "restart":
            target = self.server
            if len(self.servers) > 1:
                target, _ = restart_target(self.servers, self.mailboxes)
            return restart_server(target)
        if event.kind == KILL_MEMBER:
            return str(self.server.kill_member())
        if event.kind == KILL_LEADER:
            detail = str(self.server.kill_leader())
            leader_again(self)
            return detail
        if event.kind == "failover":
            self.server.lose_writes_failover(lambda: None)
            return "master killed; Sentinel promoted the replica"
        raise ValueError(f"unknown event kind {event.kind!r}")


@dataclass
class Played:
    """One run of a schedule: its case's judged result and the thread that played it."""

    case: ExploreCase
    result: dict[str, Any]
    played: list[list[str]]


@dataclass(frozen=True)
class Stuck:
    """The longest a round's lock stayed ungranted, against the lock's bound; why a value: the row and
    the outcome's reason both say it.

    ``waited_s`` runs from the service being back (else the round's end) to the next grant, or
    to the history's end when none came (``granted`` False). ``decided``: the wait reached the
    bound (stuck), or a grant came (not stuck); False when the case ended first.
    """

    waited_s: float
    bound_s: float
    granted: bool

    @property
    def stuck(self) -> bool:
        return self.waited_s >= self.bound_s

    @property
    def decided(self) -> bool:
        return self.granted or self.stuck

    def text(self) -> str:
        if self.stuck:
            return (
                f"stuck: nobody got the lock for {self.waited_s:.1f} s after a round's events "
                f"(its recovery bound {self.bound_s:g} s: 3x its own timeout)"
            )
        if not self.granted:
            return f"undecided: the case ended {self.waited_s:.1f} s after a round, short of the bound {self.bound_s:g} s"
        return f"recovered: the next grant {self.waited_s:.1f} s after a round (bound {self.bound_s:g} s)"


def stuck_after(history: pd.DataFrame | None, bound_s: float) -> Stuck | None:
    """The round whose lock stayed ungranted longest, from the history's strike windows (None: no round)."""
    if history is None or history.empty:
        return None
    windows = strike_windows(history)
    if windows.empty:
        return None
    grants = np.sort(
        history.loc[((history["op"] == "acquire") & (history["type"] == "ok")).to_numpy(dtype=bool), "t_ns"]
        .to_numpy(dtype=np.int64)
    )  # fmt: skip
    end = int(history["t_ns"].max())
    worst: Stuck | None = None
    for w in windows.itertuples(index=False):
        base = (
            w.back_ns
            if w.back_ns == w.back_ns
            else (w.healed_ns if w.healed_ns == w.healed_ns else w.start_ns)
        )
        i = int(np.searchsorted(grants, int(base), side="right"))
        granted = i < len(grants)
        waited = ((int(grants[i]) if granted else end) - int(base)) / 1e9
        one = Stuck(max(0.0, waited), bound_s, granted)
        if worst is None or (one.stuck, not one.granted, one.waited_s) > (
            worst.stuck,
            not worst.granted,
            worst.waited_s,
        ):
            worst = one
    return worst


def outcome_of(result: dict[str, Any]) -> Outcome:
    """Failed when the case's verdict is ``invalid`` or its lock was stuck past its bound; the reason in words."""
    row = result["row"]
    verdict = str(row.get("verdict"))
    reason = str(row.get("verdict_reason") or verdict)
    stuck: Stuck | None = result.get("stuck")
    detail = {"case": row.get("case"), "verdict": verdict}
    if verdict != "invalid" and stuck is not None and stuck.stuck:
        return Outcome(True, stuck.text(), {**detail, "stuck": True})
    if verdict != "invalid" and stuck is not None and not stuck.decided:
        reason = f"{reason}; {stuck.text()}"
    return Outcome(verdict == "invalid", reason, detail)


def run_schedule(
    schedule: Schedule,
    stack: Any,
    scratch: Path,
    number: int,
    launch: Callable[[list[str], Path, float], int] | None = None,
) -> Played:
    """Run ``schedule`` once as a case on ``stack``'s servers; the judged case and what was played."""
    from bench.run.runner import lock_servers_of, run_case

    case = make_case(schedule, number)
    threads: list[ScheduleThread] = []

    def nemesis(case_: Case, stack_: Any, resource_url: str) -> ScheduleThread:
        servers = lock_servers_of(stack_, case_.backend)
        server = stack_.servers.get(f"{case_.backend}-lock") or servers[0]
        thread = ScheduleThread(schedule, server, servers, resource_url, case_.settings)
        threads.append(thread)
        return thread

    def launch_with_hold(argv: list[str], log_path: Path, timeout: float) -> int:
        argv = list(argv)
        if "--fault-hold" in argv:  # the holder holds through the whole schedule
            argv[argv.index("--fault-hold") + 1] = f"{hold_cap_s(schedule):g}"
        if launch is not None:
            return launch(argv, log_path, timeout)
        from bench.run.locust import run_locust

        return run_locust(argv, log_path, timeout=timeout)

    result = run_case(case, stack, scratch, launch=launch_with_hold, nemesis=nemesis)
    result["row"]["fault"] = EXPLORE
    history_file = result.get("history_file")
    history = pd.read_parquet(history_file) if history_file and Path(history_file).exists() else None
    stuck = stuck_after(history, float(case.params["recovery_bound_s"]))
    result["stuck"] = stuck
    if stuck is not None:
        result["row"]["explore_stuck_s"] = round(stuck.waited_s, 3) if stuck.decided else None
    return Played(case, result, threads[0].played if threads else [])


def stack_for(
    reach_: Reach, keep_logs: Path | None = None, user_urls: dict[str, list[str]] | None = None
) -> Any:
    """The servers every schedule of ``reach_`` plays on (not yet started: use it as a context manager)."""
    from infra.stack import Stack

    return Stack(
        [reach_.backend], user_urls=user_urls or {}, reuse_infra_up=False,
        servers_per_backend={reach_.backend: reach_.servers},
        topology={reach_.backend: reach_.topology} if reach_.topology else {},
        keep_logs=keep_logs,
    )  # fmt: skip
