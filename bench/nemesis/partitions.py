"""Network partitions during a case: who goes on which side, cut, heal, and what it cost.

A partition fault needs the case to run on test hosts (:mod:`infra.testhosts`): every
server process on its own host, each Locust worker process on its own client host, the
resource and bench's control host on no side (both sides reach them, so a cut-off holder
can still write to the resource, the stale write that fencing must stop). The sides:

* ``partition-node``: one server node (a follower where there is a leader) against every
  other server node and client host;
* ``partition-leader``: the leader (Redis Sentinel: the master) together with the holder's
  client host, against the rest;
* ``partition-majority``: a minority of the server nodes (no leader) with the holder's
  client host, against the majority and the other clients (one server: the holder alone);
* ``partition-client``: the holder's client host against every server node.

The cut lasts :data:`HEAL_AFTER_S` seconds, then every route is removed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.nemesis.kind import ENSEMBLES, FaultKind
from bench.nemesis.window import FaultWindow
from infra.testhosts import TestHost, TestHostNet
from workloads.harness.netns import claims

if TYPE_CHECKING:  # pandas only where a history is read: naming a kind must not import it
    import pandas as pd

PARTITION_NODE = "partition-node"
PARTITION_LEADER = "partition-leader"
PARTITION_MAJORITY = "partition-majority"
PARTITION_CLIENT = "partition-client"
KINDS = (PARTITION_NODE, PARTITION_LEADER, PARTITION_MAJORITY, PARTITION_CLIENT)
#: seconds from the cut to the heal: longer than the leases and session timeouts the
#: partition scenarios use (2 s TTL, a 3 s ZooKeeper session, etcd's lease plus the
#: election that extends it), so the majority side can move on before the heal
HEAL_AFTER_S = 8.0
#: how long the holder that claimed the fault keeps its lock: it works through the cut
#: and writes to the resource just before the heal, after its lease is gone
HOLD_S = 7.0
#: the cut is this many times the longest lease or session, plus :data:`CUT_MARGIN_S` (for the
#: election that may extend a lease), never shorter than :data:`MIN_CUT_S`: a cut that follows
#: the lock's own timeouts, not a fixed 8 s (the matrix's 2 s leases and 3 s sessions give 8 s)
CUT_FACTOR = 2.0
CUT_MARGIN_S = 2.0
MIN_CUT_S = 4.0


def cut_seconds(lease_s: float | None, session_s: float | None = None) -> float:
    """How long a partition lasts for a lock whose lease is ``lease_s`` and session ``session_s``."""
    longest = max(float(lease_s or 0.0), float(session_s or 0.0))
    if longest <= 0:
        return HEAL_AFTER_S
    return max(MIN_CUT_S, CUT_FACTOR * longest + CUT_MARGIN_S)


@dataclass
class PartitionGround:
    """What a partition fault acts on: the hosts, the lock servers, the client hosts.

    Why one object: the fault thread must map a holder's client id (``<pid>-u<n>``) to
    the host its Locust process runs on, and a server node to its host, at strike time.
    """

    net: TestHostNet
    servers: list[Any]
    #: Locust worker pid -> its client host
    client_hosts: dict[int, TestHost] = field(default_factory=dict)
    #: case folders whose forked workers claim their hosts there (workloads/harness/netns.py)
    claim_dirs: list[Path] = field(default_factory=list)

    def learn(self) -> None:
        """Take in the hosts the cases' workers have claimed so far (pid -> host)."""
        for folder in self.claim_dirs:
            for pid, name in claims(folder).items():
                if pid not in self.client_hosts:
                    self.client_hosts[pid] = self.net.host(name)

    def nodes(self) -> list[tuple[str, TestHost]]:
        """(name, host) of every server process of the lock service."""
        out: list[tuple[str, TestHost]] = []
        for server in self.servers:
            for node in getattr(server, "nodes", [server]):
                out.append((node.name, self.net.host(node.host)))
            for proc, (addr, _) in zip(
                getattr(server, "sentinels", []), getattr(server, "sentinel_addrs", []), strict=False
            ):
                out.append((proc.name, self.net.host(addr)))
        return out

    def leader(self) -> tuple[str, TestHost] | None:
        """The node that leads now: a cluster's leader, a Sentinel group's master."""
        for server in self.servers:
            if hasattr(server, "leader"):
                node = server.leader()
                if node is not None:
                    return node.name, self.net.host(node.host)
            elif hasattr(server, "master") and hasattr(server, "node_at"):
                node = server.node_at(server.master())
                return node.name, self.net.host(node.host)
        return None

    def holder_host(self, client_id: str | None) -> TestHost:
        """The client host of the Locust process that runs ``client_id`` (the first one when unknown)."""
        self.learn()
        if client_id:
            pid = client_id.split("-", 1)[0]
            if pid.isdigit() and int(pid) in self.client_hosts:
                return self.client_hosts[int(pid)]
        return next(iter(self.client_hosts.values()))


def sides(
    kind: str, ground: PartitionGround, holders: TestHost | list[TestHost]
) -> tuple[list[TestHost], list[TestHost], str]:
    """(side A, side B, a line naming what is on each side) for a partition of ``kind``.

    ``holders``: the client hosts of the strike's holders, one per case of a group (each case
    has client hosts of its own, so its other clients stay on the far side with the majority).
    """
    held = [holders] if isinstance(holders, TestHost) else list(dict.fromkeys(holders))
    held_names = {h.name for h in held}
    nodes = ground.nodes()
    leader = ground.leader()
    lead_name = leader[0] if leader else None
    followers = [n for n in nodes if n[0] != lead_name]
    clients = list(ground.client_hosts.values())  # one worker a host: no host twice
    others = [h for h in clients if h.name not in held_names]
    roles = ground.net.roles
    if kind == "partition-node":
        victim = followers[-1] if followers else nodes[-1]
        a = [victim]
        b = [n for n in nodes if n is not victim]
        a_hosts, b_hosts = [victim[1]], [n[1] for n in b] + clients
    elif kind == "partition-leader":
        lead = leader or nodes[0]
        a = [lead]
        b = [n for n in nodes if n[0] != lead[0]]
        a_hosts, b_hosts = [lead[1], *held], [n[1] for n in b] + others
    elif kind == "partition-majority":
        minority = followers[len(followers) - (len(nodes) - 1) // 2 :] if (len(nodes) - 1) // 2 else []
        a = minority
        b = [n for n in nodes if n not in minority]
        a_hosts, b_hosts = [n[1] for n in a] + held, [n[1] for n in b] + others
    elif kind == "partition-client":
        a, b = [], nodes
        a_hosts, b_hosts = held, [n[1] for n in nodes]
    else:
        raise ValueError(f"not a partition kind: {kind}")
    a_names = [n[0] for n in a] + [roles.get(h.name, h.name) for h in held if h in a_hosts]
    b_names = [n[0] for n in b] + [roles.get(h.name, h.name) for h in b_hosts if h in clients]
    detail = f"cut {{{', '.join(a_names)}}} from {{{', '.join(b_names)}}}; healed after {HEAL_AFTER_S:g}s"
    return a_hosts, b_hosts, detail


def strike(
    kind: str,
    ground: PartitionGround,
    holder_clients: str | list[str] | None,
    cancel: Any,
    cut_s: float = HEAL_AFTER_S,
) -> tuple[int, int, str]:
    """Cut, wait ``cut_s`` (or until ``cancel`` is set), heal; (start_ns, heal_ns, detail).

    ``holder_clients``: the client id of the strike's holder, or of every case's holder in a group.
    """
    clients = holder_clients if isinstance(holder_clients, list) else [holder_clients]
    holders = [ground.holder_host(c) for c in clients]
    side_a, side_b, detail = sides(kind, ground, holders)
    detail = detail.replace(f"healed after {HEAL_AFTER_S:g}s", f"healed after {cut_s:g}s")
    start = time.monotonic_ns()
    try:
        ground.net.partition(side_a, side_b)
        cancel.wait(cut_s)
    finally:
        ground.net.heal()
    return start, time.monotonic_ns(), detail


def after_heal_columns(
    history: pd.DataFrame,
    start_ns: int,
    heal_ns: int,
    holder: str | None,
    uncertainty_ns: dict[str, int | None] | None = None,
) -> dict[str, Any]:
    """The partition columns of one case.

    ``recovery_after_heal_ms``: the heal to the next acquisition by anyone (None when none
    followed). ``takeover_after_cut_ms``: the cut to the first acquisition by a client
    other than the holder while the cut lasted (None when the lock stayed with the holder
    until the heal): how long the lock service kept the cut-off holder's lock.
    ``holder_release`` / ``holder_release_after_cut_ms``: what the holder's release said
    after its work (``owned``, ``not owned``: the lock was gone, ``unknown``, ``failed``)
    and when: the moment the holder learned, as the workload checks nothing in between.

    The cut and the heal are timed on bench's clock, grants on their workers' clocks shifted
    onto the master's: with ``uncertainty_ns`` (per worker bound, None = not measured) a
    grant within its worker's bound of the cut or the heal may lie on either side, and
    ``partition_clock_reason`` says which figure could not be decided ("" when none).
    """
    ok = history[(history["op"] == "acquire") & (history["type"] == "ok")]
    bound = _bounds(ok["client"], uncertainty_ns)
    after = ok.loc[ok["t_ns"] >= heal_ns, "t_ns"]
    during = ok[(ok["t_ns"] >= start_ns) & (ok["t_ns"] < heal_ns) & (ok["client"] != (holder or ""))]
    unsure: list[str] = []
    if len(during):
        first = during["t_ns"].idxmin()
        t, b = int(during.loc[first, "t_ns"]), int(bound.loc[first])
        if t - b < start_ns or t + b >= heal_ns:
            unsure.append(
                "takeover_after_cut_ms (the first takeover lies within its clock bound of the cut or heal)"
            )
    if len(after):
        first = after.idxmin()
        if int(after.loc[first]) - int(bound.loc[first]) < heal_ns:
            unsure.append("recovery_after_heal_ms (the first grant lies within its clock bound of the heal)")
    release = history[
        (history["client"] == (holder or ""))
        & (history["op"] == "release")
        & (history["type"] != "invoke")
        & (history["t_ns"] >= start_ns)
    ].head(1)
    learned, when = "", None
    if len(release):
        r = release.iloc[0]
        when = (int(r["t_ns"]) - start_ns) / 1e6
        if r["type"] == "ok":
            import pandas as pd

            learned = "owned" if r["value"] is not pd.NA and r["value"] == 1 else "not owned"
        else:
            learned = "unknown" if r["type"] == "info" else "failed"
    clock = {"partition_clock_reason": "undecided by the clocks: " + "; ".join(unsure)} if unsure else {}
    if uncertainty_ns is not None and not unsure:
        clock = {"partition_clock_reason": ""}
    return {
        "recovery_after_heal_ms": (int(after.min()) - heal_ns) / 1e6 if len(after) else None,
        "takeover_after_cut_ms": (int(during["t_ns"].min()) - start_ns) / 1e6 if len(during) else None,
        "holder_release": learned,
        "holder_release_after_cut_ms": when,
        **clock,
    }


def _bounds(clients: pd.Series, uncertainty_ns: dict[str, int | None] | None) -> pd.Series:
    """Each grant's clock bound (ns) from its client's worker (``<worker>/`` prefix); 0 on one host."""
    import pandas as pd

    if not uncertainty_ns:
        return pd.Series(0, index=clients.index, dtype="int64")
    unbounded = 1 << 60  # no estimate: any side of the cut

    def one(client: str) -> int:
        worker = client.rsplit("/", 1)[0] if "/" in client else ""
        b = uncertainty_ns.get(worker, 0)
        return unbounded if b is None else int(b)

    return clients.astype(str).map(one).astype("int64")


def _strike(kind: str) -> Any:
    def strike_kind(nemesis: Any, trigger: Any) -> FaultWindow | None:
        """One cut for every case of the group: each case's holder host goes to the cut side."""
        if not trigger():
            return None
        if nemesis.ground is None:
            raise RuntimeError(f"{kind} needs the case on test hosts")
        cut = cut_seconds(nemesis.lease_s, nemesis.session_s)
        holders = [b.holder for b in nemesis.mailboxes if b.holder is not None]
        start, healed, detail = strike(kind, nemesis.ground, holders, nemesis.cancel_event(), cut)
        return FaultWindow(kind, start, healed, detail)

    return strike_kind


_SERVERS = ("redis", "postgres", "etcd", "memcached", "zookeeper")
_PRECONDITION = "the holder claimed the strike and held the lock when the cut began"
PARTITION_KINDS = (
    FaultKind(
        name=PARTITION_NODE, backends=_SERVERS, topology=ENSEMBLES, regrant_wait_s=0.0, hold_for_s=HOLD_S,
        reach="a server node the holder's grant rests on (RedLock: one of its masters); a follower no client "
        "talks to cannot reach a lock (ZooKeeper, etcd: n/a)",
        precondition=_PRECONDITION, controls={PARTITION_NODE: {"redis": "redis.redlock"}}, strike=_strike(PARTITION_NODE),
    ),
    FaultKind(
        name=PARTITION_LEADER, backends=("redis", "zookeeper", "etcd"), topology={"redis": "sentinel", **ENSEMBLES},
        regrant_wait_s=0.0, hold_for_s=HOLD_S,
        reach="the leader (Sentinel's master) together with the holder's client host",
        precondition=_PRECONDITION,
        controls={PARTITION_LEADER: {"redis": "redis.set-nx-px-lua", "etcd": "etcd.lease",
                                     "zookeeper": "canary.fail-open-zookeeper"}},
        strike=_strike(PARTITION_LEADER),
    ),
    FaultKind(
        name=PARTITION_MAJORITY, backends=_SERVERS, topology=ENSEMBLES, regrant_wait_s=0.0, hold_for_s=HOLD_S,
        reach="the holder's client host with a minority of the server nodes",
        precondition=_PRECONDITION,
        controls={PARTITION_MAJORITY: {"redis": "redis.redlock", "etcd": "etcd.lease",
                                       "zookeeper": "zookeeper.sequential"}},
        strike=_strike(PARTITION_MAJORITY),
    ),
    FaultKind(
        name=PARTITION_CLIENT, backends=_SERVERS, regrant_wait_s=0.0, hold_for_s=HOLD_S,
        reach="the holder's client host, cut off from every lock server (the resource stays reachable)",
        precondition=_PRECONDITION,
        # the locks the standard run of 2026-12-02 saw fail there; PostgreSQL's three locks all hold
        # under a client cut, so its control is its lease lock (the canary does not fail there: a
        # query on a cut connection hangs, it does not error)
        controls={PARTITION_CLIENT: {"redis": "redis.set-nx-px-lua", "postgres": "postgres.unique-insert-expiry",
                                     "memcached": "memcached.add", "etcd": "etcd.lease",
                                     "zookeeper": "zookeeper.sequential"}},
        strike=_strike(PARTITION_CLIENT),
    ),
)  # fmt: skip
