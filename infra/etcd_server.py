"""Throwaway etcd members on 127.0.0.1 or test hosts: one node, or a 3-node cluster for fault cases.

Debian 12 ships etcd 3.4 (package ``etcd-server``). Locks talk to it through its
HTTP/JSON gateway on the client port (``/v3/...``), so the URL of a node is the plain
``http://<host>:<client port>`` every etcd user knows.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from infra.cluster import LoopbackCluster
from infra.errors import InfraError
from infra.install import find_binary
from infra.placement import LOOPBACK_HOST, Placer, on_loopback
from infra.ports import free_port
from infra.process import ServerProcess
from infra.ramdisk import ram_dir, release
from infra.server import ManagedServer

#: Raft timing of a single node. A node elects itself at once, so short timings only
#: make it ready sooner; they also lower etcd's minimum lease TTL to 1 s (the minimum is
#: 1.5 election timeouts, rounded up), which the lease-expiry cases need.
SINGLE_HEARTBEAT_MS = 50
SINGLE_ELECTION_MS = 500
#: A cluster keeps etcd's defaults: on 2 busy cores shorter timeouts make leaders flap.
CLUSTER_HEARTBEAT_MS = 100
CLUSTER_ELECTION_MS = 1000

_GOARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64", "ppc64le": "ppc64le",
           "s390x": "s390x", "armv7l": "arm", "i686": "386", "i386": "386", "riscv64": "riscv64"}  # fmt: skip


def etcd_env() -> dict[str, str]:
    """The environment for etcd: 3.4 refuses to start on other arches than amd64/ppc64le
    unless ETCD_UNSUPPORTED_ARCH names the running arch (harmless where it is supported)."""
    env = dict(os.environ)
    machine = platform.machine().lower()
    env.setdefault("ETCD_UNSUPPORTED_ARCH", _GOARCH.get(machine, machine))
    return env


def health(client_url: str, timeout: float = 0.5) -> bool:
    """True when the member at ``client_url`` reports ``{"health": "true"}`` (it has a leader)."""
    with urllib.request.urlopen(f"{client_url}/health", timeout=timeout) as resp:  # noqa: S310 - loopback http
        return json.loads(resp.read()).get("health") in ("true", True)


def binary() -> str:
    """Path of the etcd binary, installing the OS package ``etcd-server`` when allowed."""
    return find_binary("etcd", "etcd-server")


def binary_version(path: str) -> str:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, env=etcd_env()).stdout
    for line in out.splitlines():
        if line.lower().startswith("etcd version:"):
            return line.split(":", 1)[1].strip()
    return out.strip().splitlines()[0] if out.strip() else "unknown"


class EtcdServer(ManagedServer):
    """One etcd member with its own client port, peer port and data directory.

    Why a fresh member per run: each case starts from an empty keyspace and revision 1,
    so fencing tokens (create revisions) and timings do not depend on earlier runs.
    The member also serves as a building block of :class:`EtcdCluster`.
    """

    kind = "etcd"

    def __init__(
        self,
        workdir: Path,
        name: str = "etcd",
        *,
        client_port: int | None = None,
        peer_port: int | None = None,
        initial_cluster: str | None = None,
        cluster_token: str | None = None,
        heartbeat_ms: int = SINGLE_HEARTBEAT_MS,
        election_ms: int = SINGLE_ELECTION_MS,
        host: str = LOOPBACK_HOST,
        launcher: Sequence[str] = (),
        fsync: bool = False,
    ) -> None:
        self.binary = binary()
        #: with False (the default) the data directory is in RAM (infra/ramdisk.py), where etcd's
        #: fsync of every write costs nothing; True keeps it on the disk under ``workdir``
        self.fsync = fsync
        self._ram: Path | None = None
        self.name = name
        self.host = host
        self.client_port = client_port or free_port()
        self.peer_port = peer_port or free_port()
        self.dir = workdir / f"{name}-{self.client_port}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.data_dir = self.dir / "data"
        member = f"{name}=http://{host}:{self.peer_port}"
        argv = [
            *launcher,
            self.binary,
            "--name", name,
            "--data-dir", str(self.data_dir),
            "--listen-client-urls", self.url,
            "--advertise-client-urls", self.url,
            "--listen-peer-urls", self.peer_url,
            "--initial-advertise-peer-urls", self.peer_url,
            "--initial-cluster", initial_cluster or member,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", cluster_token or f"lockbench-{name}-{self.client_port}",
            "--heartbeat-interval", str(heartbeat_ms),
            "--election-timeout", str(election_ms),
            "--logger", "zap",
            "--log-level", "warn",
        ]  # fmt: skip
        self.process = ServerProcess(name, argv, self.dir / "server.log", cwd=self.dir, env=etcd_env())

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://{self.host}:{self.peer_port}"

    def healthy(self) -> bool:
        """True when the member answers /health with a leader; False on any error."""
        try:
            return health(self.url)
        except Exception:  # noqa: BLE001 - down, starting, or no leader: all mean "not healthy"
            return False

    def start(self, detached: bool = False, wait: bool = True) -> EtcdServer:
        """Start the member; with ``wait`` (the default) return once /health says healthy."""
        ready = (lambda: health(self.url)) if wait else (lambda: True)
        if not self.fsync and not detached and not self.data_dir.exists() and not self.data_dir.is_symlink():
            # a detached member outlives this process, whose pid names (and reaps) a RAM directory
            self._ram = ram_dir("etcd", f"{self.name}-{self.client_port}")
            if self._ram is not None:
                self.data_dir.symlink_to(self._ram, target_is_directory=True)
        self.process.start(ready, timeout=30, detached=detached)
        return self

    def stop(self) -> None:
        """Stop the member for good and free its RAM data directory.

        A member that is to come back is killed (:meth:`kill`, as every fault does), which keeps
        its data: started again after a stop it would be a new member of a cluster that knows it.
        """
        super().stop()
        if self._ram is not None:
            release(self._ram)
            self.data_dir.unlink(missing_ok=True)
            self._ram = None

    def wipe(self) -> None:
        """Remove the data directory (only while stopped): the next start is a new member."""
        if self._ram is not None:
            shutil.rmtree(self._ram, ignore_errors=True)
            self._ram.mkdir(mode=0o700)
        else:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def version(self) -> str:
        return binary_version(self.binary)


class EtcdCluster(LoopbackCluster):
    """Three etcd members forming one cluster, for failover and partition cases.

    Why separate from :class:`EtcdServer`: a member of a cluster is only healthy once a
    quorum is up, so all members must be started before any is waited for.
    """

    kind = "etcd-cluster"
    label = "etcd cluster"

    def __init__(
        self, workdir: Path, name: str = "etcd-cluster", size: int = 3, *, place: Placer = on_loopback
    ) -> None:
        if size < 1:
            raise InfraError("an etcd cluster needs at least one member")
        ports = [(free_port(), free_port()) for _ in range(size)]
        names = [f"{name}-{i}" for i in range(size)]
        spots = [place(n) for n in names]
        initial = ",".join(
            f"{n}=http://{p.host}:{peer}" for n, p, (_, peer) in zip(names, spots, ports, strict=True)
        )
        token = f"lockbench-{name}-{ports[0][0]}"
        nodes = [
            EtcdServer(
                workdir,
                n,
                client_port=client,
                peer_port=peer,
                initial_cluster=initial,
                cluster_token=token,
                heartbeat_ms=CLUSTER_HEARTBEAT_MS,
                election_ms=CLUSTER_ELECTION_MS,
                host=p.host,
                launcher=p.launcher,
            )
            for n, p, (client, peer) in zip(names, spots, ports, strict=True)
        ]
        super().__init__(name, nodes)

    @property
    def urls(self) -> list[str]:
        """Client URLs of all members (a Lock accepts them all and fails over between them)."""
        return [n.url for n in self.nodes]

    @property
    def url(self) -> str:
        """All client URLs comma-separated, the form ``--etcd-url`` accepts."""
        return ",".join(self.urls)

    def member_ready(self, node: EtcdServer) -> bool:
        return node.healthy()

    def leader(self) -> EtcdServer | None:
        """The member that is leader right now (None when there is none or it cannot be asked)."""
        for node in self.nodes:
            try:
                req = urllib.request.Request(f"{node.url}/v3/maintenance/status", data=b"{}", method="POST")
                with urllib.request.urlopen(req, timeout=0.5) as resp:  # noqa: S310 - loopback http
                    status = json.loads(resp.read())
            except Exception:  # noqa: BLE001 - a down member cannot say who leads
                continue
            leader_id = status.get("leader")
            if leader_id and leader_id == status.get("header", {}).get("member_id"):
                return node
        return None
