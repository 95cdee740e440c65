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

import gc
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (reference counting still frees everything the page drops).

    Why: a matrix page holds hundreds of thousands of small objects (rows as dicts, lines as
    lists), and the collector walked them all again and again while the page was built, a
    tenth of its time; what it found was a few thousand objects out of millions.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def group_of(case: str) -> str:
    """The impl x scenario a case belongs to: its id without the ``__t<N>`` trial suffix."""
    return _TRIAL_SUFFIX.sub("", case)


@dataclass(frozen=True)
class AcquireRows:
    """A case's acquire rows as numpy columns, in the history's order: what the over-time chart and the
    fairness figures compute from.

    Why not a DataFrame: a matrix has 333 cases of 2 million rows in all, and turning each file's
    text columns into pandas (then comparing them row by row) cost more than the figures.
    """

    client: np.ndarray  #: int64 code per row, the same code for the same client; -1 where absent
    seq: np.ndarray  #: int64
    invoke: np.ndarray  #: bool: type == "invoke"
    ok: np.ndarray  #: bool: type == "ok"
    t_ns: np.ndarray  #: int64

    @classmethod
    def from_frame(cls, history: pd.DataFrame) -> AcquireRows:
        """From history rows (client, seq, op, type, t_ns); rows of other ops are left out."""
        acq = history[(history["op"] == "acquire").to_numpy(dtype=bool)]
        return cls(
            client=pd.factorize(acq["client"])[0].astype(np.int64),
            seq=acq["seq"].to_numpy(dtype=np.int64),
            invoke=(acq["type"] == "invoke").to_numpy(dtype=bool),
            ok=(acq["type"] == "ok").to_numpy(dtype=bool),
            t_ns=acq["t_ns"].to_numpy(dtype=np.int64),
        )

    def client_counts(self) -> list[int]:
        """Successful acquires per client, clients in order of their first acquire row; those never granted count 0."""
        if not len(self.client):
            return []
        codes, first = np.unique(self.client, return_index=True)
        order = codes[np.argsort(first, kind="stable")]
        granted = self.client[self.ok & (self.client >= 0)]
        per_code = np.bincount(granted, minlength=int(codes.max()) + 1) if len(granted) else None
        return [int(per_code[c]) if per_code is not None and c >= 0 else 0 for c in order]


@dataclass(frozen=True)
class EventRows:
    """A case's fault, pause and crash rows as plain lists, in the history's order (the over-time chart's marks).

    Why not a DataFrame: most of a matrix's cases have a few such rows, and a DataFrame per case
    cost more than pairing them.
    """

    op: list[str]
    type: list[str]
    client: list[str]
    seq: list[str]
    lock: list[str]  #: "" where the row names none
    t_ns: list[int]

    @classmethod
    def from_frame(cls, events: pd.DataFrame) -> EventRows:
        """From history rows (client, seq, op, type, lock, t_ns)."""
        return cls(
            op=events["op"].astype(str).tolist(),
            type=events["type"].astype(str).tolist(),
            client=events["client"].astype(str).tolist(),
            seq=events["seq"].astype(str).tolist(),
            lock=["" if pd.isna(v) else str(v) for v in events["lock"].tolist()],
            t_ns=[int(t) for t in events["t_ns"].tolist()],
        )

    def ordered(self) -> tuple[list[str], list[str], list[str], list[str], list[str], list[int]]:
        """(op, type, client, seq, lock, t_ns) sorted by time, rows at the same time in their order."""
        order = sorted(range(len(self.t_ns)), key=self.t_ns.__getitem__)
        columns = (self.op, self.type, self.client, self.seq, self.lock, self.t_ns)
        return tuple([c[i] for i in order] for c in columns)  # type: ignore[return-value]


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
    _acquires: dict[str, AcquireRows | None] = field(default_factory=dict, repr=False)
    _event_rows: dict[str, EventRows | None] = field(default_factory=dict, repr=False)
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
            rows = self.acquires(case)
            self._client_counts[case] = rows.client_counts() if rows is not None and len(rows.t_ns) else None
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

    def acquires(self, case: str) -> AcquireRows | None:
        """The case's acquire rows as numpy columns, read once per report; None (with a note) without a history."""
        if case not in self._acquires:
            self._read_both(case)
        if case not in self._acquires:
            # an older or odd file: the DataFrame reader, its notes
            history = self.history(case, HISTORY_COLUMNS)
            self._acquires[case] = None if history is None else AcquireRows.from_frame(history)
        return self._acquires[case]

    def _read_both(self, case: str) -> None:
        """The acquire rows and the fault, pause and crash rows in one read of the file (the over-time chart needs both).

        Only where the file has every column of both; otherwise each is read on its own, with its own note.
        """
        path = self._case_file("history", case, ".parquet")
        if path is None or case in self._acquires:
            return
        try:
            import pyarrow as pa
            import pyarrow.compute as pc
            import pyarrow.parquet as pq

            parquet = pq.ParquetFile(path, read_dictionary=["client", "op", "type", "lock"])
            if not set(EVENT_COLUMNS) <= set(parquet.schema_arrow.names):
                return
            # One thread, no dataset filter, text columns as dictionaries, acquires straight to
            # numpy: a matrix report reads 333 files of 2 million rows in all, and the dataset API,
            # the thread pool and a Python string per cell were most of its over-time chart's time.
            both = (
                parquet.read(columns=EVENT_COLUMNS, use_threads=False).unify_dictionaries().combine_chunks()
            )
            is_acquire = pc.fill_null(pc.equal(both["op"], "acquire"), False)
            acq = both.filter(is_acquire)
            seq, t_ns = acq["seq"], acq["t_ns"]
            if seq.null_count or t_ns.null_count:
                return  # the DataFrame reader says what it makes of them
            client = acq["client"].combine_chunks() if acq.num_rows else None
            kind = acq["type"]
            acquires = AcquireRows(
                client=np.zeros(0, np.int64)
                if client is None
                else pc.fill_null(client.indices, -1).to_numpy(zero_copy_only=False).astype(np.int64),
                seq=seq.to_numpy().astype(np.int64, copy=False),
                invoke=pc.fill_null(pc.equal(kind, "invoke"), False).to_numpy(zero_copy_only=False),
                ok=pc.fill_null(pc.equal(kind, "ok"), False).to_numpy(zero_copy_only=False),
                t_ns=t_ns.to_numpy().astype(np.int64, copy=False),
            )
            rest = both.filter(pc.fill_null(pc.is_in(both["op"], pa.array(EVENT_OPS)), False))
            columns = {c: rest[c].to_pylist() for c in EVENT_COLUMNS}
            if None in columns["t_ns"]:
                return
            event_rows = EventRows(
                op=[str(v) for v in columns["op"]],
                type=[str(v) for v in columns["type"]],
                client=[str(v) for v in columns["client"]],
                seq=[str(v) for v in columns["seq"]],
                lock=["" if v is None else str(v) for v in columns["lock"]],
                t_ns=columns["t_ns"],
            )
        except Exception:  # noqa: BLE001 - the reads on their own name what is wrong
            return
        self._acquires[case] = acquires
        self._event_rows[case] = event_rows

    def event_rows(self, case: str) -> EventRows | None:
        """The case's fault, pause and crash rows (client, seq, op, type, lock, t_ns) as lists, read once.

        None, without a note, when the history is absent or older than these ops: the
        acquire history already says so where it matters.
        """
        if case not in self._event_rows:
            if case not in self._acquires:
                self._read_both(case)
            if case not in self._event_rows:
                # an older or odd file: the DataFrame reader
                frame = self.history(case, EVENT_COLUMNS, ops=EVENT_OPS, quiet=True)
                self._event_rows[case] = None if frame is None else EventRows.from_frame(frame)
        return self._event_rows[case]

    @property
    def has_witnesses(self) -> bool:
        """Whether judging kept the checkers' witnesses in this folder (``violations/``; older folders have none)."""
        return (self.path / "violations").is_dir()

    def violations(self, case: str) -> Any:
        """``violations/<case>.parquet`` as an Arrow table (``pyarrow.Table``): the holds of each violation
        the checkers found, or None when none. Arrow, not pandas: the timeline sorts and slices it as arrays."""
        path = self._case_file("violations", case, ".parquet")
        if path is None:
            return None
        try:
            import pyarrow.parquet as pq

            return pq.read_table(path)
        except Exception as exc:  # noqa: BLE001 - a damaged file is named, never fatal to the page
            self.damaged.append(f"violations/{case}.parquet: {exc}")
            return None

    def history(
        self, case: str, columns: list[str], ops: tuple[str, ...] = ("acquire",), quiet: bool = False
    ) -> pd.DataFrame | None:
        """The case's history restricted to ``columns`` and rows of ``ops``, or None with a note."""
        path = self._history_file(case, columns, quiet)
        if path is None:
            return None
        try:
            return pd.read_parquet(path, columns=columns, filters=[("op", "in", list(ops))])
        except Exception as exc:  # noqa: BLE001 - a damaged parquet file must not stop the report
            self.notes.append(f"case {case}: history/{case}.parquet unreadable ({type(exc).__name__})")
            return None

    def history_table(self, case: str, columns: list[str], ops: tuple[str, ...]) -> Any:
        """:meth:`history` as an Arrow table (``pyarrow.Table``), in the file's order, or None (quietly).

        Why: the violation timeline turns the rows into plain arrays at once; going through pandas
        first cost it a third of its reading time on a matrix (1.1 million rows for 94 cases).
        """
        path = self._history_file(case, columns, quiet=True)
        if path is None:
            return None
        try:
            import pyarrow as pa
            import pyarrow.compute as pc
            import pyarrow.parquet as pq

            table = pq.read_table(path, columns=columns)
            return table.filter(pc.is_in(table["op"], value_set=pa.array(list(ops), pa.string())))
        except Exception as exc:  # noqa: BLE001 - a damaged parquet file must not stop the report
            self.notes.append(f"case {case}: history/{case}.parquet unreadable ({type(exc).__name__})")
            return None

    def _history_file(self, case: str, columns: list[str], quiet: bool) -> Path | None:
        """history/<case>.parquet when it exists and has ``columns``, else None (with a note unless quiet)."""
        path = self._case_file("history", case, ".parquet")
        if path is None:
            if not quiet:
                self.notes.append(f"case {case}: no history/{case}.parquet, not in the over-time chart")
            return None
        try:
            import pyarrow.parquet as pq

            present = set(pq.read_schema(path).names)
        except Exception as exc:  # noqa: BLE001 - a damaged parquet file must not stop the report
            self.notes.append(f"case {case}: history/{case}.parquet unreadable ({type(exc).__name__})")
            return None
        missing = [c for c in columns if c not in present]
        if missing:
            if not quiet:
                self.notes.append(f"case {case}: history lacks columns {', '.join(missing)}")
            return None
        return path


def load_run(path: Path) -> RunData:
    """Read a results folder with the one results reader (resultsio); ReportInputError if it is not a run.

    Damage the reader finds leaves the run readable: it goes to ``RunData.damaged`` (the red
    banner), and every row resting on it reads verdict ``unknown`` with the reason
    ``damaged: ...`` (``Results.marked``), so no section can call it safe. Only a folder with
    nothing to read (no run.json, run.json not JSON or of another schema, no case table)
    raises.
    """
    with gc_paused():
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
