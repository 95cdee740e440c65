"""What each client records: HDR histograms in microseconds and a history of lock events.

A process has one :class:`Recorder`. Clients (Locust users) talk to it through
:class:`RecordedLock`, which wraps a ``lockimpls`` Lock so that every operation is
timed with ``time.monotonic_ns()`` and written to the history as invoke then
ok / fail / info. Recordings travel between processes as plain chunks (lists and
strings, safe for Locust's msgpack) and merge without loss: histograms add, events
concatenate, and every chunk carries its own counts so the receiver can prove it got
everything.
"""

from __future__ import annotations

import itertools
import os
import time
from collections.abc import Iterable
from typing import Any

import pandas as pd
from hdrh.histogram import HdrHistogram

from lockimpls.base import BackendUnavailable, Lease, Lock, LockError, LockOutcomeUnknown, LockTimeout

HIST_NAMES = ("acquire_ok", "acquire_timeout", "release", "hold", "cs")
HIST_LOWEST_US = 1
HIST_HIGHEST_US = 3_600_000_000  # one hour
HIST_DIGITS = 3

HISTORY_COLUMNS = ["client", "seq", "op", "type", "lock", "t_ns", "token", "value", "error", "sent_ns"]
#: The client of a Locust process's loop stalls in a history (``loop:<pid>``, op ``stall``): no buyer.
STALL_CLIENT_PREFIX = "loop:"

#: ``error`` of an ``info`` completion the harness wrote for an invoke that never got one (its
#: user was stopped mid-operation, its worker was lost): the outcome is unknown, and the event
#: says nothing about when the operation ended. Checkers recognise it by this prefix.
UNFINISHED = "unfinished: "
#: ``error`` prefix of an operation interrupted inside :class:`RecordedLock` (Locust killed the user).
INTERRUPTED = "interrupted: "
#: ``error`` prefix of an acquire ended as its case stopped, while it waited between two attempts:
#: its last attempt had failed and none was in flight, so the lock was not granted (a definite
#: ``fail``). Not a timeout: the client did not give up, the case ended.
STOPPED = "stopped: "
#: What :meth:`RecordedLock.acquire` returns as its error for such an acquire (the caller's test).
STOPPED_ERROR = "stopped"


def without_stopped_waits(history: pd.DataFrame) -> pd.DataFrame:
    """``history`` without the acquires its case's stop ended (invoke and ``fail`` with :data:`STOPPED`).

    For the case's figures: such a wait was neither granted nor given up on (not a timeout), and
    its length is the stop's, not the lock's. The checkers and the saved history keep every row.
    """
    if history.empty or "error" not in history.columns:
        return history
    acquire = (history["op"] == "acquire").to_numpy(dtype=bool)
    errors = history["error"].fillna("").astype(str)
    stopped = acquire & errors.str.startswith(STOPPED).to_numpy(dtype=bool)
    if not stopped.any():
        return history
    calls = pd.MultiIndex.from_arrays([history["client"], history["seq"]])
    ended = acquire & calls.isin(calls[stopped])  # each such acquire's invoke with its fail
    return history.loc[~ended].reset_index(drop=True)


class StopWaiting(BaseException):
    """Thrown into a client waiting between two attempts when its case stops (see ``locust_glue``).

    Why a BaseException: no lock's ``except Exception`` may take it for its own error; only
    :meth:`RecordedLock.acquire` catches it, and records the acquire as not granted.
    """


def new_histogram() -> HdrHistogram:
    """An empty histogram with lockbench's range: 1 us .. 1 h, 3 significant digits."""
    return HdrHistogram(HIST_LOWEST_US, HIST_HIGHEST_US, HIST_DIGITS)


def encode_histogram(hist: HdrHistogram) -> str:
    return hist.encode().decode("ascii")


def decode_histogram(text: str) -> HdrHistogram:
    hist = new_histogram()
    if text:
        hist.decode_and_add(text.encode("ascii") if isinstance(text, str) else text)
    return hist


def _interrupted(exc: BaseException) -> str:
    return f"{INTERRUPTED}{type(exc).__name__}: {exc}"[:200]


def _remaining_ms(lease: Lease) -> int | None:
    """Milliseconds until the lease's client-side deadline (negative: past it; None: no deadline)."""
    if lease.deadline_ns is None:
        return None
    return int((lease.deadline_ns - time.monotonic_ns()) // 1_000_000)


#: ``error`` of a probe the lock could not answer (``Lock.owns`` returned None).
PROBE_UNTOLD = "the lock cannot tell (no ownership probe)"


def _clamp_us(ns: int) -> int:
    us = ns // 1000
    return min(max(us, HIST_LOWEST_US), HIST_HIGHEST_US)


class Recorder:
    """One process's recording: histograms plus the event history.

    Why one per process rather than per client: histograms merge cheaply only when few,
    and a single drain point lets the process ship its recording to the master in
    chunks without stopping the clients.
    """

    def __init__(self) -> None:
        self.hists = {name: new_histogram() for name in HIST_NAMES}
        self.events: list[tuple] = []
        self.totals = {"events": 0, **{name: 0 for name in HIST_NAMES}}
        self.lock_stats: dict[str, int] = {}
        self._client_ids = itertools.count()
        #: (client, seq) -> (op, lock) of every invoke still without its completion
        self.open_invokes: dict[tuple[str, int], tuple[str, str]] = {}

    def new_client_id(self) -> str:
        return f"{os.getpid()}-u{next(self._client_ids)}"

    def add_lock_stats(self, stats: dict[str, int]) -> None:
        """Fold one lock instance's own counters (``Lock.stats()``) into this recording."""
        for key, value in stats.items():
            self.lock_stats[key] = self.lock_stats.get(key, 0) + int(value)

    def record(self, hist: str, duration_ns: int) -> None:
        self.hists[hist].record_value(_clamp_us(duration_ns))
        self.totals[hist] += 1

    def event(
        self,
        client: str,
        seq: int,
        op: str,
        type_: str,
        lock: str,
        t_ns: int,
        token: int | None = None,
        value: int | None = None,
        error: str | None = None,
        sent_ns: int | None = None,
    ) -> None:
        self.events.append((client, seq, op, type_, lock, t_ns, token, value, error, sent_ns))
        self.totals["events"] += 1
        if type_ == "invoke":
            self.open_invokes[(client, seq)] = (op, lock)
        elif self.open_invokes:
            self.open_invokes.pop((client, seq), None)

    def close_open(self, t_ns: int, why: str) -> int:
        """Complete every invoke still open as ``info`` (unknown outcome) at ``t_ns``; how many.

        Every invoke must have exactly one completion: an operation cut off (a user Locust
        killed past its stop timeout, a lost worker, a crash) may or may not have taken
        effect, which is exactly what ``info`` says. ``error`` starts with :data:`UNFINISHED`.
        """
        pending = list(self.open_invokes.items())
        for (client, seq), (op, lock) in pending:
            self.event(client, seq, op, "info", lock, t_ns, error=f"{UNFINISHED}{why}"[:200])
        return len(pending)

    # transport -----------------------------------------------------------------------
    def drain(self) -> dict[str, Any]:
        """Hand over what was recorded since the last drain, and forget it."""
        hists = {}
        counts = {}
        for name, hist in self.hists.items():  # replacing a value keeps the dict's size: safe
            counts[name] = hist.get_total_count()
            if counts[name]:
                hists[name] = encode_histogram(hist)
                # a fresh one, not hdrh's reset(): that zeroes 23,552 counters in a Python loop,
                # 1.5 ms each, five a drain with the worker's loop blocked; a new one is 0.13 ms
                self.hists[name] = new_histogram()
        events, self.events = self.events, []
        return {
            "events": [list(e) for e in events],
            "hists": hists,
            "counts": counts,
            "n_events": len(events),
        }

    def absorb(self, chunk: dict[str, Any]) -> None:
        """Add a chunk drained elsewhere (a worker's) into this recording."""
        for name, text in chunk.get("hists", {}).items():
            self.hists[name].decode_and_add(text.encode("ascii") if isinstance(text, str) else text)
            self.totals[name] += chunk["counts"][name]
        self.add_lock_stats(chunk.get("lock_stats", {}))
        events = chunk.get("events", [])
        self.events.extend(tuple(e) for e in events)
        self.totals["events"] += len(events)
        open_ = self.open_invokes
        for e in events:
            if e[3] == "invoke":
                open_[(e[0], e[1])] = (e[2], e[4])
            elif open_:
                open_.pop((e[0], e[1]), None)

    # output ------------------------------------------------------------------------
    def history_frame(self) -> pd.DataFrame:
        return history_frame(self.events)

    def encoded_histograms(self) -> dict[str, str]:
        return {name: encode_histogram(h) for name, h in self.hists.items()}


#: positions in an event tuple (``Recorder.event``) of the two times on the recording process's clock
_T_AT, _SENT_AT = HISTORY_COLUMNS.index("t_ns"), HISTORY_COLUMNS.index("sent_ns")


def shift_times(event: list, delta_ns: int) -> None:
    """Move an event (a drained chunk's list) onto another clock: its time and, where set, its send."""
    event[_T_AT] += delta_ns
    if len(event) > _SENT_AT and event[_SENT_AT] is not None:
        event[_SENT_AT] += delta_ns


def history_frame(events: Iterable[tuple]) -> pd.DataFrame:
    """Events as the history DataFrame of docs/architecture.md, sorted by time.

    An event shorter than the schema (one recorded before ``sent_ns`` was a column) has the rest unset.
    """
    rows = list(events)
    df = pd.DataFrame(rows) if rows else pd.DataFrame(columns=HISTORY_COLUMNS)
    df.columns = HISTORY_COLUMNS[: df.shape[1]]
    for column in HISTORY_COLUMNS[df.shape[1] :]:
        df[column] = None
    df = df.astype(
        {
            "client": "string",
            "seq": "int64",
            "op": "string",
            "type": "string",
            "lock": "string",
            "t_ns": "int64",
            "token": "Int64",
            "value": "Int64",
            "error": "string",
            "sent_ns": "Int64",
        }
    )
    return df.sort_values("t_ns", kind="stable").reset_index(drop=True)


class RecordedLock:
    """A Lock whose every operation lands in the history and the histograms.

    Why a wrapper: algorithms stay free of measurement code, and every algorithm is
    measured by the same few lines, so no impl can flatter itself.
    """

    def __init__(self, lock: Lock, recorder: Recorder, client: str, seq: itertools.count) -> None:
        self.lock = lock
        self.recorder = recorder
        self.client = client
        self._seq = seq
        self._held_since: dict[int, int] = {}

    def next_seq(self) -> int:
        return next(self._seq)

    def acquire(self, timeout: float | None) -> tuple[Lease | None, str | None]:
        """(lease, None) on success; (None, error) on fail or unknown outcome."""
        rec, name = self.recorder, self.lock.name
        seq = self.next_seq()
        t0 = time.monotonic_ns()
        rec.event(self.client, seq, "acquire", "invoke", name, t0)
        try:
            lease = self.lock.acquire(timeout=timeout)
        except LockTimeout as exc:
            t1 = time.monotonic_ns()
            rec.event(self.client, seq, "acquire", "fail", name, t1, error=str(exc)[:200])
            rec.record("acquire_timeout", t1 - t0)
            return None, "timeout"
        except (LockOutcomeUnknown, BackendUnavailable, LockError, OSError) as exc:
            t1 = time.monotonic_ns()
            # BackendUnavailable means nothing was applied, so it is a fail; anything
            # else may have been applied and is an unknown outcome.
            type_ = "fail" if isinstance(exc, BackendUnavailable) else "info"
            rec.event(
                self.client, seq, "acquire", type_, name, t1, error=f"{type(exc).__name__}: {exc}"[:200]
            )
            return None, type(exc).__name__
        except StopWaiting:
            # thrown only while the lock waited in Lock._between_attempts: nothing in flight
            t1 = time.monotonic_ns()
            rec.event(
                self.client,
                seq,
                "acquire",
                "fail",
                name,
                t1,
                error=f"{STOPPED}the case ended while it waited",
            )
            return None, STOPPED_ERROR
        except BaseException as exc:
            # a client library's own error, or the user killed mid-acquire (GreenletExit):
            # the lock may have been granted, so the outcome is unknown; the caller sees it too
            rec.event(self.client, seq, "acquire", "info", name, time.monotonic_ns(), error=_interrupted(exc))
            raise
        t1 = time.monotonic_ns()
        rec.event(self.client, seq, "acquire", "ok", name, t1, token=lease.token, sent_ns=lease.sent_ns)
        rec.record("acquire_ok", t1 - t0)
        self._held_since[id(lease)] = t1
        return lease, None

    def release(self, lease: Lease) -> bool | None:
        """True / False as the lock says (still owned or not); None when unknown."""
        rec, name = self.recorder, self.lock.name
        seq = self.next_seq()
        t0 = time.monotonic_ns()
        since = self._held_since.pop(id(lease), None)
        if since is not None:
            rec.record("hold", t0 - since)
        # the invoke's value: ms the client's own deadline still had to run (None: no deadline), so a
        # "not owned" answer says whether the lock was lost within its lease or the holder overstayed
        rec.event(self.client, seq, "release", "invoke", name, t0, value=_remaining_ms(lease))
        try:
            owned = self.lock.release(lease)
        except (LockError, OSError) as exc:
            t1 = time.monotonic_ns()
            rec.event(
                self.client, seq, "release", "info", name, t1, error=f"{type(exc).__name__}: {exc}"[:200]
            )
            return None
        except BaseException as exc:
            rec.event(self.client, seq, "release", "info", name, time.monotonic_ns(), error=_interrupted(exc))
            raise
        t1 = time.monotonic_ns()
        rec.event(self.client, seq, "release", "ok", name, t1, value=int(bool(owned)))
        rec.record("release", t1 - t0)
        return bool(owned)

    def probe(self, lease: Lease, why: str = "strike") -> bool | None:
        """Ask the lock whether ``lease`` still owns it (``Lock.owns``) and record the answer.

        One ``probe`` invoke/completion pair: ``ok`` with value 1 (owned) or 0 (lost), ``info``
        when the lock cannot tell or the probe failed. The invoke's value is the ms left of the
        client's own deadline, as for a release; its error names why the probe was made.
        """
        rec, name = self.recorder, self.lock.name
        seq = self.next_seq()
        rec.event(
            self.client,
            seq,
            "probe",
            "invoke",
            name,
            time.monotonic_ns(),
            value=_remaining_ms(lease),
            error=why,
        )
        try:
            owned = self.lock.owns(lease)
        except Exception as exc:  # noqa: BLE001 - a client library's own error: the probe could not tell
            rec.event(
                self.client,
                seq,
                "probe",
                "info",
                name,
                time.monotonic_ns(),
                error=f"{type(exc).__name__}: {exc}"[:200],
            )
            return None
        except BaseException as exc:
            rec.event(self.client, seq, "probe", "info", name, time.monotonic_ns(), error=_interrupted(exc))
            raise
        if owned is None:
            rec.event(self.client, seq, "probe", "info", name, time.monotonic_ns(), error=PROBE_UNTOLD)
            return None
        rec.event(self.client, seq, "probe", "ok", name, time.monotonic_ns(), value=int(bool(owned)))
        return bool(owned)
