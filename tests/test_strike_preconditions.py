"""Every green could have failed (issue 30): strikes count only when their precondition held,
one strike serves every case of a group whose holder was inside, colours follow the verdict in
every view, and a scenario whose positive control survived shows no green and exits 1.

Pure rules on synthetic histories first, then real Redis servers (a shared strike), then a
real matrix under a test-only fault that breaks nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from bench.matrix.tables import grid, undecided
from bench.measure import strikes
from bench.nemesis.faults import FaultThread, FaultWindow, Mailbox, StrikeMark, parse_fault
from bench.nemesis.restart import restart_target
from bench.run.case import RunSettings
from bench.run.group import resource_db
from bench.run.judge import stall_reason, with_fault_windows
from dashboards.cells import cell_for
from dashboards.matrix import summarize, trial_class
from infra.redis_server import RedisServer
from tests.helpers import bench, lock_and_resource_redis
from workloads.checks.stop_rules import EvidenceWatch, StopRule
from workloads.harness.recording import HISTORY_COLUMNS, history_frame
from workloads.harness.resource import FlashSaleResource

S = 1_000_000_000


def _history(events: list[tuple]) -> pd.DataFrame:
    """Events as (client, seq, op, type, lock, t_ns, token, value, error): a history of the recorder's
    own schema (every column, ``sent_ns`` too), so the nemesis rows are merged into what a run writes."""
    return history_frame(tuple(e) + (None,) * (len(HISTORY_COLUMNS) - len(e)) for e in events)


def _claim(client: str, start_s: float, end_s: float | None) -> list[tuple]:
    rows = [(client, 5, "fault-hold", "invoke", "flash-sale:item-0", int(start_s * S), None, None, None)]
    if end_s is not None:
        rows.append((client, 5, "fault-hold", "ok", "flash-sale:item-0", int(end_s * S), None, None, None))
    return rows


def _grants(times_s: list[float]) -> list[tuple]:
    return [
        ("z", i, "acquire", "ok", "flash-sale:item-0", int(t * S), None, None, None)
        for i, t in enumerate(times_s)
    ]


def _window(start_s: float) -> FaultWindow:
    return FaultWindow("restart", int(start_s * S), int((start_s + 0.2) * S), "restarted")


def test_a_server_strike_counts_only_when_its_holder_was_inside_when_it_hit() -> None:
    base = _history(
        [*_claim("a", 1.0, 4.0), *_claim("b", 9.5, 10.0), *_claim("c", 14.0, 17.0), *_grants([5, 12, 18])]
    )
    windows = [_window(2.0), _window(10.5), _window(15.0), _window(20.0)]
    marks = [
        StrikeMark(0, True, holder="a"),
        StrikeMark(1, True, holder="b"),  # b's hold ended (a stale heal message) before the action
        StrikeMark(2, True, holder="c"),
        StrikeMark(3, False, "no holder of this case was inside its critical section when the fault struck"),
    ]
    history = with_fault_windows(base, windows, marks)
    counted, missed = strikes.strike_record(history, "flash-sale", None, server_fault=True)
    assert list(counted) == [int(2.0 * S), int(15.0 * S)]
    assert len(missed) == 2
    assert "let go before the fault hit" in missed[0] and "no holder" in missed[1]
    cols = strikes.columns(history, counted, missed)
    assert cols["strikes"] == 2 and cols["strikes_missed"] == 2
    # an older history (no strike rows): every strike counts, as it did
    old = with_fault_windows(base, windows)
    assert len(strikes.strike_record(old, "flash-sale", None, server_fault=True)[0]) == 4


def test_a_strike_whose_server_held_nothing_of_the_holder_is_missed() -> None:
    base = _history([*_claim("a", 1.0, 4.0), *_grants([5])])
    marks = [StrikeMark(0, False, "the restarted master redis-lock-3 held no key of this holder", "a")]
    counted, missed = strikes.strike_record(
        with_fault_windows(base, [_window(2.0)], marks), "flash-sale", None, True
    )
    assert len(counted) == 0 and "held no key" in missed[0]


def test_a_clock_skew_strike_is_a_skewed_grant_while_an_unskewed_client_waits() -> None:
    lock = "flash-sale:item-0"
    events = [
        ("s", -1, "skew", "ok", "", 0, None, 30000, None),
        ("u", -1, "skew", "ok", "", 0, None, None, None),  # only skewed clients are marked; harmless
        ("s", 0, "acquire", "invoke", lock, 1 * S, None, None, None),
        ("s", 0, "acquire", "ok", lock, 2 * S, None, None, None),  # nobody else around: no strike
        ("s", 1, "release", "invoke", lock, 3 * S, None, None, None),
        ("v", 0, "acquire", "invoke", lock, 4 * S, None, None, None),  # v (unskewed) waits ...
        ("s", 2, "acquire", "invoke", lock, 4 * S + 1, None, None, None),
        ("s", 2, "acquire", "ok", lock, 5 * S, None, None, None),  # ... while s is granted: a strike
    ]
    events = [e for e in events if e[0] != "u"]
    assert list(strikes.strike_record(_history(events), "clock-skew", None, False)[0]) == [5 * S]
    no_skew = _history([e for e in events if e[2] != "skew"])
    assert len(strikes.strike_record(no_skew, "clock-skew", None, False)[0]) == 0


def _row(**kw: object) -> dict:
    base = {
        "case": "c", "impl": "x.lock", "matrix_scenario": "restart", "verdict": "valid", "fencing": "observe",
        "strikes": 10, "acquisitions_after_strike": 1000, "evidence_target_k": 10, "evidence_target_n": 1000,
        "overlapping_holds": 0, "stuck_locks": 0, "acquisitions": 1200, "data_safe": True,
        "scenario": "restart+unfenced",
    }  # fmt: skip
    return {**base, **kw}


@pytest.mark.parametrize(
    "counter", [{"fencing_order_violations": 3}, {"legit_writes_refused": 1}], ids=["tokens", "refused"]
)
def test_an_invalid_case_is_red_in_every_view_whatever_made_it_invalid(counter: dict) -> None:
    row = _row(verdict="invalid", data_safe=False, **counter)
    assert cell_for([row]).cls == "bad"  # the grid, the decision page and matrix.md
    assert trial_class(row) == "bad" and summarize([row]).cls == "bad"  # the verdict matrix
    _, _, cells = grid([row])  # the console summary
    assert cells[("x.lock", "restart")].cls == "bad"


def test_an_unfenced_failure_whose_data_survived_is_red_and_says_so() -> None:
    cell = cell_for([_row(verdict="invalid", overlapping_holds=2, data_safe=True, fencing="observe")])
    assert cell.cls == "bad" and "happened to survive" in cell.detail
    fenced = cell_for(
        [
            _row(
                verdict="invalid",
                overlapping_holds=2,
                data_safe=True,
                fencing="enforce",
                stale_writes_refused=1,
            )
        ]
    )
    assert fenced.cls == "warn"  # fencing (enforce) refused a stale write and kept the data right: amber
    idle = cell_for([_row(verdict="invalid", overlapping_holds=2, data_safe=True, fencing="enforce")])
    assert idle.cls == "bad"  # fenced, but no stale write came: fencing was never seen at work


def test_a_scenario_whose_control_survived_has_no_green_and_is_undecided() -> None:
    bit = _row(control_outcome="failed (redis.set-nx-px, 10 strikes)")
    assert cell_for([bit]).cls == "good"
    survived = _row(control_outcome="survived (redis.set-nx-px, 10 strikes)")
    cell = cell_for([survived])
    assert cell.cls == "nottested" and cell.word == "did not bite"
    assert undecided([survived]) == [
        "x.lock x restart: did not bite (control survived (redis.set-nx-px, 10 strikes); "
        "positive control survived (redis.set-nx-px, 10 strikes))"
    ]


def test_stalls_in_a_row_add_up_per_process() -> None:
    """A process's stalls are added up: three short ones in a row starve a holder like one long one.

    The history of redis.python-redis-lock x crash (2026-12-05, Z shard 3): stalls of 104, 262 and
    196 ms, one after another, left the holder 40 ms of CPU in the 600 ms before its lost lock,
    and the longest alone (262 ms) was under 30% of the 1 s lease, so the loss was painted red.
    """
    leased = RunSettings(ttl=1.0)
    row = {"verdict": "invalid", "fault": "crash"}
    in_a_row = [("loop:7", -1, "stall", "ok", "", int(9.0 * S + ms * 1e6), None, lag, None)
                for ms, lag in ((3.75, 104), (113.75, 262), (383.75, 196))]  # fmt: skip
    reason = stall_reason(row, leased, _history([*in_a_row, *_grants([12.0])]), int(9.6 * S))
    assert "stalled 0.56 s in 3 stalls" in reason
    # the same three stalls spread over three processes: none was stalled 30% of the lease
    spread = [(f"loop:{i}", *rest) for i, (_, *rest) in enumerate(in_a_row)]
    assert stall_reason(row, leased, _history([*spread, *_grants([12.0])]), int(9.6 * S)) == ""
    # overlapping stall rows of one process count their shared time once
    twice = [*in_a_row[:1], ("loop:7", -1, "stall", "ok", "", int(9.0 * S + 50e6), None, 104, None)]
    assert stall_reason(row, leased, _history([*twice, *_grants([12.0])]), int(9.6 * S)) == ""


def test_a_violation_under_a_stalled_generator_says_so() -> None:
    """A stall counts only where it could explain the violation: 30% of the session, just before it."""
    settings = RunSettings(ttl=1.0, lock_params={"session_timeout": 3})
    row = {"verdict": "invalid", "loop_lag_late_share": 0.61, "loop_lag_p99_us": 3.4e6, "fault": "crash"}
    stalled = _history([("loop:7", -1, "stall", "ok", "", int(9.0 * S), None, 1500, None), *_grants([12.0])])
    reason = stall_reason(row, settings, stalled, int(10.0 * S))
    assert "stalled 1.5 s" in reason and "3 s session" in reason and "not the scenario's crash" in reason
    # a stall long before the violation, or too short for the session, or no stall at all: no excuse
    assert stall_reason(row, settings, stalled, int(20.0 * S)) == ""
    short = _history([("loop:7", -1, "stall", "ok", "", int(9.0 * S), None, 600, None), *_grants([12.0])])
    assert stall_reason(row, settings, short, int(10.0 * S)) == ""
    assert stall_reason(row, settings, _history(_grants([12.0])), int(10.0 * S)) == ""  # late share alone: no
    assert stall_reason({**row, "verdict": "valid"}, settings, stalled, int(10.0 * S)) == ""
    # a stall dated at its start, long before the violation, that lasted up to it: it counts
    # (redis.reentrant's watchdog under a 1 s lease, 2026-12-05: two processes stalled 2.9 s from
    # 2.9 s before the overlap; the window of lease + 1 s before it held no stall's start)
    leased = RunSettings(ttl=1.0)
    through = _history([("loop:7", -1, "stall", "ok", "", int(7.1 * S), None, 2885, None), *_grants([12.0])])
    assert "stalled 2.9 s" in stall_reason(row, leased, through, int(10.0 * S))
    ended = _history([("loop:7", -1, "stall", "ok", "", int(5.0 * S), None, 2885, None), *_grants([12.0])])
    assert stall_reason(row, leased, ended, int(10.0 * S)) == ""  # over 2 s before it: no excuse
    # the scenario's own world pause stops the loop on purpose: that stall is the strike, not an excuse
    paused = _history(
        [("loop:7", -1, "stall", "ok", "", int(9.0 * S), None, 1500, None),
         ("7-u0", 4, "pause", "ok", "L", int(10.5 * S), None, 1500, None), *_grants([12.0])]
    )  # fmt: skip
    world = RunSettings(ttl=1.0, lock_params={"session_timeout": 3}, workload_options={"pause_kind": "world"})
    assert stall_reason(row, world, paused, int(11.0 * S)) == ""
    # a task pause stops the holder's task, not a loop; and a world pause excuses only its own
    # process (a 0.96 s stall of three processes inside one holder's task pause was let through)
    assert "stalled 1.5 s" in stall_reason(row, settings, paused, int(11.0 * S))
    other = _history(
        [("loop:8", -1, "stall", "ok", "", int(9.0 * S), None, 1500, None),
         ("7-u0", 4, "pause", "ok", "L", int(10.5 * S), None, 1500, None), *_grants([12.0])]
    )  # fmt: skip
    assert "stalled 1.5 s" in stall_reason(row, world, other, int(11.0 * S))
    cell = cell_for([_row(verdict="invalid", overlapping_holds=2, data_safe=False, stall_reason=reason)])
    assert cell.cls == "unknown" and cell.word == "stalled"  # undecided: never red, never green
    both = cell_for(
        [
            _row(verdict="invalid", overlapping_holds=2, data_safe=False, stall_reason=reason),
            _row(verdict="invalid", overlapping_holds=1, data_safe=False, case="d"),
        ]
    )
    assert both.cls == "bad"  # a failure without a stall beside it decides the cell


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    with lock_and_resource_redis(tmp_path, "precondition") as pair:
        yield pair


@pytest.mark.server
def test_one_strike_of_a_group_counts_for_the_case_whose_holder_was_inside_and_not_for_the_other(
    servers: tuple[RedisServer, RedisServer],
) -> None:
    lock, resource = servers
    urls = [resource_db(resource.url, 0), resource_db(resource.url, 1)]
    thread = FaultThread(
        parse_fault("restart@held"), lock, urls, deadline_s=30, labels=["0", "1"], lease_s=2.0
    )
    thread.start()
    inside, idle = FlashSaleResource(urls[0]), FlashSaleResource(urls[1])
    try:
        inside.reset(["item-0"], 100)
        idle.reset(["item-0"], 100)  # this case's load runs, but its holder never claims the strike
        deadline = time.monotonic() + 10  # a hang guard, not a speed claim
        while not (inside.armed() and idle.armed()):
            assert time.monotonic() < deadline, "the cases were never armed"
            time.sleep(0.02)
        claimed_ns = time.monotonic_ns()
        assert inside.signal_held("client-a")
        assert inside.wait_healed(9)  # the strike happened and its holder was let go
        thread.stop()
        thread.join(10)
        assert [w.kind for w in thread.windows] == ["restart"]
        marks = {m: thread.mailbox(m).marks for m in ("0", "1")}
        assert marks["0"][0].hit and marks["0"][0].holder == "client-a"
        assert not marks["1"][0].hit and "no holder" in marks["1"][0].reason
        # the histories each case gets: one strike counted for the first, none for the second
        hist_a = _history(_claim("client-a", (claimed_ns - 1) / S, None))
        counted_a, _ = strikes.strike_record(
            with_fault_windows(hist_a, thread.windows, marks["0"]), "flash-sale", None, True
        )
        counted_b, missed_b = strikes.strike_record(
            with_fault_windows(_history(_grants([0.0])), thread.windows, marks["1"]), "flash-sale", None, True
        )
        assert len(counted_a) == 1 and len(counted_b) == 0 and "no holder" in missed_b[0]
        # the two cases' mailboxes never met: separate databases of one resource server
        assert inside.client.connection_pool.connection_kwargs["db"] == 0
        assert idle.client.connection_pool.connection_kwargs["db"] == 1
    finally:
        thread.stop()
        inside.client.close()
        idle.client.close()


@pytest.mark.server
@pytest.mark.slow
def test_a_matrix_whose_control_survived_shows_no_green_and_exits_1(tmp_path: Path) -> None:
    # a test-only fault that does nothing: the positive control (redis.set-nx-px) cannot fail
    r = bench(
        "matrix", "--impl", "redis.set-nx-px-lua", "--scenario", "restart", "--evidence", "quick",
        "--strikes", "3", "--results-dir", str(tmp_path), env={"LOCKBENCH_TEST_NOOP_FAULT": "1"},
    )  # fmt: skip
    assert r.returncode == 1, r.stderr[-2000:]
    assert "undecided: redis.set-nx-px-lua x restart: did not bite" in r.stderr
    run = next(p for p in tmp_path.iterdir() if p.is_dir())
    cases = pd.read_csv(run / "cases.csv")
    control = cases[cases["role"] == "control"]
    assert len(control) == 1 and control.iloc[0]["verdict"] == "valid" and control.iloc[0]["strikes"] >= 1
    subjects = cases[cases["role"] == "subject"]
    assert len(subjects) == 2 and (subjects["control_outcome"].str.startswith("survived")).all()
    assert not any(cell_for([r]).cls == "good" for r in subjects.to_dict("records"))
    meta = json.loads((run / "run.json").read_text())
    assert meta["params"]["controls"]["restart"].startswith("survived (redis.set-nx-px")
    assert meta["undecided"] and "did not bite" in meta["undecided"][0]
    html = (run / "report.html").read_text()
    assert "did not bite" in html and "control: survived" in html


def test_recovery_counts_only_the_strikes_that_hit_the_case() -> None:
    from workloads.checks.recovery import server_recovery_columns

    base = _history([*_claim("a", 1.0, 2.5), *_grants([2.6])])
    windows = [_window(2.0), _window(9.0)]  # the second struck the group after this case's last grant
    marks = [
        StrikeMark(0, True, holder="a"),
        StrikeMark(1, False, "not armed: this case already had its strikes"),
    ]
    cols = server_recovery_columns(with_fault_windows(base, windows, marks))
    assert cols["unrecovered_strikes"] == 0  # a strike that was never this case's is no liveness failure
    assert cols["recovery_ms_p50"] == pytest.approx((2.6 - 2.2) * 1000)
    unmarked = server_recovery_columns(with_fault_windows(base, windows))
    assert unmarked["unrecovered_strikes"] == 1  # without marks every strike counts, as before


def test_a_group_without_its_control_takes_no_other_group_s_control() -> None:
    """No fallback: a control in another group saw other strikes (and another machine load)."""
    from bench.matrix import controls

    rows = [
        {"impl": "redis.setnx-del", "matrix_scenario": "crash", "backend": "redis", "control_impl": "redis.setnx-del",
         "group_id": "redis#0/crash/t0/g0", "verdict": "valid", "stuck_locks": 1, "strikes": 5},
        {"impl": "redis.set-nx-px", "matrix_scenario": "crash", "backend": "redis", "control_impl": "redis.setnx-del",
         "group_id": "redis#0/crash/t0/g1", "verdict": "valid", "stuck_locks": 0, "strikes": 5},
    ]  # fmt: skip
    controls.annotate(rows)
    assert rows[0]["control_outcome"].startswith("failed (redis.setnx-del")
    assert (
        rows[1]["control_outcome"] == "not run (redis.setnx-del)"
    )  # the other group's failure vouches for nothing
    assert cell_for(
        [{**rows[1], "evidence_target_k": 1, "evidence_target_n": 0, "acquisitions_after_strike": 9}]
    ).word == ("unproven: no control")


def test_a_control_fails_only_by_a_violation_tied_to_a_strike_and_not_under_a_stall() -> None:
    from bench.matrix import controls

    base = {
        "impl": "c",
        "control_impl": "c",
        "verdict": "invalid",
        "strikes": 3,
        "violation_after_strike": True,
    }
    assert controls.failed(base)
    assert not controls.failed({**base, "violation_after_strike": False})  # before any strike
    assert not controls.failed({**base, "strikes": 0})  # never struck
    assert not controls.failed({**base, "stall_reason": "a Locust process stalled 2 s"})
    assert (
        controls.outcome([{**base, "stall_reason": "stalled"}], "c")
        == "unproven (c): its violation came under a stall"
    )
    assert controls.failed({**base, "verdict": "valid", "stuck_locks": 1})  # stuck after its strike


def test_controls_read_back_from_cases_csv_ignore_empty_cells() -> None:
    from bench.matrix import controls

    nan = float("nan")
    rows = [  # a merge reads rows back from cases.csv: empty text cells are NaN there
        {"impl": "file.flock", "matrix_scenario": "crash", "backend": "file", "control_impl": nan,
         "group_id": nan, "verdict": "valid", "strikes": 1},
        {"impl": "redis.setnx-del", "matrix_scenario": "crash", "backend": "redis", "control_impl": "redis.setnx-del",
         "group_id": nan, "verdict": "valid", "stuck_locks": 1, "strikes": 1},
    ]  # fmt: skip
    controls.annotate(rows)
    assert "control_outcome" not in rows[0]  # no control on this backend: no "not run (nan)"
    assert rows[1]["control_outcome"].startswith("failed (redis.setnx-del")


@pytest.mark.server  # starts servers itself (bench in a subprocess, or infra directly): not for --quick
def test_a_holder_whose_strike_missed_is_told_so_and_its_case_waits_for_one_that_hit(
    servers: tuple[RedisServer, RedisServer],
) -> None:
    """A case's stop rule counts fault-holds that ended ok; a strike that missed the case (its
    master held no key of the holder, it claimed too late) ends the hold as fail, so the case
    runs on to a strike that hit instead of stopping at k claims with k-1 hits (thin RedLock
    restart cells, round 5 and 6)."""
    _, resource = servers
    url = resource_db(resource.url, 2)
    box, holder = Mailbox(url, "0"), FlashSaleResource(url)
    try:
        box.reset()
        box.release(missed=True)
        assert holder.wait_healed(2) == "missed"
        box.released = False
        box.release()
        assert holder.wait_healed(2) == "1"
        assert holder.wait_healed(1) is None  # nothing more was said
    finally:
        box.close()
    watch = EvidenceWatch(StopRule("fault", count=1), start_ns=0)
    events = [("a", 1, "fault-hold", "invoke", "k", 1), ("a", 1, "fault-hold", "fail", "k", 2)]
    watch.feed(events)
    assert watch.hits == 0
    watch.feed([*events, ("a", 2, "fault-hold", "invoke", "k", 3), ("a", 2, "fault-hold", "ok", "k", 4)])
    assert watch.hits == 1


@pytest.mark.server
def test_a_restart_finds_the_holder_s_master_by_its_owner_value_whatever_the_key_is_called(
    tmp_path: Path,
) -> None:
    """Reach, per holder: a user's own lock with its own key names gets the same strikes as ours.

    Two masters; the holder's lock value sits on the second under a key bench never named
    (``myapp/locks/…``) and a waiter's value on the first. The restart must take the second.
    """
    with lock_and_resource_redis(tmp_path, "reach") as (first, resource):
        second = RedisServer(tmp_path / "second", name="redis-reach-second").start()
        try:
            thread = FaultThread(
                parse_fault("restart@held"), first, [resource_db(resource.url, 0)], deadline_s=5,
                labels=["0"], servers=[first, second],
            )  # fmt: skip
            box = thread.mailbox("0")
            box.holder, box.owner = "client-a", "owner-of-a"
            import redis as redis_lib

            redis_lib.Redis.from_url(first.url).set("myapp/locks/item", "owner-of-a-waiter")
            redis_lib.Redis.from_url(second.url).set("myapp/locks/item", "owner-of-a")
            target, missed = restart_target(thread.servers, thread.mailboxes)
            assert target is second and missed == {}
            # and the reentrant layout: the owner as a field of a hash
            redis_lib.Redis.from_url(second.url).delete("myapp/locks/item")
            redis_lib.Redis.from_url(first.url).hset("myapp/locks/h", "owner-of-a", 1)
            target, missed = restart_target(thread.servers, thread.mailboxes)
            assert target is first and missed == {}
            # a lock that stores no owner (redis.setnx-getset keeps its expiry time): by bench's key
            # names, when one master alone holds them (a single-server lock beside RedLock's masters)
            redis_lib.Redis.from_url(first.url).flushall()
            redis_lib.Redis.from_url(second.url).flushall()
            redis_lib.Redis.from_url(second.url).set("lockbench:lock:m0:flash-sale:item-0", "1733240000.5")
            target, missed = restart_target(thread.servers, thread.mailboxes)
            assert target is second and missed == {}
            # where both hold such a key (a RedLock's waiters), a key by name proves nothing: missed
            redis_lib.Redis.from_url(first.url).set("lockbench:lock:m0:flash-sale:item-0", "1733240001.5")
            _, missed = restart_target(thread.servers, thread.mailboxes)
            assert "held no key of this holder" in missed["0"]
        finally:
            second.stop()


def test_a_pause_strikes_when_it_begins_so_a_violation_during_it_is_tied_to_it() -> None:
    """The pause is marked when it ends (value: its length); a waiter granted while the holder
    sleeps came after the strike, not before it, and a control's failure there counts."""
    history = _history(
        [("a", 4, "pause", "invoke", "L", int(1.0 * S), None, None, None),
         ("a", 4, "pause", "ok", "L", int(3.0 * S), None, 2000, None), *_grants([2.0])]
    )  # fmt: skip
    counted, _ = strikes.strike_record(history, "lease-expiry", 1.0, server_fault=False)
    assert list(counted) == [int(1.0 * S)]


def test_a_violation_of_the_struck_hold_ties_a_control_to_its_strike_whatever_failed_first() -> None:
    """H, 2026-12-06: ``canary.no-keepalive-etcd`` lost a queued waiter's lease at 2.6 s, before any
    pause, then lost every paused hold (12.3-14.3 s, ...): its first violation hid those."""
    from bench.run.judge import struck_hold_violated
    from workloads.checks.common import CheckResult, Witness

    def hold(start: float, end: float) -> dict:
        return {
            "client": "1-u0",
            "lock": "L",
            "start_ns": int(start * S),
            "end_ns": int(end * S),
            "token": 1,
            "open": False,
        }

    early = Witness("lost-lock", int(2.64 * S), "L", (hold(2.51, 2.52),))
    paused = Witness("lost-lock", int(14.29 * S), "L", (hold(12.26, 14.26),))
    pauses = [int(t * S) for t in (12.26, 18.89)]
    both = CheckResult("ownership", "invalid", {}, "", witnesses=[early, paused])
    assert struck_hold_violated([both], pauses)
    only_early = CheckResult("ownership", "invalid", {}, "", witnesses=[early])
    assert not struck_hold_violated([only_early], pauses)  # a failure of its own, no strike's
    assert not struck_hold_violated([CheckResult("ownership", "valid", {}, "", witnesses=[paused])], pauses)
    assert not struck_hold_violated([both], [])


@pytest.mark.server
def test_a_holder_kept_through_a_long_fault_lets_go_before_its_lease_runs_out(tmp_path: Path) -> None:
    """A Sentinel failover heals after seconds; a holder with a 1 s lease must not wait for it.

    A holder that overstays its own lease loses the lock by its own doing: in AA (2026-12-06) a
    restart struck 1.4 s after the claim on a busy machine, the heal came 4.07 s after it, past the
    4 s lease, and RedLock was drawn red. The hold ends a margin before the lease's deadline, and
    the holder probes its lock after the strike with time left on its lease."""
    r = bench(
        "run", "--impl", "redis.set-nx-px-lua", "--workload", "flash-sale", "--fault", "failover@held",
        "--ttl", "1", "--duration", "6", "--results-dir", str(tmp_path), timeout=300,
    )  # fmt: skip
    assert r.returncode in (0, 1), r.stderr[-2000:]
    history = pd.read_parquet(next(tmp_path.glob("*/history/*.parquet")))
    held = history[(history["op"] == "fault-hold").to_numpy(dtype=bool)]
    begun = held[held["type"] == "invoke"].set_index(["client", "seq"])["t_ns"]
    ended = held[held["type"] != "invoke"].set_index(["client", "seq"])["t_ns"]
    assert len(begun) >= 1 and len(ended) == len(begun), (r.stdout[-1500:], r.stderr[-1500:])
    assert ((ended - begun.reindex(ended.index)) < 1_000_000_000).all(), (ended - begun) / 1e9
    # the probe after the strike was made with time left on the holder's lease (its invoke's value,
    # ms left; the answer itself may be "cannot tell" while the failover is still going on)
    probes = history[((history["op"] == "probe") & (history["type"] == "invoke")).to_numpy(dtype=bool)]
    assert len(probes) >= 1 and (probes["value"] > 0).all(), probes[["client", "value"]]
