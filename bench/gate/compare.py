"""``bench gate BASELINE CANDIDATE``: did the candidate run regress against the baseline?

How it decides, per impl x workload (the trials of a case are one group):

* Safety first, no statistics: a group with a violation (overlapping holds, witness
  violations, oversold units, lost updates, or an ``invalid`` verdict) in the candidate
  and none in the baseline is a regression, even with one trial. A candidate verdict
  ``unknown`` (the checkers could not decide) is "not enough data", never a pass.
* Performance, per rule (``acquire.p99:+10%``): a regression needs BOTH the median of the
  candidate's per-trial figures to be worse than the baseline's by more than the threshold
  AND a one-sided Mann-Whitney U test of the per-trial figures to be significant at
  ``alpha`` after Holm's correction over all performance comparisons of the gate (so a
  gate with many rules and impls does not cry wolf more often than one with a single rule).
* Too few trials is "not enough data": fewer than :data:`MIN_TRIALS` per side, or so few
  that even complete separation (every candidate trial worse than every baseline trial)
  could not reach the corrected alpha.
* A generator-bound figure (``generator_bound`` in either side's trials: the load
  generator, not the lock, set it; bench/measure/fidelity.py) is "not enough data" too: its
  throughput is only a lower bound and its latencies an upper bound, so it can show
  neither a regression nor a pass. Safety is judged as always.

Exit codes: 0 pass; 1 regression; 2 unusable input (bad folder, schema, rule, machine
class) or not enough data to decide. "Not enough data" is 2, not 0: a CI job must not go
green when the gate could not judge, and not 1 either, which means "your change made it
worse". A regression found elsewhere in the same gate still exits 1.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from bench.errors import UserError
from bench.gate.rules import DEFAULT_RULES, Rule, parse_rules
from bench.measure.stalls import failed_under_stall
from bench.measure.stats import holm, mann_whitney_u, min_p_value
from resultsio import FINISHED, VIOLATION_COLUMNS, read_results, trial_group

MIN_TRIALS = 3
#: Parameters that may differ between baseline and candidate without a warning.
_IGNORED_PARAMS = {"trials"}

PASS, REGRESSION, INSUFFICIENT = "pass", "regression", "insufficient"


@dataclass
class Side:
    """One results folder (a run or a baseline) as the gate reads it."""

    path: Path
    meta: dict[str, Any]
    cases: pd.DataFrame

    @property
    def run_id(self) -> str:
        return str(self.meta.get("run_id") or self.path.name)

    @property
    def machine_class(self) -> str | None:
        host = self.meta.get("host")
        value = host.get("machine_class") if isinstance(host, dict) else None
        return str(value) if value else None

    def groups(self) -> dict[str, pd.DataFrame]:
        keys = self.cases["case"].astype(str).map(trial_group)
        return {str(g): rows for g, rows in self.cases.groupby(keys, sort=False)}


@dataclass
class Row:
    """One line of the gate's table."""

    group: str
    impl: str
    workload: str
    metric: str
    rule: str
    baseline: float | None
    candidate: float | None
    n_baseline: int
    n_candidate: int
    change: float | None = None  # relative (0.1 = +10%) or absolute, as the rule says
    relative: bool = True
    unit: str = ""
    p_raw: float | None = None
    p: float | None = None  # Holm-adjusted, of the one-sided test "the candidate is worse"
    #: what the p-value tests, e.g. "H1: candidate throughput lower" (one-sided Mann-Whitney U)
    p_tests: str = ""
    #: Holm-adjusted p of the opposite one-sided test (candidate better), when the change is beyond it
    p_better: float | None = None
    verdict: str = ""
    outcome: str = PASS
    note: str = ""
    baseline_trials: list[float] = field(default_factory=list)
    candidate_trials: list[float] = field(default_factory=list)
    generator_bound: str = ""  # why a side's figure describes the load generator, "" when neither does


@dataclass
class GateResult:
    """Everything the gate found; ``exit_code`` is what the process returns."""

    baseline: dict[str, Any]
    candidate: dict[str, Any]
    rules: list[str]
    alpha: float
    comparisons: int
    rows: list[Row] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        outcomes = {r.outcome for r in self.rows}
        if REGRESSION in outcomes:
            return 1
        if INSUFFICIENT in outcomes or not self.rows:
            return 2
        return 0

    @property
    def verdict(self) -> str:
        return {0: "PASS", 1: "REGRESSION", 2: "NOT ENOUGH DATA"}[self.exit_code]


# reading ------------------------------------------------------------------------------------


def load_side(path: Path, role: str) -> Side:
    """Read a run or baseline folder with the one results reader; UserError (one line) when it is unusable.

    Any problem the reader finds (resultsio: the declared schema of run.json and the case
    tables, histograms, parquet against csv) refuses the side: the gate never judges a figure
    it could not trust. The first problem is the one line, prefixed with the side.
    """
    results = read_results(path)
    fatal = results.fatal
    if fatal:
        raise UserError(f"{role} {fatal[0]}")
    status = results.meta.get("status")
    if status not in FINISHED:
        raise UserError(f"{role} {path} is not a finished run (status: {status}); gate needs a complete run")
    if results.problems:
        more = len(results.problems) - 1
        also = f" ({more} more problem(s): bench report {path} lists them)" if more else ""
        raise UserError(f"{role} {results.problems[0]}{also}")
    if results.cases.empty:
        raise UserError(f"{role} {path} has no finished cases")
    return Side(path=Path(path), meta=results.meta, cases=results.cases.reset_index(drop=True))


# deciding -----------------------------------------------------------------------------------


def _values(rows: pd.DataFrame, column: str) -> list[float]:
    if column not in rows.columns:
        return []
    values = pd.to_numeric(rows[column], errors="coerce").dropna()
    return [float(v) for v in values if math.isfinite(float(v))]


def _has_column(cand: pd.DataFrame, base: pd.DataFrame | None, column: str) -> bool:
    """Does either side of a group carry ``column`` with at least one value?"""
    return any(
        rows is not None and column in rows.columns and rows[column].notna().any() for rows in (cand, base)
    )


def _stalled(rows: pd.DataFrame) -> pd.Series:
    """Trials whose failure a stall of the load generator could explain (``stall_reason``, bench/run/judge.py).

    The matrix draws such a cell "stalled", never red (bench/matrix/rerun.py); the gate, alike,
    takes them as undecided: a runner that froze the generator past a share of the lease says
    nothing about the change (and a change that busies the loop shows in the timing rows).
    """
    flags = [failed_under_stall(row) for row in rows.to_dict("records")]
    return pd.Series(flags, index=rows.index, dtype=bool)


def _violations(rows: pd.DataFrame) -> tuple[int, bool, bool]:
    """(violation count, unsafe, undecided) of a group's trials; a stalled trial decides neither way."""
    decided = rows[~_stalled(rows)]
    count = 0
    for col in VIOLATION_COLUMNS:
        count += int(sum(_values(decided, col)))
    verdicts = set(decided["verdict"].fillna("unknown").astype(str).str.lower())
    unsafe = count > 0 or "invalid" in verdicts
    undecided = not unsafe and ("unknown" in verdicts or len(decided) < len(rows))
    return count, unsafe, undecided


def _bound_note(side: str, rows: pd.DataFrame) -> str:
    """Why a side's trials are generator-bound ("" when none is); older runs lack the column."""
    if "generator_bound" not in rows.columns:
        return ""
    flags = rows["generator_bound"].astype(str).str.strip().str.lower().isin(("true", "1", "1.0"))
    if not flags.any():
        # not measured (the column is there, the flag empty) is "not enough data" too, never a pass
        unmeasured = rows["generator_bound"].isna() | rows["generator_bound"].astype(
            str
        ).str.strip().str.lower().isin(("", "nan", "none"))
        if not unmeasured.any():
            return ""
        why = (
            rows.loc[unmeasured, "generator_bound_reason"] if "generator_bound_reason" in rows.columns else []
        )
        reason = next((str(r) for r in why if isinstance(r, str) and r), "")
        return (
            f"the {side}'s fidelity was not measured in {int(unmeasured.sum())} of {len(rows)} trial(s)"
            + (f" ({reason})" if reason else "")
        )
    reasons = rows.loc[flags, "generator_bound_reason"] if "generator_bound_reason" in rows.columns else []
    reason = next((str(r) for r in reasons if isinstance(r, str) and r), "")
    return f"the {side} is generator-bound in {int(flags.sum())} of {len(rows)} trial(s)" + (
        f" ({reason})" if reason else ""
    )


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    s = sorted(values)
    mid = len(s) // 2
    return s[mid] if len(s) % 2 else (s[mid - 1] + s[mid]) / 2


def _first(rows: pd.DataFrame, column: str, default: str) -> str:
    value = rows[column].dropna() if column in rows.columns else []
    return str(value.iloc[0]) if len(value) else default


def _safety_row(group: str, impl: str, workload: str, base: pd.DataFrame | None, cand: pd.DataFrame) -> Row:
    c_count, c_unsafe, c_unknown = _violations(cand)
    row = Row(group, impl, workload, "violations", "violations:0", None, float(c_count), 0, len(cand))
    b_undecided = False
    if base is not None:
        b_count, b_unsafe, _ = _violations(base)
        row.baseline, row.n_baseline = float(b_count), len(base)
        verdicts = base["verdict"].fillna("unknown").astype(str).str.strip().str.lower()
        b_undecided = bool(verdicts.eq("unknown").all())
    else:
        b_unsafe = False
    if c_unsafe and not b_unsafe:
        row.verdict, row.outcome = "REGRESSION: unsafe", REGRESSION
        row.note = "the candidate has safety violations where the baseline had none"
    elif c_unsafe:
        row.verdict = "unsafe, as in baseline"
        row.note = "known unsafe in the baseline too: not a new regression"
    elif c_unknown:
        row.verdict, row.outcome = "not enough data", INSUFFICIENT
        stalled = cand[_stalled(cand)]
        if len(stalled):
            row.note = (
                f"{len(stalled)} candidate trial(s) failed while the load generator stalled, which could "
                f"explain it ({_first(stalled, 'stall_reason', '')}): neither safe nor unsafe; run the "
                "gate again on a quieter runner"
            )
        else:
            row.note = "a candidate trial has verdict unknown: the checkers could not decide"
    elif b_undecided:
        # nothing to compare the candidate's safety with: "no new violation" would mean nothing
        row.verdict, row.outcome = "not enough data", INSUFFICIENT
        row.note = "every baseline trial has verdict unknown: the checkers could not decide the baseline"
    else:
        row.verdict = "pass"
    return row


def evaluate(
    base: Side,
    cand: Side,
    rules: list[Rule],
    alpha: float,
    allow_other_machine: bool = False,
    allow_param_diff: set[str] | frozenset[str] = frozenset(),
) -> GateResult:
    """Compare two loaded folders under ``rules``; safety (``violations:0``) is always checked.

    Runs made with different parameters are not comparable (UserError, exit 2) unless
    every differing parameter is named in ``allow_param_diff``.
    """
    if not 0 < alpha < 1:
        raise UserError(f"--alpha must be between 0 and 1, got {alpha:g}")
    result = GateResult(
        baseline=_describe(base),
        candidate=_describe(cand),
        rules=[r.text for r in rules] + ["violations:0"],
        alpha=alpha,
        comparisons=0,
    )
    _check_machines(base, cand, allow_other_machine, result)
    _check_params(base, cand, allow_param_diff, result)
    b_groups, c_groups = base.groups(), cand.groups()
    perf: list[Row] = []
    for group, c_rows in c_groups.items():
        b_rows = b_groups.get(group)
        result.rows.append(
            _safety_row(group, _first(c_rows, "impl", group), _first(c_rows, "workload", ""), b_rows, c_rows)
        )
        for row in _rule_rows(group, b_rows, c_rows, rules):
            result.rows.append(row)
            if b_rows is not None:
                perf.append(row)
    for group, b_rows in b_groups.items():
        if group not in c_groups:
            result.rows.append(_missing_row(group, b_rows))
    _judge_performance(perf, {r.text: r for r in rules}, alpha)
    result.comparisons = len(perf)
    return result


def _check_machines(base: Side, cand: Side, allow_other_machine: bool, result: GateResult) -> None:
    """Timings compare on one machine class only (UserError otherwise, unless allowed: a warning)."""
    b_class, c_class = base.machine_class, cand.machine_class
    if allow_other_machine:
        if b_class != c_class:
            result.warnings.append(
                f"machine classes differ ({b_class} vs {c_class}); allowed by --allow-other-machine"
            )
        return
    if b_class is None or c_class is None:
        which = "baseline" if b_class is None else "candidate"
        raise UserError(
            f"the {which} records no machine class; re-create it with bench baseline update, "
            "or pass --allow-other-machine"
        )
    if b_class != c_class:
        raise UserError(
            f"baseline {base.path} was recorded on machine class {b_class}, the candidate on {c_class}: "
            "timings do not compare across machines (make a baseline on this machine class with "
            "bench baseline update, or pass --allow-other-machine)"
        )


def _check_params(base: Side, cand: Side, allowed: set[str] | frozenset[str], result: GateResult) -> None:
    """Runs of different parameters do not compare (UserError), except in the parameters allowed."""
    differ = _param_differences(base, cand)
    refused = {k: v for k, v in differ.items() if k not in allowed}
    if refused:
        shown = "; ".join(f"{k}: {v}" for k, v in list(refused.items())[:4])
        more = f" (+{len(refused) - 4} more)" if len(refused) > 4 else ""
        flags = " ".join(f"--allow-param-diff {k}" for k in refused)
        raise UserError(
            f"not comparable: baseline and candidate ran with different parameters ({shown}{more}); "
            f"run the candidate with the baseline's parameters, or pass {flags}"
        )
    if differ:
        listed = "; ".join(f"{k}: {v}" for k, v in differ.items())
        result.warnings.append(
            f"run parameters differ (baseline vs candidate), allowed by --allow-param-diff: {listed}"
        )


def _rule_rows(group: str, b_rows: Any, c_rows: Any, rules: list[Rule]) -> list[Row]:
    """One performance row per rule for a case group (``new (no baseline)`` when the baseline lacks it)."""
    impl, workload = _first(c_rows, "impl", group), _first(c_rows, "workload", "")
    rows: list[Row] = []
    for rule in rules:
        if rule.info.optional and not _has_column(c_rows, b_rows, rule.info.column):
            continue  # an open-model metric on a closed-loop case: nothing to judge
        row = Row(group, impl, workload, rule.metric, rule.text, None, None, 0, 0,
                  relative=rule.relative, unit="%" if rule.relative else rule.info.unit)  # fmt: skip
        cv = _values(c_rows, rule.info.column)
        row.candidate, row.n_candidate, row.candidate_trials = _median(cv), len(cv), cv
        if b_rows is None:
            row.verdict, row.note = "new (no baseline)", "not in the baseline: nothing to compare"
        else:
            bv = _values(b_rows, rule.info.column)
            row.baseline, row.n_baseline, row.baseline_trials = _median(bv), len(bv), bv
            row.generator_bound = "; ".join(
                n for n in (_bound_note("baseline", b_rows), _bound_note("candidate", c_rows)) if n
            )
        rows.append(row)
    return rows


def _missing_row(group: str, b_rows: Any) -> Row:
    """A case group of the baseline the candidate lacks: not enough data, never a pass."""
    return Row(
        group, _first(b_rows, "impl", group), _first(b_rows, "workload", ""), "(case)", "", None, None,
        len(b_rows), 0, verdict="missing in candidate", outcome=INSUFFICIENT,
        note="in the baseline but not in the candidate (failed or not run)",
    )  # fmt: skip


def _judge_performance(rows: list[Row], rules: dict[str, Rule], alpha: float) -> None:
    """Fill verdicts of the performance rows, Holm-correcting over all of them.

    Rows that cannot be tested (too few trials) stay in the family with p = 1, so adding
    an untestable comparison never makes the others easier to flag.
    """
    m = max(1, len(rows))
    raw = [1.0] * len(rows)
    testable = [False] * len(rows)
    for i, row in enumerate(rows):
        rule = rules[row.rule]
        testable[i] = (
            not row.generator_bound
            and row.n_baseline >= MIN_TRIALS
            and row.n_candidate >= MIN_TRIALS
            and min_p_value(row.n_candidate, row.n_baseline) <= alpha / m
        )
        if testable[i]:
            alternative = "greater" if rule.info.worse > 0 else "less"
            raw[i] = mann_whitney_u(row.candidate_trials, row.baseline_trials, alternative).p
    adjusted = holm(raw)
    for i, row in enumerate(rows):
        rule = rules[row.rule]
        row.p_tests = f"H1: candidate {rule.metric} {'higher' if rule.info.worse > 0 else 'lower'} (worse)"
        if row.baseline is not None and row.candidate is not None:
            if rule.relative:
                row.change = (row.candidate - row.baseline) / abs(row.baseline) if row.baseline else None
            else:
                row.change = row.candidate - row.baseline
        if row.generator_bound:
            row.verdict, row.outcome = "not enough data", INSUFFICIENT
            row.note = (
                f"{row.generator_bound}: the load generator, not the lock, set this figure"
                if "generator-bound" in row.generator_bound
                else f"{row.generator_bound}: whether the lock or the load generator set this figure is not known"
            )
            continue
        if row.baseline is None or row.candidate is None:
            side = "baseline" if row.baseline is None else "candidate"
            row.verdict, row.outcome = "not enough data", INSUFFICIENT
            row.note = f"column {rule.info.column} has no values in the {side}"
            continue
        if not testable[i]:
            row.verdict, row.outcome = "not enough data", INSUFFICIENT
            row.note = (
                f"{row.n_baseline} vs {row.n_candidate} trials cannot reach a p-value of {alpha / m:.3g} "
                f"(alpha {alpha:g} over {m} comparisons); run at least {_trials_needed(alpha / m)} "
                "trials per side (bench run --trials N)"
            )
            continue
        row.p_raw, row.p = raw[i], adjusted[i]
        beyond = rule.beyond(row.baseline, row.candidate)
        significant = row.p <= alpha
        if beyond and significant:
            row.verdict, row.outcome = "REGRESSION", REGRESSION
            row.note = f"worse than {rule.text} and significant"
        elif beyond:
            row.verdict = "pass (not significant)"
            row.note = "worse than the threshold, but within the noise of the trials"
        elif rule.better_beyond(row.baseline, row.candidate):
            alternative = "less" if rule.info.worse > 0 else "greater"
            better_p = min(1.0, mann_whitney_u(row.candidate_trials, row.baseline_trials, alternative).p * m)
            row.p_better = better_p
            row.verdict = "improved" if better_p <= alpha else "pass"
            row.note = (
                f"better beyond the threshold; the opposite one-sided test (H1: candidate better) gives "
                f"p = {better_p:.3g}" + (" (significant)" if better_p <= alpha else " (not significant)")
            )
        elif significant:
            row.verdict = "pass (within threshold)"
            row.note = "significantly worse, but by less than the threshold"
        else:
            row.verdict = "pass"


def _trials_needed(level: float) -> int:
    n = MIN_TRIALS
    while min_p_value(n, n) > level and n < 100:
        n += 1
    return n


def _describe(side: Side) -> dict[str, Any]:
    return {
        "path": str(side.path),
        "run_id": side.run_id,
        "git_commit": side.meta.get("git_commit"),
        "machine_class": side.machine_class,
        "status": side.meta.get("status"),
    }


def _param_differences(base: Side, cand: Side) -> dict[str, str]:
    """Parameter name -> ``'baseline' vs 'candidate'`` for every run parameter that differs."""
    sides = []
    for side in (base, cand):
        params = side.meta.get("params")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise UserError(f"{side.path / 'run.json'}: params is not a JSON object; the file is damaged")
        sides.append(params)
    bp, cp = sides
    return {
        k: f"{bp.get(k)!r} vs {cp.get(k)!r}"
        for k in sorted(set(bp) | set(cp))
        if k not in _IGNORED_PARAMS and bp.get(k) != cp.get(k)
    }


# the public entry ---------------------------------------------------------------------------


def run_gate(
    baseline: Path,
    candidate: Path,
    rule_texts: list[str] | None = None,
    alpha: float = 0.05,
    allow_other_machine: bool = False,
    allow_param_diff: list[str] | None = None,
) -> GateResult:
    """Load both folders, parse the rules (defaults when none) and evaluate."""
    rules = parse_rules(list(rule_texts) if rule_texts else list(DEFAULT_RULES))
    base = load_side(baseline, "baseline")
    cand = load_side(candidate, "candidate")
    return evaluate(base, cand, rules, alpha, allow_other_machine, set(allow_param_diff or ()))


# output -------------------------------------------------------------------------------------


def _md(text: object) -> str:
    """A table cell: data from files cannot break the table or inject HTML into a step summary."""
    s = " ".join(str(text).split())
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("`", "'")):
        s = s.replace(a, b)
    return s


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif float(value).is_integer():
        text = f"{int(value)}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".strip()


def _value_cell(value: float | None, n: int, unit: str) -> str:
    if value is None and not n:
        return "n/a"
    return f"{_num(value, unit)} (n={n})"


def _change_cell(row: Row) -> str:
    if row.change is None:
        return ""
    if row.relative:
        return f"{row.change * 100:+.1f}%"
    return f"{row.change:+,.4g} {row.unit}".strip()


def _metric_unit(row: Row) -> str:
    from bench.gate.rules import METRICS

    info = METRICS.get(row.metric)
    return info.unit if info else ""


def to_markdown(result: GateResult) -> str:
    """The gate's report as GitHub-flavoured Markdown (also what goes into $GITHUB_STEP_SUMMARY)."""
    b, c = result.baseline, result.candidate
    icon = {"PASS": "✅", "REGRESSION": "❌", "NOT ENOUGH DATA": "⚠️"}[result.verdict]
    lines = [
        f"### {icon} lockbench gate: {result.verdict} (exit {result.exit_code})",
        "",
        f"Baseline `{_md(b['path'])}` (run {_md(b['run_id'])}, commit {_md(b['git_commit'])}, "
        f"{_md(b['machine_class'])}) vs candidate `{_md(c['path'])}` (run {_md(c['run_id'])}, commit "
        f"{_md(c['git_commit'])}, {_md(c['machine_class'])}).",
        f"Rules: {', '.join(f'`{_md(r)}`' for r in result.rules)}. A performance regression needs the "
        "median over trials beyond the threshold AND a one-sided Mann-Whitney U p-value <= "
        f"{result.alpha:g} (Holm-corrected over {result.comparisons} comparisons); any new safety "
        "violation is a regression. The p-value column is that one-sided test, H1: the candidate is "
        "WORSE (throughput lower, latency higher): a p near 1 means no sign of worse, not a sign of "
        "better; an improvement is tested the other way round (its p is in the notes).",
        "",
        "| case | metric | baseline | candidate | change | p (H1: worse) | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result.rows:
        unit = "" if row.metric in ("violations", "(case)") else _metric_unit(row)
        verdict = f"**{row.verdict}**" if row.outcome != PASS else row.verdict
        p = f"{row.p:.3g}" if row.p is not None else ""
        case = f"{row.impl} · {row.workload}" if row.workload else row.group
        lines.append(
            f"| {_md(case)} | {_md(row.metric)} | {_md(_value_cell(row.baseline, row.n_baseline, unit))} | "
            f"{_md(_value_cell(row.candidate, row.n_candidate, unit))} | {_md(_change_cell(row))} | {p} | "
            f"{_md(verdict)} |"
        )
    notes = [f"- {_md(w)}" for w in result.warnings]
    by_note: dict[str, list[str]] = {}
    for r in result.rows:
        if r.note and (r.outcome != PASS or r.p_better is not None):
            by_note.setdefault(r.note, []).append(f"{r.impl} {r.metric}")
    for note, where in by_note.items():
        shown = ", ".join(where[:4]) + (f" and {len(where) - 4} more" if len(where) > 4 else "")
        notes.append(f"- {_md(shown)}: {_md(note)}")
    if notes:
        lines += ["", *notes]
    return "\n".join(lines) + "\n"


def to_json(result: GateResult) -> str:
    """The gate's report as JSON: verdict, exit code, both sides, every row with its trials."""

    def clean(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v

    payload = {
        "verdict": result.verdict,
        "exit_code": result.exit_code,
        "alpha": result.alpha,
        "correction": "holm",
        "comparisons": result.comparisons,
        "min_trials": MIN_TRIALS,
        "rules": result.rules,
        "baseline": result.baseline,
        "candidate": result.candidate,
        "warnings": result.warnings,
        "rows": [{k: clean(v) for k, v in asdict(r).items()} for r in result.rows],
    }
    return json.dumps(payload, indent=2)


def append_step_summary(markdown: str) -> Path | None:
    """Append to $GITHUB_STEP_SUMMARY when GitHub Actions set it; the file it wrote, or None."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return None
    with open(target, "a", encoding="utf-8") as fh:
        fh.write(markdown + "\n")
    return Path(target)
