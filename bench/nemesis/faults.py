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

from bench.errors import UserError
from bench.nemesis import partitions, redlock_arms
from bench.nemesis.kind import NOOP_ENV, namespace
from bench.nemesis.kinds import SERVER_KINDS
from bench.nemesis.window import FaultWindow, StrikeMark

__all__ = [
    "HOLD_FOR", "KINDS", "MISSED", "NOOP_ENV", "REDLOCK_ARMS", "REGRANT_WAIT_S", "FaultSpec", "FaultThread",
    "FaultWindow", "Mailbox", "StrikeMark", "namespace", "parse_fault",
]  # fmt: skip

#: The server faults (``--fault KIND``), each declared in its own module (bench/nemesis/kinds.py).
KINDS = SERVER_KINDS
#: The RedLock restart arms (each needs several masters).
REDLOCK_ARMS = redlock_arms.ARMS

#: After a strike's action is done, how long at most its holder keeps the lock before bench
#: tells it the fault is over (seconds), waiting for the service to hand the lock to someone
#: else if it lost it: bench lets the holder go as soon as another client has bought. No verdict
#: depends on it: the holder asks its lock whether it still owns it after every strike
#: (workloads/checks/ownership.py), so a lost lock is a failure whether or not a waiter came in.
#: Never more than half the lease (``lease_s``): a hold past its lease proves nothing of the fault.
REGRANT_WAIT_S = {name: kind.regrant_wait_s for name, kind in SERVER_KINDS.items()}
#: How often bench looks at the order ledgers while it waits (seconds).
REGRANT_POLL_S = 0.05
#: How long a signalling holder keeps its lock at most while the fault runs (seconds); bench
#: normally releases it sooner (at most REGRANT_WAIT_S after the strike's action).
HOLD_FOR = {name: kind.hold_for_s for name, kind in SERVER_KINDS.items()}


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
        topo = KINDS[self.kind].topology
        if isinstance(topo, dict):
            return topo.get(backend or "")
        return topo

    @property
    def is_partition(self) -> bool:
        """A network partition: the case runs on test hosts."""
        return self.kind in partitions.KINDS

    def applies_to(self, backend: str) -> bool:
        return backend in KINDS[self.kind].backends


def parse_fault(text: str) -> FaultSpec:
    """``restart``, ``restart@held``, ``failover@3s`` -> FaultSpec; UserError otherwise."""
    m = re.fullmatch(r"([a-z-]+)(?:@(held|\d+(?:\.\d+)?s))?", text.strip())
    if not m or m.group(1) not in KINDS:
        kinds = ", ".join(KINDS)
        raise UserError(f"bad --fault {text!r}; use KIND[@held|@<seconds>s] with KIND one of {kinds}")
    return FaultSpec(m.group(1), m.group(2) or "held")


#: After the first holder claimed a strike, how long the other cases of a group may take to
#: claim it too before the fault strikes (seconds). Six clients of a healthy lock claim within
#: milliseconds of the arming; a case whose holder has not claimed by then is "missed" and is
#: armed again for the next strike (FaultThread._needy), so a short window costs little. At
#: 1.5 s, claiming took 3.7 s of a 10.5 s ZooKeeper restart cycle on the busy machine.
CLAIM_WINDOW_S = 0.5
#: How often bench looks for claims in the cases' mailboxes (seconds).
CLAIM_POLL_S = 0.005


#: What bench tells a holder whose strike did not count for its case (``Mailbox.release``).
MISSED = "missed"


class Mailbox:
    """One case's side of a (possibly shared) fault: the resource its holders claim strikes on.

    Every case of a group has its own resource (its own Redis database), so its holders,
    ledgers and mailbox keys never meet another case's.
    """

    def __init__(self, resource_url: str, label: str = "") -> None:
        import redis  # here, not at the top: naming a fault kind (bench run --fault) must not import it

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
        """Grants the case's buyers used so far: purchases, and accesses the fence refused
        (``workloads.harness.resource.grants_seen``, which says why both)."""
        from workloads.harness.resource import grants_seen  # here: it imports redis

        return grants_seen(self.client)

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
        from workloads.harness.resource import LEFT_SEP, OWNER_SEP  # with redis: not when a kind is named

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
        #: the heal running beside the strike's aftermath (:meth:`_start_heal`), when it began and ended
        self._healer: threading.Thread | None = None
        self._heal_ns: tuple[int, int | None] = (0, None)

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
                if KINDS[self.spec.kind].heals_beside_hold:
                    self._start_heal()
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
            self._join_heal()
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
        if KINDS[self.spec.kind].heals and hasattr(self.server, "heal"):
            self.server.heal()

    def _start_heal(self) -> None:
        """Begin bringing back what the last strike took down, in a thread: :meth:`_between` waits for it."""
        began = time.monotonic_ns()
        self._heal_ns = (began, None)

        def heal() -> None:
            try:
                self._heal_topology()
            except Exception as exc:  # noqa: BLE001 - reported with the case, as a strike error is
                self.error = self.error or f"heal: {type(exc).__name__}: {exc}"
            self._heal_ns = (began, time.monotonic_ns())

        self._healer = threading.Thread(target=heal, name=f"heal-{self.spec.kind}", daemon=True)
        self._healer.start()

    def _join_heal(self) -> float:
        """Wait for the heal begun last, if any; the seconds it took (0.0: none was running)."""
        healer, self._healer = self._healer, None
        if healer is None:
            return 0.0
        healer.join()
        began, ended = self._heal_ns
        return (ended - began) / 1e9 if ended is not None else 0.0

    def _between(self, cycle: dict[str, float]) -> bool:
        """Heal and let the service grant its purchases before the next strike; False once it is over.

        The two overlap: the grants are counted from the holder's release while a killed member
        starts again (a 3-node ensemble serves on with two), so a strike costs the longer of the
        two, not their sum; an ensemble's heal began even earlier, beside the holder's wait
        (``heals_beside_hold``). The next strike waits for both (a leader kill needs the others whole).
        """
        t = time.monotonic()
        if self._healer is None:
            self._start_heal()
        paced = self._paced()
        cycle["grants_s"] = time.monotonic() - t
        cycle["heal_s"] = self._join_heal()
        if self.windows:  # when the heal began, after the previous strike's action ended
            cycle["heal_began_s"] = (self._heal_ns[0] - self.windows[-1].end_ns) / 1e9
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
        """One strike of this thread's kind, by the kind's own module (bench/nemesis/kinds.py)."""
        trigger: Callable[[], bool]
        if self.spec.at_seconds is None:
            trigger = self._wait_for_holder
        else:
            at = self.spec.at_seconds
            trigger = lambda: self._wait_until(at)  # noqa: E731
        strike = KINDS[self.spec.kind].strike
        if strike is None:
            raise RuntimeError(f"{self.spec.kind} is made by the clients, not struck by bench")
        return strike(self, trigger)

    # what a kind's strike may use of the thread ------------------------------------------------
    def cancelled(self) -> bool:
        """The fault is over (every case ended, or bench stopped it)."""
        return self._cancel.is_set()

    def cancel_event(self) -> threading.Event:
        """Set when the fault is over: a strike that waits waits on it."""
        return self._cancel

    def wait(self, seconds: float) -> bool:
        """Wait ``seconds`` unless the fault ends first; True when it ended."""
        return self._cancel.wait(seconds)

    def release_holders(self, which: Callable[[Mailbox], bool] | None = None) -> None:
        """Let go of this strike's holders (``which`` of them) as after any strike."""
        self._release_holder(which)
