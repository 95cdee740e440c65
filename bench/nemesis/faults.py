"""Server faults during a case: what to break, when, and the window it was broken in.

Grammar of ``--fault``: ``KIND[@WHEN]``. KIND is ``restart`` (SIGKILL the lock server and
start it again: Redis has no persistence here, so every lock is forgotten),
``failover`` (Redis behind Sentinel: the master dies and the replica takes over, with
the newest writes not yet replicated), ``kill-member`` / ``kill-leader`` (one node of a
ZooKeeper or etcd ensemble), or a network partition (``partition-node``,
``partition-leader``, ``partition-majority``, ``partition-client``: see
:mod:`bench.nemesis.partitions`; the case then runs on test hosts). WHEN is ``held`` (default: the moment a client holds a lock;
the holder is told and keeps the lock while the fault runs) or a time like ``3s`` after
the load starts.

Event-triggered faults use the resource server as a mailbox: bench sets an ``armed``
key (its value: bench's ``time.monotonic_ns()`` when it armed), the first holder whose
lease was granted after that moment claims it and pushes its id to a ``signal`` list,
bench's fault thread pops it (BLPOP) and strikes. Faults therefore happen while a lock
is held on purpose, not by luck.

A fault strikes again and again, as Jepsen's nemesis does (``--strikes N``): strike, heal
(the restarted server, the killed member back, the failed-over master back as a replica,
the partition healed), then let the service grant ``grants_between`` purchases (counted
on the resource's order ledgers) before arming again. Because a claim needs a lease
granted after the arming, every strike after the first falls on a grant the service
made after the previous heal. Every strike's window is kept (:attr:`FaultThread.windows`).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from bench.errors import UserError
from bench.nemesis import partitions

_SERVERS = ("redis", "postgres", "etcd", "memcached", "zookeeper")
_ENSEMBLES = {"zookeeper": "ensemble", "etcd": "ensemble"}

#: fault kind -> (backends it applies to, the topology it needs from infra: one for every
#: backend, or one per backend)
KINDS: dict[str, tuple[tuple[str, ...], str | dict[str, str] | None]] = {
    "restart": (_SERVERS, None),
    "failover": (("redis",), "sentinel"),
    "kill-member": (("zookeeper", "etcd"), "ensemble"),
    "kill-leader": (("zookeeper", "etcd"), "ensemble"),
    "partition-node": (_SERVERS, _ENSEMBLES),
    "partition-leader": (("redis", "zookeeper", "etcd"), {"redis": "sentinel", **_ENSEMBLES}),
    "partition-majority": (_SERVERS, _ENSEMBLES),
    "partition-client": (_SERVERS, None),
}

#: After a strike's action is done, how long at most its holder keeps the lock before bench
#: tells it the fault is over (seconds), waiting for the service to hand the lock to someone
#: else if it lost it: bench lets the holder go as soon as another client has bought (the
#: service granted the lock again while its holder still held it: what the checker will
#: call an overlap). A safe lock never does that, so its holder waits all of it.
#: Why not a fixed half second: clients whose connections died with the server come back on
#: their own schedule. psycopg's pool reconnects after about a second; with 0.5 s, 4 of 6
#: PostgreSQL advisory and for-update restart cells "survived" 3 strikes (2026-12-01 quick
#: matrix) that the same strikes, held longer, show are lost locks (the catalog's "violates").
#: Never more than half the lease (``lease_s``): a hold past its lease proves nothing of the fault.
REGRANT_WAIT_S = {
    "restart": 3.0,
    "failover": 3.0,
    "kill-member": 3.0,
    "kill-leader": 4.0,
    **dict.fromkeys(partitions.KINDS, 0.0),
}
#: How often bench looks at the order ledgers while it waits (seconds).
REGRANT_POLL_S = 0.05

#: How long a signalling holder keeps its lock at most while the fault runs (seconds); bench
#: normally releases it sooner (at most REGRANT_WAIT_S after the strike's action).
#: failover: a Sentinel election that fails is retried after twice the failover timeout (6 s);
#: one took 8.2 s on the shared machine, and a holder that had let go by then proved nothing.
HOLD_FOR = {
    "restart": 12.0,  # a cap: the restart (a ZooKeeper JVM takes seconds) plus REGRANT_WAIT_S
    "failover": 12.0,  # a cap: bench releases the holder at most 3 s after the promotion
    "kill-member": 10.0,
    "kill-leader": 12.0,
    **dict.fromkeys(partitions.KINDS, partitions.HOLD_S),
}


@dataclass(frozen=True)
class FaultSpec:
    """A parsed ``--fault`` value."""

    kind: str
    when: str  # "held" or "<seconds>s"

    @property
    def at_seconds(self) -> float | None:
        return None if self.when == "held" else float(self.when[:-1])

    @property
    def label(self) -> str:
        return f"{self.kind}@{self.when}"

    def topology(self, backend: str | None = None) -> str | None:
        """The server topology this fault needs for ``backend`` (None: the plain server)."""
        topo = KINDS[self.kind][1]
        if isinstance(topo, dict):
            return topo.get(backend or "")
        return topo

    @property
    def is_partition(self) -> bool:
        """A network partition: the case runs on test hosts."""
        return self.kind in partitions.KINDS

    def applies_to(self, backend: str) -> bool:
        return backend in KINDS[self.kind][0]


def parse_fault(text: str) -> FaultSpec:
    """``restart``, ``restart@held``, ``failover@3s`` -> FaultSpec; UserError otherwise."""
    m = re.fullmatch(r"([a-z-]+)(?:@(held|\d+(?:\.\d+)?s))?", text.strip())
    if not m or m.group(1) not in KINDS:
        kinds = ", ".join(KINDS)
        raise UserError(f"bad --fault {text!r}; use KIND[@held|@<seconds>s] with KIND one of {kinds}")
    return FaultSpec(m.group(1), m.group(2) or "held")


@dataclass
class FaultWindow:
    """When a fault started and ended (monotonic ns, the clock of the history) and what it did."""

    kind: str
    start_ns: int
    end_ns: int
    detail: str


def _restart(server: Any) -> str:
    if hasattr(server, "restart"):
        server.restart()  # the server knows how to come back on the same port and data
    else:
        server.process.kill()
        if server.process.popen is not None:
            server.process.popen.wait(10)
        server.start()
    return f"killed (SIGKILL) and restarted {server.process.name}"


class FaultThread(threading.Thread):
    """Runs one fault during a case, from a thread of the bench process.

    Why a thread in bench, not in Locust: the fault acts on servers that bench started
    and owns (their processes and handles); Locust only signals when a lock is held.
    """

    def __init__(
        self,
        spec: FaultSpec,
        server: Any,
        resource_url: str,
        deadline_s: float,
        ground: partitions.PartitionGround | None = None,
        strikes: int = 1,
        grants_between: int = 0,
        lease_s: float | None = None,
    ) -> None:
        super().__init__(name=f"fault-{spec.kind}", daemon=True)
        self.spec = spec
        self.server = server
        self.ground = ground
        #: strikes asked for, and purchases the service must grant between two of them
        self.strikes = strikes if spec.at_seconds is None else 1
        self.grants_between = grants_between
        #: client id of the holder that claimed the latest strike (None for a timed fault)
        self.holder: str | None = None
        #: client id of the holder of every strike, in order
        self.holders: list[str | None] = []
        #: every strike's window, in order
        self.windows: list[FaultWindow] = []
        #: why striking stopped before ``strikes`` (None: all struck, or the case ended first)
        self.stopped_early: str | None = None
        self.resource = redis.Redis.from_url(resource_url, socket_connect_timeout=2, socket_timeout=30)
        self.deadline_s = deadline_s
        #: the lease the holder's lock has (``--ttl``): a strike's holder never waits past half of it
        self.lease_s = lease_s
        self.error: str | None = None
        self._cancel = threading.Event()
        #: purchases on the order ledgers when the latest strike's holder claimed it
        self._ledger_at_claim = 0

    def stop(self) -> None:
        self._cancel.set()

    def _load_started(self) -> bool:
        """Wait until the workload has reset the resource (it would clear an earlier arming)."""
        end = time.monotonic() + 60
        while not self._cancel.is_set() and time.monotonic() < end:
            if self.resource.get("lockbench:res:started"):
                return True
            time.sleep(0.05)
        return False

    def _wait_for_holder(self) -> bool:
        """Arm the fault and wait until a holder claims it (True) or the case ends (False)."""
        if not self._load_started():
            return False
        self.resource.set("lockbench:res:armed", str(time.monotonic_ns()))
        end = time.monotonic() + self.deadline_s
        while not self._cancel.is_set() and time.monotonic() < end:
            popped = self.resource.blpop(["lockbench:res:signal"], timeout=1)
            if popped:
                value = popped[1]
                self.holder = value.decode() if isinstance(value, bytes) else str(value)
                self._ledger_at_claim = self._ledger_length()
                return True
        self.resource.delete("lockbench:res:armed")
        return False

    def _wait_until(self, seconds: float) -> bool:
        return self._load_started() and not self._cancel.wait(seconds)

    def start(self) -> None:
        self.resource.delete(
            "lockbench:res:started", "lockbench:res:armed", "lockbench:res:signal", "lockbench:res:healed"
        )
        super().start()

    def regrant_wait_s(self) -> float:
        """How long the strike's holder keeps its lock after the action, at most (REGRANT_WAIT_S)."""
        wait = REGRANT_WAIT_S[self.spec.kind]
        return min(wait, self.lease_s / 2) if self.lease_s else wait

    def _release_holder(self) -> None:
        """Tell the strike's holder the fault is over: once another client has bought, or after the wait."""
        if self.spec.at_seconds is not None:
            return
        end = time.monotonic() + self.regrant_wait_s()
        while not self._cancel.is_set() and time.monotonic() < end:
            if self._ledger_length() > self._ledger_at_claim:
                break  # the lock was granted again under its holder: the history has the overlap
            self._cancel.wait(REGRANT_POLL_S)
        if not self._cancel.is_set():
            self.resource.rpush("lockbench:res:healed", "1")

    @property
    def window(self) -> FaultWindow | None:
        """The first strike's window (None: the fault never struck)."""
        return self.windows[0] if self.windows else None

    def run(self) -> None:
        try:
            for i in range(self.strikes):
                if i and not (self._heal() and self._paced()):
                    break
                window = self._strike()
                if window is None:
                    break
                self._release_holder()
                self.windows.append(window)
                self.holders.append(self.holder)
                if self._cancel.is_set():
                    break
            if self.windows:
                self._heal_topology()  # the case ends whole: a server dead now died on its own
        except Exception as exc:  # noqa: BLE001 - reported in the case row, the run goes on
            self.error = f"{type(exc).__name__}: {exc}"

    def _heal_topology(self) -> None:
        """Bring back what a strike took down (a restart and a partition heal themselves)."""
        if self.spec.kind in ("kill-member", "kill-leader", "failover") and hasattr(self.server, "heal"):
            self.server.heal()

    def _heal(self) -> bool:
        """Heal before the next strike; False once the case is over."""
        self._heal_topology()
        return not self._cancel.is_set()

    def _ledger_length(self) -> int:
        keys = list(self.resource.scan_iter(match="lockbench:res:orders:*", count=1000))
        if not keys:
            return 0
        pipe = self.resource.pipeline(transaction=False)
        for key in keys:
            pipe.llen(key)
        return sum(pipe.execute())

    def _paced(self) -> bool:
        """Wait until the service granted ``grants_between`` purchases since the heal (False: it did not).

        A service that grants nothing for 10 s after a heal is not struck again: its history
        already shows the outage, and striking a lock nobody can take proves nothing more.
        """
        if self.grants_between <= 0:
            return True
        start = self._ledger_length()
        idle_until = time.monotonic() + 10.0
        last = start
        while not self._cancel.is_set():
            now = self._ledger_length()
            if now - start >= self.grants_between:
                return True
            if now != last:
                last, idle_until = now, time.monotonic() + 10.0
            elif time.monotonic() > idle_until:
                self.stopped_early = f"no purchase for 10 s after strike {len(self.windows)}'s heal"
                return False
            self._cancel.wait(0.05)
        return False

    def _strike(self) -> FaultWindow | None:
        spec = self.spec
        trigger: Callable[[], bool]
        if spec.at_seconds is None:
            trigger = self._wait_for_holder
        else:
            at = spec.at_seconds
            trigger = lambda: self._wait_until(at)  # noqa: E731
        if spec.kind == "failover":
            # The replica is paused before the trigger so that the holder's lock exists on
            # the master only (loopback replication is sub-millisecond otherwise).
            timings: dict[str, Any] = {}

            def hold() -> None:
                timings["triggered"] = trigger()
                timings["start"] = time.monotonic_ns()

            self.server.lose_writes_failover(hold)
            if not timings.get("triggered"):
                return None
            return FaultWindow(
                "failover", timings["start"], time.monotonic_ns(), "master killed with unreplicated writes"
            )
        if not trigger():
            return None
        if spec.is_partition:
            if self.ground is None:
                raise RuntimeError(f"{spec.kind} needs the case on test hosts")
            start, healed, detail = partitions.strike(spec.kind, self.ground, self.holder, self._cancel)
            return FaultWindow(spec.kind, start, healed, detail)
        start = time.monotonic_ns()
        if spec.kind == "restart":
            detail = _restart(self.server)
        elif spec.kind == "kill-leader":
            detail = self.server.kill_leader()
        else:
            detail = self.server.kill_member()
        return FaultWindow(spec.kind, start, time.monotonic_ns(), detail)
