"""Throwaway ZooKeeper servers on 127.0.0.1 or test hosts: one standalone server, or a 3-node ensemble.

Debian's ``zookeeper`` package puts its jars under /usr/share/java and its scripts expect
/etc and /var, so lockbench starts the JVM itself: ``QuorumPeerMain`` with its own
``zoo.cfg`` (client port on its host's address, its own data directory, the admin HTTP server off,
the four-letter words ``ruok srvr mntr stat conf`` allowed). The package ships no logging
backend, so slf4j-simple (``libslf4j-java``, a dependency of the package) goes on the
classpath and the server's warnings and errors land in ``server.log``.

A server is ready when ``srvr`` reports a mode; the JVM then answers its first requests
slowly (class loading, JIT), so ``start`` also runs a short warm-up of creates and deletes
before it returns. ``ZOOKEEPER_HOME`` (a tarball's directory) is used instead of the
Debian jars when set.
"""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
from collections.abc import Sequence
from pathlib import Path

from infra.cluster import LoopbackCluster
from infra.errors import InfraError
from infra.install import find_binary
from infra.placement import LOOPBACK_HOST, Placer, on_loopback
from infra.ports import free_port
from infra.process import ServerProcess
from infra.server import ManagedServer

DEBIAN_JARS = Path("/usr/share/java")
DEBIAN_SCRIPTS = "/usr/share/zookeeper/bin"
#: Four-letter words the servers answer (readiness, counters, diagnostics).
FOUR_LETTER_WORDS = "ruok,srvr,mntr,stat,conf"
#: ZooKeeper's tick. Session expiry is checked once a tick, so a short tick makes short
#: session timeouts (tests, fault cases) expire on time; ensembles count limits in ticks.
TICK_MS = 500
MIN_SESSION_TIMEOUT_MS = 1000
MAX_SESSION_TIMEOUT_MS = 60000
WARMUP_OPS = 300
JVM_OPTS = ["-Xms64m", "-Xmx512m", "-XX:+PerfDisableSharedMem", "-Djava.net.preferIPv4Stack=true"]
#: More JVM options, split on spaces, after :data:`JVM_OPTS`. The test suite sets it to a JVM that
#: compiles less and collects more simply (tests/conftest.py), because its servers live seconds and
#: are never measured; a benchmark's servers run the JVM's defaults, whose compiler pays off over a run.
JVM_EXTRA_ENV = "LOCKBENCH_ZK_JVM_EXTRA"


def java_binary() -> str:
    """Path of ``java``, installing the OS package default-jre-headless when allowed."""
    return find_binary("java", "default-jre-headless")


def classpath() -> str:
    """The server's classpath: ZooKeeper's jars plus a logging backend.

    Installs the OS package ``zookeeper`` when it is missing (root + apt-get); the error
    otherwise says how to install it.
    """
    home = os.environ.get("ZOOKEEPER_HOME")
    if home:
        jars = sorted(glob.glob(os.path.join(home, "lib", "*.jar")) + glob.glob(os.path.join(home, "*.jar")))
        if not jars:
            raise InfraError(f"ZOOKEEPER_HOME={home} holds no jars (expected lib/*.jar)")
        return ":".join(jars)
    if not (DEBIAN_JARS / "zookeeper.jar").exists():
        find_binary("zkServer.sh", "zookeeper", (DEBIAN_SCRIPTS,))
    if not (DEBIAN_JARS / "zookeeper.jar").exists():
        raise InfraError("ZooKeeper jars not found; install them with: sudo apt-get install zookeeper")
    # zookeeper.jar's manifest names its own dependencies (netty, jute, slf4j-api ...).
    parts = [DEBIAN_JARS / "zookeeper.jar", DEBIAN_JARS / "slf4j-simple.jar"]
    return ":".join(str(p) for p in parts if p.exists())


def four_letter(host: str, port: int, word: str, timeout: float = 1.0) -> str:
    """Send a four-letter word (``srvr``, ``mntr``, ...) and return the whole answer."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def mntr(host: str, port: int, timeout: float = 2.0) -> dict[str, float | str]:
    """The server's ``mntr`` counters: numbers as int/float, the rest as text."""
    out: dict[str, float | str] = {}
    for line in four_letter(host, port, "mntr", timeout).splitlines():
        key, _, value = line.partition("\t")
        if not key:
            continue
        try:
            out[key] = int(value)
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                out[key] = value
    return out


def parse_url_hosts(url: str) -> list[tuple[str, int]]:
    """[(host, port)] of ``zookeeper://h:p,h:p[/chroot]`` (port 2181 when missing)."""
    rest = url.split("://", 1)[1] if "://" in url else url
    rest = rest.split("/", 1)[0]
    out = []
    for part in filter(None, (p.strip() for p in rest.split(","))):
        host, colon, port = part.rpartition(":")
        out.append((host, int(port)) if colon else (part, 2181))
    return out


def stats_snapshot(urls: list[str]) -> dict[str, int]:
    """Cumulative request counters of every server behind ``urls`` (for infra.server_stats).

    Only ``packets_received`` (requests the server got from clients, pings and this
    query included): it is the one counter whose difference over a case means "requests
    sent", so divided by acquisitions it is the round trips an acquire+release cost.
    """
    total = 0
    for url in urls:
        for host, port in parse_url_hosts(url):
            total += int(mntr(host, port).get("zk_packets_received", 0))
    return {"packets_received": total}


def _mode(host: str, port: int) -> str | None:
    for line in four_letter(host, port, "srvr", timeout=0.5).splitlines():
        if line.startswith("Mode:"):
            return line.split(":", 1)[1].strip()
    return None


def warm_up(hosts: str, ops: int = WARMUP_OPS, timeout: float = 30.0) -> None:
    """Creates and deletes ephemeral-sequential nodes until the JVM answers at full speed."""
    from kazoo.client import KazooClient

    client = KazooClient(hosts=hosts, timeout=10.0)
    try:
        client.start(timeout=timeout)
        client.ensure_path("/lockbench-warmup")
        for _ in range(ops):
            path = client.create("/lockbench-warmup/n-", b"x", ephemeral=True, sequence=True)
            client.get_children("/lockbench-warmup")
            client.delete(path)
        client.delete("/lockbench-warmup")
    finally:
        client.stop()
        client.close()


class ZooKeeperServer(ManagedServer):
    """One ZooKeeper server (standalone, or a member of :class:`ZooKeeperEnsemble`).

    Why lockbench's own: each case needs empty lock state, a fresh sequence counter and
    its own ``mntr`` counters, on loopback, and it must be stopped afterwards whatever
    happens. ``force_sync`` keeps ZooKeeper's default fsync of its transaction log.
    """

    kind = "zookeeper"

    def __init__(
        self,
        workdir: Path,
        name: str = "zookeeper",
        port: int | None = None,
        *,
        server_id: int | None = None,
        peers: list[tuple[int, str, int, int, int]] | None = None,
        force_sync: bool = True,
        host: str = LOOPBACK_HOST,
        launcher: Sequence[str] = (),
    ) -> None:
        self.java = java_binary()
        self.classpath = classpath()
        self.name = name
        self.host = host
        self.port = port or free_port()
        self.dir = workdir / f"{name}-{self.port}"
        self.data_dir = self.dir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"tickTime={TICK_MS}",
            f"dataDir={self.data_dir}",
            f"clientPort={self.port}",
            f"clientPortAddress={host}",
            "admin.enableServer=false",
            f"4lw.commands.whitelist={FOUR_LETTER_WORDS}",
            "maxClientCnxns=0",
            f"minSessionTimeout={MIN_SESSION_TIMEOUT_MS}",
            f"maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}",
            f"forceSync={'yes' if force_sync else 'no'}",
            "autopurge.purgeInterval=0",
        ]
        if peers:
            # initLimit/syncLimit in ticks: 10 s to join, 5 s to stay in sync (2 busy cores)
            lines += ["initLimit=20", "syncLimit=10", "quorumListenOnAllIPs=false"]
            lines += [f"server.{sid}={addr}:{quorum}:{election}" for sid, addr, _, quorum, election in peers]
            (self.data_dir / "myid").write_text(f"{server_id}\n")
        self.config = self.dir / "zoo.cfg"
        self.config.write_text("\n".join(lines) + "\n")
        argv = [
            *launcher,
            self.java,
            *JVM_OPTS,
            *os.environ.get(JVM_EXTRA_ENV, "").split(),
            "-cp", self.classpath,
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-Dorg.slf4j.simpleLogger.showDateTime=true",
            "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd'T'HH:mm:ss.SSS",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-Dzookeeper.admin.enableServer=false",
            "org.apache.zookeeper.server.quorum.QuorumPeerMain",
            str(self.config),
        ]  # fmt: skip
        self.process = ServerProcess(name, argv, self.dir / "server.log", cwd=self.dir)

    @property
    def hosts(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"zookeeper://{self.hosts}"

    def mode(self) -> str | None:
        """``standalone``, ``leader`` or ``follower`` once serving; None before (or when down)."""
        try:
            return _mode(self.host, self.port)
        except OSError:
            return None

    def serving(self) -> bool:
        return self.mode() in ("standalone", "leader", "follower")

    def start(self, detached: bool = False, wait: bool = True) -> ZooKeeperServer:
        """Start the JVM; with ``wait`` return once it serves and has been warmed up."""
        self.process.start(self.serving if wait else (lambda: True), timeout=60, detached=detached)
        if wait:
            self._warm()
        return self

    def _warm(self) -> None:
        try:
            warm_up(self.hosts)
        except Exception as exc:
            self.stop()
            raise InfraError(
                f"{self.name} did not answer its warm-up ({exc!r}); see {self.process.log_path}"
            ) from exc

    def pause(self) -> None:
        """SIGSTOP: the server stops answering (clients time out) without closing sockets."""
        self.process.kill(signal.SIGSTOP)

    def resume(self) -> None:
        self.process.kill(signal.SIGCONT)

    def restart(self) -> None:
        """Kill and start again on the same port and data (sessions may survive it).

        No warm-up after a restart: the fault's clients are the first requests a restarted
        server gets, as in life, and the warm-up cost about 1 s of every strike (0.8-1.5 s
        measured, on top of 0.6-0.8 s until the JVM served again) that was no part of the lock.
        """
        self.kill()
        self.process.start(self.serving, timeout=60)

    def wipe(self) -> None:
        """Remove the data (only while stopped): the next start has no nodes and no sessions."""
        for child in self.data_dir.iterdir():
            if child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
            elif child.name != "myid":
                child.unlink()

    def mntr(self) -> dict[str, float | str]:
        return mntr(self.host, self.port)

    def version(self) -> str:
        """The server's version as ``srvr`` reports it (from the jar's name when it is down)."""
        try:
            first = four_letter(self.host, self.port, "srvr", timeout=0.5).splitlines()[0]
            if first.startswith("Zookeeper version:"):
                return first.split(":", 1)[1].split("-", 1)[0].split(",")[0].strip()
        except (OSError, IndexError):
            pass
        for part in self.classpath.split(":"):
            base = os.path.basename(os.path.realpath(part))
            if base.startswith("zookeeper-") and base[10:11].isdigit():
                return base[len("zookeeper-") : -len(".jar")]
        return "unknown"


class ZooKeeperEnsemble(LoopbackCluster):
    """Three ZooKeeper servers forming one ensemble, for failover and partition cases.

    Why separate from :class:`ZooKeeperServer`: a member serves only once a quorum has
    elected a leader, so all members start before any is waited for.
    """

    kind = "zookeeper-ensemble"
    label = "ZooKeeper ensemble"

    def __init__(
        self, workdir: Path, name: str = "zookeeper-ensemble", size: int = 3, *, place: Placer = on_loopback
    ) -> None:
        if size < 1:
            raise InfraError("a ZooKeeper ensemble needs at least one server")
        spots = {i + 1: place(f"{name}-{i + 1}") for i in range(size)}
        peers = [(sid, p.host, free_port(), free_port(), free_port()) for sid, p in spots.items()]
        nodes = [
            ZooKeeperServer(
                workdir,
                f"{name}-{sid}",
                client,
                server_id=sid,
                peers=peers,
                host=spots[sid].host,
                launcher=spots[sid].launcher,
            )
            for sid, _, client, _, _ in peers
        ]
        super().__init__(name, nodes)

    @property
    def hosts(self) -> str:
        return ",".join(n.hosts for n in self.nodes)

    @property
    def urls(self) -> list[str]:
        """One URL naming every member (a ZooKeeper client fails over between them itself)."""
        return [self.url]

    @property
    def url(self) -> str:
        """All members in one URL, ``zookeeper://h:p,h:p,h:p`` (what ``--zk-hosts`` gives)."""
        return f"zookeeper://{self.hosts}"

    def member_ready(self, node: ZooKeeperServer) -> bool:
        return node.serving()

    def after_start(self) -> None:
        warm_up(self.hosts)

    def leader(self) -> ZooKeeperServer | None:
        """The member that leads right now (None while there is none)."""
        return next((n for n in self.nodes if n.mode() == "leader"), None)
