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

import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from bench.errors import UserError
from bench.nemesis import partitions
from workloads.harness.resource import LEFT_SEP, OWNER_SEP

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
    # RedLock under a master restart, as Kleppmann (2016) and the Redis distributed-locks page
    # discuss it: the holder wins with exactly 3 of 5 masters (bench keeps 2 masters stopped
    # while it acquires) and one of its 3 restarts (see FaultThread._redlock_restart)
    "restart-bare": (("redis",), None),  # no persistence, started again at once
    "restart-aof": (("redis",), "aof-everysec"),  # appendonly yes, appendfsync everysec, kill -9
    "restart-delayed": (("redis",), None),  # no persistence, kept down longer than the lease
}
#: The RedLock restart arms (each needs several masters).
REDLOCK_ARMS = ("restart-bare", "restart-aof", "restart-delayed")

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
    **dict.fromkeys(("restart-bare", "restart-aof", "restart-delayed"), 3.0),
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
    **dict.fromkeys(("restart-bare", "restart-aof", "restart-delayed"), 12.0),
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
    #: case label -> why this strike's server was not one the case's holder's grant rested on
    missed: dict[str, str] = field(default_factory=dict)
    #: when the struck service answered again (monotonic ns; 0: at ``end_ns``). A restart's action
    #: ends once the server answers; a member or leader kill leaves the others serving at once.
    service_at_ns: int = 0

    @property
    def service_ns(self) -> int:
        return self.service_at_ns or self.end_ns


def _restart(server: Any) -> str:
    if hasattr(server, "restart"):
        server.restart()  # the server knows how to come back on the same port and data
    else:
        server.process.kill()
        if server.process.popen is not None:
            server.process.popen.wait(10)
        server.start()
    return f"killed (SIGKILL) and restarted {server.process.name}"


#: After the first holder claimed a strike, how long the other cases of a group may take to
#: claim it too before the fault strikes (seconds). Six clients of a healthy lock claim within
#: milliseconds of the arming; a case whose holder has not claimed by then is "missed" and is
#: armed again for the next strike (FaultThread._needy), so a short window costs little. At
#: 1.5 s, claiming took 3.7 s of a 10.5 s ZooKeeper restart cycle on the busy machine.
CLAIM_WINDOW_S = 0.5
#: Test-only: with this variable set to 1 a server fault's action does nothing (a fault that cannot bite).
NOOP_ENV = "LOCKBENCH_TEST_NOOP_FAULT"
#: How often bench looks for claims in the cases' mailboxes (seconds).
CLAIM_POLL_S = 0.005


@dataclass
class StrikeMark:
    """What one strike was to one case of the group: did its precondition hold, and if not, why.

    Why per case: one strike serves every case whose holder was inside its critical section,
    holding the lock, when the fault hit; for the others the strike proved nothing.
    """

    strike: int
    hit: bool
    reason: str = ""
    holder: str | None = None
    claimed_ns: int | None = None


def namespace(label: str) -> str:
    """The lock-name prefix of group member ``label`` (``--lock-namespace``): its keys contain ``:m<label>:``."""
    return f"m{label}:"


#: What bench tells a holder whose strike did not count for its case (``Mailbox.release``).
MISSED = "missed"


class Mailbox:
    """One case's side of a (possibly shared) fault: the resource its holders claim strikes on.

    Every case of a group has its own resource (its own Redis database), so its holders,
    ledgers and mailbox keys never meet another case's.
    """

    def __init__(self, resource_url: str, label: str = "") -> None:
        self.label = label
        self.client = redis.Redis.from_url(resource_url, socket_connect_timeout=2, socket_timeout=30)
        self.active = True
        self.started = False
        #: the holder that claimed the strike being prepared (None: nobody yet)
        self.holder: str | None = None
        #: the value its lock wrote for that grant (``Lease.owner``): where its key is, on any server
        self.owner = ""
        #: what the holder's own lease had left when it claimed (seconds; None: no lease or not said)
        self.lease_left_s: float | None = None
        self.claimed_ns: int | None = None
        self.ledger_at_claim = 0
        self.released = False
        self.marks: list[StrikeMark] = []
        #: why this case was struck no more (None: it ran as long as the fault did)
        self.stopped: str | None = None

    def reset(self) -> None:
        self.client.delete(
            "lockbench:res:started", "lockbench:res:armed", "lockbench:res:signal", "lockbench:res:healed"
        )

    def ledger(self) -> int:
        keys = list(self.client.scan_iter(match="lockbench:res:orders:*", count=1000))
        if not keys:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.llen(key)
        return sum(pipe.execute())

    def arm(self, armed_ns: int) -> None:
        self.holder, self.claimed_ns, self.released, self.owner = None, None, False, ""
        self.lease_left_s = None
        # a heal left over from a holder that gave up waiting must not release the next one early
        self.client.delete("lockbench:res:healed", "lockbench:res:signal")
        self.client.set("lockbench:res:armed", str(armed_ns))

    def poll_claim(self) -> bool:
        """True once a holder claimed the armed strike (recorded with the moment bench saw it)."""
        if self.holder is not None:
            return True
        value = self.client.lpop("lockbench:res:signal")
        if value is None:
            return False
        text = value.decode() if isinstance(value, bytes) else str(value)
        text, _, left = text.partition(LEFT_SEP)
        self.holder, _, self.owner = text.partition(OWNER_SEP)
        self.lease_left_s = int(left) / 1000 if left.lstrip("-").isdigit() else None
        self.claimed_ns = time.monotonic_ns()
        self.ledger_at_claim = self.ledger()
        return True

    def disarm(self) -> None:
        self.client.delete("lockbench:res:armed")

    def release(self, missed: bool = False) -> None:
        """Let the holder go; ``missed``: this strike did not count for its case (the holder then
        closes its fault-hold as ``fail``, and the case's stop rule waits for a strike that hit)."""
        if not self.released:
            self.client.rpush("lockbench:res:healed", MISSED if missed else "1")
            self.released = True

    def close(self) -> None:
        self.client.close()


class FaultThread(threading.Thread):
    """Runs one fault during a case, or during a group of cases that share the servers, from bench.

    Why a thread in bench, not in Locust: the fault acts on servers that bench started
    and owns (their processes and handles); Locust only signals when a lock is held.
    Why a group: a strike costs seconds (a restart, a heal, the grants after it) and does not
    care how many locks it breaks, so the cases of every impl on the same servers take it
    together (as Jepsen's ``independent`` runs many keys under one nemesis); each case keeps
    its own keys, resource, history and checker, and each strike is counted only for the cases
    whose holder was inside when it hit (:class:`StrikeMark`).
    """

    def __init__(
        self,
        spec: FaultSpec,
        server: Any,
        resource_url: str | list[str],
        deadline_s: float,
        ground: partitions.PartitionGround | None = None,
        strikes: int = 1,
        grants_between: int = 0,
        lease_s: float | None = None,
        labels: list[str] | None = None,
        servers: list[Any] | None = None,
        session_s: float | None = None,
        quorum_keys: dict[str, list[str]] | None = None,
    ) -> None:
        super().__init__(name=f"fault-{spec.kind}", daemon=True)
        self.spec = spec
        self.server = server
        #: every lock server of the topology (RedLock: its masters): a restart strikes the one
        #: holding the holders' keys
        self.servers = servers or [server]
        self.ground = ground
        #: strikes asked for, and purchases the service must grant between two of them
        self.strikes = strikes if spec.at_seconds is None else 1
        self.grants_between = grants_between
        urls = [resource_url] if isinstance(resource_url, str) else list(resource_url)
        names = labels or [str(i) for i in range(len(urls))]
        self.mailboxes = [Mailbox(url, name) for url, name in zip(urls, names, strict=True)]
        #: client id of the holder that claimed the latest strike (the first case's; None for a timed fault)
        self.holder: str | None = None
        #: client id of the holder of every strike, in order
        self.holders: list[str | None] = []
        #: every strike's window, in order
        self.windows: list[FaultWindow] = []
        #: why striking stopped before ``strikes`` (None: all struck, or the case ended first)
        self.stopped_early: str | None = None
        #: where each strike's time went (seconds): waiting for holders to claim, the action, the
        #: service back (from the action's start), the holder's wait after it, and before it the
        #: heal and the grants the service had to make since the previous strike
        self.cycles: list[dict[str, float]] = []
        self.deadline_s = deadline_s
        #: the lease the holder's lock has (``--ttl``): a strike's holder never waits past half of it
        self.lease_s = lease_s
        #: a session timeout the lock rests on (ZooKeeper), which a partition's cut must outlast
        self.session_s = session_s
        #: case label -> the keys its lock takes on each master (RedLock's arms arrange the vote)
        self.quorum_keys = quorum_keys or {}
        self.error: str | None = None
        #: the cases armed for the strike being prepared (the others already had their strikes)
        self._armed: set[str] = {m.label for m in self.mailboxes}
        self._cancel = threading.Event()

    def mailbox(self, label: str) -> Mailbox:
        return next(m for m in self.mailboxes if m.label == label)

    def finished(self, label: str) -> None:
        """The case ``label`` has ended (its Locust exited): strike it no more."""
        box = self.mailbox(label)
        box.active = False
        if all(not m.active for m in self.mailboxes):
            self._cancel.set()

    def stop(self) -> None:
        self._cancel.set()

    def _active(self) -> list[Mailbox]:
        return [m for m in self.mailboxes if m.active]

    def _load_started(self) -> bool:
        """Wait until every case's workload has reset its resource (that would clear an earlier arming)."""
        end = time.monotonic() + 60
        while not self._cancel.is_set() and time.monotonic() < end:
            waiting = [m for m in self._active() if not m.started]
            for box in waiting:
                box.started = bool(box.client.get("lockbench:res:started"))
            if all(m.started for m in self._active()):
                return bool(self._active())
            time.sleep(0.05)
        for box in self._active():
            if not box.started:
                box.active, box.stopped = False, "its load never started"
        return bool(self._active())

    def _wait_for_holder(self) -> bool:
        """Arm every case, wait for claims, and decide who is inside (True) or the fault is over (False)."""
        if not self._load_started():
            return False
        armed = time.monotonic_ns()
        boxes = self._needy() or self._active()
        for box in self._active():
            box.holder = None  # a case not armed this time has no holder in this strike
        self._armed = {b.label for b in boxes}
        for box in boxes:
            box.arm(armed)
        end = time.monotonic() + self.deadline_s
        first: float | None = None
        while not self._cancel.is_set() and time.monotonic() < end:
            claimed = [b.poll_claim() for b in boxes if b.active]
            if any(claimed) and first is None:
                first = time.monotonic()
            if claimed and all(claimed):
                break
            if first is not None and time.monotonic() - first > CLAIM_WINDOW_S:
                break
            if not any(b.active for b in boxes):
                break
            time.sleep(CLAIM_POLL_S)
        for box in boxes:
            box.disarm()
            box.poll_claim()  # a claim that came in just before the disarm is still inside: it counts
        holders = [b for b in boxes if b.holder is not None]
        if not holders:
            return False
        self.holder = holders[0].holder
        return True

    def _wait_until(self, seconds: float) -> bool:
        return self._load_started() and not self._cancel.wait(seconds)

    def start(self) -> None:
        for box in self.mailboxes:
            box.reset()
        super().start()

    def regrant_wait_s(self) -> float:
        """How long the strike's holder keeps its lock after the action, at most (REGRANT_WAIT_S)."""
        wait = REGRANT_WAIT_S[self.spec.kind]
        return min(wait, self.lease_s / 2) if self.lease_s else wait

    def _release_holder(self, which: Callable[[Mailbox], bool] | None = None) -> None:
        """Tell each strike's holder the fault is over: once another client of its case has bought, or after the wait.

        ``which`` limits it to some holders (a delayed restart lets go of those whose lease ends first).
        """
        if self.spec.at_seconds is not None:
            return
        held = [
            b
            for b in self.mailboxes
            if b.holder is not None and not b.released and (which is None or which(b))
        ]
        index = len(self.windows)  # the strike being finished (marked before, except a delayed restart's)

        def missed(box: Mailbox) -> bool:
            return bool(box.marks) and box.marks[-1].strike == index and not box.marks[-1].hit

        end = time.monotonic() + self.regrant_wait_s()
        while not self._cancel.is_set() and time.monotonic() < end:
            for box in held:
                if not box.released and box.ledger() > box.ledger_at_claim:
                    box.release(missed(box))  # granted again under its holder: the history has the overlap
            if all(b.released for b in held):
                break
            self._cancel.wait(REGRANT_POLL_S)
        if not self._cancel.is_set():
            for box in held:
                box.release(missed(box))

    @property
    def window(self) -> FaultWindow | None:
        """The first strike's window (None: the fault never struck)."""
        return self.windows[0] if self.windows else None

    def _needy(self) -> list[Mailbox]:
        """The running cases that still lack strikes that hit them (each wants :attr:`strikes`)."""
        return [m for m in self.mailboxes if m.active and sum(k.hit for k in m.marks) < self.strikes]

    def run(self) -> None:
        try:
            # a strike that missed a case (its holder was not inside) is paid again for it, up to
            # twice the strikes asked: each case wants its own k strikes that could have broken it
            for i in range(2 * self.strikes if self.spec.at_seconds is None else 1):
                if i and not self._needy():
                    break
                cycle: dict[str, float] = {}
                if i and not self._between(cycle):
                    break
                began_ns = time.monotonic_ns()
                window = self._strike()
                if window is None:
                    break
                self._mark(len(self.windows), window)
                released = time.monotonic()
                self._release_holder()
                cycle.update(
                    claim_s=(window.start_ns - began_ns) / 1e9,
                    strike_s=(window.end_ns - window.start_ns) / 1e9,
                    service_back_s=(window.service_ns - window.start_ns) / 1e9,
                    holder_wait_s=time.monotonic() - released,
                )
                self.cycles.append(cycle)
                self.windows.append(window)
                self.holders.append(self.holder)
                if self._cancel.is_set():
                    break
            if self.windows:
                self._heal_topology()  # the case ends whole: a server dead now died on its own
        except Exception as exc:  # noqa: BLE001 - reported in the case row, the run goes on
            self.error = f"{type(exc).__name__}: {exc}"

    def _mark(self, index: int, window: FaultWindow) -> None:
        """Each running case's precondition for strike ``index``: its holder claimed before the action."""
        for box in self.mailboxes:
            if not box.started:
                continue
            if box.label not in self._armed:
                box.marks.append(StrikeMark(index, False, "not armed: this case already had its strikes"))
            elif box.holder is None:
                why = "no holder of this case was inside its critical section when the fault struck"
                box.marks.append(StrikeMark(index, False, why))
            elif box.claimed_ns is not None and box.claimed_ns > window.start_ns:
                box.marks.append(
                    StrikeMark(index, False, "the holder claimed after the strike began", box.holder)
                )
            else:
                # the struck server may not be one the holder's grant rests on (FaultWindow.missed)
                miss = window.missed.get(box.label, "")
                box.marks.append(StrikeMark(index, not miss, miss, box.holder))

    def _heal_topology(self) -> None:
        """Bring back what a strike took down (a restart and a partition heal themselves)."""
        if self.spec.kind in ("kill-member", "kill-leader", "failover") and hasattr(self.server, "heal"):
            self.server.heal()

    def _between(self, cycle: dict[str, float]) -> bool:
        """Heal and let the service grant its purchases before the next strike; False once it is over.

        The two overlap: the grants are counted from the holder's release while a killed member
        starts again (a 3-node ensemble serves on with two), so a strike costs the longer of the
        two, not their sum. The next strike waits for both (a leader kill needs the others whole).
        """
        t = time.monotonic()
        healed: dict[str, float] = {}

        def heal() -> None:
            try:
                self._heal_topology()
            except Exception as exc:  # noqa: BLE001 - reported with the case, as a strike error is
                self.error = self.error or f"heal: {type(exc).__name__}: {exc}"
            healed["s"] = time.monotonic() - t

        healer = threading.Thread(target=heal, name=f"heal-{self.spec.kind}", daemon=True)
        healer.start()
        paced = self._paced()
        cycle["grants_s"] = time.monotonic() - t
        healer.join()
        cycle["heal_s"] = healed.get("s", time.monotonic() - t)
        cycle["between_s"] = time.monotonic() - t
        return paced and not self._cancel.is_set()

    def _paced(self) -> bool:
        """Wait until each case's service granted ``grants_between`` purchases since the heal.

        A case whose service grants nothing for 10 s after a heal is not struck again: its
        history already shows the outage, and striking a lock nobody can take proves nothing
        more. False once no case is left to strike.
        """
        if self.grants_between <= 0:
            return bool(self._active())
        boxes = self._active()
        start = {id(b): b.ledger() for b in boxes}
        last = dict(start)
        idle_until = {id(b): time.monotonic() + 10.0 for b in boxes}
        while not self._cancel.is_set():
            waiting = False
            for box in boxes:
                if not box.active:
                    continue
                now = box.ledger()
                if now - start[id(box)] >= self.grants_between:
                    continue
                waiting = True
                if now != last[id(box)]:
                    last[id(box)], idle_until[id(box)] = now, time.monotonic() + 10.0
                elif time.monotonic() > idle_until[id(box)]:
                    box.active = False
                    box.stopped = f"no purchase for 10 s after strike {len(self.windows)}'s heal"
            if not self._active():
                self.stopped_early = next((b.stopped for b in boxes if b.stopped), None)
                return False
            if not waiting:
                return True
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
        if spec.kind in REDLOCK_ARMS:  # stops two masters before it triggers
            return self._redlock_restart(trigger)
        if not trigger():
            return None
        if spec.is_partition:
            if self.ground is None:
                raise RuntimeError(f"{spec.kind} needs the case on test hosts")
            cut = partitions.cut_seconds(self.lease_s, self.session_s)
            holders = [b.holder for b in self.mailboxes if b.holder is not None]  # every case's, one cut
            start, healed, detail = partitions.strike(spec.kind, self.ground, holders, self._cancel, cut)
            return FaultWindow(spec.kind, start, healed, detail)
        missed: dict[str, str] = {}
        target = self.server
        if spec.kind == "restart" and len(self.servers) > 1:
            target, missed = self._restart_target()
        start = time.monotonic_ns()
        if os.environ.get(NOOP_ENV) == "1":
            # test-only: a fault that breaks nothing, so a suite can show that a positive control
            # that survived greys every cell of its scenario (tests/test_strike_preconditions.py)
            time.sleep(0.05)
            return FaultWindow(
                spec.kind, start, time.monotonic_ns(), "no-op (test fault: nothing was done)", missed
            )
        service_ns = 0
        if spec.kind == "restart":
            detail = _restart(target)  # returns once the server answers its readiness probe again
        elif spec.kind == "kill-leader":
            detail = self.server.kill_leader()
            service_ns = self._leader_again()
        else:
            detail = self.server.kill_member()  # the others keep quorum: the service never stopped
        return FaultWindow(spec.kind, start, time.monotonic_ns(), detail, missed, service_ns)

    def _leader_again(self, timeout_s: float = 30.0) -> int:
        """When the ensemble had a leader again after a leader kill (monotonic ns; 0: not seen in time)."""
        end = time.monotonic() + timeout_s
        while not self._cancel.is_set() and time.monotonic() < end:
            try:
                if self.server.leader() is not None:
                    return time.monotonic_ns()
            except Exception:  # noqa: BLE001 - a member that cannot answer yet: ask again
                pass
            time.sleep(0.02)
        return 0

    #: Of RedLock's 5 masters, these two hold every case's lock key for a phantom owner while
    #: bench arms a strike, so each grant meanwhile rests on exactly the other three.
    BLOCKED_FOR_BARE_MAJORITY = (3, 4)
    PHANTOM = "lockbench-phantom-voter"

    def _phantom(self, servers: list[Any], on: bool) -> None:
        """Give (``on``) or take back every case's lock key on ``servers`` from a phantom owner."""
        keys = [k for box in self.mailboxes for k in self.quorum_keys.get(box.label, [])]
        for server in servers:
            client = redis.Redis.from_url(server.url, socket_connect_timeout=2, socket_timeout=5)
            try:
                pipe = client.pipeline(transaction=False)
                for key in keys:
                    if on:
                        pipe.set(key, self.PHANTOM, px=60_000)
                    else:
                        pipe.delete(key)
                pipe.execute()
            finally:
                client.close()

    def _redlock_restart(self, trigger: Callable[[], bool]) -> FaultWindow | None:
        """Restart one of the holder's 3 masters (the arms of :data:`REDLOCK_ARMS`).

        Before the arming, two masters get every case's lock key for a phantom owner (a
        waiter's vote that split, as when waiters race): a holder granted meanwhile owns
        exactly the other three. Once it claims, one of its three is SIGKILLed, the phantom
        keys go, and the killed master starts again: at once without persistence
        (``restart-bare``: three masters are free while the holder holds), at once from its
        AOF (``restart-aof``), or after the lease (``restart-delayed``). Unlike stopping the
        two masters, this holds for any RedLock client, whatever its reply timeouts.
        """
        if len(self.servers) < 5:
            raise RuntimeError(f"{self.spec.kind} needs RedLock's 5 masters")
        blocked = [self.servers[i] for i in self.BLOCKED_FOR_BARE_MAJORITY]
        self._phantom(blocked, on=True)
        try:
            if not trigger():
                return None
            running = [sv for sv in self.servers if sv not in blocked]
            target, missed = self._restart_target(running)
            missed.update(self._not_bare(blocked))
            start = time.monotonic_ns()
            target.process.kill()
            if target.process.popen is not None:
                target.process.popen.wait(10)
        finally:
            self._phantom(blocked, on=False)
        freed = time.monotonic_ns()  # the lock service (a quorum of masters) serves on meanwhile
        down_s = (self.lease_s or 10.0) + 0.5
        if self.spec.kind == "restart-delayed":
            # a holder whose lease ends before the master is back lets go now (never past its lease);
            # one whose lease outlasts the delay (the control: the same lock, restarted before its
            # lease ends) holds on through the restart and is asked about its lock after it
            self._release_holder(lambda b: b.lease_left_s is None or b.lease_left_s < down_s + 1.0)
            self._cancel.wait(max(0.0, down_s - (time.monotonic_ns() - start) / 1e9))
        target.start()
        name = target.process.name
        how = {"restart-bare": "at once, no persistence", "restart-aof": "at once, from its AOF (everysec)",
               "restart-delayed": f"after {down_s:g} s, no persistence"}[self.spec.kind]  # fmt: skip
        detail = f"held on exactly 3 of 5 masters (2 voted for a phantom); killed {name}, started again {how}"
        return FaultWindow(self.spec.kind, start, time.monotonic_ns(), detail, missed, freed)

    def _not_bare(self, blocked: list[Any]) -> dict[str, str]:
        """Holders that own more than a bare majority: one restart cannot take their lock from them.

        A lock whose key names bench knows (``Lock.quorum_key``) gets the two phantom votes; a
        user's own RedLock without them may win all five masters, and then the strike proves
        nothing for it: it is missed with that reason, never counted.
        """
        quorum = len(self.servers) // 2 + 1
        counts: dict[str, int] = {}
        for server in self.servers:
            try:
                client = redis.Redis.from_url(server.url, socket_connect_timeout=1, socket_timeout=2)
                try:
                    for label in self._holders_on(client):
                        counts[label] = counts.get(label, 0) + 1
                finally:
                    client.close()
            except (redis.RedisError, AttributeError):
                continue
        out = {}
        for box in self.mailboxes:
            n = counts.get(box.label, 0)
            if box.holder and n > quorum:
                why = (
                    "declare Lock.quorum_key so bench can arrange a bare majority"
                    if box.label not in self.quorum_keys
                    else "a phantom vote was lost"
                )
                out[box.label] = (
                    f"the holder owned {n} of {len(self.servers)} masters: one restart cannot take its majority ({why})"
                )
        return out

    def _restart_target(self, candidates: list[Any] | None = None) -> tuple[Any, dict[str, str]]:
        """Of several masters (RedLock), the one holding the most holders' keys, and whose it is not.

        Reach, per holder and per strike: a master holds a holder's key when some key there has
        the holder's owner value (a string equal to it, or a hash with it as a field: Redisson's
        layout), whatever the lock names its keys, so a user's own RedLock is struck as ours is.
        A holder whose owner is not known (a workload that did not send it) is found by bench's
        key names, as before. A waiter's key is never a hit: only this strike's holder's is.
        """
        servers = candidates or self.servers
        holding: list[set[str]] = []
        for server in servers:
            try:
                client = redis.Redis.from_url(server.url, socket_connect_timeout=1, socket_timeout=2)
                try:
                    holding.append(self._holders_on(client))
                finally:
                    client.close()
            except (redis.RedisError, AttributeError):
                holding.append(set())
        best = max(range(len(servers)), key=lambda i: len(holding[i]))
        name = getattr(getattr(servers[best], "process", None), "name", f"master {best}")
        missed = {
            b.label: f"the restarted master {name} held no key of this holder"
            for b in self.mailboxes
            if b.holder and b.label not in holding[best]
        }
        return servers[best], missed

    def _holders_on(self, client: redis.Redis) -> set[str]:
        """The labels of the cases whose strike holder has its key on this server."""
        owners = {b.owner: b.label for b in self.mailboxes if b.holder and b.owner}
        named = [b for b in self.mailboxes if b.holder and not b.owner]
        found: set[str] = set()
        for key in client.scan_iter(count=1000):
            text = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
            if named:
                found.update(
                    b.label for b in named if f":{namespace(b.label)}" in text and not text.endswith(":fence")
                )
            if not owners:
                continue
            kind = client.type(key)
            kind = kind.decode() if isinstance(kind, bytes) else str(kind)
            if kind == "string":
                value = client.get(key)
                value = value.decode(errors="replace") if isinstance(value, bytes) else value
                if value in owners:
                    found.add(owners[value])
            elif kind == "hash":
                for field_ in client.hkeys(key):
                    field_ = field_.decode(errors="replace") if isinstance(field_, bytes) else field_
                    if field_ in owners:
                        found.add(owners[field_])
        return found
