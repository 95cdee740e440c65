"""The one declared schema of a results folder: run.json (pydantic) and the case tables (pandera).

Every reader of a results folder (``bench gate``, ``bench report``, ``bench history``, the
shard merge) checks a folder against these declarations and nothing else, so they cannot
disagree about what is damaged. A column is declared once with its kind (a whole count, a
rate, a latency, a fraction, a flag, text), its range, whether it must exist and whether
it may be empty; the checks between columns (a verdict against its counters, trials of a
case, percentiles in order) are declared beside them as checks of the whole table.

Why pandera and pydantic rather than hand-written loops: the gate and the report used to
validate cases.csv by hand in two near-copies that disagreed, and damage slipped through
whichever was weaker. A declaration that both read is the fix; pandera reports every failed
cell with its column, check and row, which is what a one-line error needs.

Cells are checked as read (text that is no number is itself damage), so each numeric
check coerces its column with ``pd.to_numeric(errors="coerce")`` first and counts only
numbers; the "is a number" check catches the rest.

Most tables pass. :func:`table_passes` runs the very same check functions over the table
without pandera (pandera's own cost per column and check was about 30 ms a table, most of
``bench report`` and ``bench gate`` on a small folder); only a table where some check fails
goes through pandera (:func:`cases_schema`, built on first use), whose failure cases name
the cells. pandera is imported only then.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, StrictInt, StrictStr

if TYPE_CHECKING:
    import pandera.pandas as pa

#: The results folder layout this lockbench reads and writes (run.json ``schema``).
SCHEMA_VERSION = 1
#: A case's verdict, exactly as bench writes it (lower case: ``VALID`` is not a verdict bench writes).
VERDICTS = ("valid", "invalid", "unknown")
#: A fault case's evidence grade (cases.csv ``evidence``; empty for a case without a fault).
EVIDENCE_GRADES = ("earned", "thin", "not-struck", "unknown", "failed")
#: The evidence levels a run or matrix may be asked for (run.json ``params.evidence``; bench/measure/strikes.py LEVELS).
EVIDENCE_LEVELS = ("quick", "standard", "thorough")
#: Counters whose nonzero value means the lock was unsafe in a case.
VIOLATION_COLUMNS = ("overlapping_holds", "witness_violations", "oversold_units", "lost_updates")
#: Every checker counts overlapping holds: an empty cell there is damage, never "not counted".
ALWAYS_COUNTED = "overlapping_holds"
#: The fewest columns a case table must have to be read at all (ids, the verdict, the safety counters).
REQUIRED_COLUMNS = ("case", "impl", "workload", "throughput_acq_s", *VIOLATION_COLUMNS, "verdict")
#: Columns a matrix shard's case table must also have for bench merge: each row's cell in the grid
#: (the report draws a matrix without them by scenario; the merge's grid cannot place such a row).
MATRIX_COLUMNS = ("matrix_scenario",)
#: Text columns (read as strings, never as numbers).
TEXT_COLUMNS = (
    "case", "impl", "backend", "workload", "verdict", "scenario", "fencing", "fault", "data_safe",
    "verdict_reason", "generator_bound_reason", "server_cmds_reason", "matrix_scenario",
    "expected_outcome", "expected_note", "observed_outcome", "evidence", "recovery_by",
    "partition_clock_reason",
)  # fmt: skip
#: Flag columns: true, false or empty (not measured).
FLAG_COLUMNS = ("generator_bound", "data_safe", "contradicts_catalog", "arrival_all_p99_censored")
_FLAG_TEXT = {"true", "false", "1", "0", "1.0", "0.0", "yes", "no"}

#: No run grants a lock a trillion times, nor 100 million times a second, nor waits a day.
MAX_COUNT = 1e12
MAX_RATE = 1e8
MAX_US = 86_400e6
MAX_S = 86_400.0 * 30

#: Whole counts that every case row has (bench writes them as integers, 0 when nothing happened).
_COUNTS_ALWAYS = (
    "trial", "acquisitions", "acquire_timeouts", "acquire_unknown", "releases_not_owned", "purchases",
    "units_sold",
)  # fmt: skip
#: Whole counts that may be empty: not counted by this workload's checker, or not measured.
_COUNTS = (
    "users", "processes", "uncertain_overlaps", "max_concurrent_holders", "witness_max",
    "indeterminate_purchases", "acquire_info", "loop_lag_processes", "strikes", "acquisitions_after_strike",
    "unrecovered_strikes", "stuck_locks", "pauses", "crashes", "stale_writes_accepted",
    "stale_writes_refused", "stale_reads", "fencing_order_violations", "legit_writes_refused",
    "open_ended_overlaps", "scenario_events", "acquisitions_after_event", "reentrant_token_changes",
    "uncertain_fencing_order", "evidence_target_k", "evidence_target_n",
    "locks_lost", "locks_lost_in_lease", "ownership_probes", "ownership_probes_untold",
)  # fmt: skip
_RATES = ("throughput_acq_s", "throughput_ops_s", "model_acq_s")
_FRACTIONS = ("jain_index", "loop_lag_late_share")
_RATIOS = (
    # 3/k and 3/n: bounds on probabilities, capped at 1 since round 5; older folders wrote 1.5 for k = 2
    "strike_failure_bound", "race_rate_bound",
    "utilization", "hold_inflation", "client_cpu_ms_per_acq", "polls_per_acq", "server_cpu_us_per_acq",
    "server_cmds_per_acquire", "harness_cpu_max",
)  # fmt: skip
#: Latencies that can only be positive (HDR percentiles); gaps and schedule lags may be negative.
_LATENCY = re.compile(r"^(acquire|release|hold|read_acquire|write_acquire|solo_hold|loop_lag|cs)_\w*_us$")
#: Numbers without a tighter rule: handoff gaps and schedule lags (may be negative), arrival figures, windows.
_OTHER_NUMBERS = (
    r"^(handoff|arrival|schedule|recovery)\w*_(us|ms|s)$|^recovery_ms_\w+$"
    r"|^(fault_window|case_wall|locust_startup|stuck_bound|recovery_expected)_s$|^clock_step_ms$"
)
#: Percentile columns that must rise with the percentile, where present.
PERCENTILE_ORDER = (
    ("acquire_p50_us", "acquire_p90_us", "acquire_p99_us", "acquire_p999_us", "acquire_max_us"),
    ("release_p50_us", "release_p99_us"),
    ("hold_p50_us", "hold_p99_us"),
)


def numbers(column: pd.Series) -> pd.Series:
    """A column as float64: text that is no number becomes NaN (the "is a number" check reports it)."""
    if column.dtype == np.float64:
        return column  # already numbers (pandas copies on write: no caller's change reaches the table)
    if pd.api.types.is_bool_dtype(column.dtype):
        return column.astype("float64")
    if pd.api.types.is_float_dtype(column.dtype) or pd.api.types.is_integer_dtype(column.dtype):
        return column.astype("float64")
    return pd.to_numeric(column, errors="coerce").astype("float64")


def _verdict(column: pd.Series, ok: np.ndarray) -> bool | pd.Series:
    """True when every cell passed (the common case, cheap), else the mask that names the failed rows."""
    return True if bool(ok.all()) else pd.Series(ok, index=column.index)


def _blank(column: pd.Series) -> pd.Series:
    text = column.astype("string").str.strip()
    return column.isna() | text.isna() | (text == "") | (text.str.lower() == "nan")


def _is_number(column: pd.Series) -> bool | pd.Series:
    if pd.api.types.is_numeric_dtype(column.dtype):
        return True  # read as numbers: nothing in it is text
    return _verdict(column, (numbers(column).notna() | _blank(column)).to_numpy(dtype=bool))


def _finite(column: pd.Series) -> bool | pd.Series:
    values = numbers(column).to_numpy()
    return _verdict(column, ~np.isinf(values))


def _between(lo: float, hi: float) -> Callable[[pd.Series], bool | pd.Series]:
    def check(column: pd.Series) -> bool | pd.Series:
        values = numbers(column).to_numpy()
        with np.errstate(invalid="ignore"):
            ok = ~np.isfinite(values) | ((values >= lo) & (values <= hi))
        return _verdict(column, ok)

    return check


def _whole(column: pd.Series) -> bool | pd.Series:
    values = numbers(column).to_numpy()
    with np.errstate(invalid="ignore"):
        ok = ~np.isfinite(values) | (values % 1 == 0)
    return _verdict(column, ok)


def _flag(column: pd.Series) -> bool | pd.Series:
    if pd.api.types.is_bool_dtype(column.dtype):
        return True
    text = column.astype("string").str.strip().str.lower()
    return _verdict(column, (_blank(column) | text.isin(_FLAG_TEXT).fillna(False)).to_numpy(dtype=bool))


IS_NUMBER = "is not a number"
NOT_FINITE = "is infinite"


@dataclass(frozen=True)
class NumberCheck:
    """A number column's checks in one pass: a number, finite, within [lo, hi], whole when asked.

    Why one check and not five: pandera's cost is per check and column (a few ms each on a busy
    machine, and bench history reads every folder); a column that passes costs one pass. When
    it fails, :meth:`reasons` says which rule each failed cell broke, in this order, so the
    error still names the rule.
    """

    lo: float
    hi: float
    whole: bool = False

    @property
    def name(self) -> str:
        return f"number[{self.lo:g}, {self.hi:g}{', whole' if self.whole else ''}]"

    def rules(self) -> list[tuple[str, Callable[[pd.Series], bool | pd.Series]]]:
        out: list[tuple[str, Callable[[pd.Series], bool | pd.Series]]] = [
            (IS_NUMBER, _is_number),
            (NOT_FINITE, _finite),
        ]
        if self.lo >= 0:
            out.append(("is negative", _between(0, math.inf)))
            out.append((f"is implausibly large (above {self.hi:g})", _between(-math.inf, self.hi)))
        else:
            out.append(
                (f"is out of range (plausible: {self.lo:g} .. {self.hi:g})", _between(self.lo, self.hi))
            )
        if self.whole:
            out.append(("is not a whole number", _whole))
        return out

    def __call__(self, column: pd.Series) -> bool | pd.Series:
        # every rule of :meth:`rules` at once, on one conversion of the column (their AND)
        values = numbers(column).to_numpy()
        low = 0.0 if self.lo >= 0 else self.lo
        finite = np.isfinite(values)
        with np.errstate(invalid="ignore"):
            ok = ~np.isinf(values) & (~finite | ((values >= low) & (values <= self.hi)))
            if self.whole:
                ok &= ~finite | (values % 1 == 0)
        if not pd.api.types.is_numeric_dtype(column.dtype):
            ok &= ~np.isnan(values) | _blank(column).to_numpy(dtype=bool)
        return _verdict(column, ok)

    def reasons(self, column: pd.Series) -> list[tuple[str, list[Any]]]:
        """(rule broken, row labels) for each rule some cell breaks; a cell counts under its first rule."""
        seen = np.zeros(len(column), dtype=bool)
        out = []
        for error, rule in self.rules():
            result = rule(column)
            if result is True:
                continue
            bad = ~np.asarray(result, dtype=bool) & ~seen
            seen |= bad
            if bad.any():
                out.append((error, list(column.index[bad])))
        return out


#: every NumberCheck of the schema by its pandera check name (the reader asks it why a cell failed)
NUMBER_CHECKS: dict[str, NumberCheck] = {}


@dataclass(frozen=True)
class ColumnRule:
    """One declared column (or a regex of column names): its one check, whether it may be empty or repeat.

    Why a plain record and not a pandera Column: :func:`table_passes` runs these checks itself on
    a table that passes (most do), and pandera is built from the same records, for a table that
    fails, only then.
    """

    name: str
    check: Callable[[pd.Series], bool | pd.Series] | None = None
    error: str = ""
    nullable: bool = True
    unique: bool = False
    regex: bool = False

    @property
    def required(self) -> bool:
        return self.name in REQUIRED_COLUMNS


def _numbers(name: str, lo: float, hi: float, whole: bool = False, **kw: Any) -> ColumnRule:
    check = NumberCheck(lo, hi, whole)
    NUMBER_CHECKS[check.name] = check
    return ColumnRule(name, check, check.name, **kw)


def _count(name: str, nullable: bool = True) -> ColumnRule:
    return _numbers(name, 0, MAX_COUNT, whole=True, nullable=nullable)


def _columns() -> dict[str, ColumnRule]:
    cols: dict[str, ColumnRule] = {
        "case": ColumnRule("case", nullable=False, unique=True),
        "impl": ColumnRule("impl", nullable=False),
        "workload": ColumnRule("workload", nullable=False),
        "verdict": ColumnRule(
            "verdict",
            lambda c: c.astype("string").isin(VERDICTS).fillna(False),
            f"is not one of {', '.join(VERDICTS)} (exactly, in lower case)",
            nullable=False,
        ),
        "evidence": ColumnRule(
            "evidence",
            lambda c: _blank(c) | c.astype("string").isin(EVIDENCE_GRADES).fillna(False),
            f"is not one of {', '.join(EVIDENCE_GRADES)} or empty",
        ),
    }
    cols[ALWAYS_COUNTED] = _count(ALWAYS_COUNTED, nullable=False)
    for name in VIOLATION_COLUMNS[1:]:
        cols[name] = _count(name, nullable=True)
    for name in _COUNTS_ALWAYS:
        cols[name] = _count(name, nullable=False)
    for name in _COUNTS:
        cols[name] = _count(name)
    for name in _RATES:
        cols[name] = _numbers(name, 0, MAX_RATE)
    for name in _FRACTIONS:
        cols[name] = _numbers(name, 0, 1)
    for name in _RATIOS:
        cols[name] = _numbers(name, 0, MAX_COUNT)
    for name in FLAG_COLUMNS:
        cols[name] = ColumnRule(name, _flag, "is not true, false or empty")
    cols["duration_s"] = _numbers("duration_s", 0, MAX_S)
    cols[_LATENCY.pattern] = _numbers(_LATENCY.pattern, 0, MAX_US, regex=True)
    cols[r"^lockstat_\w+$"] = _numbers(r"^lockstat_\w+$", 0, MAX_COUNT, regex=True)
    # the other numbers bench writes: finite where they are numbers (handoff gaps and lags may be negative)
    cols[_OTHER_NUMBERS] = _numbers(_OTHER_NUMBERS, -MAX_US, MAX_US, regex=True)
    for name in TEXT_COLUMNS:  # text: any string, or empty
        cols.setdefault(name, ColumnRule(name))
    return cols


#: The case tables' declared columns (cases.csv, cases.parquet), in order; checks between them in TABLE_CHECKS.
COLUMNS: dict[str, ColumnRule] = _columns()


# checks between columns -----------------------------------------------------------------------

_TRIAL = re.compile(r"__t\d+$")
_UNSAFE_ID = re.compile(r"[^\w.-]")


def trial_group(case_id: str) -> str:
    """The case id without its trial suffix: ``redis.x__flash-sale__t3`` -> ``redis.x__flash-sale``."""
    return _TRIAL.sub("", case_id)


def _groups(frame: pd.DataFrame) -> pd.Series:
    return frame["case"].astype("string").fillna("").str.replace(_TRIAL.pattern, "", regex=True)


@dataclass(frozen=True)
class TableCheck:
    """A check of a whole case table, with the column it is about (for the one-line error).

    Why its own record: pandera reports a table-level failure without a column; the reader
    names the column from here.
    """

    column: str
    error: str
    fn: Callable[[pd.DataFrame], pd.Series]
    needs: tuple[str, ...] = ("case",)

    def __call__(self, frame: pd.DataFrame) -> pd.Series:
        if not set(self.needs) <= set(frame.columns):
            return pd.Series(True, index=frame.index)
        return self.fn(frame)


def _valid_beside_violations(frame: pd.DataFrame) -> pd.Series:
    valid = frame["verdict"].astype("string").str.strip().str.lower().eq("valid").fillna(False)
    violated = pd.Series(False, index=frame.index)
    for column in VIOLATION_COLUMNS:
        if column in frame:
            violated |= numbers(frame[column]).fillna(0) > 0
    return ~(valid & violated)


def _counted_in_every_trial(column: str) -> Callable[[pd.DataFrame], pd.Series]:
    def check(frame: pd.DataFrame) -> pd.Series:
        if column not in frame:
            return pd.Series(True, index=frame.index)
        empty = numbers(frame[column]).isna()
        if not empty.any():
            return True
        empty &= _blank(frame[column])
        partly = empty & ~empty.groupby(_groups(frame)).transform("all")
        return ~partly

    return check


def _trials_unique(frame: pd.DataFrame) -> pd.Series:
    if "trial" not in frame:
        return pd.Series(True, index=frame.index)
    trial = numbers(frame["trial"])
    twice = pd.DataFrame({"g": _groups(frame), "t": trial}).duplicated(keep=False) & trial.notna()
    return ~twice


def _impl_matches_case(frame: pd.DataFrame) -> pd.Series:
    """A case id starts with its impl (bench makes it so): a changed impl or a renamed id breaks it."""
    case = frame["case"].astype("string").fillna("").map(lambda c: _UNSAFE_ID.sub("_", c))
    impl = frame["impl"].astype("string").fillna("").map(lambda i: _UNSAFE_ID.sub("_", i) + "__")
    return pd.Series([c.startswith(i) for c, i in zip(case, impl, strict=True)], index=frame.index)


def _throughput_with_acquisitions(frame: pd.DataFrame) -> pd.Series:
    """Throughput counts acquisitions inside the load window: never more than all of them per second."""
    if not {"acquisitions", "duration_s"} <= set(frame):
        return pd.Series(True, index=frame.index)
    rate, acq, dur = (numbers(frame[c]) for c in ("throughput_acq_s", "acquisitions", "duration_s"))
    known = rate.notna() & acq.notna() & dur.notna() & (dur > 0)
    return ~known | (rate * dur <= acq * 1.001 + 1)


def _throughput_present(frame: pd.DataFrame) -> pd.Series:
    if "acquisitions" not in frame:
        return pd.Series(True, index=frame.index)
    return ~(numbers(frame["throughput_acq_s"]).isna() & (numbers(frame["acquisitions"]) > 0))


def _at_most_acquisitions(column: str) -> Callable[[pd.DataFrame], pd.Series]:
    """A count of grants' subsets (strikes: each hit a holder's grant; grants after a strike) <= all grants."""

    def check(frame: pd.DataFrame) -> pd.Series:
        if not {column, "acquisitions"} <= set(frame):
            return pd.Series(True, index=frame.index)
        part, whole = numbers(frame[column]), numbers(frame["acquisitions"])
        return part.isna() | whole.isna() | (part <= whole)

    return check


def _in_order(columns: tuple[str, ...]) -> Callable[[pd.DataFrame], pd.Series]:
    def check(frame: pd.DataFrame) -> pd.Series:
        ok = pd.Series(True, index=frame.index)
        present = [c for c in columns if c in frame]
        for low, high in zip(present, present[1:], strict=False):
            a, b = numbers(frame[low]), numbers(frame[high])
            ok &= a.isna() | b.isna() | (a <= b)
        return ok

    return check


TABLE_CHECKS: tuple[TableCheck, ...] = (
    TableCheck(
        "verdict", "is valid beside a nonzero violation counter", _valid_beside_violations, ("verdict",)
    ),
    *(
        TableCheck(
            c, "is empty (NaN) where other trials of the same case counted it", _counted_in_every_trial(c)
        )
        for c in VIOLATION_COLUMNS[1:]
    ),
    TableCheck("trial", "repeats a trial number of the same case", _trials_unique),
    TableCheck(
        "impl",
        "does not match the case id (a changed impl or a renamed case)",
        _impl_matches_case,
        ("case", "impl"),
    ),
    TableCheck(
        "throughput_acq_s",
        "is empty (NaN) in a case that has acquisitions",
        _throughput_present,
        ("throughput_acq_s",),
    ),
    TableCheck(
        "throughput_acq_s",
        "is more than acquisitions / duration_s allow",
        _throughput_with_acquisitions,
        ("throughput_acq_s",),
    ),
    TableCheck(
        "strikes",
        "is more than acquisitions (a strike counts only when it hit a holder, who had a grant)",
        _at_most_acquisitions("strikes"),
        ("strikes",),
    ),
    TableCheck(
        "acquisitions_after_strike",
        "is more than acquisitions (grants after a strike are some of the case's grants)",
        _at_most_acquisitions("acquisitions_after_strike"),
        ("acquisitions_after_strike",),
    ),
    *(
        TableCheck(
            cols[-1] if len(cols) == 2 else "acquire_p99_us",
            f"is out of order ({' <= '.join(cols)})",
            _in_order(cols),
        )
        for cols in PERCENTILE_ORDER
    ),  # fmt: skip
)


def _passed(result: Any) -> bool:
    """A check's outcome as pandera reads it, or False where that reading is in any doubt (pandera decides)."""
    if isinstance(result, bool | np.bool_):
        return bool(result)
    if isinstance(result, pd.Series) and pd.api.types.is_bool_dtype(result.dtype):
        return not result.isna().any() and bool(result.all())
    return False


def doubtful(frame: pd.DataFrame) -> tuple[frozenset[str], frozenset[int]] | None:
    """The declared columns (COLUMNS keys) and table checks (TABLE_CHECKS indexes) that ``frame`` may fail.

    Each is run on ``frame`` as pandera would run it, without pandera; one whose outcome is
    not plainly a pass (a failure, an exception, a result that is not plainly true or false)
    is named. None: the table is beyond this reading (repeated or non-text column names), so
    every check is in doubt.
    """
    names = list(frame.columns)
    if not all(isinstance(c, str) for c in names) or len(set(names)) != len(names):
        return None
    present = set(names)
    columns: set[str] = set()
    for key, rule in COLUMNS.items():
        if rule.regex:
            pattern = re.compile(rule.name)
            matched = [c for c in names if pattern.match(c)]
        elif rule.name in present:
            matched = [rule.name]
        else:
            if rule.required:
                columns.add(key)
            continue
        try:
            for name in matched:
                column = frame[name]
                if (
                    (not rule.nullable and column.isna().any())
                    or (rule.unique and not column.is_unique)
                    or (rule.check is not None and not _passed(rule.check(column)))
                ):
                    columns.add(key)
                    break
        except Exception:  # noqa: BLE001 - a check that raised is pandera's to report
            columns.add(key)
    table: set[int] = set()
    for i, check in enumerate(TABLE_CHECKS):
        try:
            if not _passed(check(frame)):
                table.add(i)
        except Exception:  # noqa: BLE001 - as above
            table.add(i)
    return frozenset(columns), frozenset(table)


def table_passes(frame: pd.DataFrame) -> bool:
    """True only when :func:`cases_schema` would pass ``frame``: the same checks, run without pandera.

    False means "let pandera say": a failed check, and anything this shortcut does not model
    (repeated or non-text column names, a check that raised, an outcome that is not plainly
    true or false). So a False costs a validation, never a wrong answer.
    """
    return doubtful(frame) == (frozenset(), frozenset())


def _pandera_check(fn: Callable[..., Any], name: str, error: str | None = None) -> pa.Check:
    import pandera.pandas as pa

    return pa.Check(fn, element_wise=False, ignore_na=False, name=name, error=error)


@functools.cache
def cases_schema(
    columns: frozenset[str] | None = None, table: frozenset[int] | None = None
) -> pa.DataFrameSchema:
    """The case tables' declared schema as pandera's (COLUMNS and TABLE_CHECKS), built on first use.

    Why only then: importing pandera and building the schema cost about 0.15 s of CPU, which
    a process reading only tables that pass (:func:`table_passes`) no longer pays. Given
    ``columns`` and ``table`` (:func:`doubtful`), only those declarations, in their declared
    order: pandera checks each column and table check on its own, so a table's failures
    under them are its failures under the whole schema, at the cost of the few in doubt.
    """
    import pandera.pandas as pa

    declared = {key: rule for key, rule in COLUMNS.items() if columns is None or key in columns}
    checks = [t for i, t in enumerate(TABLE_CHECKS) if table is None or i in table]
    columns_ = {
        key: pa.Column(
            None,
            checks=[_pandera_check(rule.check, rule.error, rule.error)] if rule.check is not None else None,
            nullable=rule.nullable,
            unique=rule.unique,
            required=rule.required,
            regex=rule.regex,
            name=None if rule.regex else rule.name,
        )
        for key, rule in declared.items()
    }
    return pa.DataFrameSchema(
        columns_,
        checks=[_pandera_check(t, f"{t.column}|{t.error}") for t in checks],
        strict=False,
        name="cases",
    )


def schema_failures(frame: pd.DataFrame) -> pd.DataFrame | str | None:
    """What the schema refuses in ``frame``: None when it passes, else pandera's failure cases.

    A table that passes every declaration is told so without pandera (:func:`doubtful`); one in
    doubt is validated under only the declarations in doubt (:func:`cases_schema`). A str: the
    first line of a failure lazy validation could not collect (the whole table is in doubt).
    """
    doubt = doubtful(frame)
    if doubt == (frozenset(), frozenset()):
        return None
    import pandera.errors as pa_errors

    try:
        (cases_schema() if doubt is None else cases_schema(*doubt)).validate(frame, lazy=True)
        return None
    except pa_errors.SchemaErrors as exc:
        return exc.failure_cases
    except pa_errors.SchemaError as exc:
        text = str(exc).strip()
        return (text.splitlines()[0] if text else type(exc).__name__)[:160]


def __getattr__(name: str) -> Any:
    # CASES_SCHEMA stays importable by name (tests), built on first use
    if name == "CASES_SCHEMA":
        return cases_schema()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# run.json ---------------------------------------------------------------------------------------


class RunParams(BaseModel):
    """run.json ``params`` fields that readers act on, with their JSON types; other fields pass through.

    Why declared: the shard merge compares ``evidence`` across shards and the report draws a
    matrix's ``controls``; a shard saying evidence ``bogus`` or controls as a list was merged,
    and the report ended in a traceback on it.
    """

    model_config = ConfigDict(extra="allow", strict=True)

    evidence: Literal[EVIDENCE_LEVELS] | None = None  # type: ignore[valid-type]
    controls: dict[str, Any] | None = None
    shard: dict[str, Any] | None = None
    not_run: list[Any] | None = None


class RunMeta(BaseModel):
    """run.json's fields that readers rely on, with their JSON types; other fields pass through.

    Why a model: a run.json whose ``cases`` is a number or whose ``params`` is a string must
    be named as damaged, not read as "no cases" or crash a reader deep inside.
    """

    model_config = ConfigDict(extra="allow", strict=True, populate_by_name=True)

    schema_: StrictInt = Field(alias="schema")
    status: StrictStr | None = None
    run_id: StrictStr | None = None
    kind: StrictStr | None = None
    started_at: StrictStr | None = None
    finished_at: StrictStr | None = None
    git_commit: StrictStr | None = None
    cases: list[StrictStr] | None = None
    impls: list[StrictStr] | None = None
    params: RunParams | None = None
    matrix: dict[str, Any] | None = None
    host: dict[str, Any] | None = None
    versions: dict[str, Any] | None = None
    endpoints: dict[str, Any] | None = None
    calibration: dict[str, Any] | None = None


#: pydantic's error type -> the JSON type it wanted, as a person reads it
JSON_KIND = {
    "list_type": "list", "dict_type": "dict", "string_type": "str", "int_type": "int",
    "model_type": "dict", "model_attributes_type": "dict",
}  # fmt: skip


def non_finite(value: Any, path: str = "", limit: int = 3) -> list[tuple[str, float]]:
    """(field path, value) of the numbers in parsed JSON that are NaN or infinite (``1e999`` parses as inf).

    Why: run.json's figures (timings, load, calibration floors) are read as figures; bench
    never writes NaN or Infinity there, so one is damage, named by its path (``timing.wall_s``).
    """
    found: list[tuple[str, float]] = []
    stack: list[tuple[str, Any]] = [(path, value)]
    while stack and len(found) < limit:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            found.append((where or "(top)", item))
        elif isinstance(item, dict):
            stack.extend((f"{where}.{k}" if where else str(k), v) for k, v in reversed(list(item.items())))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", v) for i, v in reversed(list(enumerate(item))))
    return found


# the files a folder must hold -------------------------------------------------------------------

#: Each case's histograms: ``hist/<case>.json``, in every results folder (runs, matrices, baselines).
CASE_HISTOGRAMS = "hist/{case}.json"
#: Every trial of an impl x workload merged: ``hist/<group>.merged.json``, in a finished ``bench run``
#: (and its baseline); a matrix writes none.
MERGED_HISTOGRAMS = "hist/{group}.merged.json"
#: Each case's history: ``history/<case>.parquet``, in a run or matrix folder; a baseline keeps none.
CASE_HISTORY = "history/{case}.parquet"
#: The checkers' witnesses of a failed case: ``violations/<case>.parquet`` (bench/run/witnesses.py); optional,
#: never required: a case that failed no checker has none, and folders written before they were kept have
#: no ``violations/`` at all (the report then says no witnesses were recorded).
CASE_VIOLATIONS = "violations/{case}.parquet"
#: Every server's own log, copied when its servers stop, a start fails or one dies; never required (a
#: user's servers have none): ``logs/servers/<server>.log`` in a run, ``logs/servers/<lane>/<server>.log``
#: in a matrix, ``<server>.start-failed-<n>.log`` and ``<server>.died-<n>.log`` for a failed start, a death.
SERVER_LOGS = "logs/servers"


def required_files(meta: dict[str, Any], cases: list[str], baseline: bool) -> dict[str, tuple[str, ...]]:
    """The files a folder must hold for its rows: {path inside the folder: the case ids resting on it}.

    Why declared here: a missing file was never checked, so a folder without ``hist/`` passed
    the gate; this says which files each kind of folder holds (see the three patterns above).
    """
    out: dict[str, tuple[str, ...]] = {}
    for case in cases:
        out[CASE_HISTOGRAMS.format(case=case)] = (case,)
        if not baseline:
            out[CASE_HISTORY.format(case=case)] = (case,)
    # a matrix and an explore folder (bench explore: each run of a schedule is its own case) merge no trials
    if meta.get("kind") not in ("matrix", "explore") and meta.get("status") in (
        "complete",
        "complete-with-failures",
    ):
        groups: dict[str, list[str]] = {}
        for case in cases:
            groups.setdefault(trial_group(case), []).append(case)
        for group, members in groups.items():
            out[MERGED_HISTOGRAMS.format(group=group)] = tuple(members)
    return out
