"""bench explore / bench replay (issue 41): seeded schedules, shrinking, the file, exit codes.

The search and the shrinking are tested on a deterministic fake schedule space (a lock that fails
only when two named events coincide: the outcome is a function of the schedule, so what is
asserted is Hypothesis's search and shrink, not the weather of a loaded machine); the command's
exits and the replay are tested end to end on real servers.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from bench.errors import UserError
from bench.explore.draw import Reach, reach, schedule_for
from bench.explore.execute import explore_settings, make_case, outcome_of, recovery_bound_s, stuck_after
from bench.explore.schedule import Event, Schedule
from bench.explore.shrink import Explorer, Outcome
from tests.helpers import bench
from tests.test_checkers import history
from workloads.checks.stop_rules import StopRule

ROOT = Path(__file__).resolve().parents[1]
S = 1_000_000_000
KINDS = ("task-pause", "world-pause", "kill-member", "kill-leader")
FAKE = Reach("fake.coincidence", "etcd", KINDS, "ensemble")


def _make(events: list[Event]) -> Schedule:
    return schedule_for(FAKE, events, 7, explore_settings(), {}, "off")


class Coincidence:
    """The fake space: the lock breaks only when a world pause and a leader kill are in one schedule."""

    def __init__(self, a: str = "world-pause", b: str = "kill-leader") -> None:
        self.a, self.b = a, b
        self.runs: list[Schedule] = []

    def __call__(self, schedule: Schedule) -> Outcome:
        self.runs.append(schedule)
        kinds = {e.kind for e in schedule.events}
        return Outcome(self.a in kinds and self.b in kinds, f"{self.a} with {self.b}")


def test_the_same_seed_draws_the_same_schedules_and_another_seed_others() -> None:
    plan = [s.text() for s in Explorer(FAKE, _make, Coincidence(), 3, 0).plan(10)]
    assert plan == [s.text() for s in Explorer(FAKE, _make, Coincidence(), 3, 0).plan(10)]
    assert plan != [s.text() for s in Explorer(FAKE, _make, Coincidence(), 4, 0).plan(10)]
    assert len(plan) == 10


def test_the_plan_is_what_the_search_runs_in_order() -> None:
    never = Coincidence("none", "none")
    plan = [s.text() for s in Explorer(FAKE, _make, never, 3, 0).plan(8)]
    Explorer(FAKE, _make, never, 3, 3600).explore()
    assert [s.text() for s in never.runs[:8]] == plan


def test_a_failure_of_two_coinciding_events_is_found_and_shrunk_to_exactly_them() -> None:
    space = Coincidence()
    finding = Explorer(FAKE, _make, space, 3, 3600).explore()
    assert finding.found and finding.reproduced
    assert sorted(e.kind for e in finding.shrunk.events) == ["kill-leader", "world-pause"]
    # shrunk: the weakest pause the strategy draws, and the first failure was no smaller
    assert [e.seconds for e in finding.shrunk.events if e.kind == "world-pause"] == [0.5]
    assert finding.first.size() >= finding.shrunk.size()
    assert finding.confirmed == "2 of 2 confirming runs failed"


def test_shrink_runs_bound_the_shrinking_in_runs_and_the_failure_is_still_confirmed() -> None:
    free = Coincidence()
    unbound = Explorer(FAKE, _make, free, 3, 3600).explore()
    assert unbound.shrink_steps > 2 and not unbound.shrink_out  # so the bound below is what stops it
    space = Coincidence()
    finding = Explorer(FAKE, _make, space, 3, 3600, max_shrink_runs=2).explore()
    assert finding.shrink_out and finding.shrink_steps == 2
    assert finding.found and finding.reproduced  # what was in hand is kept and confirmed
    assert finding.shrunk.size() <= finding.first.size()
    kept = Explorer(FAKE, _make, Coincidence(), 3, 3600, max_shrink_runs=0).explore()
    assert kept.shrink_steps == 0 and kept.shrunk.text() == kept.first.text()


def test_a_lock_that_never_fails_is_nothing_found_with_the_count_tried() -> None:
    space = Coincidence("none", "none")
    finding = Explorer(FAKE, _make, space, 5, 3600, max_schedules=40).explore()
    assert not finding.found and finding.shrunk is None
    assert finding.tried == len({s.text() for s in space.runs}) > 0
    assert finding.events_tried >= finding.tried


def test_reach_draws_only_the_kinds_that_reach_the_lock() -> None:
    assert reach("redis.set-nx-px-lua").kinds == ("task-pause", "world-pause", "restart")
    assert reach("etcd.lease").topology == "ensemble"
    assert "restart" not in reach("zookeeper.kazoo").kinds
    assert reach("redis.set-nx-px-lua", ["failover"]).topology == "sentinel"
    # the persistence arm is the restart of a Redis with its append-only file on
    aof = reach("redis.set-nx-px-lua", ["restart-aof", "world-pause"])
    assert (aof.kinds, aof.topology) == (("world-pause", "restart-aof"), "aof-everysec")
    # a plain restart of ZooKeeper or etcd, asked for, on one server
    assert (reach("etcd.lease", ["restart"]).kinds, reach("etcd.lease", ["restart"]).topology) == (
        ("restart",),
        None,
    )
    # a pause can only outlast a lease: a PostgreSQL session lock has none; a ZooKeeper session is one
    assert reach("postgres.advisory").kinds == ("restart",)
    assert reach("zookeeper.kazoo").kinds == ("world-pause", "kill-member", "kill-leader")
    assert reach("memcached.add").kinds == ("task-pause", "world-pause", "restart")


@pytest.mark.parametrize(
    ("impl", "faults", "says"),
    [
        ("redis.set-nx-px-lua", ["crash"], "does not draw it yet"),
        ("redis.set-nx-px-lua", ["clock-jump"], "does not draw it yet"),
        ("etcd.lease", ["partition-client"], "network-namespace test hosts"),
        ("etcd.lease", ["restart", "kill-member"], "need different servers"),
        ("redis.set-nx-px-lua", ["kill-leader"], "none of them reaches"),
        ("postgres.advisory", ["world-pause"], "none of them reaches"),
        ("file.flock", [], "nothing bench explore draws reaches"),
    ],
)
def test_a_kind_that_cannot_reach_or_cannot_be_played_is_refused_with_why(
    impl: str, faults: list[str], says: str
) -> None:
    with pytest.raises(UserError, match=says):
        reach(impl, faults)


def _round_history(wait_s: float, end_s: float, grant: bool) -> pd.DataFrame:
    """One round: the holder granted, bench's strike window 0.1-1.1 s, the service back at 1.2 s, then
    the next grant ``wait_s`` after it (when ``grant``), the history ending at ``end_s``."""
    lock = "m0:flash-sale:item-0"
    ev = [
        ("1-u0", 0, "acquire", "ok", lock, 0),
        ("bench", 0, "fault", "invoke", "explore: +0s restart", S // 10),
        ("bench", 0, "strike", "ok", "explore", S // 10),
        ("bench", 0, "fault", "ok", "explore: +0s restart", int(1.1 * S)),
        ("bench", 0, "service", "ok", "explore", int(1.2 * S)),
    ]
    if grant:
        ev.append(("2-u0", 0, "acquire", "ok", lock, int((1.2 + wait_s) * S)))
    ev.append(("3-u0", 0, "acquire", "fail", lock, int(end_s * S)))
    return history(*ev)


def test_a_lock_stuck_past_its_own_bound_is_a_failure_and_one_back_in_time_is_not() -> None:
    stuck = stuck_after(_round_history(0, 20.0, grant=False), bound_s=15.0)
    assert stuck is not None and stuck.stuck and stuck.decided and not stuck.granted
    assert stuck.waited_s == pytest.approx(18.8)
    back = stuck_after(_round_history(3.0, 20.0, grant=True), bound_s=15.0)
    assert back is not None and not back.stuck and back.decided and back.waited_s == pytest.approx(3.0)
    # a grant after the bound is stuck too: the lock stayed unavailable past what it promises
    late = stuck_after(_round_history(16.0, 30.0, grant=True), bound_s=15.0)
    assert late is not None and late.stuck
    # the case ended before the bound: undecided, never called stuck
    short = stuck_after(_round_history(0, 5.0, grant=False), bound_s=15.0)
    assert short is not None and not short.stuck and not short.decided


def test_the_outcome_of_a_stuck_run_is_a_failure_with_its_reason() -> None:
    row = {"case": "x__explore__r0", "verdict": "valid", "verdict_reason": ""}
    stuck = stuck_after(_round_history(0, 20.0, grant=False), bound_s=15.0)
    outcome = outcome_of({"row": row, "stuck": stuck})
    assert outcome.failed and outcome.reason.startswith("stuck: nobody got the lock for 18.8 s")
    assert "recovery bound 15 s" in outcome.reason
    fine = outcome_of({"row": row, "stuck": stuck_after(_round_history(3.0, 20.0, grant=True), bound_s=15.0)})
    assert not fine.failed
    invalid = outcome_of({"row": {**row, "verdict": "invalid", "verdict_reason": "overlaps"}, "stuck": None})
    assert invalid.failed and invalid.reason == "overlaps"


def test_the_stuck_bound_is_the_lock_s_own() -> None:
    """3x the lock's own timeout, at least 10 s: a 5 s lease -> 15 s; a 10 s ZooKeeper session -> 30 s."""
    assert recovery_bound_s("redis.set-nx-px-lua", 5.0, {}) == 15.0
    assert recovery_bound_s("zookeeper.kazoo", 5.0, {}) == 30.0
    assert recovery_bound_s("postgres.advisory", 1.0, {}) == 10.0
    lua = reach("redis.set-nx-px-lua")
    case = make_case(schedule_for(lua, [Event("restart", 0.0)], 3, explore_settings(), {}, "off"), 0)
    rule = StopRule.from_json(case.settings.stop_rule)
    assert rule is not None and rule.or_after_s == case.params["recovery_bound_s"] and rule.stall_after_any


class Flaky:
    """A failure with an edge: the two events fail with a world pause of 3 s or more; 2.8-2.9 s fails only
    the first time it runs (timing decides it), and shorter never."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def __call__(self, schedule: Schedule) -> Outcome:
        kinds = {e.kind for e in schedule.events}
        pause = max((e.seconds for e in schedule.events if e.kind == "world-pause"), default=0.0)
        n = self.calls[schedule.text()] = self.calls.get(schedule.text(), 0) + 1
        both = {"world-pause", "kill-leader"} <= kinds
        return Outcome(both and (pause >= 3.0 or (pause >= 2.8 and n == 1)), "coincidence")


def test_a_shrunk_schedule_on_the_edge_gives_way_to_the_smallest_that_reproduces() -> None:
    finding = Explorer(FAKE, _make, Flaky(), 3, 3600).explore()
    assert finding.found and finding.reproduced
    assert sorted(e.kind for e in finding.shrunk.events) == ["kill-leader", "world-pause"]
    assert [e.seconds for e in finding.shrunk.events if e.kind == "world-pause"][0] >= 3.0
    assert "did not reproduce" in finding.confirmed


def test_a_schedule_file_reads_back_as_written(tmp_path: Path) -> None:
    schedule = _make([Event("kill-leader", 0.3), Event("world-pause", 0.0, {"seconds": 2.5})])
    schedule.write(tmp_path / "schedule.json")
    back = Schedule.read(tmp_path)
    assert back.as_json() == schedule.as_json()
    assert back.text() == "fake.coincidence: +0s world-pause 2.5s, +0.3s kill-leader"


def _bench(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return bench(*args, timeout=timeout)  # forked from the tests' server (tests/bench_forkserver.py)


@pytest.mark.parametrize(
    "args",
    [
        ["explore", "--impl", "redis.set-nx-px-lua", "--budget", "5x", "--plan"],
        ["explore", "--impl", "redis.set-nx-px-lua", "--faults", "kill-leader", "--plan"],
        ["explore", "--impl", "no.such-lock", "--plan"],
        ["replay", "/nonexistent/schedule.json"],
        ["explore", "--impl", "redis.set-nx-px-lua", "--faults", "crash", "--plan"],
        ["explore", "--impl", "etcd.lease", "--faults", "restart,kill-member", "--plan"],
        ["explore", "--impl", "file.flock", "--plan"],
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str]) -> None:
    done = _bench(*args)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_damaged_schedule_file_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "s.json").write_text(json.dumps({"impl": "redis.set-nx-px-lua", "events": [{"at": 1}]}))
    done = _bench("replay", str(tmp_path / "s.json"))
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1


def test_the_plan_command_prints_the_same_schedules_for_the_same_seed() -> None:
    one = _bench("explore", "--impl", "redis.set-nx-px-lua", "--seed", "3", "--plan")
    two = _bench("explore", "--impl", "redis.set-nx-px-lua", "--seed", "3", "--plan")
    assert one.returncode == 0 and one.stdout == two.stdout and "restart" in one.stdout


@pytest.mark.server  # starts servers itself (bench in a subprocess, or infra directly): not for --quick
def test_nothing_found_exits_0_and_says_how_many_schedules(tmp_path: Path) -> None:
    """A pause well inside the lease breaks no lock: one real schedule runs, then the budget is spent."""
    done = _bench(
        "explore", "--impl", "redis.set-nx-px-lua", "--seed", "3", "--faults", "task-pause",
        "--budget", "1s", "--no-report", "--results-dir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert "nothing found within the budget: 1 schedule(s) with 1 event(s) tried" in done.stdout + done.stderr
    run = json.loads(next(tmp_path.glob("*/run.json")).read_text())
    assert run["kind"] == "explore" and run["explore"]["redis.set-nx-px-lua"]["schedules_tried"] == 1


@pytest.mark.server  # starts servers itself (bench in a subprocess, or infra directly): not for --quick
@pytest.mark.parametrize(
    "event",
    [
        Event("restart", 0.2),  # Redis forgets the holder's key in a restart
        Event("world-pause", 0.0, {"seconds": 7.0}),  # the holder's process stopped past its 5 s lease
    ],
    ids=["restart", "world-pause"],
)
def test_a_replayed_schedule_that_breaks_the_lock_exits_1(tmp_path: Path, event: Event) -> None:
    """A lease lock without persistence or renewal: the replay fails (exit 1) and says so."""
    schedule = schedule_for(reach("redis.set-nx-px-lua"), [event], 3, explore_settings(), {}, "off")
    schedule.write(tmp_path / "schedule.json")
    done = _bench("replay", str(tmp_path / "schedule.json"), "--results-dir", str(tmp_path / "out"))
    assert done.returncode == 1, done.stderr[-2000:]
    assert "reproduced: 1 of 1 run(s) failed" in done.stdout + done.stderr
    run = json.loads(next((tmp_path / "out").glob("*/run.json")).read_text())
    assert run["kind"] == "explore" and run["status"] == "complete"
