"""The decision table: the report's first screen, one row per impl, answering "which lock should I use".

Each row puts side by side what a reader weighs: the scenarios the lock survived, failed or
was not put through in this run (grey, never green), whether fencing tokens exist and saved
the data, what the lock costs at the hot key (with the load generator's fidelity flag), its
fairness, the servers it needs, one sentence drawn from its own numbers, and the evidence
behind every "survived": a clean run of n acquisitions only bounds a rare race below 3/n
(rule of three, 95%), so a short run cannot clear a lock of a 1-in-1000 race.

Reads only what the results folder holds; every column it uses may be absent (older runs,
or producers not merged yet) and then shows "n/a".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from dashboards.grid import cell_for
from dashboards.html_bits import DAMAGED, UNKNOWN_DAMAGED, duration_us, e, fmt, rule_of_three
from dashboards.load import RunData, flag, group_of, num, scenario_of, text
from dashboards.matrix import summarize, trial_class
from dashboards.timeline import anchor, has_timeline

#: One row of cases.csv as a plain dict.
Row = dict[str, Any]
#: Client-fault workloads: each injects a fault by itself.
FAULT_WORKLOADS = ("long-cs", "lease-expiry", "crash")
#: What a safety matrix puts every lock through; absent ones are "not tested" in this run.
SAFETY_CHECKS = (
    ("long-cs", "long-cs (holder outlives its lease)"),
    ("lease-expiry", "lease-expiry (holder paused)"),
    ("crash", "crash (holder killed)"),
    ("server-fault", "server fault (restart, failover, member kill)"),
)
#: Chip class -> the word the table shows.
OUTCOME = {
    "good": "survived",
    "thin": "held, thin evidence",
    "bad": "failed",
    "warn": "failed, data safe",
    "stuck": "stuck",
    "unknown": "inconclusive",
    "nottested": "did not strike: not tested",
    "nofault": "no fault tried",
    "baseline": "no fault",
}


def is_fault_case(row: Row) -> bool:
    """Whether a case put the lock through a fault (client fault workload, server fault, skew, partition)."""
    workload = text(row, "workload") or scenario_of(row).split("+")[0]
    if workload in FAULT_WORKLOADS or (text(row, "fault") or "").strip():
        return True
    scenario = scenario_of(row)
    return "skew" in scenario or "partition" in scenario or (num(row, "fault_window_s") or 0) > 0


def _check_of(row: Row) -> str | None:
    """Which of SAFETY_CHECKS a case counts for (a server fault on any workload counts as server-fault)."""
    fault = (text(row, "fault") or "").strip()
    if fault:
        return "partition" if fault.startswith("partition") else "server-fault"
    workload = text(row, "workload") or scenario_of(row).split("+")[0]
    return workload if workload in FAULT_WORKLOADS else None


def clock_skewed(run: RunData) -> bool:
    """Whether the run gave some clients a skewed lock clock (a run-wide fault: every case had it)."""
    params = run.meta.get("params") if isinstance(run.meta.get("params"), dict) else {}
    return bool((num(params, "clock_skew_s") or 0) and (num(params, "skewed_clients") or 0))


def run_has_faults(run: RunData) -> bool:
    return clock_skewed(run) or any(is_fault_case(r) for r in records(run))


def _median(values: list[float]) -> float | None:
    return float(pd.Series(values).median()) if values else None


def records(run: RunData) -> list[Row]:
    """cases.csv as plain dicts: iterrows converts every arrow string column on every row (slow on a matrix).

    Converted once per table: the first screen asks for them per lock and per scenario (200 times on a matrix).
    """
    cached = getattr(run, "_records", None)
    if cached is None or cached[0] is not run.cases:
        cached = (run.cases, run.cases.to_dict("records"))
        run._records = cached  # type: ignore[attr-defined]
    return cached[1]


def _values(rows: list[Row], column: str) -> list[float]:
    return [v for v in (num(r, column) for r in rows) if v is not None]


def _sum(rows: list[Row], column: str) -> float:
    return float(sum(_values(rows, column)))


@dataclass
class Outcome:
    """One scenario of one impl: its class, the evidence behind it, and the catalog's expectation."""

    scenario: str
    cls: str
    acquisitions: float
    fault_events: float
    tooltip: str
    after_event: float | None = None
    failure: str = ""
    expected: str = ""
    contradicts: bool = False
    #: strikes and grants after them (cases.csv ``strikes``, ``acquisitions_after_strike``), when counted
    strikes: int | None = None
    detail: str = ""
    #: element id of the first failed case's violation timeline (dashboards/timeline.py), "" for none
    link: str = ""


@dataclass
class Cost:
    """The hot-key figures of one impl: medians over the trials of its no-fault flash-sale cases."""

    scenario: str = ""
    acq_s: float | None = None
    model_acq_s: float | None = None
    bound: bool | None = None
    reason: str = ""
    users: float | None = None
    round_trips: float | None = None
    jain: float | None = None
    top_share: float | None = None
    top_total: int = 0


@dataclass
class ImplRow:
    """Everything the decision table shows for one impl."""

    impl: str
    backend: str
    outcomes: list[Outcome] = field(default_factory=list)
    untested: list[str] = field(default_factory=list)
    tokens: str = "not tested"
    data: str = ""
    solo_acquire_us: float | None = None
    cost: Cost = field(default_factory=Cost)
    servers: str = "n/a"


def _fault_events(rows: list[Row]) -> float:
    """Fault events the trials saw: ``scenario_events`` where bench matrix counted them, else
    paused holders + killed holders + one per server fault."""
    counted = _values(rows, "scenario_events")
    if counted:
        return float(sum(counted))
    server = sum(1 for r in rows if (text(r, "fault") or "").strip())
    return _sum(rows, "pauses") + _sum(rows, "crashes") + server


def _failure_text(rows: list[Row]) -> str:
    parts = []
    for column, label in (
        ("overlapping_holds", "overlapping holds"), ("lost_updates", "lost updates"),
        ("oversold_units", "oversold units"), ("stale_writes_accepted", "stale writes accepted"),
        ("stuck_locks", "locks left stuck"),
    ):  # fmt: skip
        total = _sum(rows, column)
        if total:
            parts.append(f"{fmt(total)} {label}")
    return ", ".join(parts)


def _outcomes(rows_by_scenario: dict[str, list[Row]]) -> list[Outcome]:
    out = []
    for scenario, rows in rows_by_scenario.items():
        cell = summarize(rows)
        cls = cell.cls
        expected = {t for t in (text(r, "expected_outcome") for r in rows) if t}
        after = _values(rows, "acquisitions_after_event")  # bench matrix's evidence column
        strikes = None
        detail = ""
        link = ""
        if _values(rows, "strikes"):  # the evidence rule (bench/measure/strikes.py): green must be earned
            graded = cell_for(rows)
            cls, strikes, detail = graded.cls, graded.k, graded.detail
            link = graded.link  # a stalled (undecided) failure links its timeline too
            after = [float(graded.n)]
        elif cls in ("bad", "warn"):
            link = next((anchor(str(r["case"])) for r in rows if has_timeline(r)), "")
        plain = not any(is_fault_case(r) for r in rows) and not scenario.endswith("+clock-skew")
        if cls in ("good", "thin", "baseline") and plain and strikes is None:
            cls = "nofault"  # plain contention shows exclusion, not safety: never a green chip
        out.append(
            Outcome(
                scenario=scenario, cls=cls, acquisitions=_sum(rows, "acquisitions"),
                after_event=float(sum(after)) if after else None,
                fault_events=float(strikes) if strikes is not None else _fault_events(rows), tooltip=cell.tooltip,
                failure=_failure_text(rows) if cls in ("bad", "warn", "stuck") else "",
                expected=", ".join(sorted(expected)),
                contradicts=any(flag(r, "contradicts_catalog") is True for r in rows),
                strikes=strikes, detail=detail,
                link=link,
            )
        )  # fmt: skip
    return out


def _fencing(modes_run: set[str], impl_rows: list[Row]) -> tuple[str, str]:
    """(tokens, what they did for the data) from the run's fencing modes and the impl's cases' data_safe."""
    modes = {m for m in (text(r, "fencing") for r in impl_rows) if m}
    fenced = [r for r in impl_rows if text(r, "fencing") == "enforce"]
    # tokens out of grant order (checked wherever the lock handed tokens out, --fencing off
    # included: the lock's token promise), or writes refused from holders that overlapped
    # nobody: the tokens themselves are wrong, whatever the refusals seemed to protect
    tokened = impl_rows
    out_of_order = sum(num(r, "fencing_order_violations") or 0 for r in tokened)
    if not out_of_order and not modes_run - {"off"}:
        return "not tested", "this run used no tokens (bench run --fencing both)"
    if not out_of_order and not modes - {"off"}:
        return "no tokens", "the data depends on the lock alone"
    refused = sum(num(r, "legit_writes_refused") or 0 for r in fenced)
    if out_of_order or refused:
        said = []
        if out_of_order:
            said.append(f"{out_of_order:,.0f} grants with tokens out of grant order")
        if refused:
            said.append(f"{refused:,.0f} legitimate writes refused")
        where = ", ".join(dict.fromkeys(scenario_of(r) for r in tokened if (num(r, "fencing_order_violations") or 0)
                                        or (num(r, "legit_writes_refused") or 0)))  # fmt: skip
        return "broken", f"{'; '.join(said)} ({where})"
    if not fenced:
        return "yes", "observed only (no fenced case)"
    classes = [trial_class(r) for r in fenced]
    failed = [r for r, c in zip(fenced, classes, strict=True) if c in ("bad", "warn")]
    unclear = [r for r, c in zip(fenced, classes, strict=True) if c == "unknown"]
    if not failed and unclear:
        where = ", ".join(dict.fromkeys(scenario_of(r) for r in unclear))
        return "yes", f"no verdict in {where}"
    if not failed:
        return "yes", "the lock held in every fenced case: tokens not needed"
    saved = [r for r in failed if flag(r, "data_safe") is True]
    lost = [r for r in failed if flag(r, "data_safe") is False]
    if lost:
        where = ", ".join(dict.fromkeys(scenario_of(r) for r in lost))
        return "yes", f"did NOT save the data in {where}"
    where = ", ".join(dict.fromkeys(scenario_of(r) for r in saved))
    return "yes", f"saved the data when the lock failed ({where})" if saved else "data_safe n/a"


def _cost(run: RunData, impl_rows: list[Row]) -> Cost:
    """The no-fault flash-sale cases (else any no-fault cases) of the impl, medians over trials."""
    plain = [r for r in impl_rows if not is_fault_case(r)]
    if not plain or clock_skewed(run):
        return Cost()
    flash = [r for r in plain if scenario_of(r).split("+")[0] == "flash-sale"]
    rows = flash or plain
    first = scenario_of(rows[0])
    rows = [r for r in rows if scenario_of(r) == first]
    bound_flags = [flag(r, "generator_bound") for r in rows]
    texts = [(t or "").strip() for t in (text(r, "generator_bound_reason") for r in rows)]
    # three states: bound if any trial is; unknown (None) if any is not measured; "no" only when all are
    bound = True if True in bound_flags else None if None in bound_flags else False
    reasons = [t for f, t in zip(bound_flags, texts, strict=True) if t and f is bound]
    counts: list[int] = []
    for case in [str(r.get("case")) for r in rows]:
        counts += run.client_counts(case) or []
    total = sum(counts)
    return Cost(
        scenario=first,
        acq_s=_median(_values(rows, "throughput_acq_s")),
        model_acq_s=_median(_values(rows, "model_acq_s")),
        bound=bound,
        reason=reasons[0] if reasons else "",
        users=_median(_values(rows, "users")),
        round_trips=_median(_values(rows, "server_cmds_per_acquire")),
        jain=_median(_values(rows, "jain_index")),
        top_share=max(counts) / total if total else None,
        top_total=total,
    )  # fmt: skip


def _servers(run: RunData, impl: str, backend: str) -> str:
    if backend == "file":
        return "none: a local file (one host only)"
    endpoints = run.meta.get("endpoints") if isinstance(run.meta.get("endpoints"), dict) else {}
    entry: Any = endpoints.get(backend)
    urls = entry.get("urls") if isinstance(entry, dict) else [entry] if isinstance(entry, str) else entry
    count = 1
    if "redlock" in impl and isinstance(urls, list) and len(urls) > 1:
        count = len(urls)  # RedLock: N independent masters, a majority must grant
    return backend if count == 1 else f"{count} × {backend} (independent masters)"


def _calibration(run: RunData) -> dict[str, Any]:
    value = run.meta.get("calibration")
    return value if isinstance(value, dict) else {}


def solo_acquire_us(run: RunData, impl: str) -> float | None:
    solo = _calibration(run).get("solo")
    entry = solo.get(impl) if isinstance(solo, dict) else None
    return num(entry, "acquire_p50_us") if isinstance(entry, dict) else None


def impl_rows(run: RunData) -> list[ImplRow]:
    """One ImplRow per impl of ``run``, in first-seen order."""
    cases = records(run)
    if not cases:
        return []
    impls = [text(r, "impl") or group_of(str(r["case"])) for r in cases]
    modes_run = {m for m in (text(r, "fencing") for r in cases) if m}
    out = []
    for impl in dict.fromkeys(impls):
        rows = [r for r, i in zip(cases, impls, strict=True) if i == impl]
        backend = text(rows[0], "backend") or impl.split(".")[0]
        skew = "+clock-skew" if clock_skewed(run) else ""  # run-wide: bench puts it in no scenario name
        scenarios = [scenario_of(r) + skew for r in rows]
        by_scenario = {
            s: [r for r, x in zip(rows, scenarios, strict=True) if x == s] for s in dict.fromkeys(scenarios)
        }
        checks = {c for c in (_check_of(r) for r in rows) if c}
        tokens, data = _fencing(modes_run, rows)
        out.append(
            ImplRow(
                impl=impl, backend=backend, outcomes=_outcomes(by_scenario),
                untested=[label for key, label in SAFETY_CHECKS if key not in checks],
                tokens=tokens, data=data, solo_acquire_us=solo_acquire_us(run, impl), cost=_cost(run, rows),
                servers=_servers(run, impl, backend),
            )
        )  # fmt: skip
    return out


def sentence(row: ImplRow) -> str:
    """One plain sentence from the impl's own figures: failures first, then cost, then fairness."""
    parts = []
    failed = [o for o in row.outcomes if o.cls in ("bad", "warn")]
    survived = [o for o in row.outcomes if o.cls in ("good", "thin", "nofault")]
    for o in failed:
        saved = " (fencing kept the data)" if o.cls == "warn" else ""
        parts.append(f"failed {o.scenario}{': ' + o.failure if o.failure else ''}{saved}")
    faults = [
        o
        for o in survived
        if o.fault_events or o.scenario.split("+")[0] in FAULT_WORKLOADS or o.scenario.endswith("+clock-skew")
    ]
    unclear = [o.scenario for o in row.outcomes if o.cls == "unknown"]
    stuck = [o for o in row.outcomes if o.cls == "stuck"]
    earned = [o for o in faults if o.cls == "good"]
    thin = [o for o in faults if o.cls == "thin"]
    if stuck:
        parts.append("stayed stuck after " + ", ".join(f"{o.scenario} ({o.detail})" for o in stuck))
    if earned:
        parts.append("survived " + ", ".join(o.scenario for o in earned))
    if thin:
        parts.append("held on thin evidence in " + ", ".join(o.scenario for o in thin))
    elif survived and not failed:
        parts.append("stayed exclusive under contention, but no fault was tried")
    if unclear:
        parts.append("no verdict in " + ", ".join(unclear))
    c = row.cost
    if c.acq_s is not None:
        who = f" with {c.users:g} clients" if c.users else ""
        figure = f"{c.acq_s:,.0f} acquisitions/s{who}"
        if c.bound:
            figure += " (a lower bound: the load generator was the limit)"
        if c.model_acq_s:
            figure += f", {c.model_acq_s:,.0f}/s for independent clients (model)"
        parts.append(figure)
    if c.jain is not None and c.jain < 0.5:
        share = (
            f": one client got {c.top_share:.0%} of {c.top_total:,} acquisitions"
            if c.top_share is not None
            else ""
        )
        parts.append(f"unfair (Jain {c.jain:.2f}){share}")
    text_ = "; ".join(parts) or "no results"
    return text_[0].upper() + text_[1:] + "."


def _chip(o: Outcome) -> str:
    mark = " ≠ catalog" if o.contradicts else ""
    expected = f"; catalog expects: {o.expected}" if o.expected else ""
    # a case resting on damaged data (resultsio marks its reason "damaged: ...") is never just inconclusive
    word = UNKNOWN_DAMAGED if o.cls == "unknown" and DAMAGED in o.tooltip else OUTCOME[o.cls]
    return (
        f'<span class="chip {o.cls}{" contradicts" if o.contradicts else ""}" data-scenario="{e(o.scenario)}" '
        f'title="{e(word + expected + "; " + o.tooltip)}">{e(o.scenario)}: {e(word)}'
        f"{e(mark)}</span>" + (f'<a class="tl-link" href="#{e(o.link)}">timeline</a>' if o.link else "")
    )


def _evidence(o: Outcome) -> str:
    if o.strikes is not None:
        n = int(o.after_event or 0)
        bounds = [f"per-strike failure < {3 / o.strikes:.2g}"] if o.strikes else []
        bounds += [f"per-grant race < {3 / n:.2g}"] if n else []
        return (
            f'<li data-evidence="{e(o.scenario)}">{e(o.scenario)}: {o.strikes} strike(s), {n:,} grants after '
            f"them{e('; ' + ', '.join(bounds) + ' (95%)' if bounds else '')}"
            f"{e('; ' + OUTCOME[o.cls]) if o.cls == 'thin' else ''}</li>"
        )
    if o.fault_events:
        events = f", {fmt(o.fault_events)} fault event(s)"
    elif o.scenario.split("+")[0] in FAULT_WORKLOADS or o.scenario.endswith("+clock-skew"):
        events = ", fault events not counted"
    else:
        events = ", no fault"
    if o.after_event is not None and o.fault_events:
        # what the fault could break is tested by the acquisitions after it: the bound rests on those
        return (
            f'<li data-evidence="{e(o.scenario)}">{e(o.scenario)}: {fmt(o.acquisitions)} acquisitions '
            f"({fmt(o.after_event)} after {e(events.lstrip(', '))}); {e(rule_of_three(o.after_event))}</li>"
        )
    return (
        f'<li data-evidence="{e(o.scenario)}">{e(o.scenario)}: {fmt(o.acquisitions)} acquisitions{e(events)}; '
        f"{e(rule_of_three(o.acquisitions))}</li>"
    )


def _safety_cell(row: ImplRow) -> str:
    chips = "".join(_chip(o) for o in row.outcomes)
    chips += "".join(
        f'<span class="chip untested" data-scenario="{e(u)}" title="not run for this impl in this run">'
        f"{e(u.split(' (')[0])}: not tested</span>"
        for u in row.untested
    )
    survived = [o for o in row.outcomes if o.cls in ("good", "nofault")]
    evidence = f'<ul class="evidence">{"".join(_evidence(o) for o in survived)}</ul>' if survived else ""
    failed = sum(1 for o in row.outcomes if o.cls in ("bad", "warn"))
    return f'<td class="safety" data-col="safety" data-sort="{failed}">{chips}{evidence}</td>'


def _num_cell(value: float | None, shown: str, col: str, extra: str = "", cls: str = "") -> str:
    sort = "" if value is None else f' data-sort="{value:.6g}"'
    classes = " ".join(c for c in ("num", cls, "na" if value is None else "") if c)
    return f'<td class="{classes}" data-col="{col}"{sort}>{shown}{extra}</td>'


def _throughput_cell(c: Cost) -> str:
    if c.acq_s is None:
        return _num_cell(None, "n/a", "acq_s", "<br><small>not measured: fault cases only</small>")
    extra = (
        f"<br><small>model {c.model_acq_s:,.0f}/s</small>"
        if c.model_acq_s
        else ('<br><small class="na">model n/a</small>')
    )
    if c.bound:
        reason = c.reason or "reason not recorded"
        extra += f'<br><small class="boundnote" title="{e(reason)}">generator-bound: a lower bound</small>'
        return _num_cell(c.acq_s, f"{c.acq_s:,.0f}", "acq_s", extra, "bound")
    if c.bound is None:  # not measured: never shown as a figure of the lock's, never as "not bound"
        said = f"fidelity {e(c.reason)}" if c.reason else "fidelity n/a"  # n/a: a run from before the flag
        extra += f'<br><small class="na boundnote">{said}</small>'
    return _num_cell(c.acq_s, f"{c.acq_s:,.0f}", "acq_s", extra)


def _fencing_cell(row: ImplRow) -> str:
    cls = {"yes": "good", "no tokens": "bad", "broken": "bad"}.get(row.tokens, "untested")
    rank = {"yes": 2, "no tokens": 0, "broken": -1}.get(row.tokens, 1)
    data = f"<br><small>{e(row.data)}</small>" if row.data else ""
    return f'<td data-col="fencing" data-sort="{rank}"><span class="chip {cls}">{e(row.tokens)}</span>{data}</td>'


def decision_section(run: RunData) -> str:
    """Every lock of ``run`` in detail, below the first screen (dashboards/first_screen.py)."""
    rows = impl_rows(run)
    if not rows:
        return '<h2 id="decision-details-heading">Every lock in detail</h2><p>No cases.</p>'
    body = []
    for r in rows:
        c = r.cost
        solo = r.solo_acquire_us
        jain_extra = f"<br><small>top client {c.top_share:.0%}</small>" if c.top_share is not None else ""
        body.append(
            f'<tr data-row="{e(r.impl)}" id="detail-{e(r.impl)}"><th data-col="impl" data-sort="{e(r.impl)}">'
            f"{e(r.impl)}</th>"
            + _safety_cell(r)
            + _fencing_cell(r)
            + _num_cell(solo, duration_us(solo) if solo is not None else "n/a", "solo_acquire_p50")
            + _throughput_cell(c)
            + _num_cell(
                c.round_trips, f"{c.round_trips:.3g}" if c.round_trips is not None else "n/a", "round_trips"
            )
            + _num_cell(
                c.jain, fmt(c.jain, "ratio"), "jain", jain_extra, "bad" if (c.jain or 1) < 0.5 else ""
            )
            + f'<td data-col="servers" data-sort="{e(r.servers)}">{e(r.servers)}</td>'
            + f'<td class="sentence" data-col="sentence">{e(sentence(r))}</td></tr>'
        )
    head = "".join(
        f'<th class="sortable" data-sort-col="{i}" title="click to sort">{label}</th>'
        for i, label in enumerate(
            [
                "impl", "scenarios: survived / failed / not tested", "fencing tokens", "solo acquire p50 (1 client)",
                "acquisitions/s at the hot key", "round trips per acquire", "fairness (Jain)", "servers it needs",
                "in one sentence",
            ]
        )
    )  # fmt: skip
    cost_from = {r.cost.scenario for r in rows if r.cost.scenario}
    return (
        '<h2 id="decision-details-heading">Every lock in detail</h2>'
        f'<table id="decision-details" class="sortable-table"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
        '<p class="caption">Click a header to sort. Scenarios: <b>green</b> survived, <b>red</b> failed and '
        "the data suffered, <b>amber</b> the lock failed but the data stayed right, <b>grey</b> "
        "inconclusive, <i>no fault tried</i> (plain contention shows exclusion, not safety) or <i>not tested</i> "
        "in this run (a scenario not run proves nothing). Under each "
        "survived scenario: the acquisitions and fault events it rests on; no violation in n acquisitions "
        "only bounds a race's rate below 3/n at 95% confidence (rule of three). Cost at the hot key "
        f"({e(', '.join(sorted(cost_from)) or 'not measured: this run has fault cases only')}, median over "
        "trials, cases.csv): "
        "acquisitions/s as measured, hatched when the load generator was the limit (then a lower bound), "
        "with the model <code>model_acq_s</code> = 1 / (mean solo hold + mean handoff gap): what independent "
        "clients would get (means: a rate is a mean; n/a where either is unknown); solo acquire p50 from run.json calibration (1 client alone; the console's "
        "<i>acq p50</i> is under the run's load); round trips: lock-server "
        "commands per acquisition (server statistics); fairness: Jain's index of acquisitions per client "
        "(1 = equal) and the busiest client's share (history). Servers: lock servers the impl needs "
        "(run.json endpoints). The sentence is generated from the row's own figures.</p>"
    )


def no_fault_banner(run: RunData, matrix_answers: bool = False) -> str:
    """A banner for a run that injected no fault: what it shows, what it does not, and what would.

    ``matrix_answers``: a bench matrix folder fills the first screen's safety column; then the
    banner only says where safety comes from.
    """
    if run.cases.empty or run_has_faults(run):
        return ""
    if matrix_answers:
        return (
            '<div class="banner nofault" id="no-fault-banner">No faults were injected in this run: its figures '
            "are costs. The safety column comes from the newest <code>bench matrix</code> of each lock in this "
            "results folder (sources under the table).</div>"
        )
    backends = sorted({text(r, "backend") or (text(r, "impl") or "").split(".")[0] for r in records(run)})
    backends = [b for b in backends if b]
    command = "bench matrix " + " ".join(f"--backend {b}" for b in backends) if backends else "bench matrix"
    return (
        '<div class="banner nofault" id="no-fault-banner">No faults were injected in this run. It shows what '
        "each lock costs and that it kept clients apart under plain contention; it does not show what "
        "happens when a holder stalls past its lease, a holder crashes, or a server restarts or fails "
        f"over (a lock can be <i>valid</i> here and stay stuck forever after a crash). For the safety "
        f"matrix run <code>{e(command)}</code>.</div>"
    )


def contradictions_banner(run: RunData) -> str:
    """For a matrix run: every case whose result contradicts the catalog's expectation, at the top."""
    if "contradicts_catalog" not in run.cases.columns:
        return ""
    items = []
    for r in records(run):
        if flag(r, "contradicts_catalog") is not True:
            continue
        impl, scenario = text(r, "impl") or str(r["case"]), scenario_of(r)
        expected = text(r, "expected_outcome") or "n/a"
        note = text(r, "expected_note")
        got = text(r, "observed_outcome") or OUTCOME[trial_class(r)]
        items.append(
            f"<li><b>{e(impl)}</b> under {e(scenario)}: catalog expects <i>{e(expected)}</i>, "
            f"this run: <i>{e(got)}</i> ({e(text(r, 'verdict') or 'unknown')})"
            + (f" — {e(note)}" if note else "")
            + "</li>"
        )
    if not items:
        return ""
    kind = " (safety matrix)" if run.meta.get("kind") == "matrix" else ""
    return (
        f'<div class="banner contradicts" id="contradicts-banner">{len(items)} result(s) contradict the '
        f"catalog{e(kind)}: look at these first.<ul>{''.join(items)}</ul></div>"
    )
