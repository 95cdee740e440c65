"""Throwaway redis-server instances on 127.0.0.1 or a test host (no persistence: a restart loses lock state)."""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from infra.install import find_binary
from infra.placement import LOOPBACK_HOST
from infra.ports import free_port
from infra.process import ServerProcess
from infra.server import ManagedServer


def _ping(host: str, port: int) -> bool:
    with socket.create_connection((host, port), timeout=0.5) as s:
        s.sendall(b"PING\r\n")
        return s.recv(64).startswith(b"+PONG")


class RedisServer(ManagedServer):
    """One redis-server with its own port and directory, started and stopped by lockbench.

    Why not a shared server: each case must start from empty lock state and its own
    command statistics, and the resource must never share a server with the lock.
    """

    kind = "redis"

    def __init__(
        self,
        workdir: Path,
        name: str = "redis",
        port: int | None = None,
        extra_args: list[str] | None = None,
        *,
        host: str = LOOPBACK_HOST,
        launcher: Sequence[str] = (),
    ) -> None:
        self.binary = find_binary("redis-server", "redis-server")
        self.port = port or free_port()
        self.name = name
        self.host = host
        self.dir = workdir / f"{name}-{self.port}"
        self.dir.mkdir(parents=True, exist_ok=True)
        # Protected mode refuses every client that is not on loopback; a test host's address
        # exists only inside its namespaces, so nothing outside the machine can reach it.
        protected = "yes" if host == LOOPBACK_HOST else "no"
        argv = [
            *launcher,
            self.binary,
            "--bind", host,
            "--port", str(self.port),
            "--dir", str(self.dir),
            "--save", "",
            "--appendonly", "no",
            "--protected-mode", protected,
            "--daemonize", "no",
            "--maxclients", "10000",
            *(extra_args or []),
        ]  # fmt: skip
        self.process = ServerProcess(name, argv, self.dir / "server.log", realtime=True)

    @property
    def address(self) -> tuple[str, int]:
        return (self.host, self.port)

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def start(self, detached: bool = False) -> RedisServer:
        self.process.start(lambda: _ping(self.host, self.port), timeout=10, detached=detached)
        return self

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True).stdout
        for part in out.split():
            if part.startswith("v="):
                return part[2:]
        return out.strip()


class RedisAofEverysec(RedisServer):
    """A Redis with its append-only file on, fsynced every second (``appendfsync everysec``).

    Why: the RedLock restart arm with persistence. A SIGKILL loses nothing the kernel already
    holds (Redis writes the AOF before it replies; only the fsync waits a second), so this
    arm tells whether a *process* crash breaks RedLock with AOF on; a machine crash, which
    could lose that second, is not simulated here.
    """

    def __init__(self, workdir: Path, name: str = "redis", *, place: Any = None, **kw: Any) -> None:
        at = place(name) if place is not None else None
        if at is not None:
            kw.setdefault("host", at.host)
            kw.setdefault("launcher", at.launcher)
        super().__init__(workdir, name, extra_args=["--appendonly", "yes", "--appendfsync", "everysec"], **kw)
