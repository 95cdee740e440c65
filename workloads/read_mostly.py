"""read-mostly: readers and writers share documents under a read/write lock (a valid locustfile).

Each client picks a document (``--items``), then with probability ``--read-ratio`` reads
it under the lock's read side, otherwise writes it under the write side. A read takes
the document's version and spends the critical-section time (``--cs``); a write reads
the version, spends the time, writes version + 1 and counts the write on a ledger. An
entry witness on the resource server sees any conflicting client inside. Only impls that
declare ``read_write`` can run it; they take ``params["mode"] = "read" | "write"``::

    locust -f workloads/read_mostly.py --headless -u 50 -r 50 -t 10s \\
        --lock-impl zookeeper.rwlock --lock-url zookeeper://127.0.0.1:2181 \\
        --resource-url redis://127.0.0.1:6380/0 --read-ratio 0.9

History: acquires carry their mode in ``value`` (1 read, 0 write; see
:mod:`workloads.checks.read_write`), the business steps are ops ``read`` and ``write``.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import random
import time
from typing import Any

import redis
from locust import User, events, task

from lockimpls.base import BackendUnavailable, Lease, LockError, LockTimeout
from workloads.checks.read_write import MODE_READ, MODE_WRITE, check_read_mostly
from workloads.harness import locust_glue as harness
from workloads.harness.backoff import ErrorBackoff, wait_of
from workloads.harness.distributions import parse_distribution
from workloads.harness.recording import INTERRUPTED, RecordedLock, Recorder

log = logging.getLogger("lockbench")


def doc_names(n: int) -> list[str]:
    return [f"doc-{i}" for i in range(n)]


@events.init_command_line_parser.add_listener
def _add_options(parser: Any) -> None:
    g = parser.add_argument_group("read-mostly")
    g.add_argument("--items", type=int, default=1, help="number of documents (one lock each)")
    g.add_argument("--read-ratio", type=float, default=0.9, help="fraction of operations that read (0..1)")
    g.add_argument("--cs", default="1ms", help="critical-section time: 1ms, exp:1ms, uniform:0.5ms:2ms, ...")


class RWResource:
    """Documents (a version and a ledger of writes) plus reader/writer witnesses, on Redis.

    The witness counts readers and writers inside each document; entering reads both
    counts in one MULTI, so whichever of two conflicting clients enters second sees the
    first, independent of any client's clock.
    """

    def __init__(self, url: str, namespace: str = "lockbench:rw") -> None:
        self.client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=10)
        self.ns = namespace

    def _k(self, kind: str, doc: str) -> str:
        return f"{self.ns}:{kind}:{doc}"

    def reset(self, docs: list[str]) -> None:
        pipe = self.client.pipeline(transaction=False)
        for doc in docs:
            pipe.set(self._k("version", doc), 0)
            pipe.delete(self._k("writes", doc), self._k("readers", doc), self._k("writers", doc))
        pipe.execute()

    def enter(self, doc: str, read: bool) -> int:
        """Register this client inside; returns conflicting clients inside, itself included."""
        mine, theirs = ("readers", "writers") if read else ("writers", "readers")
        pipe = self.client.pipeline(transaction=True)
        pipe.incr(self._k(mine, doc))
        pipe.get(self._k(theirs, doc))
        inside, other = pipe.execute()
        other = int(other or 0)
        return 1 + other if read else int(inside) + other

    def leave(self, doc: str, read: bool) -> None:
        self.client.decr(self._k("readers" if read else "writers", doc))

    def read_version(self, doc: str) -> int:
        return int(self.client.get(self._k("version", doc)) or 0)

    def write_version(self, doc: str, value: int) -> None:
        self.client.set(self._k("version", doc), value)
        self.client.incr(self._k("writes", doc))

    def final_state(self, docs: list[str]) -> dict:
        out = {}
        for doc in docs:
            out[doc] = {
                "version": self.read_version(doc),
                "writes": int(self.client.get(self._k("writes", doc)) or 0),
                "readers_inside": int(self.client.get(self._k("readers", doc)) or 0),
                "writers_inside": int(self.client.get(self._k("writers", doc)) or 0),
            }
        return {"docs": out}


class ReadMostly:
    """The workload's server-side steps: reset the documents, read the final state, judge."""

    name = "read-mostly"

    def setup(self, opts: Any) -> None:
        RWResource(opts.resource_url).reset(doc_names(opts.items))

    def final_state(self, opts: Any) -> dict:
        return RWResource(opts.resource_url).final_state(doc_names(opts.items))

    def summarize(self, history: Any, final_state: dict) -> str:
        verdict = check_read_mostly(history, final_state)
        counters = ", ".join(
            f"{k}={v:.0f}" if isinstance(v, float) else f"{k}={v}" for k, v in verdict.counters.items()
        )
        return f"lockbench read-mostly verdict: {verdict.status} ({counters})"


harness.use_workload(ReadMostly())
_resources: dict[tuple[int, str], RWResource] = {}


def shared_resource(url: str) -> RWResource:
    """One resource client per process and URL."""
    key = (os.getpid(), url)
    if key not in _resources:
        _resources[key] = RWResource(url)
    return _resources[key]


class ModeRecordedLock(RecordedLock):
    """A RecordedLock that marks every acquire event with its mode (``value``: 1 read, 0 write).

    Why a subclass: the checkers must know which holds are shared, and the history has
    no column for it; every other event is recorded exactly as RecordedLock does.
    """

    def __init__(self, lock: Any, recorder: Recorder, client: str, seq: itertools.count, read: bool) -> None:
        super().__init__(lock, recorder, client, seq)
        self.mode = MODE_READ if read else MODE_WRITE

    def acquire(self, timeout: float | None) -> tuple[Lease | None, str | None]:
        rec, name, mode = self.recorder, self.lock.name, self.mode
        seq = self.next_seq()
        t0 = time.monotonic_ns()
        rec.event(self.client, seq, "acquire", "invoke", name, t0, value=mode)
        try:
            lease = self.lock.acquire(timeout=timeout)
        except LockTimeout as exc:
            t1 = time.monotonic_ns()
            rec.event(self.client, seq, "acquire", "fail", name, t1, value=mode, error=str(exc)[:200])
            rec.record("acquire_timeout", t1 - t0)
            return None, "timeout"
        except (LockError, OSError) as exc:
            t1 = time.monotonic_ns()
            type_ = "fail" if isinstance(exc, BackendUnavailable) else "info"
            error = f"{type(exc).__name__}: {exc}"[:200]
            rec.event(self.client, seq, "acquire", type_, name, t1, value=mode, error=error)
            return None, type(exc).__name__
        except BaseException as exc:
            # the user killed mid-acquire, or a client library's own error: outcome unknown
            error = f"{INTERRUPTED}{type(exc).__name__}: {exc}"[:200]
            rec.event(self.client, seq, "acquire", "info", name, time.monotonic_ns(), value=mode, error=error)
            raise
        t1 = time.monotonic_ns()
        rec.event(self.client, seq, "acquire", "ok", name, t1, token=lease.token, value=mode)
        rec.record("acquire_ok", t1 - t0)
        self._held_since[id(lease)] = t1
        return lease, None


class ReadMostlyUser(User):
    """One client: a closed loop of read (shared lock) or write (exclusive lock) on a document."""

    def wait_time(self) -> float:
        """No wait (a closed loop flat out), but after a server error its backoff (harness/backoff.py)."""
        return wait_of(self)

    def on_start(self) -> None:
        opts = self.environment.parsed_options
        self.opts = opts
        self.rec = harness.recorder(self.environment)
        self.client_id = self.rec.new_client_id()
        self.docs = doc_names(opts.items)
        self.rng = random.Random()
        self.backoff = ErrorBackoff()
        self.cs = parse_distribution(opts.cs, self.rng)
        self.resource = shared_resource(opts.resource_url)
        cls = harness.lock_class(opts)
        if not cls.capabilities.read_write:
            log.error(
                "lockbench: %s has no read/write side; read-mostly needs an impl with read_write", cls.id
            )
            self.environment.runner.quit()
            return
        options = harness.lock_options(opts, 0, harness.context(self.environment).clock_reads)
        urls = harness.lock_urls(opts)
        seq = itertools.count()

        def make(doc: str, read: bool) -> ModeRecordedLock:
            params = {**options.params, "mode": "read" if read else "write"}
            lock = cls(f"read-mostly:{doc}", urls, dataclasses.replace(options, params=params))
            return ModeRecordedLock(lock, self.rec, self.client_id, seq, read)

        self.readers = {doc: make(doc, True) for doc in self.docs}
        self.writers = {doc: make(doc, False) for doc in self.docs}

    def on_stop(self) -> None:
        harness.close_locks(
            [*getattr(self, "readers", {}).values(), *getattr(self, "writers", {}).values()], self.environment
        )

    def _fire(self, name: str, started_ns: int, exc: Exception | None = None) -> None:
        harness.fire_request(self.environment, name, started_ns, exc)

    @task
    def operate(self) -> None:
        doc = self.rng.choice(self.docs) if len(self.docs) > 1 else self.docs[0]
        read = self.rng.random() < self.opts.read_ratio
        lock = (self.readers if read else self.writers)[doc]
        label = "acquire_read" if read else "acquire_write"
        started = time.monotonic_ns()
        lease, error = lock.acquire(timeout=self.opts.acquire_timeout)
        self.backoff.after(error)
        if lease is None:
            self._fire(label, started, RuntimeError(error))
            return
        self._fire(label, started)
        try:
            self._critical_section(lock, doc, read)
        finally:
            started = time.monotonic_ns()
            lock.release(lease)
            self._fire("release", started)

    def _critical_section(self, lock: ModeRecordedLock, doc: str, read: bool) -> None:
        rec, res, name = self.rec, self.resource, lock.lock.name
        entered = time.monotonic_ns()
        inside = res.enter(doc, read)
        rec.event(self.client_id, lock.next_seq(), "witness", "ok", name, time.monotonic_ns(), value=inside)
        try:
            seq = lock.next_seq()
            op = "read" if read else "write"
            rec.event(self.client_id, seq, op, "invoke", name, time.monotonic_ns())
            version = res.read_version(doc)
            time.sleep(self.cs())
            if not read:
                version += 1
                res.write_version(doc, version)
            rec.event(self.client_id, seq, op, "ok", name, time.monotonic_ns(), value=version)
        finally:
            res.leave(doc, read)
            rec.record("cs", time.monotonic_ns() - entered)
