"""Judging a recorded case: its history with the fault's strikes, the checkers, one cases.csv row.

Pure apart from reading the recording it is given: what the fault did (each strike and its
precondition) goes into the history first, then the workload's checker, the metrics, the
strikes and the evidence rule, the fidelity of the load, and why a violation may be a stall.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bench.measure import analysis, arrival_metrics, evidence, fidelity, strikes
from bench.measure.evidence import checker_reason
from bench.measure.stalls import STALL_SHARE
from bench.nemesis import partitions
from bench.nemesis.faults import FaultWindow, StrikeMark
from bench.run import clock_watch
from bench.run.case import (
    Case,
    RunSettings,
)
from bench.run.witnesses import write_witnesses
from workloads.checks.common import process_of
from workloads.checks.recovery import server_recovery_columns
from workloads.harness.recording import (
    STALL_CLIENT_PREFIX,
    decode_histogram,
    history_frame,
    without_stopped_waits,
)


def with_fault_windows(
    history: pd.DataFrame, windows: list[FaultWindow], marks: list[StrikeMark] | None = None
) -> pd.DataFrame:
    """The history plus every strike as an invoke/ok pair of op ``fault`` by client ``bench`` (seq = strike).

    With ``marks`` (what each strike was to this case), each strike also gets a ``strike``
    row at its start: ``ok`` when its precondition held (the case's holder was inside, on the
    struck server), ``fail`` with the reason when it missed; the holder's client id is in
    ``lock``. Without marks (an older history) every strike counts, as it did.
    """
    if not windows:
        return history
    # events as the recorder writes them (client, seq, op, type, lock, t_ns, token, value, error):
    # history_frame gives them the history's own columns, whatever columns it has since gained
    events = [
        ("bench", i, "fault", type_, w.kind, t, None, None, w.detail)
        for i, w in enumerate(windows)
        for type_, t in (("invoke", w.start_ns), ("ok", w.end_ns))
    ]
    # when the struck service answered again (recovery counts from it)
    events += [
        ("bench", i, "service", "ok", w.kind, w.service_ns, None, None, "") for i, w in enumerate(windows)
    ]
    if marks is not None:
        by_strike = {m.strike: m for m in marks}
        for i, w in enumerate(windows):
            mark = by_strike.get(i)
            hit = mark is not None and mark.hit
            why = "" if hit else (mark.reason if mark else "the case had ended")
            holder = (mark.holder if mark else None) or ""
            events.append(
                ("bench", i, "strike", "ok" if hit else "fail", holder, w.start_ns, None, None, why)
            )
    rows = history_frame(events)
    common = [c for c in history.columns if c in rows.columns]
    merged = pd.concat([history, rows[common].astype(history[common].dtypes.to_dict())], ignore_index=True)
    return merged.sort_values("t_ns", kind="stable").reset_index(drop=True)


def judge(
    case: Case,
    settings: RunSettings,
    recording: dict[str, Any],
    history: pd.DataFrame,
    history_file: Path,
    solo: fidelity.Solo | None = None,
) -> dict[str, Any]:
    """Checkers and metrics for one recorded case; ``solo`` is its impl's calibration, if any."""
    verdict = case.workload.check_function()(history, recording["final_state"])
    hists = {name: decode_histogram(text) for name, text in recording["histograms"].items()}
    window = analysis.steady_window(history)
    params = {**case.params, "trial": case.trial, "users": settings.users, "processes": settings.processes}
    figures = without_stopped_waits(history)  # waits the case's stop ended are no timeouts
    row = analysis.case_row(
        case.case_id, case.impl, case.workload.name, params, figures, hists, verdict, window
    )
    row["scenario"] = case.scenario
    row["fencing"] = (recording.get("final_state") or {}).get("fencing", {}).get("mode", "off")
    row["fault"] = case.fault.label if case.fault else ""
    arrival_columns, arrival_hists = arrival_metrics.arrival_summary(
        history, recording.get("final_state"), settings.workload_options.get("patience")
    )
    row.update(arrival_columns)
    row["data_safe"] = data_safe(row)
    fault_info = recording.get("fault") or {}
    fault_case, strike_ns = _fault_columns(row, case, settings, recording, history)
    first_ns = first_violation_ns(verdict.results)
    row["violation_after_strike"] = (
        bool(len(strike_ns))
        and (first_ns >= int(strike_ns[0]) or struck_hold_violated(verdict.results, strike_ns))
        if fault_case and first_ns is not None
        else None
    )
    row["indeterminate_purchases"] = int(verdict.counters.get("indeterminate_purchases", 0))
    row["verdict_reason"] = checker_reason(verdict.results, row["verdict"])
    # a verdict needs evidence (bench/measure/evidence.py): enough acquisitions, not mostly server errors
    evidence.apply(
        row, history, fault_injected=case.fault is not None, recording_complete=recording.get("complete", True),
        recording_problems=recording.get("problems", []), duration_s=settings.duration,
        spawn_s=settings.users / settings.spawn_rate if settings.spawn_rate else None,
    )  # fmt: skip
    if fault_case:
        _grade(row, case, settings, fault_info)
    _load_columns(row, settings, recording, case, solo, history, first_ns)
    # the checkers' witnesses beside the history, for the folder (violations/<case>.parquet) and the report
    write_witnesses(history_file, verdict.results, history)
    return {
        "row": row,
        "histograms": {**recording["histograms"], **arrival_hists},
        "history_file": history_file,
        "extra": _extra(recording, verdict),
    }


def data_safe(row: dict[str, Any]) -> bool:
    """Did the data survive, whatever the lock did? No oversold or lost units, no stale write accepted.

    The lock may fail (overlaps) while the data stays right (fencing refused the stale writes);
    with fencing on, tokens out of grant order or refused legitimate writes void that claim:
    the resource trusted an order that was not there. With fencing off the resource trusted
    no token, so their order says nothing about the data.
    """
    fenced_columns = (
        ("fencing_order_violations", "legit_writes_refused") if row.get("fencing") != "off" else ()
    )
    damage = [
        row.get(k) for k in ("oversold_units", "lost_updates", "stale_writes_accepted", *fenced_columns)
    ]
    return not any(v and v == v for v in damage)


def struck_hold_violated(results: list[Any], strike_ns: Any) -> bool:
    """Is a hold that a counted strike fell inside (the struck holder's) one of a violation's holds?

    Why beside "the first violation came after the first strike": a control without the
    protection may also fail on its own before any strike (``canary.no-keepalive-etcd``'s 1 s lease
    ran out while a waiter queued, 2026-12-06, H), and its first violation then hid the ones its
    strikes made. A violation whose own holds contain a strike is that strike's, whenever it came.
    """
    times = np.sort(np.asarray(list(strike_ns), dtype=np.int64))
    if not len(times):
        return False
    for result in results:
        if result.status != "invalid":
            continue
        for witness in result.witnesses:
            for hold in witness.holds:
                k = int(np.searchsorted(times, int(hold["start_ns"]), side="left"))
                if k < len(times) and times[k] <= int(hold["end_ns"]):
                    return True
    return False


#: Reason prefix of a fault that could not reach the lock at all (the cell says "n/a", never a strike).
NOT_REACHED = "n/a: "


def first_violation_ns(results: list[Any]) -> int | None:
    """When the earliest violation a checker placed in time happened (history ns), None if none was."""
    times = [
        r.first_ns for r in results if r.status == "invalid" and getattr(r, "first_ns", None) is not None
    ]
    return min(times) if times else None


def _fault_columns(
    row: dict[str, Any], case: Case, settings: RunSettings, recording: dict[str, Any], history: pd.DataFrame
) -> tuple[bool, Any]:
    """The fault's columns (window, strikes that counted, recovery, partition); (a fault case?, the
    counted strikes' start times)."""
    times: Any = []
    fault_info = recording.get("fault") or {}
    if fault_info.get("start_ns") is not None:
        row["fault_window_s"] = (fault_info["end_ns"] - fault_info["start_ns"]) / 1e9
    # how much of its fault the case saw, and whether a "survived" is earned (bench/measure/strikes.py)
    skewed = bool(settings.clock_skew and settings.skewed_clients)
    fault_case = case.fault is not None or case.workload.name in strikes.FAULT_WORKLOADS or skewed
    if fault_case:
        kind = "clock-skew" if skewed and case.fault is None else case.workload.name
        times, missed = strikes.strike_record(history, kind, settings.ttl, case.fault is not None)
        reads = (recording.get("lock_stats") or {}).get("clock_reads")
        if kind == "clock-skew" and reads == 0:
            # reach: a skewed clock nobody read touched nothing; its "strikes" are none
            times = times[:0]
            missed = [f"{NOT_REACHED}the lock never read the skewed client clock (0 reads)"]
        row.update(strikes.columns(history, times, missed))
        if case.fault is not None and case.fault.at_seconds is None:
            row.update(server_recovery_columns(history))
    if case.workload.name == "crash":
        row["stuck_bound_s"] = settings.workload_options.get("stuck_bound")
    for key in ("recovery_expected_s", "recovery_by", "recovery_bound_s"):
        if key in case.params:
            value = case.params[key]
            # a lock that never frees a dead holder: empty here, and recovery_by says "never"
            row[key] = None if isinstance(value, float) and value == float("inf") else value
    if recording.get("partition") is not None and fault_info.get("start_ns") is not None:
        # judged again with the workers' clock bounds: a grant within them of the cut or heal is undecided
        row.update(
            partitions.after_heal_columns(
                history, fault_info["start_ns"], fault_info["end_ns"], fault_info.get("holder"),
                (recording.get("final_state") or {}).get("clock_uncertainty_ns"),
            )
        )  # fmt: skip
    return fault_case, times


def _grade(row: dict[str, Any], case: Case, settings: RunSettings, fault_info: dict[str, Any]) -> None:
    """The evidence grade of a fault case; a fault that never struck (or always missed) proved nothing."""
    row["evidence"] = strikes.grade(row, settings.evidence, fault_case=True)
    row["evidence_target"] = settings.evidence.text()
    row["evidence_target_k"] = settings.evidence.strikes
    row["evidence_target_n"] = settings.evidence.acquisitions
    if row["evidence"] == "not-struck" and str(row.get("verdict_reason") or "").startswith(
        evidence.NO_EVIDENCE
    ):
        return  # its clients never got going (the reason says why): that, not "did not strike", is the story
    if row["evidence"] == "not-struck":
        what = case.fault.label if case.fault else f"the {case.workload.name} event"
        why = (
            fault_info.get("error")
            or row.get("strikes_missed_reason")
            or fault_info.get("stopped_early")
            or "no holder claimed it in time"
        )
        row["verdict"] = "unknown"
        if str(why).startswith(NOT_REACHED):
            row["verdict_reason"] = f"{why}: the fault cannot reach it"
        else:
            row["verdict_reason"] = f"{what} did not strike ({why}): not tested"


def _load_columns(
    row: dict[str, Any],
    settings: RunSettings,
    recording: dict[str, Any],
    case: Case,
    solo: fidelity.Solo | None,
    history: pd.DataFrame | None = None,
    first_ns: int | None = None,
) -> None:
    """What the load cost the servers and the generator, and whether the figures are the lock's."""
    shares = [
        w.get("cpu_share") for w in recording.get("workers", {}).values() if w.get("cpu_share") is not None
    ]
    row["harness_cpu_max"] = max(shares) if shares else None
    commands = recording.get("server_commands")
    commands = {} if commands is None else commands
    acquisitions = row.get("acquisitions") or 0
    # a failed read or a counter reset (server restart) leaves no count: n/a with its reason, never a number
    row["server_cmds_reason"] = getattr(commands, "error", "")
    row["server_cmds_per_acquire"] = (
        sum(commands.values()) / acquisitions
        if commands and acquisitions and not row["server_cmds_reason"]
        else None
    )
    # Does the row describe the lock or the load generator? (bench/measure/fidelity.py)
    row.update(
        fidelity.columns(
            row,
            solo,
            case.workload.name in fidelity.CALIBRATED_WORKLOADS,
            recording.get("workers", {}),
            recording.get("lock_stats") or {},
            (recording.get("server_cpu") or {}).get("seconds"),
        )
    )
    for key, value in sorted((recording.get("lock_stats") or {}).items()):
        row[f"lockstat_{key}"] = value
    clock = clock_watch.current()
    row["stall_reason"] = stall_reason(row, settings, history, first_ns, clock)
    row["clock_step_ms"] = clock_step_ms(history, clock)


def _extra(recording: dict[str, Any], verdict: Any) -> dict[str, Any]:
    """The case's bookkeeping kept beside its histograms (hist/<case>.json)."""
    return {
        "recording_complete": recording.get("complete", True),
        "recording_problems": recording.get("problems", []),
        "workers": recording.get("workers", {}),
        "merged_totals": recording.get("merged_totals", {}),
        "final_state": recording.get("final_state", {}),
        "server_commands": recording.get("server_commands", {}),
        "server_cpu": recording.get("server_cpu"),
        "lock_stats": recording.get("lock_stats", {}),
        "fault": recording.get("fault"),
        "clock_offsets": recording.get("clock_offsets") or {},
        "checks": [
            {"name": r.name, "status": r.status, "counters": r.counters, "detail": r.detail}
            for r in verdict.results
        ],
    }


def _most_stalled(t_ns: np.ndarray, lag_ms: np.ndarray, who: np.ndarray) -> tuple[float, int]:
    """The most time one process spent stalled (s, overlapping stalls counted once) and its stalls."""
    worst, count = 0.0, 0
    for process in np.unique(who):
        mine = who == process
        starts = t_ns[mine]
        stops = starts + (lag_ms[mine] * 1e6).astype("int64")
        spans = sorted(zip(starts.tolist(), stops.tolist(), strict=True))
        total, end = 0, -1
        for start, stop in spans:  # sorted by start: each adds only what lies past the ones before
            total += max(0, stop - max(start, end))
            end = max(end, stop)
        if total / 1e9 > worst:
            worst, count = total / 1e9, len(spans)
    return worst, count


def clock_step_ms(history: pd.DataFrame | None, clock: clock_watch.ClockWatch | None) -> float:
    """The wall clock's forward steps while the case ran (ms; 0 with no watcher): see clock_watch."""
    if clock is None or history is None or history.empty:
        return 0.0
    t = history["t_ns"].to_numpy(dtype="int64")
    return clock.forward_ns(int(t.min()), int(t.max())) / 1e6


def stall_reason(
    row: dict[str, Any],
    settings: RunSettings,
    history: pd.DataFrame | None = None,
    first_ns: int | None = None,
    clock: clock_watch.ClockWatch | None = None,
) -> str:
    """Why a failed case's violation may be a stall of the load generator's own process, "" if not.

    A stall counts only where it could explain the violation: the time one Locust process spent
    stalled (the loop-lag probe writes every wake-up 50 ms late or more into the history as a
    ``stall`` dated at its start; a process's stalls are added up, overlaps once) in the stalls
    that overlap the lease before the first violation reaches :data:`STALL_SHARE` of the lease or
    session. Added up, not the longest: three stalls of 104, 262 and 196 ms in a row left a
    holder 40 ms of CPU in 600 ms, and by the longest (262 ms against a 300 ms bar) a lost
    lock was painted red (redis.python-redis-lock x crash, 2026-12-05). Such a failure is the
    generator's doing, not necessarily the scenario's: the cell is undecided ("stalled"), never
    red and never green. A history without a time for its violation is judged by the whole case.

    A step of the machine's wall clock forward (``clock``, bench/run/clock_watch.py) in the same
    window counts alike: the servers time their leases by that clock, so a step of 30% of the
    lease shortened the holder's lease by as much, the clock-skew fault, from the machine.
    """
    if row.get("verdict") != "invalid":
        return ""
    lease = float(settings.lock_params.get("session_timeout") or settings.ttl or 0)
    what = "session" if settings.lock_params.get("session_timeout") else "lease"
    if not lease or history is None or history.empty:
        return ""
    # the window that could explain the violation: the lease before it (plus 1 s), or the whole case
    t_all = history["t_ns"].to_numpy(dtype="int64")
    if first_ns is not None:
        begin, end = first_ns - int((lease + 1.0) * 1e9), first_ns
        where = "in the lease before the violation"
    else:
        begin, end = int(t_all.min()), int(t_all.max())
        where = "during the case"
    if clock is not None and (stepped_s := clock.forward_ns(begin, end) / 1e9) >= STALL_SHARE * lease:
        return (
            f"the machine's wall clock stepped {stepped_s:+.2g} s {where}, against a {lease:g} s "
            f"{what} (at least {STALL_SHARE:.0%} of it could explain the violation: the servers time "
            "leases by that clock): it may be the machine, not the scenario"
        )
    stalls = history[(history["op"] == "stall").to_numpy(dtype=bool)]
    if stalls.empty:
        return ""
    t = stalls["t_ns"].to_numpy(dtype="int64")
    lag_ms = stalls["value"].astype("Float64").fillna(0).to_numpy(dtype=float)
    who = stalls["client"].astype(str).to_numpy()
    # a stall of the paused process inside a world pause the scenario made on purpose is the strike,
    # not the generator's; a task pause stops only the holder's task, never a loop (excusing the
    # stalls in any pause's time let a 0.96 s stall of three processes, the machine's, through)
    pauses = history[((history["op"] == "pause") & (history["type"] == "ok")).to_numpy(dtype=bool)]
    if settings.workload_options.get("pause_kind") == "world" and not pauses.empty:
        ends = pauses["t_ns"].to_numpy(dtype="int64")
        starts = ends - (pauses["value"].astype("Float64").fillna(0).to_numpy(dtype=float) * 1e6).astype(
            "int64"
        )
        paused = process_of(pauses["client"]).str.rsplit("/", n=1).str[-1].to_numpy()
        pids = np.array([w.removeprefix(STALL_CLIENT_PREFIX) for w in who])
        excused = np.zeros(len(t), dtype=bool)
        for start, stop, pid in zip(starts, ends, paused, strict=True):
            excused |= (t >= start - 50_000_000) & (t <= stop) & (pids == pid)
        t, lag_ms, who = t[~excused], lag_ms[~excused], who[~excused]
    # a stall row is dated at the stall's start: a long one that began before the window and
    # ran through it counts (2.9 s from 2.9 s before a violation under a 1 s lease was missed)
    near = (t <= end) & (t + (lag_ms * 1e6).astype("int64") >= begin)
    t, lag_ms, who = t[near], lag_ms[near], who[near]
    worst_s, count = _most_stalled(t, lag_ms, who)
    if worst_s < STALL_SHARE * lease:
        return ""
    cause = (
        f"the scenario's {row.get('fault') or row.get('workload')}" if row.get("fault") else "the scenario"
    )
    times = f" in {count} stalls" if count > 1 else ""
    return (
        f"a Locust process stalled {worst_s:.2g} s{times} {where}, against a {lease:g} s {what} (at least "
        f"{STALL_SHARE:.0%} of it could explain the violation): it may be a pause of the load generator, not {cause}"
    )
