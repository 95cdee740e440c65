"""``bench matrix``: the scenario table, the catalog's expectations, the stop rule, and a real run."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from bench.matrix.expectations import CATALOG, OUTCOMES, annotate, expected, observed_outcome
from bench.matrix.plan import plan_lanes, plan_matrix
from bench.nemesis.scenarios import SCENARIOS
from bench.run.command import plan_impls
from lockimpls import registry
from tests.helpers import bench
from workloads.checks.stop_rules import EvidenceWatch, StopRule


def _applicable() -> list[tuple[str, str]]:
    pairs = []
    for impl_id, backend, cls in plan_impls(["all"], []):
        for name, scenario in SCENARIOS.items():
            if scenario.needs_clock and not getattr(cls, "reads_clock", False):
                continue  # n/a: the fault cannot reach a lock that never reads the client clock
            if backend in scenario.unreachable:
                continue  # n/a: the fault cannot reach a lock there
            if scenario.applies_to(impl_id, backend, int(getattr(cls, "servers", 1))):
                pairs.append((impl_id, name))
    return pairs


def test_every_impl_has_an_expectation_for_every_scenario_that_applies() -> None:
    pairs = _applicable()
    for impl_id, name in pairs:
        if name == "flash-sale":
            assert expected(impl_id, name).outcome == "survives"
            continue
        assert name in CATALOG.get(impl_id, {}), f"no catalog row for {impl_id} x {name}"
        exp = CATALOG[impl_id][name]
        assert exp.outcome in OUTCOMES and exp.note, (impl_id, name)
    # and no row for a scenario that never runs (a stale or misspelt row); a control runs there too
    from bench.nemesis import kinds

    controls = {(c, sc) for sc, table in kinds.controls().items() for c in table.values()}
    applicable = set(pairs) | controls
    stale = [(i, s) for i, rows in CATALOG.items() for s in rows if (i, s) not in applicable]
    assert stale == []
    for scenario in SCENARIOS.values():
        for impl_id in scenario.impls or ():
            assert impl_id in registry.known_ids()


def test_every_scenario_option_reaches_its_workloads_command_line() -> None:
    """An option a scenario sets but its workload does not take is dropped without a word: the
    lease-expiry scenarios' pace did nothing until round 23, because lease-expiry did not list it."""
    from workloads.harness.catalog import WORKLOADS

    for name, scenario in SCENARIOS.items():
        known = set(WORKLOADS[scenario.workload].options) | {"stuck_bound"}
        assert set(scenario.options) <= known, (name, sorted(set(scenario.options) - known))


def test_every_control_can_fail_where_it_stands() -> None:
    """A control is a canary or a catalog lock the catalog says fails in that scenario, never one
    expected to survive or left open: restart-aof's control was redis.redlock, which cannot fail
    where it is right, so both RedLocks' restart-aof cells read "did not bite" on every matrix."""
    from bench.nemesis import kinds

    cannot = []
    for scenario, table in kinds.controls().items():
        for backend, control in table.items():
            if control in registry.CANARIES:
                continue
            if expected(control, scenario).outcome not in ("violates", "stuck"):
                cannot.append(
                    f"{scenario}/{backend}: {control} ({expected(control, scenario).outcome or 'no claim'})"
                )
    assert cannot == []


def test_observed_outcome_and_contradictions() -> None:
    stuck = {"verdict": "invalid", "overlapping_holds": 0, "stuck_locks": 1, "data_safe": True}
    assert observed_outcome(stuck) == "stuck"
    assert annotate(stuck, "redis.setnx-del", "crash", fenced=False)["contradicts_catalog"] is False
    assert annotate(stuck, "redis.set-nx-px-lua", "crash", fenced=False)["contradicts_catalog"] is True
    unknown = {"verdict": "unknown", "overlapping_holds": 3}
    assert annotate(unknown, "redis.set-nx-px-lua", "crash", fenced=False)["contradicts_catalog"] is False
    overlap = {"verdict": "invalid", "overlapping_holds": 4, "lost_updates": 0, "data_safe": True}
    fenced = annotate(overlap, "redis.set-nx-px-lua", "long-cs", fenced=True)
    assert fenced["expected_outcome"] == "violates" and fenced["contradicts_catalog"] is False
    assert "fencing" in fenced["expected_note"]
    damaged = annotate(
        {**overlap, "lost_updates": 2, "data_safe": False}, "redis.set-nx-px-lua", "long-cs", True
    )
    assert damaged["contradicts_catalog"] is True  # the tokens were meant to keep the data safe
    # setnx-getset's token comes after its grant: under a clock-skew takeover the catalog promises no fence
    broken = {**overlap, "data_safe": False}
    takeover = annotate(broken, "redis.setnx-getset", "clock-skew", fenced=True)
    assert takeover["contradicts_catalog"] is False and "out of grant order" in takeover["expected_note"]
    assert annotate(broken, "redis.setnx-getset", "long-cs", fenced=True)["contradicts_catalog"] is True
    silent = annotate({"verdict": "valid"}, "memcached.add", "crash", fenced=False)
    assert silent["expected_outcome"] == "" and silent["contradicts_catalog"] is False


def _ev(client: str, op: str, type_: str, t_s: float) -> tuple:
    return (client, 0, op, type_, "flash-sale:item-0", int(t_s * 1e9), None, None, None)


def test_stop_rule_waits_for_the_event_then_the_acquisitions_or_the_time() -> None:
    rule = StopRule("crash", acquisitions=2, or_after_s=3.0)
    watch = EvidenceWatch(StopRule.from_json(rule.to_json()), start_ns=0)
    events = [_ev("a", "acquire", "ok", 1.0), _ev("b", "acquire", "ok", 2.5)]  # b's chunk came early
    watch.feed(events)
    assert not watch.satisfied(int(2.0e9))
    events.append(_ev("a", "crash", "info", 2.0))
    watch.feed(events)
    assert watch.hits == 1 and watch.after == 1 and not watch.satisfied(int(3.0e9))
    # the lock stalled: no grant for or_after_s after the event's last grant (b's, at 2.5 s)
    assert not watch.satisfied(int(5.1e9)) and watch.satisfied(int(5.6e9))
    events.append(_ev("c", "acquire", "ok", 3.0))
    watch.feed(events)
    assert watch.satisfied(int(3.0e9))

    long_hold = EvidenceWatch(StopRule("long-hold", count=1, long_hold_s=1.0), start_ns=0)
    long_hold.feed([_ev("a", "acquire", "ok", 0.0), _ev("a", "release", "invoke", 0.5)])
    assert not long_hold.satisfied(int(1e9))
    long_hold.feed(
        [
            _ev("a", "acquire", "ok", 0.0), _ev("a", "release", "invoke", 0.5),
            _ev("a", "acquire", "ok", 0.6), _ev("a", "release", "invoke", 1.7),
        ]
    )  # fmt: skip
    assert long_hold.satisfied(int(2e9))
    with pytest.raises(ValueError):
        StopRule("lunch")


def test_a_crash_case_whose_lock_nobody_gets_any_more_stops_before_its_strikes() -> None:
    """A stuck lock brings no further crash (each needs a holder): the case ends once
    or_after_s passed with no grant after any crash, not at its cap; without the flag it waits."""
    events = [_ev("a", "acquire", "ok", 1.0), _ev("a", "crash", "info", 1.5)]
    stuck = EvidenceWatch(StopRule.from_json(StopRule("crash", count=5, acquisitions=5, or_after_s=3.0,
                                                      stall_after_any=True).to_json()), start_ns=0)  # fmt: skip
    stuck.feed(events)
    assert stuck.hits == 1 and not stuck.satisfied(int(4.4e9)) and stuck.satisfied(int(4.6e9))
    stuck.feed([*events, _ev("b", "acquire", "ok", 4.0)])  # a grant: the lock recovered, go on
    assert not stuck.satisfied(int(6.9e9)) and stuck.satisfied(int(7.1e9))
    plain = EvidenceWatch(StopRule("crash", count=5, acquisitions=5, or_after_s=3.0), start_ns=0)
    plain.feed(events)
    assert not plain.satisfied(int(60e9))


def test_plan_puts_fault_topologies_in_their_own_lanes() -> None:
    cases, skipped = plan_matrix([], ["redis.set-nx-px-lua", "redis.redlock"], [], fixed_servers=set())
    names = {(c.impl, c.scenario) for c in cases}
    assert ("redis.set-nx-px-lua", "long-cs+fenced") in names and ("redis.redlock", "long-cs") in names
    assert ("redis.set-nx-px-lua", "failover+unfenced") in names
    assert not any(c.impl == "redis.redlock" and c.matrix_scenario == "failover" for c in cases)
    # RedLock never reads the client clock (monotonic validity): clock-skew cannot reach it, n/a
    assert ("redis.redlock", "clock-skew") not in names and skipped == []
    assert ("redis.redlock", "restart") not in names  # replaced by its arms
    assert ("redis.redlock", "restart-delayed") in names
    lanes = plan_lanes(cases, fixed_servers=set())
    assert {(ln.backend, ln.topology) for ln in lanes} == {
        ("redis", None),
        ("redis", "sentinel"),
        ("redis", "aof-everysec"),
    }
    assert sum(len(ln.cases) for ln in lanes) == len(cases)
    # a server the user gave is never broken on purpose, and stays one lane
    cases, skipped = plan_matrix([], ["redis.set-nx-px-lua"], ["restart", "crash"], fixed_servers={"redis"})
    # standard evidence: 10 crashes, 5 a case (one Locust process dies per crash), so 2 trials,
    # and the crash scenario's positive control (a lock that must get stuck) beside them
    subjects = [c for c in cases if c.role == "subject"]
    assert [c.matrix_scenario for c in subjects] == ["crash", "crash"] and "restart" in skipped[0]
    assert {(c.impl, c.role) for c in cases if c not in subjects} == {("redis.setnx-del", "control")}
    assert all(c.control_impl == "redis.setnx-del" for c in cases)


def test_a_lock_without_a_lease_is_not_put_through_a_scenario_that_needs_one() -> None:
    not_run: list[dict[str, str]] = []
    cases, _ = plan_matrix(
        [], ["redis.setnx-del"], ["long-cs", "lease-expiry-task", "crash"], set(), not_run=not_run
    )
    assert {c.matrix_scenario for c in cases if c.role == "subject"} == {"crash"}
    assert {(n["scenario"], n["word"]) for n in not_run} == {("long-cs", "n/a"), ("lease-expiry-task", "n/a")}


def test_unknown_scenario_is_one_line_exit_2(tmp_path: Path) -> None:
    r = bench("matrix", "--impl", "redis.setnx-del", "--scenario", "lunch", "--results-dir", str(tmp_path))
    assert r.returncode == 2
    assert (
        r.stderr.strip().startswith("bench: error: unknown scenario 'lunch'") and "Traceback" not in r.stderr
    )


@pytest.mark.slow
def test_matrix_runs_the_catalog_into_one_folder_and_one_report(tmp_path: Path) -> None:
    r = bench("matrix", "--impl", "redis.setnx-del", "--impl", "redis.set-nx-px-lua", "--evidence", "quick",
              "--strikes", "2",
              "--scenario", "crash", "--scenario", "long-cs", "--results-dir", str(tmp_path))  # fmt: skip
    # two strikes against quick evidence (k >= 3) leave the crash cell thin: undecided, so exit 1,
    # with one line naming it (setnx-del has no lease: long-cs does not apply to it)
    assert r.returncode == 1, r.stderr[-2000:]
    assert "undecided: redis.set-nx-px-lua x crash: held, thin" in r.stderr
    assert "undecided: redis.setnx-del" not in r.stderr
    runs = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert len(runs) == 1
    run = runs[0]
    assert r.stdout.strip() == str(run / "report.html") and (run / "report.html").is_file()
    meta = json.loads((run / "run.json").read_text())
    assert meta["kind"] == "matrix" and meta["status"] == "complete"
    assert meta["matrix"]["wall_s"] > 0 and meta["contradictions"] == []
    cases = pd.read_csv(run / "cases.csv").set_index(["impl", "scenario"])
    assert len(cases) == 5
    control = cases.loc[("redis.set-nx-px", "long-cs")]  # long-cs's positive control, nobody selected it
    assert control["role"] == "control" and control["verdict"] == "invalid"
    assert cases.loc[("redis.set-nx-px-lua", "long-cs+fenced")]["control_outcome"].startswith("failed")
    assert meta["params"]["controls"]["long-cs"].startswith("failed (redis.set-nx-px")
    stuck = cases.loc[("redis.setnx-del", "crash")]
    # stuck is liveness: nobody held it twice, so the verdict stays valid; the stuck bound is its own
    assert stuck["verdict"] == "valid" and stuck["stuck_locks"] >= 1 and stuck["stuck_bound_s"] == 3.0
    assert stuck["expected_outcome"] == "stuck" and not stuck["contradicts_catalog"]
    unfenced = cases.loc[("redis.set-nx-px-lua", "long-cs+unfenced")]
    assert unfenced["overlapping_holds"] > 0 and not unfenced["data_safe"]
    assert unfenced["expected_outcome"] == "violates" and not unfenced["contradicts_catalog"]
    fenced = cases.loc[("redis.set-nx-px-lua", "long-cs+fenced")]
    assert fenced["overlapping_holds"] > 0 and fenced["data_safe"] and fenced["lost_updates"] == 0
    assert fenced["scenario_events"] >= 2  # holds that outlasted the lease: the evidence
    recovered = cases.loc[("redis.set-nx-px-lua", "crash")]
    assert recovered["verdict"] == "valid" and recovered["expected_outcome"] == "survives"
    assert recovered["acquisitions_after_event"] >= 1
    # two strikes asked, graded against quick evidence (k >= 3): 2 crashes in one case, thin
    assert recovered["strikes"] == 2 and recovered["evidence_target"] == "k >= 3 and n >= 300"
    assert recovered["evidence"] == "thin"
    assert recovered["recovery_by"] == "the lease TTL" and recovered["recovery_ms_p50"] > 0
    assert not cases["contradicts_catalog"].any()
    assert "contradict the catalog" not in r.stderr


def test_etcds_lease_expiry_task_cases_may_run_long_enough_for_their_evidence() -> None:
    """etcd grants through a fsync each (14-23 grants a second beside other lanes) and its stop rule
    needs about 1,100 grants: its cap allows that, while the other backends' stay as they were."""
    cases, _ = plan_matrix(["etcd", "redis"], [], ["lease-expiry-task", "restart"], set(), root=False)
    caps = {(c.backend, c.matrix_scenario): c.settings.duration for c in cases}
    assert caps[("etcd", "lease-expiry-task")] >= 1_100 / 14
    assert caps[("redis", "lease-expiry-task")] == 15.0 + 10 * 1.5
    etcd = next(c for c in cases if (c.backend, c.matrix_scenario) == ("etcd", "lease-expiry-task"))
    rule = StopRule.from_json(etcd.settings.stop_rule)
    assert rule is not None and rule.after_first == 1_000  # what the cap must leave time for
    assert [s.name for s in SCENARIOS.values() if s.per_strike_on] == ["lease-expiry-task"]
