"""The violation timeline (dashboards/timeline.py) on synthetic histories written as a run folder.

Each history plants one kind of violation; the section must find it, name the two clients,
the strike and the lease, and keep only the window around it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from bench.run.witnesses import WITNESS_FILE, write_witnesses
from dashboards.load import RunData
from dashboards.timeline import OPS, anchor, case_views, has_timeline, timeline_section
from tests.test_checkers import history
from workloads.checks.core import check_lock_pairs, check_witness

MS = 1_000_000
S = 1_000 * MS


def _run(
    tmp_path: Path, cases: dict[str, pd.DataFrame], rows: list[dict], meta: dict | None = None
) -> RunData:
    """A results folder of these histories, each with the witnesses the real checkers keep of it."""
    (tmp_path / "history").mkdir(parents=True, exist_ok=True)
    (tmp_path / "violations").mkdir(parents=True, exist_ok=True)
    for case, h in cases.items():
        h.to_parquet(tmp_path / "history" / f"{case}.parquet")
        results = [*check_lock_pairs(h).results, check_witness(h)]
        write_witnesses(tmp_path / "history" / f"{case}.parquet", results, h)
        found = tmp_path / "history" / WITNESS_FILE
        if found.exists():
            found.rename(tmp_path / "violations" / f"{case}.parquet")
    return RunData(path=tmp_path, meta=meta or {"params": {"ttl_s": 1.0}}, cases=pd.DataFrame(rows))


def _lease_history() -> pd.DataFrame:
    """1-u0 is granted, pauses 2 s under a 1 s lease; 2-u0 is granted when the lease ends; both write."""
    lock = "flash-sale:item-0"
    ev = [
        ("1-u0", 0, "acquire", "invoke", lock, 0),
        ("1-u0", 0, "acquire", "ok", lock, 1 * MS, 7),
        ("1-u0", 1, "pause", "invoke", lock, 2 * MS),
        ("2-u0", 0, "acquire", "invoke", lock, 5 * MS),
        ("2-u0", 0, "acquire", "ok", lock, 1 * S + 20 * MS, 8),
        ("2-u0", 1, "purchase", "invoke", lock, 1 * S + 30 * MS),
        ("2-u0", 1, "purchase", "ok", lock, 1 * S + 40 * MS, None, 1),
        ("1-u0", 1, "pause", "ok", lock, 2 * S + 2 * MS, None, 2000),
        ("1-u0", 2, "purchase", "invoke", lock, 2 * S + 3 * MS),
        ("1-u0", 2, "purchase", "ok", lock, 2 * S + 5 * MS, None, 1),
        ("1-u0", 3, "release", "invoke", lock, 2 * S + 6 * MS),
        ("2-u0", 2, "release", "invoke", lock, 2 * S + 50 * MS),
    ]
    # a long quiet tail, so the window is visibly cut
    ev += [("3-u0", 9, "acquire", "invoke", lock, 60 * S), ("3-u0", 9, "acquire", "fail", lock, 61 * S)]
    return history(*ev)


def test_a_lease_overlap_names_both_holders_the_pause_and_the_lease(tmp_path: Path) -> None:
    row = {"case": "x__lease-expiry", "impl": "x", "workload": "lease-expiry", "verdict": "invalid"}
    run = _run(tmp_path, {"x__lease-expiry": _lease_history()}, [row])
    views = case_views(run, row)
    assert len(views) == 1
    caption = views[0]["caption"]
    assert caption.startswith("client 1-u0 held flash-sale:item-0 from 0.001 s")
    # run.json does not say whether "x" takes the TTL: the TTL is named as the run's, not as its lease
    # the grant was made between the acquire's send (0.000 s) and its ok (0.001 s): the TTL from each
    assert (
        "the run's 1 s TTL ran out at 1.000-1.001 s while it was paused (the strike: 0.002-2.002 s)"
        in caption
    )
    assert "client 2-u0 was granted at 1.020 s" in caption
    assert "both wrote while both held (1.040-2.005 s)" in caption
    xs = [x for t in views[0]["data"] for x in t.get("x", []) if isinstance(x, float)]
    assert max(xs) < 10  # only the window around the violation, not the 60 s tail
    html = timeline_section(run)
    assert f'id="{anchor("x__lease-expiry")}"' in html and "1-u0" in html and "2-u0" in html


def test_a_server_fault_window_is_the_strike_and_cross_host_clocks_make_it_uncertain(tmp_path: Path) -> None:
    lock = "L"
    h = history(
        ("bench", 1, "fault", "invoke", "restart", 10 * MS),
        ("h1/1-u0", 0, "acquire", "ok", lock, 5 * MS, 3),
        ("h2/2-u0", 0, "acquire", "ok", lock, 30 * MS, 1),
        ("bench", 1, "fault", "ok", "restart", 40 * MS),
        ("bench", 1, "service", "ok", "restart", 45 * MS),
        ("h2/2-u0", 1, "release", "invoke", lock, 50 * MS),
        ("h1/1-u0", 1, "release", "invoke", lock, 60 * MS),
    )
    row = {"case": "r", "impl": "r", "workload": "flash-sale", "verdict": "invalid"}
    run = _run(tmp_path, {"r": h}, [row])
    (tmp_path / "hist").mkdir()
    (tmp_path / "hist" / "r.json").write_text(
        json.dumps({"final_state": {"clock_uncertainty_ns": {"h1": 5 * MS, "h2": 20 * MS}}, "histograms": {}})
    )
    caption = case_views(run, row)[0]["caption"]
    assert "client h1/1-u0 held L" in caption and "client h2/2-u0 was granted" in caption
    assert "the strike (restart) ran 0.005-0.035 s, the service answered again at 0.040 s" in caption
    assert "the clocks agree within 25 ms, so the overlap of 20 ms is uncertain" in caption
    grant = next(t for t in case_views(run, row)[0]["data"] if t["name"] == "grant (token)")
    assert grant["error_x"]["array"] == [0.005, 0.02]  # each grant's clock bound, drawn


def test_tokens_out_of_grant_order_without_an_overlap(tmp_path: Path) -> None:
    h = history(
        ("1-u0", 0, "acquire", "ok", "L", 1 * MS, 9),
        ("1-u0", 1, "release", "invoke", "L", 2 * MS),
        ("2-u0", 0, "acquire", "ok", "L", 3 * MS, 5),
        ("2-u0", 1, "release", "invoke", "L", 4 * MS),
    )
    row = {"case": "t", "impl": "t", "verdict": "invalid", "fencing_order_violations": 1}
    caption = case_views(_run(tmp_path, {"t": h}, [row]), row)[0]["caption"]
    assert "client 1-u0 was granted L at 0.000 s with token 9" in caption
    assert "client 2-u0 was granted it after that, at 0.002 s, with token 5: a lower token" in caption


def test_only_failed_cases_get_a_timeline_and_labels_are_escaped(tmp_path: Path) -> None:
    assert not has_timeline({"verdict": "valid", "overlapping_holds": 0})
    assert has_timeline({"verdict": "valid", "fencing_order_violations": 2})  # fencing off: still explained
    evil = "<img src=x onerror=alert(1)>"
    h = history(
        (evil, 0, "acquire", "ok", "L", 1 * MS),
        ("b", 0, "acquire", "ok", "L", 2 * MS),
        ("b", 1, "release", "invoke", "L", 3 * MS),
        # released: a holder whose recording ends inside its hold is open-ended, which the checker
        # calls unknown (no witness), where the timeline's own pairing once drew it as an overlap
        (evil, 1, "release", "invoke", "L", 4 * MS),
    )
    row = {"case": "e", "impl": evil, "verdict": "invalid"}
    page = timeline_section(_run(tmp_path, {"e": h}, [row]))
    blocks = re.findall(r'<script type="application/json" class="tl-data">(.*?)</script>', page, re.S)
    assert len(blocks) == 1
    # HTML outside the data block is escaped; inside it, what plotly draws is escaped, and the
    # caption is plain text (the page sets it with textContent)
    assert "<img" not in page.replace(blocks[0], "")
    (view,) = json.loads(blocks[0])
    assert "<img" not in json.dumps([view["data"], view["layout"]]) and evil in view["caption"]
    assert timeline_section(_run(tmp_path / "ok", {}, [{"case": "v", "verdict": "valid"}])) == ""


def test_a_red_grid_cell_links_to_its_timeline_and_an_unrecovered_strike_is_stuck() -> None:
    from dashboards.cells import cell_for

    target = {"evidence_target_k": 3, "evidence_target_n": 30}
    failed = [{"case": "a__restart", "verdict": "invalid", "strikes": 3, "overlapping_holds": 2, **target}]
    cell = cell_for(failed)
    assert cell.cls == "bad" and 'href="#timeline-a__restart"' in cell.html("restart")
    never = [{"case": "b__restart", "verdict": "valid", "strikes": 1, "unrecovered_strikes": 1, **target}]
    stuck = cell_for(never)
    assert stuck.cls == "stuck" and "never granted again after 1 strike" in stuck.detail
    assert "timeline" not in stuck.html("restart")


def test_a_zookeeper_holder_loses_its_session_a_timeout_after_it_stalled(tmp_path: Path) -> None:
    lock = "L"
    h = history(
        ("1-u0", 0, "acquire", "ok", lock, 1 * MS),
        ("1-u0", 1, "pause", "invoke", lock, 100 * MS),
        ("2-u0", 0, "acquire", "ok", lock, 700 * MS),
        ("2-u0", 1, "release", "invoke", lock, 720 * MS),
        ("1-u0", 1, "pause", "ok", lock, 900 * MS, None, 800),
        ("1-u0", 2, "release", "invoke", lock, 910 * MS),
    )
    row = {"case": "z", "impl": "zookeeper.kazoo", "backend": "zookeeper", "verdict": "invalid"}
    meta = {"params": {"ttl_s": 30.0, "lock_params": '{"session_timeout": 0.5}'}}
    caption = case_views(_run(tmp_path, {"z": h}, [row], meta), row)[0]["caption"]
    # the session ends 0.5 s after the holder stalled, not 0.5 s (nor the 30 s TTL) after its grant
    assert "its 0.5 s session ended at 0.599 s while it was paused (the strike: 0.099-0.899 s)" in caption
    assert "client 2-u0 was granted at 0.699 s" in caption


def test_a_server_faults_recovery_names_the_service_and_the_grant_apart() -> None:
    from dashboards.cells import cell_for

    target = {"evidence_target_k": 1, "evidence_target_n": 1}
    row = {"case": "c__restart", "verdict": "valid", "strikes": 1, "acquisitions_after_strike": 5,
           "recovery_ms_p50": 200.0, "recovery_ms_max": 200.0, "service_back_ms_p50": 1300.0, **target}  # fmt: skip
    assert "the service answered again after 1.3 s; the next grant after 0.2 s" in cell_for([row]).detail
    crash = {**row, "case": "c__crash", "service_back_ms_p50": None}
    assert "recovered in 0.2 s" in cell_for([crash]).detail


def test_a_lease_runs_from_the_request_not_from_when_the_client_heard_its_answer(tmp_path: Path) -> None:
    # CI on 03cc8a2: a grant answered 10 ms after its send, a 1 s lease, the next grant 5 ms before
    # ok + 1 s. The server's lease ran from its SET, before the ok: the lease had ended, though
    # counting from the ok said it "had not ended"
    lock = "L"
    h = history(
        ("1-u0", 0, "acquire", "invoke", lock, 0),
        ("1-u0", 0, "acquire", "ok", lock, 10 * MS),
        ("1-u0", 1, "pause", "invoke", lock, 20 * MS),
        ("2-u0", 0, "acquire", "invoke", lock, 30 * MS),
        ("2-u0", 0, "acquire", "ok", lock, 1 * S + 5 * MS),
        ("2-u0", 1, "release", "invoke", lock, 1 * S + 50 * MS),
        ("1-u0", 1, "pause", "ok", lock, 2 * S, None, 1980),
        ("1-u0", 2, "release", "invoke", lock, 2 * S + 1 * MS),
    )
    row = {"case": "s", "impl": "r", "workload": "lease-expiry", "verdict": "invalid"}
    meta = {"params": {"ttl_s": 1.0}, "impl_capabilities": {"r": {"ttl": True}}}
    view = case_views(_run(tmp_path, {"s": h}, [row], meta), row)[0]
    assert (
        "its 1 s lease ended at 1.000-1.005 s while it was paused (the strike: 0.020-2.000 s)"
        in view["caption"]
    )
    ends = next(t for t in view["data"] if t["name"].startswith("lease ends"))
    assert ends["x"][0] == pytest.approx(1.005)  # drawn no later than the grant it let in


def test_a_lease_is_said_only_where_the_lock_is_known_to_take_one(tmp_path: Path) -> None:
    h = history(
        ("1-u0", 0, "acquire", "ok", "L", 1 * MS),
        ("2-u0", 0, "acquire", "ok", "L", 5 * MS),
        ("2-u0", 1, "release", "invoke", "L", 9 * MS),
        ("1-u0", 1, "release", "invoke", "L", 10 * MS),
    )
    row = {"case": "n", "impl": "redis.setnx-del", "verdict": "invalid"}
    unknown = case_views(_run(tmp_path / "a", {"n": h}, [row], {"params": {"ttl_s": 10.0}}), row)[0]
    assert "lease" not in unknown["caption"]  # run.json does not say whether it takes the TTL
    leased = {"params": {"ttl_s": 10.0}, "impl_capabilities": {"redis.setnx-del": {"ttl": True}}}
    said = case_views(_run(tmp_path / "b", {"n": h}, [row], leased), row)[0]
    assert "its 10 s lease had not ended" in said["caption"]
    none = {"params": {"ttl_s": 0.003}, "impl_capabilities": {"redis.setnx-del": {"ttl": False}}}
    plain = case_views(_run(tmp_path / "c", {"n": h}, [row], none), row)[0]
    assert "lease" not in plain["caption"] and not any("ends" in t["name"] for t in plain["data"])


@pytest.mark.server
def test_the_red_cell_and_its_timeline_show_the_pair_of_holds_the_checker_kept(tmp_path: Path) -> None:
    """A real run of a lock that excludes nothing: the red cell and the timeline rest on the checker's file.

    Judging writes the checkers' witnesses to violations/<case>.parquet; the timeline draws that
    file's first pair, and it is the very pair the overlap checker reports on the saved history.
    """
    from dashboards.cells import cell_for
    from dashboards.load import load_run
    from tests.helpers import bench
    from workloads.checks.exclusion import check_overlaps

    results = tmp_path / "results"
    r = bench(
        "run", "--impl", "test.no-mutex", "--workload", "flash-sale", "--duration", "3", "--users", "4",
        "--cs", "2ms", "--no-report", "--results-dir", str(results),
    )  # fmt: skip
    (folder,) = [p for p in results.iterdir() if p.is_dir()]
    case = "test.no-mutex__flash-sale"
    rows = pd.read_csv(folder / "cases.csv").set_index("case")
    assert rows.loc[case, "verdict"] == "invalid", r.stderr[-2000:]
    assert rows.loc[case, "overlapping_holds"] > 0
    # the red cell links to the timeline
    cell = cell_for([{**rows.loc[case].to_dict(), "case": case}])
    assert cell.cls == "bad" and f'href="#{anchor(case)}"' in cell.html("flash-sale")

    # the file judging wrote holds the checker's first overlap
    saved = pd.read_parquet(folder / "history" / f"{case}.parquet")
    (kept, *_) = check_overlaps(saved).witnesses
    written = pd.read_parquet(folder / "violations" / f"{case}.parquet")
    overlaps = written[written["kind"] == "overlap"]
    first = overlaps[overlaps["violation"] == overlaps["violation"].min()]
    pair = first[first["role"] != "near"].sort_values("role")
    assert list(zip(pair["client"], pair["start_ns"], strict=True)) == [
        (h["client"], h["start_ns"]) for h in kept.holds
    ]

    # and the timeline draws that pair: its two lanes, named in its caption at their grant times
    run = load_run(folder)
    row = next(r for r in run.cases.to_dict("records") if r["case"] == case)
    views = case_views(run, row)
    assert views, "no timeline drawn for the red cell"
    # the timeline's zero is its first drawn event (OPS): a loop stall recorded before the first
    # acquire, as under load, is not one of them
    t0 = int(saved.loc[saved["op"].isin(OPS), "t_ns"].min())
    a, b = kept.holds
    held = f"client {a['client']} held {a['lock']} from {(a['start_ns'] - t0) / 1e9:.3f} s"
    granted = f"client {b['client']} was granted at {(b['start_ns'] - t0) / 1e9:.3f} s"
    # the views are the file's violations, earliest first (another checker's may come before it)
    drawn = [v for v in views if held in v["caption"] and granted in v["caption"]]
    assert drawn, [v["caption"] for v in views]
    names = [t["name"] for t in drawn[0]["data"]]
    assert f"hold: client {a['client']}" in names and f"hold: client {b['client']}" in names


def test_a_lock_without_tokens_keeps_the_violations_own_grants_and_holds_whole(tmp_path: Path) -> None:
    """An unfenced lock's holds have no token (NaN, which equals nothing): the violation's two must
    still be told apart from the lane's other grants and holds closer than a pixel, not merged into them."""
    us = 1_000
    h = history(
        ("1-u0", 0, "acquire", "ok", "L", 10 * MS),
        ("1-u0", 1, "release", "invoke", "L", 10 * MS + 50 * us),
        ("1-u0", 2, "acquire", "ok", "L", 10 * MS + 100 * us),  # the first holder's violating grant
        ("2-u0", 0, "acquire", "ok", "L", 20 * MS),
        ("2-u0", 1, "release", "invoke", "L", 30 * MS),
        ("1-u0", 3, "release", "invoke", "L", 40 * MS),
    )
    row = {"case": "u", "impl": "u", "workload": "flash-sale", "verdict": "invalid"}
    (v,) = case_views(_run(tmp_path, {"u": h}, [row]), row)
    assert (
        "client 1-u0 held L from 0.000 s" in v["caption"]
        and "client 2-u0 was granted at 0.010 s" in v["caption"]
    )
    grant = next(t for t in v["data"] if t["name"] == "grant (token)")
    # one marker per grant of the violation, each at its own time (the earlier grant 0.1 ms before it
    # is under a pixel of this window, and would have swallowed it)
    assert sorted(round(x, 4) for x in grant["x"]) == [0.0, 0.0001, 0.01]
    held = next(t for t in v["data"] if t["name"] == "hold: client 1-u0")
    assert [round(b, 4) for b in held["base"]] == [0.0001, 0.0]  # the violating hold whole, the earlier apart


def test_a_failure_found_under_a_stall_is_undecided_but_still_links_its_timeline() -> None:
    """CI at load 7: the lease-expiry case failed under a stall and its chip linked nowhere."""
    from dashboards.cells import cell_for
    from dashboards.decision import _outcomes

    row = {
        "case": "a__lease-expiry__unfenced", "scenario": "lease-expiry", "verdict": "invalid", "strikes": 3,
        "overlapping_holds": 1, "stall_reason": "loop 900 ms late near the violation, 0.9 of the 1 s lease",
        "evidence_target_k": 3, "evidence_target_n": 30,
    }  # fmt: skip
    assert cell_for([row]).cls == "unknown" and cell_for([row]).word == "stalled"
    (chip,) = _outcomes({"lease-expiry": [row]})
    assert chip.cls == "unknown" and chip.link == "timeline-a__lease-expiry__unfenced"
