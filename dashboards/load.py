"""Reading one lockbench results folder (run.json, cases.csv, hist/, history/) for the report.

Files only: the renderer never imports bench, workloads, infra or lockimpls, so a report can
be rebuilt from a copied results folder on a machine that has none of the servers. The
folder is read and checked by ``resultsio.read_results``, the reader the gate, history and
the shard merge use too (one schema, so they cannot disagree about damage). Anything
optional that is missing becomes ``None`` plus a note shown on the page. Data that is there
but damaged is listed in ``RunData.damaged`` and shown in a red banner at the top of the
page, and the rows resting on it read verdict ``unknown`` with the reason ``damaged: ...``:
the report is partial but usable and never calls a damaged case safe. A folder with nothing
to read (no run.json, run.json that is not JSON or of another schema, no case table) raises
:class:`ReportInputError` naming the file.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from hdrh.histogram import HdrHistogram

from resultsio import parse_json, read_results

HISTOGRAMS = ("acquire_ok", "acquire_timeout", "release", "hold", "cs")
#: Columns that tell cases apart; the ones that vary across a run go into case labels.
DIMENSIONS = ("impl", "backend", "workload", "scenario", "users", "processes", "trial")
_TRIAL_SUFFIX = re.compile(r"__t\d+$")
#: History columns the report reads (acquire rows only): over-time series and fairness.
HISTORY_COLUMNS = ["client", "seq", "op", "type", "t_ns"]
#: History ops that mark what was done to a case: server fault windows, paused holders, killed holders.
EVENT_OPS = ("fault", "pause", "crash")
EVENT_COLUMNS = ["client", "seq", "op", "type", "lock", "t_ns"]


def group_of(case: str) -> str:
    """The impl x scenario a case belongs to: its id without the ``__t<N>`` trial suffix."""
    return _TRIAL_SUFFIX.sub("", case)


class ReportInputError(Exception):
    """A folder the renderer cannot read as a lockbench run; the message is one line for the user."""


@dataclass
class RunData:
    """One run as read from its folder, so every section of the page reads the files once."""

    path: Path
    meta: dict[str, Any]
    cases: pd.DataFrame
    notes: list[str] = field(default_factory=list)
    #: damaged data found while loading: "<file>: what is wrong" (shown in a banner)
    damaged: list[str] = field(default_factory=list)
    _hists: dict[str, dict[str, HdrHistogram | None]] = field(default_factory=dict, repr=False)
    _encoded: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    _bases: dict[str, Path] = field(default_factory=dict, repr=False)
    _extras: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    _histories: dict[str, pd.DataFrame | None] = field(default_factory=dict, repr=False)
    _events: dict[str, pd.DataFrame | None] = field(default_factory=dict, repr=False)
    _merged: dict[str, dict[str, HdrHistogram | None]] = field(default_factory=dict, repr=False)
    _groups: dict[str, pd.DataFrame] | None = field(default=None, repr=False)
    _rows: dict[Any, dict[str, Any]] | None = field(default=None, repr=False)
    _numeric: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _positions: dict[str, np.ndarray] | None = field(default=None, repr=False)
    _client_counts: dict[str, list[int] | None] = field(default_factory=dict, repr=False)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def status(self) -> str:
        return str(self.meta.get("status", "unknown"))

    def case_ids(self) -> list[str]:
        return [str(c) for c in self.cases["case"]]

    def missing_cases(self) -> list[str]:
        """Cases run.json planned that have no row in cases.csv (not finished)."""
        planned = self.meta.get("cases")
        if not isinstance(planned, list):
            return []
        done = set(self.case_ids())
        return [str(c) for c in planned if str(c) not in done]

    def _case_file(self, sub: str, case: str, suffix: str) -> Path | None:
        if sub not in self._bases:
            self._bases[sub] = (self.path / sub).resolve()
        base = self._bases[sub]
        name = f"{case}{suffix}"
        # A case id is data from a file: never let it point outside the run folder. A plain
        # name is checked without resolving (two realpath walks a file, thousands on a matrix).
        plain = "/" not in name and "\\" not in name and name not in (".", "..")
        candidate = base / name if plain and not (base / name).is_symlink() else (base / name).resolve()
        if candidate.parent != base:
            return None
        return candidate if candidate.is_file() else None

    def _hist_file(self, case: str) -> dict[str, Any]:
        """hist/<case>.json read once: its encoded histograms by name (decoded on demand) and its other fields."""
        if case not in self._encoded:
            encoded: Any = {}
            path = self._case_file("hist", case, ".json")
            if path is None:
                self.notes.append(f"case {case}: no hist/{case}.json, latency columns from cases.csv only")
            else:
                try:
                    data = parse_json(path.read_bytes())
                    encoded = data.get("histograms", {})
                    self._extras[case] = {k: v for k, v in data.items() if k != "histograms"}
                except (OSError, ValueError, AttributeError) as exc:
                    self.notes.append(f"case {case}: hist/{case}.json unreadable ({exc})")
            self._encoded[case] = {str(k): v for k, v in encoded.items()} if isinstance(encoded, dict) else {}
            self._hists[case] = dict.fromkeys(HISTOGRAMS)
        return self._encoded[case]

    def _decoded(self, case: str, name: str) -> HdrHistogram | None:
        """One histogram of a case, decoded the first time it is asked for (a matrix page needs few of the five)."""
        encoded = self._hist_file(case)
        decoded = self._hists[case]
        if name in encoded:
            b64 = encoded.pop(name)
            try:
                decoded[name] = HdrHistogram.decode(b64)
            except Exception as exc:  # noqa: BLE001 - hdrh raises assorted errors on bad input
                decoded[name] = None
                self.notes.append(f"case {case}: histogram {name} undecodable ({type(exc).__name__})")
        return decoded.get(name)

    def histograms(self, case: str) -> dict[str, HdrHistogram | None]:
        """The decoded HDR histograms of a case by name; absent or undecodable ones are None."""
        for name in list(self._hist_file(case)):
            self._decoded(case, name)
        return self._hists[case]

    def histogram(self, case: str, name: str) -> HdrHistogram | None:
        """A non-empty histogram, or None when it is absent or holds no samples."""
        hist = self._decoded(case, name)
        return hist if hist is not None and hist.get_total_count() > 0 else None

    def extra(self, case: str) -> dict[str, Any]:
        """The non-histogram fields of hist/<case>.json (server_commands, lock_stats, ...)."""
        self._hist_file(case)
        return self._extras.get(case, {})

    def groups(self) -> dict[str, pd.DataFrame]:
        """Rows of cases.csv per impl x scenario (the trials of one case), in first-seen order."""
        if self.cases.empty:
            return {}
        # computed once: the page asks for every group's values many times (a matrix run has hundreds)
        if self._groups is None:
            keys = self.cases["case"].astype(str).map(group_of)
            self._groups = {str(g): rows for g, rows in self.cases.groupby(keys, sort=False)}
        return self._groups

    def rows(self, frame: pd.DataFrame) -> list[dict[str, Any]]:
        """Rows of ``cases`` (a slice of it, its values unchanged) as plain dicts, as ``to_dict("records")`` gives them.

        Why: ``to_dict`` costs about 15 ms a call on ~140 columns whatever the rows, and the
        sections of a matrix page called it on every group (hundreds of calls, most of their
        time); the whole table is converted once here and each slice is picked by its index.
        """
        if self._rows is None:
            self._rows = dict(zip(self.cases.index, self.cases.to_dict("records"), strict=True))
        return [self._rows[i] for i in frame.index]

    def values(self, group: str, column: str) -> list[float]:
        """The finite per-trial values of ``column`` in ``group``."""
        if column not in self.cases.columns:
            return []
        if self._positions is None:
            where = {i: n for n, i in enumerate(self.cases.index)}
            self._positions = {
                g: np.fromiter((where[i] for i in rows.index), dtype=np.int64, count=len(rows))
                for g, rows in self.groups().items()
            }
        positions = self._positions.get(group)
        if positions is None:
            return []
        if column not in self._numeric:
            # the whole column converted once: a matrix page asks for hundreds of groups' values of
            # each column, and pd.to_numeric costs about 0.1 ms a call whatever the rows
            self._numeric[column] = pd.to_numeric(self.cases[column], errors="coerce").to_numpy(
                dtype="float64", na_value=np.nan
            )
        return [float(v) for v in self._numeric[column][positions] if not math.isnan(v)]

    def client_counts(self, case: str) -> list[int] | None:
        """Successful acquires per client of one case (clients that never got the lock count 0), computed once.

        None when the case has no acquire history. The fairness figure, the fairness table and
        the decision section each want them, for every case of a matrix.
        """
        if case not in self._client_counts:
            history = self.acquire_history(case)
            if history is None or history.empty:
                self._client_counts[case] = None
            else:
                self._client_counts[case] = [int(v) for v in acquisitions_per_client(history)]
        return self._client_counts[case]

    def merged_histogram(self, group: str, name: str) -> HdrHistogram | None:
        """All trials of a group in one histogram: hist/<group>.merged.json, else the trials added up."""
        cached = self._merged.setdefault(group, {})
        if name in cached:
            return cached[name]
        merged: HdrHistogram | None = None
        path = self._case_file("hist", group, ".merged.json")
        if path is not None:
            try:
                text = parse_json(path.read_bytes()).get("histograms", {}).get(name)
                merged = HdrHistogram.decode(text) if text else None
            except Exception:  # noqa: BLE001 - fall back to adding the trials up
                merged = None
        if merged is None:
            rows = self.groups().get(group)
            cases = [] if rows is None else [str(c) for c in rows["case"]]
            found = [h for h in (self.histogram(case, name) for case in cases) if h is not None]
            if len(found) == 1:
                # one trial (most of a matrix's groups): that histogram is the sum, no 23,000-count copy
                cached[name] = found[0]
                return found[0]
            for hist in found:
                if merged is None:
                    merged = HdrHistogram(
                        hist.lowest_trackable_value, hist.highest_trackable_value, hist.significant_figures
                    )
                merged.add(hist)
        if merged is not None and merged.get_total_count() == 0:
            merged = None
        cached[name] = merged
        return merged

    def acquire_history(self, case: str) -> pd.DataFrame | None:
        """The case's acquire rows (client, seq, op, type, t_ns), read once per report."""
        if case not in self._histories:
            self._read_both(case)
        if case not in self._histories:
            self._histories[case] = self.history(case, HISTORY_COLUMNS)
        return self._histories[case]

    def _read_both(self, case: str) -> None:
        """The acquire rows and the fault, pause and crash rows in one read of the file (the over-time chart needs both).

        Only where the file has every column of both; otherwise each is read on its own, with its own note.
        """
        path = self._case_file("history", case, ".parquet")
        if path is None or case in self._events:
            return
        try:
            import pyarrow as pa
            import pyarrow.compute as pc
            import pyarrow.parquet as pq

            parquet = pq.ParquetFile(path, read_dictionary=["client", "op", "type", "lock"])
            if not set(EVENT_COLUMNS) <= set(parquet.schema_arrow.names):
                return
            # One thread, no dataset filter, text columns as dictionaries (pandas categoricals): a
            # matrix report reads 333 files of 2 million rows in all, and the dataset API, the
            # thread pool and a Python string per cell were most of the time its over-time chart took.
            both = parquet.read(columns=EVENT_COLUMNS, use_threads=False)
            is_acquire = pc.equal(both["op"], "acquire")
            acquires = both.filter(is_acquire).select(HISTORY_COLUMNS).to_pandas()
            rest = both.filter(pc.invert(is_acquire))
            rest = rest.filter(pc.is_in(rest["op"], pa.array(EVENT_OPS)))
            events = rest.to_pandas() if rest.num_rows else pd.DataFrame(columns=EVENT_COLUMNS)
        except Exception:  # noqa: BLE001 - the reads on their own name what is wrong
            return
        self._histories[case] = acquires
        self._events[case] = events

    def events(self, case: str) -> pd.DataFrame | None:
        """The case's fault, pause and crash rows (client, seq, op, type, lock, t_ns), read once.

        None, without a note, when the history is absent or older than these ops: the
        acquire history already says so where it matters.
        """
        if case not in self._events and case not in self._histories:
            self._read_both(case)
        if case not in self._events:
            self._events[case] = self.history(case, EVENT_COLUMNS, ops=EVENT_OPS, quiet=True)
        return self._events[case]

    @property
    def has_witnesses(self) -> bool:
        """Whether judging kept the checkers' witnesses in this folder (``violations/``; older folders have none)."""
        return (self.path / "violations").is_dir()

    def violations(self, case: str) -> pd.DataFrame | None:
        """``violations/<case>.parquet``: the holds of each violation the checkers found, or None when none."""
        path = self._case_file("violations", case, ".parquet")
        if path is None:
            return None
        try:
            return pd.read_parquet(path)
        except Exception as exc:  # noqa: BLE001 - a damaged file is named, never fatal to the page
            self.damaged.append(f"violations/{case}.parquet: {exc}")
            return None

    def history(
        self, case: str, columns: list[str], ops: tuple[str, ...] = ("acquire",), quiet: bool = False
    ) -> pd.DataFrame | None:
        """The case's history restricted to ``columns`` and rows of ``ops``, or None with a note."""
        path = self._case_file("history", case, ".parquet")
        if path is None:
            if not quiet:
                self.notes.append(f"case {case}: no history/{case}.parquet, not in the over-time chart")
            return None
        try:
            import pyarrow.parquet as pq

            present = set(pq.read_schema(path).names)
            missing = [c for c in columns if c not in present]
            if missing:
                if not quiet:
                    self.notes.append(f"case {case}: history lacks columns {', '.join(missing)}")
                return None
            return pd.read_parquet(path, columns=columns, filters=[("op", "in", list(ops))])
        except Exception as exc:  # noqa: BLE001 - a damaged parquet file must not stop the report
            self.notes.append(f"case {case}: history/{case}.parquet unreadable ({type(exc).__name__})")
            return None


def acquisitions_per_client(history: pd.DataFrame) -> pd.Series:
    """Successful acquires per client; clients that tried and never got the lock count 0."""
    tried = pd.unique(history["client"])
    got = history.loc[(history["op"] == "acquire") & (history["type"] == "ok"), "client"]
    return got.value_counts().reindex(tried, fill_value=0)


def load_run(path: Path) -> RunData:
    """Read a results folder with the one results reader (resultsio); ReportInputError if it is not a run.

    Damage the reader finds leaves the run readable: it goes to ``RunData.damaged`` (the red
    banner), and every row resting on it reads verdict ``unknown`` with the reason
    ``damaged: ...`` (``Results.marked``), so no section can call it safe. Only a folder with
    nothing to read (no run.json, run.json not JSON or of another schema, no case table)
    raises.
    """
    results = read_results(path)
    if results.fatal:
        raise ReportInputError(str(results.fatal[0]))
    run = RunData(path=Path(path), meta=results.meta, cases=results.marked())
    run.damaged = [str(p) for p in results.problems]
    return run


def num(row: pd.Series | dict[str, Any], column: str) -> float | None:
    """A numeric cell as float, or None when the column is absent, empty or not a number."""
    value = row.get(column) if hasattr(row, "get") else None
    if value is None or value is pd.NA:
        return None
    try:
        result = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(result) else result


def text(row: pd.Series | dict[str, Any], column: str) -> str | None:
    """A text cell as str, or None when absent or empty."""
    value = row.get(column) if hasattr(row, "get") else None
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return str(value)


def scenario_of(row: pd.Series | dict[str, Any]) -> str:
    """What a case put the lock through (``long-cs+fenced``); runs older than scenarios give the workload."""
    return text(row, "scenario") or text(row, "workload") or "n/a"


#: Scenario suffixes bench appends for ``--fencing both`` (observe = unfenced, enforce = fenced).
VARIANTS = ("unfenced", "fenced")


def split_scenario(scenario: str) -> tuple[str, str]:
    """('long-cs+restart@held', 'fenced') from 'long-cs+restart@held+fenced'; variant '' when unsuffixed."""
    base, sep, last = scenario.rpartition("+")
    if sep and base and last in VARIANTS:
        return base, last
    return scenario, ""


def flag(row: pd.Series | dict[str, Any], column: str) -> bool | None:
    """A boolean cell (True/False, 1/0, as bench or pandas wrote it), or None when absent or unreadable."""
    value = text(row, column)
    if value is None:
        return None
    lowered = value.strip().lower()
    if lowered in ("true", "1", "1.0", "yes"):
        return True
    if lowered in ("false", "0", "0.0", "no"):
        return False
    return None


def case_labels(cases: pd.DataFrame) -> dict[str, str]:
    """Short unique label per case: the impl plus whichever dimensions vary in this run."""
    varying = [c for c in DIMENSIONS if c in cases.columns and cases[c].nunique(dropna=False) > 1]
    if "scenario" in varying and "workload" in varying:
        # A scenario starts with its workload ("long-cs+fenced"): the workload adds nothing.
        varying.remove("workload")
    if "impl" in cases.columns:
        # Impl ids start with their backend ("redis.setnx"), so the backend adds nothing.
        varying = ["impl"] + [c for c in varying if c not in ("impl", "backend")]
    labels: dict[str, str] = {}
    for row in cases.to_dict("records"):
        case = str(row["case"])
        parts = []
        for col in varying:
            value = text(row, col)
            if value is None:
                continue
            plain = col in ("impl", "backend", "workload", "scenario")
            parts.append(value if plain else f"{col}={_plain(value)}")
        labels[case] = " ".join(parts) or case
    if len(set(labels.values())) < len(labels):
        return {case: f"{label} [{case}]" for case, label in labels.items()}
    return labels


def _plain(value: str) -> str:
    """'10.0' -> '10' for integer dimensions that pandas read as floats."""
    try:
        number = float(value)
    except ValueError:
        return value
    return str(int(number)) if number.is_integer() else value
