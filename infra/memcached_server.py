"""Throwaway memcached instances on 127.0.0.1 or a test host (OS package ``memcached``)."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path

from infra.install import find_binary
from infra.placement import LOOPBACK_HOST
from infra.ports import free_port
from infra.process import ServerProcess
from infra.server import ManagedServer


def _version(host: str, port: int) -> str:
    """The server's own version string (``VERSION 1.6.18`` -> ``1.6.18``); raises when down."""
    with socket.create_connection((host, port), timeout=0.5) as s:
        s.sendall(b"version\r\n")
        reply = s.recv(128)
    if not reply.startswith(b"VERSION "):
        raise ConnectionError(f"unexpected reply {reply!r}")
    return reply[8:].strip().decode()


class MemcachedServer(ManagedServer):
    """One memcached with its own TCP port (UDP off), started and stopped by lockbench.

    Why not a shared server: every case starts with no keys and fresh statistics, and a
    memcached nobody else uses cannot evict a lock key to make room for other data.
    """

    kind = "memcached"

    def __init__(
        self,
        workdir: Path,
        name: str = "memcached",
        port: int | None = None,
        *,
        host: str = LOOPBACK_HOST,
        launcher: Sequence[str] = (),
    ) -> None:
        self.binary = find_binary("memcached", "memcached")
        self.port = port or free_port()
        self.name = name
        self.host = host
        self.dir = workdir / f"{name}-{self.port}"
        self.dir.mkdir(parents=True, exist_ok=True)
        argv = [
            *launcher,
            self.binary,
            f"--listen={host}",
            f"--port={self.port}",
            "--udp-port=0",
            "--memory-limit=64",
            "--conn-limit=4096",
            "--threads=2",
        ]
        if os.geteuid() == 0:
            argv.append("--user=root")  # memcached refuses to run as root unless told so
        self.process = ServerProcess(name, argv, self.dir / "server.log", cwd=self.dir, realtime=True)

    @property
    def url(self) -> str:
        return f"memcached://{self.host}:{self.port}"

    def start(self, detached: bool = False) -> MemcachedServer:
        self.process.start(lambda: bool(_version(self.host, self.port)), timeout=10, detached=detached)
        return self

    def version(self) -> str:
        out = subprocess.run([self.binary, "-V"], capture_output=True, text=True).stdout.strip()
        return out.split()[-1] if out else "unknown"
