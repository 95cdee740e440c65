"""A Redis master + one replica behind three Sentinels (loopback or test hosts), for failover and partitions.

Redis replicates asynchronously: a master acknowledges a write before any replica has it.
When the master dies and Sentinel promotes the replica, every write the replica had not
received is gone, locks included, while the client that took such a lock still believes
it holds it (seed 000). :class:`RedisSentinelGroup` runs that topology and makes the loss
happen on purpose (:meth:`RedisSentinelGroup.lose_writes_failover`).

Sentinels run as ``redis-server <config> --sentinel`` (Debian's ``redis-sentinel`` is the
same binary under another name, so nothing beyond the ``redis-server`` package is needed).
Their config files live in the group's directory and stay writable: sentinels rewrite them
with what they learn (replicas, other sentinels, the current epoch).
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from infra.errors import InfraError
from infra.install import find_binary
from infra.placement import Placer, on_loopback
from infra.ports import free_port
from infra.process import ServerProcess
from infra.redis_server import RedisServer

SENTINELS = 3
QUORUM = 2
#: A master silent this long is subjectively down; with a quorum of 2 the failover starts.
DOWN_AFTER_MS = 500
FAILOVER_TIMEOUT_MS = 3000
Address = tuple[str, int]


def _client(address: Address) -> redis.Redis:
    host, port = address
    return redis.Redis(host, port, socket_timeout=1.0, socket_connect_timeout=0.5, decode_responses=True)


def _sentinel_ready(address: Address) -> bool:
    with _client(address) as c:
        return bool(c.ping())


def _healthy(state: dict) -> bool:
    """A sentinel's view of one instance: reachable and not considered down."""
    return not (state["is_sdown"] or state["is_odown"] or state["is_disconnected"])


def _kill(node: RedisServer) -> None:
    node.process.kill(signal.SIGKILL)
    if node.process.popen is not None:
        node.process.popen.wait(5)


@dataclass(frozen=True)
class FailoverTimings:
    """``time.monotonic_ns()`` readings of one fault: its window for the history and its length."""

    start_ns: int
    killed_ns: int
    end_ns: int
    old_master: Address
    new_master: Address

    @property
    def duration_s(self) -> float:
        """Seconds from the master's kill to a promoted replica every sentinel agrees on."""
        return (self.end_ns - self.killed_ns) / 1e9


class RedisSentinelGroup:
    """One master, one replica and three sentinels: the smallest Redis setup that fails over.

    Why lockbench's own: the failover fault needs a topology where a lock acknowledged by
    the master can vanish, started on loopback with free ports and always torn down
    (including a replica left paused by a fault). Lock clients reach it through
    :attr:`url` (``redis+sentinel://...``), which ``lockimpls.redis_conn`` resolves to
    whichever node the sentinels call master at the time.
    """

    kind = "redis-sentinel"

    def __init__(
        self,
        workdir: Path,
        name: str = "redis-sentinel",
        service: str = "lockbench",
        *,
        place: Placer = on_loopback,
    ) -> None:
        self.name = name
        self.service = service
        self.binary = find_binary("redis-server", "redis-server")
        # Redis waits 5 s by default before a full sync, in case more replicas come: one comes.
        sync_now = ["--repl-diskless-sync-delay", "0"]
        at = place(f"{name}-master")
        master = RedisServer(
            workdir, f"{name}-master", extra_args=sync_now, host=at.host, launcher=at.launcher
        )
        at = place(f"{name}-replica")
        replica = RedisServer(
            workdir,
            f"{name}-replica",
            extra_args=[*sync_now, "--replicaof", master.host, str(master.port)],
            host=at.host,
            launcher=at.launcher,
        )
        #: The two data nodes; which one is master changes with a failover (see :meth:`master`).
        self.nodes: list[RedisServer] = [master, replica]
        self.sentinel_ports = [free_port() for _ in range(SENTINELS)]
        self.sentinels: list[ServerProcess] = []
        #: (host, port) of each sentinel
        self.sentinel_addrs: list[Address] = []
        for i, port in enumerate(self.sentinel_ports):
            at = place(f"{name}-sentinel{i + 1}")
            self.sentinel_addrs.append((at.host, port))
            sdir = workdir / f"{name}-sentinel{i + 1}-{port}"
            sdir.mkdir(parents=True, exist_ok=True)
            config = sdir / "sentinel.conf"
            config.write_text(
                "\n".join(
                    [
                        f"bind {at.host}",
                        f"port {port}",
                        f"dir {sdir}",
                        "daemonize no",
                        *([] if at.on_loopback else ["protected-mode no"]),
                        f"sentinel monitor {service} {master.host} {master.port} {QUORUM}",
                        f"sentinel down-after-milliseconds {service} {DOWN_AFTER_MS}",
                        f"sentinel failover-timeout {service} {FAILOVER_TIMEOUT_MS}",
                        f"sentinel parallel-syncs {service} 1",
                    ]
                )
                + "\n"
            )
            argv = at.argv([self.binary, str(config), "--sentinel"])
            self.sentinels.append(
                ServerProcess(f"{name}-sentinel{i + 1}", argv, sdir / "sentinel.log", cwd=sdir, realtime=True)
            )

    @property
    def url(self) -> str:
        hosts = ",".join(f"{h}:{p}" for h, p in self.sentinel_addrs)
        return f"redis+sentinel://{hosts}/{self.service}"

    @property
    def process(self) -> ServerProcess:
        """The first sentinel's process: alive for the group's whole life, unlike a data node
        that a fault kills on purpose (callers that track one pid; see :attr:`processes`)."""
        return self.sentinels[0]

    @property
    def processes(self) -> list[ServerProcess]:
        return [n.process for n in self.nodes] + self.sentinels

    def start(self, detached: bool = False, timeout: float = 30.0) -> RedisSentinelGroup:
        """Start the data nodes, then the sentinels; return once the group can fail over."""
        try:
            for node in self.nodes:
                node.start(detached=detached)
            # Sentinels find replicas in the master's INFO, asked at connect and then every
            # 10 s: a replica that is linked before they start is found at once.
            self._wait(self._replica_linked, timeout, "replica in sync")
            for proc, addr in zip(self.sentinels, self.sentinel_addrs, strict=True):
                proc.start(lambda a=addr: _sentinel_ready(a), timeout=10, detached=detached)
            self._wait(self._ready, timeout, "ready (replica in sync, sentinels aware of each other)")
        except BaseException:
            self.stop()
            raise
        return self

    def _replica_linked(self) -> bool:
        master, replica = self.nodes
        with _client(replica.address) as c:
            if c.info("replication").get("master_link_status") != "up":
                return False
        with _client(master.address) as c:
            return c.info("replication").get("connected_slaves") == 1

    def _ready(self) -> bool:
        master, replica = self.nodes
        if not self._replica_linked():
            return False
        for addr in self.sentinel_addrs:
            with _client(addr) as c:
                state = c.sentinel_master(self.service)
                if (state["ip"], state["port"]) != master.address or not _healthy(state):
                    return False
                if not any(
                    r["port"] == replica.port and _healthy(r) for r in c.sentinel_slaves(self.service)
                ):
                    return False
                if sum(_healthy(s) for s in c.sentinel_sentinels(self.service)) != SENTINELS - 1:
                    return False
        return True

    def _wait(self, check: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in self.sentinels:
                if proc.popen is not None and not proc.alive():
                    raise InfraError(f"{proc.name} exited: {proc.log_tail()}")
            try:
                if check():
                    return
            except (redis.RedisError, OSError, KeyError, ValueError):
                pass  # a node is still starting or restarting its links
            time.sleep(0.05)
        raise InfraError(f"{self.name} not {what} within {timeout:.0f}s; see {self.sentinels[0].log_path}")

    def heal(self, timeout: float = 30.0) -> None:
        """Bring a failed-over group back to one master + one replica in sync, ready to fail over again.

        The data node a failover killed starts again on its port (with no data: Redis runs
        without persistence here); the sentinels see their old master return and make it a
        replica of the new one. Returns once every sentinel sees a healthy master and replica.
        """
        down = [n for n in self.nodes if not n.process.alive()]
        for node in down:
            node.start()
        for node in self.nodes:
            node.process.kill(signal.SIGCONT)  # a replica a fault left paused
        self._wait(self._healed, timeout, "healed (a master and a replica in sync)")

    def _healed(self) -> bool:
        master_addr = self.master()
        master = self.node_at(master_addr)
        replica = next(n for n in self.nodes if n is not master)
        with _client(replica.address) as c:
            info = c.info("replication")
            if info.get("role") != "slave" or info.get("master_link_status") != "up":
                return False
            if int(info.get("master_port", 0)) != master.port:
                return False
        for addr in self.sentinel_addrs:
            with _client(addr) as c:
                state = c.sentinel_master(self.service)
                if (state["ip"], int(state["port"])) != master_addr or not _healthy(state):
                    return False
                if not any(
                    int(r["port"]) == replica.port and _healthy(r) for r in c.sentinel_slaves(self.service)
                ):
                    return False
        return True

    def stop(self) -> None:
        """Stop everything, sentinels first (so none reconfigures a node being stopped).

        ServerProcess.stop sends SIGCONT before SIGTERM, so a replica paused by a fault
        is woken and stopped too.
        """
        for proc in [*self.sentinels, *(n.process for n in self.nodes)]:
            proc.stop()

    def version(self) -> str:
        return self.nodes[0].version()

    def master(self) -> Address:
        """(host, port) of the master as most reachable sentinels currently report it."""
        votes = Counter(self._reported_masters())
        if not votes:
            raise InfraError(f"{self.name}: no sentinel answers")
        return votes.most_common(1)[0][0]

    def _reported_masters(self) -> list[Address]:
        seen = []
        for addr in self.sentinel_addrs:
            try:
                with _client(addr) as c:
                    host, mport = c.sentinel_get_master_addr_by_name(self.service)
            except (redis.RedisError, OSError, TypeError, ValueError):
                continue
            seen.append((host, int(mport)))
        return seen

    def node_at(self, address: Address) -> RedisServer:
        for node in self.nodes:
            if node.address == address:
                return node
        raise InfraError(f"{self.name}: no data node at {address[0]}:{address[1]}")

    def replica(self) -> RedisServer:
        """The data node that is not the current master."""
        master = self.node_at(self.master())
        return next(n for n in self.nodes if n is not master)

    def pause_replica(self) -> None:
        """SIGSTOP the replica: it stops reading the replication stream."""
        self.replica().process.kill(signal.SIGSTOP)

    def resume_replica(self) -> None:
        for node in self.nodes:
            node.process.kill(signal.SIGCONT)

    def kill_master(self) -> Address:
        """SIGKILL the current master (a crash: nothing flushed, nothing handed over); its address."""
        address = self.master()
        _kill(self.node_at(address))
        return address

    def wait_failover(self, timeout: float = 15.0, old: Address | None = None) -> Address:
        """Wait until every sentinel names a master other than ``old`` and that node says it is master.

        ``old`` defaults to the master reported now (call it before killing, or pass it).
        Every sentinel must agree, so a client asking any of them reaches the new master.
        """
        old = old or self.master()
        found: list[Address] = []

        def switched() -> bool:
            reported = self._reported_masters()
            if len(reported) < SENTINELS or len(set(reported)) != 1 or reported[0] == old:
                return False
            with _client(reported[0]) as c:
                if c.execute_command("ROLE")[0] != "master":
                    return False
            found[:] = [reported[0]]
            return True

        self._wait(switched, timeout, f"failed over from {old[0]}:{old[1]}")
        return found[0]

    def lose_writes_failover(self, hold: Callable[[], None], timeout: float = 15.0) -> FailoverTimings:
        """Fail over so that whatever ``hold()`` writes to the master is lost, every time.

        Sequence: pause the replica (SIGSTOP), cut the master's link to it (``CLIENT KILL
        TYPE replica`` on the master), call ``hold()`` (the caller writes, e.g. acquires a
        lock, through :attr:`url`: only the master sees it), SIGKILL the master, resume the
        replica, wait until the sentinels have promoted it.

        Why the pause: on loopback, replication takes well under a millisecond, so a write
        reaches the replica before anyone could kill the master and nothing is lost. Why
        also cut the link: pausing a process does not pause its kernel, which keeps
        accepting the replication stream into the paused replica's socket buffer; on
        resume the replica would apply it. With the link cut while the replica is paused,
        the master sends the write to nobody (it stays in the master's backlog, which
        dies with it), and the paused replica cannot reconnect to resync before the kill.
        ``hold()`` must be quick (well under DOWN_AFTER_MS): a replica silent for longer
        is marked down by the sentinels and is not promoted until it answers again.
        """
        start = time.monotonic_ns()
        old = self.master()
        master = self.node_at(old)
        replica = next(n for n in self.nodes if n is not master)
        replica.process.kill(signal.SIGSTOP)
        try:
            with _client(master.address) as c:
                c.execute_command("CLIENT", "KILL", "TYPE", "replica")
            hold()
            _kill(master)
            killed = time.monotonic_ns()
        finally:
            replica.process.kill(signal.SIGCONT)
        new = self.wait_failover(timeout, old=old)
        return FailoverTimings(start, killed, time.monotonic_ns(), old, new)
