"""The violation timeline: for every failed case, the interleaving that failed, drawn from its history.

A red cell asks the reader to believe a lock is unsafe; this section shows *how*, as Jepsen's
timeline does: the two clients that held one lock at once (or the grants whose tokens went
backwards), what each was doing, what the fault was doing then, and where the first holder's
lease or session ran out. Per failed case, around its first violation (a chooser picks the
others, up to :data:`MAX_VIOLATIONS`):

* one lane per client involved (the two holders first), acquire attempts, holds and releases
  as bars, each grant's fencing token, the resource's accepted and refused writes;
* the strike: server-fault windows (``fault`` rows of client ``bench``), the holder's pause,
  the killed process's death;
* where each hold's lease or session ended (grant + the case's TTL from run.json);
* the loop lag of each lane's process (hist/<case>.json ``workers``), in the lane's label;
* where clients ran on several hosts, the clock bound of each grant as an error bar: within
  it the order of two events is uncertain, and the caption says so.

Only the window around each violation is embedded (a few KB per view, in a JSON block); a
view is drawn with the page's one plotly.js when its block scrolls into view or is chosen,
so a matrix with many red cells stays fast. Each case's block has the anchor
``timeline-<case id>`` (:func:`anchor`) that the safety grid's red cells and the decision
table link to. The dashboards read files only (docs/architecture.md), and decide nothing: each
violation and its holds come from the checkers' own witnesses, which judging wrote to
``violations/<case>.parquet`` (bench/run/witnesses.py), so the red cell and its timeline name
the same pair of holds. Only what is drawn around them (acquire attempts, releases, writes,
strikes, pauses, deaths) is read from the history. A folder written before the checkers kept
their witnesses has no ``violations/``: its failed cases say so instead of a drawing.
"""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dashboards.html_bits import VIOLATIONS, e
from dashboards.load import RunData, num, scenario_of, split_scenario, text

#: History rows the timeline reads (every other op is left on disk).
OPS = ("acquire", "release", "purchase", "witness", "fault", "crash", "pause", "fault-hold", "service")
COLUMNS = ["client", "seq", "op", "type", "lock", "t_ns", "token", "value", "error"]
#: Violations per case a reader can choose between.
MAX_VIOLATIONS = 5
#: Client lanes per view: the two holders, then the busiest others in the window.
MAX_LANES = 6
#: Padding around the violation: this share of its span on each side, at least MIN_PAD_NS.
PAD_SHARE = 0.1
MIN_PAD_NS = 20_000_000
#: how far before a grant its acquire's invoke is looked for: the last second first (nearly every
#: grant), then as long as a blocking acquire may wait. On P's largest history a minute (9,192 rows)
#: took 0.35 ms a hold, the last second (135 rows) 0.016 ms: 22x (load average 0.96, 2026-12-06)
SENT_LOOKBACK_NS = (1_000_000_000, 60_000_000_000)
#: A process whose loop ran more than 2 ms late this share of the time "stalled" (fidelity's limit).
LATE_SHARE_LIMIT = 0.25
#: Counters that make a case "failed" beside its verdict.
FAILURE_COUNTERS = (*VIOLATIONS, "fencing_order_violations", "stale_writes_accepted", "legit_writes_refused")
COLOURS = ("#c0392b", "#2563eb", "#7c8796", "#9aa5b1", "#b0b8c2", "#c4cad2")


def anchor(case: str) -> str:
    """The element id of a case's timeline block (``timeline-<case id>``): what red cells link to."""
    return f"timeline-{case}"


def has_timeline(row: dict[str, Any] | pd.Series) -> bool:
    """Whether the report draws a timeline for this case row (a failed case)."""
    if text(row, "verdict") == "invalid":
        return True
    return any((num(row, c) or 0) > 0 for c in FAILURE_COUNTERS)


@dataclass(frozen=True)
class Hold:
    """One outermost hold, as the checker's witness file gives it: who, which lock, from when to when, its token."""

    client: str
    lock: str
    start_ns: int
    end_ns: int
    token: float
    open: bool

    @property
    def key(self) -> tuple[str, str, int]:
        """What names a hold: its client, lock and grant. Not ``==``: an unfenced hold's token is NaN,
        which equals nothing, so a hold compared field by field is not even equal to itself."""
        return (self.client, self.lock, self.start_ns)


@dataclass(frozen=True)
class Violation:
    """Two holds that should not have been what they were, as a checker found them (``second`` the wrong one).

    A lost lock that nobody took meanwhile has one hold: ``first`` and ``second`` are the same.
    """

    kind: str  # "overlap" | "tokens" | "witness" | "lost-lock" | "stale-write"
    first: Hold
    second: Hold
    at_ns: int


# the checkers' violations -----------------------------------------------------------------


def _strings(table: Any, name: str, missing: str = "<NA>") -> np.ndarray:
    """A text column of an Arrow table as Python strings; a missing value reads ``missing`` ("<NA>",
    as pandas wrote it before the timeline read Arrow)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.fill_null(table[name].cast(pa.string()), missing).to_numpy(zero_copy_only=False)


class Holds:
    """The holds of one violation's lock around it, as arrays sorted by (lock, start), from the witness file.

    Only the holds a view draws become :class:`Hold` objects. Why arrays sliced from one sort of
    the whole file: a matrix's report reads about 1,700 violations, and sorting and converting
    each one's rows apart was a fifth of the section's time.
    """

    FIELDS = ("client", "lock", "start", "end", "token", "open", "role")

    def __init__(self, **arrays: np.ndarray) -> None:
        self.client, self.lock, self.role = arrays["client"], arrays["lock"], arrays["role"]
        self.start, self.end = arrays["start"], arrays["end"]
        self.token, self.open = arrays["token"], arrays["open"]

    @classmethod
    def of(cls, table: Any) -> Holds:
        """Every row of a witness file (a ``pyarrow.Table``, already in the order wanted)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        return cls(
            client=_strings(table, "client"), lock=_strings(table, "lock"), role=_strings(table, "role"),
            start=table["start_ns"].to_numpy().astype(np.int64, copy=False),
            end=table["end_ns"].to_numpy().astype(np.int64, copy=False),
            token=table["token"].cast(pa.float64()).to_numpy(zero_copy_only=False),
            open=pc.fill_null(table["open"].cast(pa.bool_()), False).to_numpy(zero_copy_only=False),
        )  # fmt: skip

    def __len__(self) -> int:
        return len(self.start)

    def part(self, lo: int, hi: int) -> Holds:
        """Rows [lo, hi) as Holds of their own, sharing these arrays."""
        return Holds(**{name: getattr(self, name)[lo:hi] for name in self.FIELDS})

    def hold(self, i: int) -> Hold:
        return Hold(
            str(self.client[i]), str(self.lock[i]), int(self.start[i]), int(self.end[i]),
            float(self.token[i]), bool(self.open[i]),
        )  # fmt: skip

    def around(self, lock: str, lo: int, hi: int) -> list[Hold]:
        """The holds of ``lock`` that overlap [lo, hi]."""
        rows = np.flatnonzero((self.lock == lock) & (self.end >= lo) & (self.start <= hi))
        return [self.hold(int(i)) for i in rows]


def recorded_violations(table: Any, limit: int = MAX_VIOLATIONS) -> list[tuple[Violation, Holds]]:
    """The checkers' violations of one case (``violations/<case>.parquet``, a ``pyarrow.Table``), earliest
    first, with their holds.

    Each violation's ``first``/``second`` rows are its holds; its ``near`` rows the other holds of
    its lock around it. Nothing is paired or judged here: the judge wrote what the checkers found.
    """
    out: list[tuple[Violation, Holds]] = []
    if table is None or table.num_rows == 0:
        return out
    import pyarrow.compute as pc

    # a violation's kind and time: its first row as the file has it
    ids = table["violation"].to_numpy()
    _, first_rows = np.unique(ids, return_index=True)
    kinds = table["kind"].to_pylist()
    ats = table["at_ns"].to_numpy()
    head = {int(ids[i]): (str(kinds[i]), int(ats[i])) for i in first_rows}
    # one stable sort by violation, then (lock, start, client) within it: each violation's holds a slice
    keys = ("violation", "lock", "start_ns", "client")
    ordered = table.take(pc.sort_indices(table, sort_keys=[(k, "ascending") for k in keys]))
    every = Holds.of(ordered)
    ids = ordered["violation"].to_numpy()
    cuts = [0, *(np.flatnonzero(ids[1:] != ids[:-1]) + 1).tolist(), len(ids)]
    for lo, hi in zip(cuts[:-1], cuts[1:], strict=True):
        holds = every.part(lo, hi)
        has = {r: bool((holds.role == r).any()) for r in ("first", "second")}
        if not (has["first"] or has["second"]):
            continue
        first = _by_role(holds, "first" if has["first"] else "second")
        second = _by_role(holds, "second") if has["second"] else first
        kind, at = head[int(ids[lo])]
        out.append((Violation(kind, first, second, at), holds))
    out.sort(key=lambda p: p[0].at_ns)
    return out[: limit * 4]


def _by_role(holds: Holds, role: str) -> Hold:
    """The earliest hold (by lock, start, client) of ``role``: the holds are sorted that way already."""
    return holds.hold(int(np.flatnonzero(holds.role == role)[0]))


class Events:
    """A case's history rows the timeline reads, as plain arrays sorted by time (a window is a slice, not a copy).

    Why not the DataFrame: every view filters its window a dozen ways, and pandas' per-call cost
    (masks, copies, ``astype``) was most of a matrix report's time; text columns are ``str`` once
    here (a missing error reads ""), numbers stay numbers.
    """

    TEXT = ("client", "op", "type", "lock")

    def __init__(self, columns: dict[str, np.ndarray]) -> None:
        self.columns = columns
        self.client = columns["client"]
        self.op = columns["op"]
        self.type = columns["type"]
        self.lock = columns["lock"]
        self.seq = columns["seq"]
        self.t = columns["t_ns"]
        self.value = columns["value"]
        self.error = columns["error"]

    @classmethod
    def of(cls, table: Any) -> Events:
        """The rows of ``table`` (a ``pyarrow.Table`` of the history's COLUMNS), sorted by time, stably."""
        import pyarrow as pa
        import pyarrow.compute as pc

        table = table.take(pc.sort_indices(table, sort_keys=[("t_ns", "ascending")]))
        cols = {c: _strings(table, c) for c in cls.TEXT}
        cols["seq"] = table["seq"].to_numpy().astype(np.int64, copy=False)
        cols["t_ns"] = table["t_ns"].to_numpy().astype(np.int64, copy=False)
        cols["value"] = table["value"].cast(pa.float64()).to_numpy(zero_copy_only=False)
        cols["error"] = _strings(table, "error", missing="")
        return cls(cols)

    def __len__(self) -> int:
        return len(self.t)

    def window(self, lo: int, hi: int) -> Events:
        """The rows with lo <= t_ns <= hi."""
        a, b = np.searchsorted(self.t, lo, "left"), np.searchsorted(self.t, hi, "right")
        return Events({k: v[a:b] for k, v in self.columns.items()})

    def where(self, mask: np.ndarray) -> Events:
        return Events({k: v[mask] for k, v in self.columns.items()})

    def of_op(self, op: str) -> Events:
        return self.where(self.op == op)


def _process(client: str) -> str:
    return client.rsplit("-u", 1)[0]


def _deaths(history: Events) -> dict[str, int]:
    """When each killed process died (its ``crash ok``, else its ``crash info`` mark): drawn, not judged."""
    c = history.of_op("crash")
    died: dict[tuple[str, int], int] = {}
    for client, seq, typ, t in zip(c.client, c.seq.tolist(), c.type, c.t.tolist(), strict=True):
        if typ == "ok":
            died.setdefault((client, seq), t)
    out: dict[str, int] = {}
    for client, seq, typ, t in zip(c.client, c.seq.tolist(), c.type, c.t.tolist(), strict=True):
        if typ == "info":
            when = died.get((client, seq), t)
            proc = _process(client)
            out[proc] = min(out.get(proc, when), when)
    return out


def distinct(found: list[tuple[Violation, Holds]]) -> list[tuple[Violation, Holds]]:
    """One violation per first hold: the later overlaps of one long hold draw the same window again.

    Why: a partitioned holder that keeps its lock for seconds overlaps every grant after its
    lease; five views of that one window were five copies of the same picture (and of its data).
    """
    seen: set[tuple[str, str, int]] = set()
    out = []
    for v, h in found:
        if v.first.key not in seen:
            seen.add(v.first.key)
            out.append((v, h))
    return out


# one view --------------------------------------------------------------------------------


@dataclass
class CaseContext:
    """What a view needs beside the history: the lease, the clock bounds, each process's loop lag."""

    ttl_s: float | None
    #: "lease" (ends at grant + ttl_s) or "session" (ends ttl_s after its client stalled: ZooKeeper)
    kind: str
    bounds_ns: dict[str, int | None]
    late_share: dict[str, float]
    t0_ns: int
    strikes: list[Span]
    deaths: dict[str, int]
    #: when each struck service first answered again (``service ok`` rows of client bench)
    service_ns: list[int]
    #: whether the lock is known to use the TTL (run.json ``impl_capabilities``); unknown: only a
    #: lease that ran out before the second grant is said, never one that "had not ended"
    leased: bool = False

    def s(self, t_ns: float) -> float:
        return (t_ns - self.t0_ns) / 1e9

    def bound(self, client: str) -> int | None:
        worker = client.rsplit("/", 1)[0] if "/" in client else ""
        return self.bounds_ns.get(worker, 0) if worker else 0

    def late(self, client: str) -> float | None:
        proc = _process(client)
        return self.late_share.get(proc, self.late_share.get(proc.rsplit("/", 1)[-1]))


def _window(v: Violation) -> tuple[int, int]:
    """From the first grant to both holds' ends (the first holder's late write included), padded.

    The tail after the second grant is capped at as long again as the lead up to it (at least
    20 ms), so a hold that never ended does not stretch the window over the whole run.
    """
    lo = min(v.first.start_ns, v.second.start_ns)
    at = max(v.second.start_ns, v.at_ns)
    cap = at + max(at - lo, MIN_PAD_NS)
    hi = max(at, min(max(v.first.end_ns, v.second.end_ns), cap))
    pad = max(int((hi - lo) * PAD_SHARE), MIN_PAD_NS)
    return lo - pad, hi + pad


@dataclass(frozen=True)
class Span:
    """One operation from its invoke to its completion (``end_ns`` None: none in the window)."""

    client: str
    lock: str
    start_ns: int | None
    end_ns: int | None
    type: str
    error: str


def _pairs(h: Events, op: str) -> list[Span]:
    """invoke -> completion of ``op`` per (client, seq), in the order of their first event."""
    rows = h.of_op(op)
    spans: dict[tuple[str, int], list[Any]] = {}
    for client, seq, typ, lock, t, err in zip(
        rows.client, rows.seq.tolist(), rows.type, rows.lock, rows.t.tolist(), rows.error, strict=True
    ):
        span = spans.setdefault((client, seq), [client, lock, None, None, "", ""])
        if typ == "invoke":
            span[2] = t
        elif span[3] is None:
            span[3], span[4], span[5] = t, typ, err
    return [Span(*v) for v in spans.values()]


#: A view's window is cut into this many slices; events of one lane closer than a slice (under a
#: pixel at the figure's width) are drawn as one bar or marker whose hover says how many it holds.
#: Why: a partition's window held ~4,000 acquire attempts per view (a 5 MB case block in a 79 MB report).
RESOLUTION = 300


def _merge_runs(
    rows: list[tuple[str, int, int, Any]], res: int, same_text: bool
) -> list[tuple[str, int, int, Any, int]]:
    """(client, start, end, the first row's payload, how many) per run of one lane's bars closer than ``res`` ns."""
    out: list[list[Any]] = []
    for client, start, end, payload in sorted(rows, key=lambda r: (r[0], r[1])):
        last = out[-1] if out else None
        if last and last[0] == client and (not same_text or last[3] == payload) and start - last[2] <= res:
            last[2] = max(last[2], end)
            if same_text:
                last[3] = payload
            last[4] += 1
        else:
            out.append([client, start, end, payload, 1])
    return [(c, s0, s1, p, n) for c, s0, s1, p, n in out]


def _say_merged(
    runs: list[tuple[str, int, int, str, int]], ctx: CaseContext, what: str
) -> list[tuple[str, int, int, str]]:
    """Merged bars as (client, start, end, hover): a bar standing for several says how many and when."""
    return [
        (c, s0, s1, t if n == 1 else t + html.escape(f" ({n} {what}, {ctx.s(s0):.4f}-{ctx.s(s1):.4f} s)"))
        for c, s0, s1, t, n in runs
    ]


def merge_points(rows: Events, res: int) -> list[tuple[str, int, int, int]]:
    """(client, first t_ns, last t_ns, how many) per run of one client's events closer than ``res`` ns."""
    return [(c, t0, t1, n) for c, t0, t1, n, _ in _point_runs(rows, res)]


def _point_runs(rows: Events, res: int) -> list[tuple[str, int, int, int, float]]:
    """:func:`merge_points` with the highest ``value`` among the rows each merged point stands for."""
    out: list[list[Any]] = []
    order = sorted(range(len(rows)), key=lambda i: (rows.client[i], int(rows.t[i])))
    for client, t, value in zip(
        rows.client[order], rows.t[order].tolist(), rows.value[order].tolist(), strict=True
    ):
        last = out[-1] if out else None
        if last and last[0] == client and t - last[2] <= res:
            last[2], last[3] = t, last[3] + 1
            if value > last[4] or last[4] != last[4]:
                last[4] = value
        else:
            out.append([client, t, t, 1, value])
    return [(c, t0, t1, n, v) for c, t0, t1, n, v in out]


def _thin_grants(
    grants: list[Hold], keep: set[tuple[str, str, int]], res: int
) -> tuple[list[Hold], list[tuple[int, int]]]:
    """The grants a view marks: the violation's two always; of the rest, one per run closer than ``res``.

    Returns the grants and, per grant, (how many it stands for, the last one's start).
    """
    out: list[Hold] = []
    many: list[tuple[int, int]] = []
    for h in sorted(grants, key=lambda g: (g.client, g.start_ns)):
        last = out[-1] if out else None
        if (
            last is not None and h.key not in keep and last.key not in keep and last.client == h.client
            and h.start_ns - many[-1][1] <= res
        ):  # fmt: skip
            many[-1] = (many[-1][0] + 1, h.start_ns)
        else:
            out.append(h)
            many.append((1, h.start_ns))
    return out, many


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:g} s"


class _Drawing:
    """One violation's figure as it is drawn: its lanes (clients), the window, and the traces, shapes and notes so far.

    Why a class: each part of the figure (attempts and holds, grants, writes, lease ends, the
    strike) reads the same lanes and window and adds to the same three lists; each is a method
    named for what it draws.
    """

    def __init__(self, history: Events, v: Violation, ctx: CaseContext, holds: Holds) -> None:
        lo, hi = _window(v)
        self.lo, self.hi = max(lo, ctx.t0_ns), hi
        self.v, self.ctx = v, ctx
        self.history = history
        self.near = history.window(self.lo, self.hi)
        a, b = v.first, v.second
        near = self.near
        lanes = list(dict.fromkeys([a.client, b.client]))
        busy = pd.Series(
            near.client[(near.client != "bench") & (near.lock == a.lock)], dtype=object
        ).value_counts()
        # other clients that held the lock in the window (waiting ones add lanes, not evidence)
        nearby = holds.around(a.lock, self.lo, self.hi)
        holders = {h.client for h in nearby}
        others = sorted((c for c in busy.index if c not in lanes and c in holders), key=lambda c: -busy[c])
        lanes += others[: MAX_LANES - len(lanes)]
        self.lanes = lanes
        self.labels: dict[str, str] = {}
        for c in lanes:
            late = ctx.late(c)
            extra = f" (loop late {late:.0%})" if late is not None and late == late else ""
            self.labels[c] = html.escape(f"client {c}{extra}")
        self.y = [self.labels[c] for c in lanes]
        self.lane_of = {c: i for i, c in enumerate(lanes)}
        self.colour = {c: COLOURS[min(i, len(COLOURS) - 1)] for i, c in enumerate(lanes)}
        self.in_lanes = [h for h in nearby if h.client in self.lane_of]
        # runs closer than a pixel merge into one bar (RESOLUTION)
        self.res = max((self.hi - self.lo) // RESOLUTION, 1)
        self.traces: list[dict[str, Any]] = []
        self.shapes: list[dict[str, Any]] = []
        self.notes: list[dict[str, Any]] = []

    def bar(
        self, name: str, rows: list[tuple[str, float, float, str]], width: float, fill: str | None
    ) -> None:
        if not rows:
            return
        ctx, labels, colour = self.ctx, self.labels, self.colour
        self.traces.append(
            {
                "type": "bar", "orientation": "h", "name": name, "width": width, "showlegend": True,
                "y": [labels[c] for c, _, _, _ in rows], "base": [ctx.s(s) for _, s, _, _ in rows],
                "x": [max((e_ - s) / 1e9, 1e-6) for _, s, e_, _ in rows],
                "marker": {"color": [fill or colour[c] for c, _, _, _ in rows], "opacity": 0.85},
                "hovertext": [t for _, _, _, t in rows], "hoverinfo": "text",
            }
        )  # fmt: skip

    def _held(self, h: Hold) -> tuple[str, int, int, str]:
        """A hold as a bar of its lane, clipped to the window, with its hover text."""
        ctx = self.ctx
        return (h.client, max(h.start_ns, self.lo), min(h.end_ns, self.hi), html.escape(
            f"{h.client} held {h.lock} from {ctx.s(h.start_ns):.3f} s to "
            f"{ctx.s(h.end_ns):.3f} s{' (never released)' if h.open else ''}"))  # fmt: skip

    def attempts_holds_releases(self) -> None:
        """Acquire attempts, holds (the violation's two whole, others merged below a pixel), releases."""
        near, hi, lane_of, res, ctx = self.near, self.hi, self.lane_of, self.res, self.ctx
        a, b = self.v.first, self.v.second
        pair = {a.key, b.key}
        attempts = []
        for r in _pairs(near, "acquire"):
            if r.client in lane_of and r.start_ns is not None:
                end = r.end_ns if r.end_ns is not None else hi
                attempts.append((r.client, r.start_ns, end, r.type or "no answer in the window"))
        # the hover text is a function of (client, outcome): bars merge on it before it is put in words
        merged = [
            (c, s0, s1, html.escape(f"{c}: acquire -> {outcome}"), n)
            for c, s0, s1, outcome, n in _merge_runs(attempts, res, same_text=True)
        ]
        self.bar("acquire attempt", _say_merged(merged, ctx, "acquire attempts"), 0.2, "#d8dde3")
        for who, name in (
            (a.client, f"hold: client {a.client}"),
            (b.client, f"hold: client {b.client}"),
            (None, "hold: others"),
        ):
            mine = [
                h for h in self.in_lanes if (h.client == who if who else h.client not in (a.client, b.client))
            ]
            # the violation's own holds stay whole; other holds of the lane closer than a pixel merge
            # (a merged bar says its first hold, so only the holds that start a bar are put in words)
            own = [self._held(h) for h in mine if h.key in pair]
            rest = [
                (h.client, max(h.start_ns, self.lo), min(h.end_ns, hi), h) for h in mine if h.key not in pair
            ]
            merged = [
                (c, s0, s1, self._held(h)[3], n)
                for c, s0, s1, h, n in _merge_runs(rest, res, same_text=False)
            ]
            self.bar(html.escape(name), own + _say_merged(merged, ctx, "holds"), 0.55, None)
        releases = [
            (r.client, r.start_ns, r.end_ns if r.end_ns is not None else r.start_ns, "")
            for r in _pairs(near, "release") if r.client in lane_of and r.start_ns is not None
        ]  # fmt: skip
        merged = [
            (c, s0, s1, html.escape(f"{c}: release"), n)
            for c, s0, s1, _, n in _merge_runs(releases, res, True)
        ]
        self.bar("release", _say_merged(merged, ctx, "releases"), 0.2, "#334155")

    def grants(self) -> None:
        """Grants with their tokens, the clock bound as an error bar; the violation's two always drawn,
        the others closer than a pixel in one lane as one marker that says how many."""
        ctx, labels = self.ctx, self.labels
        pair = {self.v.first.key, self.v.second.key}
        grants, many = _thin_grants([h for h in self.in_lanes if h.start_ns >= self.lo], pair, self.res)
        if not grants:
            return
        errs = [ctx.bound(h.client) for h in grants]
        unknown = any(b_ is None for b_ in errs)
        self.traces.append(
            {
                "type": "scatter", "mode": "markers+text", "name": "grant (token)",
                "x": [ctx.s(h.start_ns) for h in grants], "y": [labels[h.client] for h in grants],
                # the two grants of the violation carry their token as text; every grant has it on hover
                "text": [f"token {int(h.token)}" if h.token == h.token and h.key in pair else "" for h in grants],
                "textposition": "top center", "marker": {"symbol": "triangle-right", "size": 10, "color": "#111"},
                "hovertext": [
                    html.escape(f"{h.client} granted at {ctx.s(h.start_ns):.4f} s"
                                + (f", token {int(h.token)}" if h.token == h.token else "")
                                + (f" (and {many[i][0] - 1} more grants to {ctx.s(many[i][1]):.4f} s)"
                                   if many[i][0] > 1 else ""))
                    for i, h in enumerate(grants)
                ],
                "hoverinfo": "text",
                **({"error_x": {"type": "data", "array": [(b_ or 0) / 1e9 for b_ in errs], "visible": True,
                                "color": "#a16207", "thickness": 2, "width": 6}}
                   if any(b_ for b_ in errs) and not unknown else {}),
            }
        )  # fmt: skip

    def writes(self) -> None:
        """The resource's writes, accepted (purchase ok) and refused (stale), and witness reads that saw another inside."""
        near, lanes, labels, ctx, res = self.near, self.lanes, self.labels, self.ctx, self.res
        mine = np.isin(near.client, lanes)
        buys = near.where((near.op == "purchase") & ((near.type == "ok") | (near.type == "fail")) & mine)
        for kind, sel, symbol, col in (
            ("write accepted", buys.type == "ok", "circle", "#15803d"),
            ("write refused (stale token)", (buys.type == "fail") & (buys.error == "stale"), "x", "#b91c1c"),
        ):
            rows = buys.where(sel)
            if not len(rows):
                continue
            points = merge_points(rows, res)
            self.traces.append(
                {
                    "type": "scatter", "mode": "markers", "name": kind,
                    "x": [ctx.s(t) for _, t, _, _ in points], "y": [labels[c] for c, _, _, _ in points],
                    "marker": {"symbol": symbol, "size": 9, "color": col},
                    "hovertext": [html.escape(f"{c}: {kind} at {ctx.s(t):.4f} s" if n == 1 else
                                              f"{c}: {n} x {kind}, {ctx.s(t):.4f}-{ctx.s(t1):.4f} s")
                                  for c, t, t1, n in points],
                    "hoverinfo": "text",
                }
            )  # fmt: skip
        wit = near.where(
            (near.op == "witness") & (near.type == "ok") & mine & (np.nan_to_num(near.value) > 1)
        )
        if len(wit):
            runs = _point_runs(wit, res)
            self.traces.append(
                {
                    "type": "scatter", "mode": "markers", "name": "witness saw another inside",
                    "x": [ctx.s(t) for _, t, _, _, _ in runs], "y": [labels[c] for c, _, _, _, _ in runs],
                    "marker": {"symbol": "diamond", "size": 10, "color": "#7e22ce"},
                    "hovertext": [f"witness {int(x)} inside" if n == 1 else
                                  f"{n} witness reads saw another inside, {ctx.s(t):.4f}-{ctx.s(t1):.4f} s (up to {int(x)})"
                                  for _, t, t1, n, x in runs],
                    "hoverinfo": "text",
                }
            )  # fmt: skip

    def _sent(self, h: Hold) -> int:
        """When the request that won ``h`` was sent at the earliest: its acquire's invoke (else its grant)."""
        for back in SENT_LOOKBACK_NS:
            w = self.history.window(h.start_ns - back, h.start_ns)
            mine = (w.client == h.client) & (w.lock == h.lock) & (w.op == "acquire") & (w.type == "invoke")
            if mine.any():
                return int(w.t[mine][-1])
        return h.start_ns

    def lease_ends(self) -> dict[str, tuple[int, int]]:
        """Where each hold's lease or session ended, as (earliest, latest): a lease TTL after its
        grant, which the server made between the acquire's send and its ok, so from each; a session
        TTL after its client stalled (a pause of its own, or a fault window inside the hold), else
        not at all. A first holder's lease that could have run out before the second grant ended by
        it: the server granted the lock again."""
        ctx, lo, hi, labels = self.ctx, self.lo, self.hi, self.labels
        a, b = self.v.first, self.v.second
        lease_end: dict[str, tuple[int, int]] = {}
        word = ctx.kind if ctx.kind == "session" or ctx.leased else "TTL"
        if not ctx.ttl_s:
            return lease_end
        ttl_ns = int(ctx.ttl_s * 1e9)
        pauses = _pairs(self.near, "pause") if ctx.kind != "lease" else []
        ends: list[tuple[Hold, tuple[int, int]]] = []
        for h in self.in_lanes:
            if ctx.kind == "lease":
                ends.append((h, (self._sent(h) + ttl_ns, h.start_ns + ttl_ns)))
                continue
            stalls = [p.start_ns for p in pauses if p.client == h.client and p.start_ns is not None]
            stalls += [r.start_ns for r in ctx.strikes if r.start_ns is not None]
            stalls = [t for t in stalls if h.start_ns <= t < h.end_ns]
            if stalls:
                ends.append((h, (min(stalls) + ttl_ns,) * 2))
        ends = [
            (h, (t0, min(t1, b.start_ns)) if h.client == a.client and t0 <= b.start_ns else (t0, t1))
            for h, (t0, t1) in ends
            if lo <= t0 <= hi and t0 < h.end_ns
        ]
        for h, t in ends:
            lease_end.setdefault(h.client, t)
        if a.client in lease_end:
            self.notes.append({"x": ctx.s(lease_end[a.client][1]), "y": labels[a.client], "yshift": -22,
                               "showarrow": False, "text": f"{word} ends", "font": {"size": 11, "color": "#a16207"}})  # fmt: skip
        if ends:
            self.traces.append(
                {
                    "type": "scatter", "mode": "markers", "name": f"{word} ends ({ctx.ttl_s:g} s)",
                    "x": [ctx.s(t1) for _, (_, t1) in ends], "y": [labels[h.client] for h, _ in ends],
                    "marker": {"symbol": "line-ns-open", "size": 22, "color": "#a16207", "line": {"width": 3}},
                    "hovertext": [html.escape(f"{h.client}: its {ctx.ttl_s:g} s {word} ends at "
                                              f"{_seconds(ctx, *span)}") for (h, span) in ends], "hoverinfo": "text",
                }
            )  # fmt: skip
        return lease_end

    def strike(self) -> str:
        """The strike's server fault windows and where the service answered again; its words for the caption."""
        ctx, lo, hi = self.ctx, self.lo, self.hi
        strike_text = ""
        for r in ctx.strikes:
            s0 = r.start_ns if r.start_ns is not None else lo
            s1 = r.end_ns if r.end_ns is not None else hi
            if s1 < lo or s0 > hi:
                continue
            self.shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": ctx.s(max(s0, lo)),
                                "x1": ctx.s(min(s1, hi)), "y0": 0, "y1": 1, "fillcolor": "#f59e0b", "opacity": 0.18,
                                "line": {"width": 0}, "layer": "below"})  # fmt: skip
            self.notes.append({"x": ctx.s(max(s0, lo)), "y": 1, "yref": "paper", "xanchor": "left", "showarrow": False,
                               "text": html.escape(f"fault: {r.lock}"), "font": {"size": 11, "color": "#92400e"}})  # fmt: skip
            if not strike_text:
                strike_text = f"the strike ({r.lock}) ran {ctx.s(s0):.3f}-{ctx.s(s1):.3f} s"
                back = [t for t in ctx.service_ns if t >= s1]
                if back:
                    strike_text += f", the service answered again at {ctx.s(min(back)):.3f} s"
        for t in ctx.service_ns:
            if lo <= t <= hi:
                self.shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": ctx.s(t), "x1": ctx.s(t),
                                    "y0": 0, "y1": 1, "line": {"color": "#92400e", "dash": "dot", "width": 1.5}})  # fmt: skip
                self.notes.append({"x": ctx.s(t), "y": 0, "yref": "paper", "showarrow": False, "yshift": -12,
                                   "text": "service back", "font": {"size": 11, "color": "#92400e"}})  # fmt: skip
        return strike_text

    def pauses_and_deaths(self) -> dict[str, tuple[float, float]]:
        """Holders paused (shaded in their lane) and processes killed (a dash-dot line); the pauses by client."""
        ctx, hi = self.ctx, self.hi
        paused: dict[str, tuple[float, float]] = {}
        for r in _pairs(self.near, "pause"):
            c = r.client
            if c not in self.lane_of or r.start_ns is None:
                continue
            p1 = r.end_ns if r.end_ns is not None else hi
            paused.setdefault(c, (r.start_ns, p1))
            i = self.lane_of[c]
            self.shapes.append({"type": "rect", "xref": "x", "yref": "y", "x0": ctx.s(r.start_ns), "x1": ctx.s(p1),
                                "y0": i - 0.42, "y1": i + 0.42, "fillcolor": "#f59e0b", "opacity": 0.35,
                                "line": {"width": 1, "color": "#b45309", "dash": "dot"}, "layer": "below"})  # fmt: skip
            self.notes.append({"x": ctx.s(r.start_ns), "y": self.y[i], "xanchor": "left", "yshift": 16,
                               "showarrow": False, "text": "paused", "font": {"size": 11, "color": "#92400e"}})  # fmt: skip
        for proc, t in ctx.deaths.items():
            if self.lo <= t <= hi and any(_process(c) == proc for c in self.lanes):
                self.shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": ctx.s(t), "x1": ctx.s(t),
                                    "y0": 0, "y1": 1, "line": {"color": "#111", "dash": "dashdot", "width": 1.5}})  # fmt: skip
                self.notes.append({"x": ctx.s(t), "y": 0, "yref": "paper", "showarrow": False, "yshift": -12,
                                   "text": html.escape(f"process {proc} killed"), "font": {"size": 11}})  # fmt: skip
        return paused

    def layout(self) -> dict[str, Any]:
        ctx = self.ctx
        return {
            "height": 150 + 62 * len(self.lanes),
            "margin": {"l": 10, "r": 20, "t": 80, "b": 50},
            "barmode": "overlay",
            "xaxis": {"title": {"text": "seconds since the case's first event"},
                      "range": [ctx.s(self.lo), ctx.s(self.hi)], "zeroline": False},
            "yaxis": {"type": "category", "categoryorder": "array", "categoryarray": self.y, "autorange": "reversed",
                      "automargin": True},
            "shapes": self.shapes, "annotations": self.notes,
            "legend": {"orientation": "h", "x": 0, "y": 1.02, "yanchor": "bottom", "font": {"size": 11}},
            "hovermode": "closest",
        }  # fmt: skip


def view(history: Events, v: Violation, ctx: CaseContext, holds: Holds) -> dict[str, Any]:
    """One violation's figure (plotly JSON: data, layout) and its one-line caption in plain words."""
    drawing = _Drawing(history, v, ctx, holds)
    drawing.attempts_holds_releases()
    drawing.grants()
    drawing.writes()
    lease_end = drawing.lease_ends()
    strike_text = drawing.strike()
    paused = drawing.pauses_and_deaths()
    caption = _caption(v, ctx, drawing.near, lease_end, paused, strike_text)
    return {"data": drawing.traces, "layout": drawing.layout(), "caption": caption}


def _seconds(ctx: CaseContext, t0: int, t1: int) -> str:
    """A moment known to lie between ``t0`` and ``t1``: one figure where they agree to the millisecond."""
    a, b = f"{ctx.s(t0):.3f}", f"{ctx.s(t1):.3f}"
    return f"{a} s" if a == b else f"{a}-{b} s"


def _caption(
    v: Violation,
    ctx: CaseContext,
    near: Events,
    lease_end: dict[str, tuple[int, int]],
    paused: dict[str, tuple[float, float]],
    strike_text: str,
) -> str:
    a, b = v.first, v.second
    if v.kind == "tokens":
        return (
            f"client {a.client} was granted {a.lock} at {ctx.s(a.start_ns):.3f} s with token {int(a.token)} "
            f"and let go at {ctx.s(a.end_ns):.3f} s; client {b.client} was granted it after that, at "
            f"{ctx.s(b.start_ns):.3f} s, with token {int(b.token)}: "
            + ("the same token twice" if b.token == a.token else "a lower token, out of grant order")
            + (f"; {strike_text}" if strike_text else "")
        )
    if v.kind == "lost-lock" and a.key == b.key:
        return (
            f"client {a.client} held {a.lock} from {ctx.s(a.start_ns):.3f} s and was told at {ctx.s(v.at_ns):.3f} s "
            "that it no longer owned it (its release or a probe said so); no other client was granted it then"
            + (f"; {strike_text}" if strike_text else "")
        )
    parts = [f"client {a.client} held {a.lock} from {ctx.s(a.start_ns):.3f} s"]
    span = lease_end.get(a.client)
    if span is not None and span[0] <= b.start_ns:
        e0, e1 = span  # ended by the second grant (lease_ends)
        why = []
        p = paused.get(a.client)
        if p is not None and p[0] <= e1 and e0 <= p[1]:
            why.append(f"while it was paused (the strike: {ctx.s(p[0]):.3f}-{ctx.s(p[1]):.3f} s)")
        late = ctx.late(a.client)
        if late is not None and late == late and late > LATE_SHARE_LIMIT:
            why.append(f"while its process stalled (loop late {late:.0%})")
        ended = (
            f"its {ctx.ttl_s:g} s {ctx.kind} ended"
            if ctx.kind == "session" or ctx.leased
            else f"the run's {ctx.ttl_s:g} s TTL ran out"  # whether this lock takes it, run.json does not say
        )
        parts.append(f"{ended} at {_seconds(ctx, e0, e1)}" + (" " + " and ".join(why) if why else ""))
    elif ctx.ttl_s and ctx.kind == "lease" and ctx.leased:
        parts.append(f"its {ctx.ttl_s:g} s lease had not ended")
    parts.append(f"client {b.client} was granted at {ctx.s(b.start_ns):.3f} s")
    if v.kind == "witness":
        parts.append(f"the witness counted two inside at {ctx.s(v.at_ns):.3f} s")
    elif v.kind == "stale-write":
        parts.append(
            f"client {a.client} wrote at {ctx.s(v.at_ns):.3f} s with its older token"
            + (f" {int(a.token)}" if a.token == a.token else "")
            + " and the resource accepted it (fencing observed, not enforced)"
        )
    elif v.kind == "lost-lock":
        parts.append(f"client {a.client} was told at {ctx.s(v.at_ns):.3f} s that it no longer owned the lock")
    over_lo, over_hi = b.start_ns, min(a.end_ns, b.end_ns)
    t = near.t
    inside = near.where((near.op == "purchase") & (near.type == "ok") & (t >= over_lo) & (t <= over_hi))
    writers = [c for c in (a.client, b.client) if (inside.client == c).any()]
    if len(writers) == 2:
        when = inside.t[np.isin(inside.client, writers)]
        parts.append(
            f"both wrote while both held ({ctx.s(int(when.min())):.3f}-{ctx.s(int(when.max())):.3f} s)"
        )
    elif writers:
        w = inside.t[inside.client == writers[0]]
        parts.append(f"client {writers[0]} wrote at {ctx.s(int(w.min())):.3f} s while both held")
    if a.open:
        parts.append(f"client {a.client} never released it")
    if strike_text:
        parts.append(strike_text)
    bounds = [ctx.bound(a.client), ctx.bound(b.client)]
    same_worker = (a.client.rsplit("/", 1)[0] if "/" in a.client else "") == (
        b.client.rsplit("/", 1)[0] if "/" in b.client else ""
    )
    if not same_worker and any(x is None or x > 0 for x in bounds):
        if any(x is None for x in bounds):
            parts.append("one worker's clock bound was not measured: the order is uncertain")
        else:
            tol = sum(int(x or 0) for x in bounds)
            overlap = over_hi - over_lo
            certain = "certain" if overlap > tol else "uncertain"
            parts.append(
                f"the clocks agree within {_ms(tol / 1e9)}, so the overlap of {_ms(overlap / 1e9)} is {certain}"
            )
    return "; ".join(parts)


# the section -----------------------------------------------------------------------------


#: Backends whose holder keeps its lock for a session (heartbeats), not a lease from the grant.
SESSION_BACKENDS = ("zookeeper",)
#: ZooKeeper's session timeout when the case's lock params do not set one (lockimpls/zk_locks.py).
DEFAULT_SESSION_S = 10.0


def _lease(run: RunData, row: dict[str, Any]) -> tuple[float | None, str]:
    """(seconds, "lease" | "session") of the case's lock: the TTL from run.json, or ZooKeeper's session timeout.

    None when run.json says the impl takes no TTL (``impl_capabilities``, where recorded).
    """
    params = run.meta.get("params") or {}
    if _uses_ttl(run, row) is False:
        return None, "lease"
    backend = text(row, "backend") or (text(row, "impl") or "").split(".")[0]
    if backend in SESSION_BACKENDS:
        lock_params = params.get("lock_params") or {}
        if isinstance(lock_params, str):
            try:
                lock_params = json.loads(lock_params)
            except ValueError:
                lock_params = {}
        timeout = (
            lock_params.get("session_timeout", DEFAULT_SESSION_S) if isinstance(lock_params, dict) else None
        )
        return _positive(timeout), "session"
    scenario = text(row, "matrix_scenario") or ""
    scen = (params.get("scenarios") or {}).get(scenario) or {}
    ttl = (scen.get("settings") or {}).get("ttl")
    if ttl is None:
        per = (params.get("per_workload") or {}).get(text(row, "workload") or "") or {}
        ttl = per.get("ttl", params.get("ttl_s"))
    return _positive(ttl), "lease"


def _uses_ttl(run: RunData, row: dict[str, Any]) -> bool | None:
    """run.json ``impl_capabilities[impl]["ttl"]`` when bench recorded it, else None (not known)."""
    caps = (run.meta.get("impl_capabilities") or {}).get(text(row, "impl") or "")
    value = caps.get("ttl") if isinstance(caps, dict) else None
    return value if isinstance(value, bool) else None


def _positive(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) and out > 0 else None


CaseRead = tuple[list[tuple[Violation, Holds]], Events | None]


def read_case(run: RunData, case: str) -> CaseRead:
    """A case's chosen violations and its history as arrays: the reading half of :func:`case_views`.

    Apart so that the section reads the next cases in a thread while it draws this one: the
    reading is Arrow's work, which lets the drawing run beside it on another core.
    """
    found = distinct(recorded_violations(run.violations(case)))[:MAX_VIOLATIONS]
    if not found:
        return [], None
    history = run.history_table(case, COLUMNS, OPS)
    if history is None or history.num_rows == 0:
        return found, None
    return found, Events.of(history)


def case_views(run: RunData, row: dict[str, Any], read: CaseRead | None = None) -> list[dict[str, Any]]:
    """Every chosen violation's view of one case (empty when the checkers kept no witness of it).

    ``read``: what :func:`read_case` gave for it, when read ahead.
    """
    case = str(row["case"])
    found, events = read if read is not None else read_case(run, case)
    if not found or events is None:
        return []
    extra = run.extra(case)
    state = extra.get("final_state") or {}
    bounds = state.get("clock_uncertainty_ns") or {}
    late = {}
    for key, w in (extra.get("workers") or {}).items():
        share = w.get("loop_lag_late_share") if isinstance(w, dict) else None
        if isinstance(share, (int, float)):
            late[str(key)] = float(share)
    ctx = CaseContext(
        *_lease(run, row), dict(bounds), late, int(events.t[0]), _pairs(events, "fault"), _deaths(events),
        events.of_op("service").t.tolist(), leased=_uses_ttl(run, row) is True,
    )  # fmt: skip
    return [view(events, v, ctx, holds) for v, holds in found]


def _json(value: Any) -> str:
    """JSON for a <script> block: nothing in it can close the block."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False, default=float).replace("</", "<\\/")


def _clean(value: Any) -> Any:
    """JSON-ready: no NaN, numpy scalars as Python's, floats to the microsecond (seconds) to keep it small."""
    kind = type(value)
    if kind is float:
        return round(value, 6) if math.isfinite(value) else None
    if kind is list:
        # most lists are hover texts or labels: their strings are kept as they are without a call each
        return [v if type(v) is str else _clean(v) for v in value]
    if kind is dict:
        return {k: v if type(v) is str else _clean(v) for k, v in value.items()}
    if isinstance(value, float):
        return round(value, 6) if math.isfinite(value) else None
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return _clean(float(value))
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


TIMELINE_CSS = ".tl-link { font-size: 11px; margin-left: 4px; } .tl-caption { font-size: 14px; }"
TIMELINE_JS = """
(function () {
  function draw(block) {
    var views = JSON.parse(block.querySelector('script.tl-data').textContent);
    var pick = block.querySelector('select');
    var i = pick ? Number(pick.value) : 0;
    var v = views[i];
    block.querySelector('.tl-caption').textContent = v.caption;
    Plotly.react(block.querySelector('.tl-plot'), v.data, v.layout, {displaylogo: false, responsive: true});
    block.dataset.drawn = String(i);
  }
  document.querySelectorAll('.timeline').forEach(function (block) {
    var pick = block.querySelector('select');
    if (pick) { pick.addEventListener('change', function () { draw(block); }); }
    if (!('IntersectionObserver' in window)) { draw(block); return; }
    var seen = new IntersectionObserver(function (entries) {
      entries.forEach(function (en) { if (en.isIntersecting) { draw(block); seen.disconnect(); } });
    }, {rootMargin: '200px'});
    seen.observe(block);
  });
})();
"""


#: Timelines drawn per report at most; past it a failed case is listed with its history file.
MAX_DRAWN = 100


def drawn_cases(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    """(the failed cases drawn, {drawn case: the failed cases of the same lock x fault listed under it}).

    One per lock x fault (trials and fenced/unfenced arms of one scenario; controls apart): its
    first invalid case, the one the safety grid's red cell links to (dashboards/cells.py), else its
    first failed one. Why: trials and arms of one cell show the same failure, and drawing each
    made a standard matrix's report 79 MB; the others stay listed, with their history file.
    """
    groups: dict[tuple[bool, str, str], list[dict[str, Any]]] = {}
    for row in rows:
        key = (
            row.get("role") == "control",
            str(row.get("impl") or row["case"]),
            split_scenario(scenario_of(row))[0],
        )
        groups.setdefault(key, []).append(row)
    drawn: list[dict[str, Any]] = []
    listed: dict[str, list[dict[str, Any]]] = {}
    for members in groups.values():
        first = next((r for r in members if text(r, "verdict") == "invalid"), members[0])
        drawn.append(first)
        listed[str(first["case"])] = [r for r in members if r is not first]
    return drawn, listed


def _also(case: str, others: list[dict[str, Any]], run: RunData) -> str:
    """The failed cases of the same lock x fault that are not drawn: each with its anchor and history file."""
    if not others:
        return ""
    items = "".join(
        f'<li id="{e(anchor(str(r["case"])))}">{e(r["case"])} ({e(scenario_of(r))}): '
        f"<code>{e(run.path.name)}/history/{e(r['case'])}.parquet</code></li>"
        for r in others
    )
    return (
        f'<p class="caption">Also failed, same lock and fault, not drawn ({len(others)}; the timeline above is '
        f'{e(case)}):</p><ul class="tl-also">{items}</ul>'
    )


class _Reader:
    """Reads the cases to draw, a few ahead of the one being drawn, in one thread of its own.

    Why: on a matrix, reading the witness files and histories was a third of the section; Arrow
    reads without holding the interpreter, so the drawing goes on meanwhile. One thread and a
    short lookahead: the order of the reads (and of any note they add) is the cases' order.
    """

    AHEAD = 4

    def __init__(self, run: RunData, cases: list[str]) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.run, self.cases = run, cases
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="timeline-read") if cases else None
        self.futures: dict[str, Any] = {}
        self.next = 0
        self._fill()

    def _fill(self) -> None:
        while self.pool is not None and self.next < len(self.cases) and len(self.futures) < self.AHEAD:
            case = self.cases[self.next]
            self.futures[case] = self.pool.submit(read_case, self.run, case)
            self.next += 1

    def get(self, case: str) -> CaseRead | None:
        """What was read for ``case`` (waiting for it), or None when it was not read ahead."""
        future = self.futures.pop(case, None)
        self._fill()
        if future is None:
            return None
        result = future.result()
        if self.pool is not None and not self.futures:
            self.pool.shutdown(wait=True)
            self.pool = None
        return result


def timeline_section(run: RunData) -> str:
    """The violation timeline of each failed lock x fault, or "" when no case failed (or none can be drawn).

    One case per lock x fault is drawn (:func:`drawn_cases`), at most :data:`MAX_DRAWN`; every
    other failed case keeps its anchor, in a list naming its history file.
    """
    rows = [r for r in run.cases.to_dict("records") if has_timeline(r)]
    if not rows:
        return ""
    chosen, listed = drawn_cases(rows)
    blocks = []
    ahead = _Reader(run, [str(r["case"]) for r in chosen[:MAX_DRAWN]] if run.has_witnesses else [])
    for n, row in enumerate(chosen):
        case = str(row["case"])
        also = _also(case, listed[case], run)
        head = f"<h3>{e(text(row, 'impl') or case)} x {e(scenario_of(row))} <small>({e(case)})</small></h3>"
        if n >= MAX_DRAWN:
            blocks.append(
                f'<div class="timeline-none" id="{e(anchor(case))}">{head}<p class="caption">Not drawn: this report '
                f"draws at most {MAX_DRAWN} timelines. The full history is <code>{e(run.path.name)}/history/"
                f"{e(case)}.parquet</code>.</p>{also}</div>"
            )
            continue
        if not run.has_witnesses:
            blocks.append(
                f'<div class="timeline-none" id="{e(anchor(case))}">{head}<p class="caption">No witnesses '
                "recorded (folder written before the checkers kept their witnesses in violations/, or a "
                "baseline, which keeps none): nothing to draw. The history, where kept, is "
                f"<code>{e(run.path.name)}/history/{e(case)}.parquet</code>."
                f"</p>{also}</div>"
            )
            continue
        views = case_views(run, row, ahead.get(case))
        if not views:
            blocks.append(
                f'<div class="timeline-none" id="{e(anchor(case))}">{head}<p class="caption">No interleaving to '
                "draw: the checkers kept no pair of holds for this case (no two holders at once, no lost lock, no "
                "tokens out of order, no witness above 1; the failure is in the resource's final state: see the "
                f"verdict's reason).</p>{also}</div>"
            )
            continue
        chooser = ""
        if len(views) > 1:
            options = "".join(
                f'<option value="{i}">violation {i + 1}: {e(v["caption"][:90])}</option>'
                for i, v in enumerate(views)
            )
            chooser = f'<label>violation <select aria-label="violation">{options}</select></label>'
        data = _json(_clean(views))
        blocks.append(
            f'<div class="timeline" id="{e(anchor(case))}" data-case="{e(case)}">{head}{chooser}'
            f'<div class="tl-plot" style="min-height:{views[0]["layout"]["height"]}px"></div>'
            f'<p class="caption tl-caption">{e(views[0]["caption"])}</p>'
            f'<script type="application/json" class="tl-data">{data}</script>{also}</div>'
        )
    left = len(rows) - min(len(chosen), MAX_DRAWN)
    summary = (
        f"{len(rows)} failed case(s); {min(len(chosen), MAX_DRAWN)} drawn, one per lock x fault (its first "
        f"invalid trial or arm, the one the grid links to); the other {left} are listed under it with their "
        "history file in the results folder."
        if left
        else f"{len(rows)} failed case(s), each drawn."
    )
    return (
        '<h2 id="violation-timelines">Why each red: the violation\'s timeline</h2>'
        f'<p class="caption" id="timeline-summary">{e(summary)} From each drawn case\'s history: one lane per '
        "client involved (the two "
        "holders first, with their process's loop lag where recorded); grey: acquire attempts; coloured: holds "
        "(acquire ok to release); dark: releases; triangles: grants with their fencing token (with the clock "
        "bound as an error bar where clients ran on several hosts: inside it the order is uncertain); green "
        "dots: writes the resource accepted, red crosses: writes it refused as stale; amber ticks: where a "
        "hold's lease or session ended (grant + the case's TTL); amber bands: the fault window (all lanes) or "
        "a pause (one lane); dash-dot: a killed process's death. Only the window around each violation is "
        f"kept, and events of one lane closer than 1/{RESOLUTION} of it are one mark (hover: how many); the "
        "chooser shows violations that start from another first holder.</p>"
        + "".join(blocks)
        + f"<style>{TIMELINE_CSS}</style><script>{TIMELINE_JS}</script>"
    )
