"""The servers one command needs: started on loopback or on test hosts, reused, or given by the user.

For each backend the URL comes from, in order: the user's ``--<backend>-url`` (checked
for reachability, nothing started), a server left up by ``bench infra up`` (reused),
or a throwaway server started now and stopped when the stack closes, whatever happens.
The protected resource always gets its own Redis, distinct from every lock server.

With ``hosts`` (a :class:`infra.testhosts.TestHostNet`) every server process the stack
starts gets a test host of its own, the resource included; nothing is reused from
``bench infra up`` then. Whoever talks to those servers (readiness checks included) must
run inside a namespace on the same switch: see ``TestHostNet.enter``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from infra import catalog, state
from infra.errors import InfraError
from infra.placement import Placer, on_loopback
from infra.ports import port_open

if TYPE_CHECKING:
    from infra.testhosts import TestHostNet

DEFAULT_PORTS = {
    "redis": 6379,
    "postgresql": 5432,
    "postgres": 5432,
    "http": 2379,
    "memcached": 11211,
    "zookeeper": 2181,
}


def probe(url: str, timeout: float = 3.0) -> None:
    """Raise InfraError unless something answers at every host:port of the URL.

    Accepts one host or a comma-separated list (``http://h1:2379,http://h2:2379``,
    ``redis+sentinel://h1:p1,h2:p2/service``, ``zookeeper://h1:p1,h2:p2``).
    """
    for part in url.split(","):
        if "://" not in part:
            part = f"{urlsplit(url).scheme}://{part}"
        try:
            parts = urlsplit(part)
            host, port = parts.hostname or "127.0.0.1", parts.port
        except ValueError:
            raise InfraError(f"cannot read host and port from {part.split('@')[-1]!r}; fix the URL") from None
        if parts.scheme in ("file", ""):
            continue
        port = port or DEFAULT_PORTS.get(parts.scheme.split("+")[0], 0)
        if not port_open(host, port, timeout=timeout):
            raise InfraError(
                f"cannot reach {parts.scheme}://{host}:{port} (nothing answers there); start the server or fix the URL"
            )


def _free_name(folder: Path, name: str, why: str) -> Path:
    """The first unused name for a kept log of process ``name`` in ``folder`` (see Stack.keep_logs)."""
    folder.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        if why:
            candidate = folder / f"{name}.{why}-{n}.log"
        else:
            candidate = folder / (f"{name}.log" if n == 1 else f"{name}.{n}.log")
        if not candidate.exists():
            candidate.touch()  # claimed: the next stack of this lane takes the next name
            return candidate
        n += 1


def _naming_logs(message: str, processes: list[Any], kept: dict[str, Path]) -> str:
    """``message`` with each server log it names replaced by the kept copy (or the copies appended)."""
    named = False
    for proc in processes:
        if proc.name in kept and str(proc.log_path) in message:
            message = message.replace(str(proc.log_path), str(kept[proc.name]))
            named = True
    if kept and not named:
        message = f"{message.rstrip()}; log: {', '.join(str(p) for p in kept.values())}"
    return message


class Stack:
    """Servers for a set of backends plus the resource, as a context manager.

    Why a context manager: the only reliable way to stop what we started on every exit
    path (normal end, exception, Ctrl-C); atexit in infra.process covers the rest.
    """

    def __init__(
        self,
        backends: list[str],
        user_urls: dict[str, list[str]] | None = None,
        resource_url: str | None = None,
        workdir: Path | None = None,
        reuse_infra_up: bool = True,
        servers_per_backend: dict[str, int] | None = None,
        topology: dict[str, str] | None = None,
        hosts: TestHostNet | None = None,
        keep_logs: Path | None = None,
    ) -> None:
        self.backends = backends
        #: where every server's log is copied when the stack closes, a start fails or a server dies
        #: (a results folder's ``logs/servers/...``); None: the logs go with the work directory
        self.keep_logs_dir = keep_logs
        #: process name -> its kept log (one file per process for the stack's life; restarts append)
        self.kept: dict[str, Path] = {}
        self.hosts = hosts
        self._place: Placer = hosts.placer() if hosts is not None else on_loopback
        self.counts = servers_per_backend or {}
        self.topology = {k: v for k, v in (topology or {}).items() if v}
        self.user_urls = {k: v for k, v in (user_urls or {}).items() if v}
        self.resource_url = resource_url
        self._own_workdir = workdir is None
        self.workdir = workdir or Path(tempfile.mkdtemp(prefix="lockbench-"))
        self.reuse = reuse_infra_up and hosts is None
        self.urls: dict[str, list[str]] = {}
        self.sources: dict[str, str] = {}
        self.servers: dict[str, Any] = {}
        self.versions: dict[str, str] = {}

    def _from_infra_up(self, kind: str) -> str | None:
        if not self.reuse:
            return None
        for server in state.load().get("servers", []):
            if server.get("kind") == kind and state.pid_alive(server.get("pid", -1)):
                return server["url"]
        return None

    def _start(self, key: str, backend: str, plain: bool = False) -> str:
        cls = catalog.server_class(backend, None if plain else self.topology.get(backend))
        if cls is None:
            return catalog.local_url(backend, self.workdir)
        topology = None if plain else self.topology.get(backend)
        if topology is not None:
            server = cls(self.workdir, name=key, place=self._place)
        else:
            at = self._place(key)
            server = cls(self.workdir, name=key, host=at.host, launcher=at.launcher)
        self.servers[key] = server
        try:
            server.start()
        except InfraError as exc:
            kept = self.keep_logs([key], why="start-failed")
            raise InfraError(_naming_logs(str(exc), self.processes([key]), kept)) from exc
        try:
            self.versions[key] = server.version()
        except Exception:  # noqa: BLE001 - a version is a label, never a reason to fail
            self.versions[key] = "unknown"
        return server.url

    def __enter__(self) -> Stack:
        try:
            for backend in self.backends:
                if backend not in catalog.SERVERS:
                    raise InfraError(f"no infra for backend {backend!r}; known: {', '.join(catalog.SERVERS)}")
                if backend in self.user_urls:
                    for url in self.user_urls[backend]:
                        probe(url)
                    self.urls[backend] = self.user_urls[backend]
                    self.sources[backend] = "user"
                elif (
                    self.counts.get(backend, 1) == 1
                    and backend not in self.topology
                    and (url := self._from_infra_up(backend)) is not None
                ):
                    self.urls[backend] = [url]
                    self.sources[backend] = "infra-up"
                else:
                    n = self.counts.get(backend, 1)
                    names = [f"{backend}-lock"] if n == 1 else [f"{backend}-lock-{i}" for i in range(n)]
                    self.urls[backend] = [self._start(name, backend) for name in names]
                    self.sources[backend] = "started"
            if self.resource_url:
                probe(self.resource_url)
                self.urls["resource"] = [self.resource_url]
                self.sources["resource"] = "user"
            else:
                self.urls["resource"] = [self._start("resource", "redis", plain=True)]
                self.sources["resource"] = "started"
            lock_urls = {u for b in self.backends for u in self.urls[b]}
            if self.urls["resource"][0] in lock_urls:
                raise InfraError(
                    "the resource must not live on a lock server; give --resource-url another server"
                )
        except BaseException:
            self.close()
            raise
        return self

    def dead(self) -> list[str]:
        """Names of servers this stack started that are no longer running."""
        return [
            name
            for name, server in self.servers.items()
            if getattr(server, "process", None) is not None and not server.process.alive()
        ]

    def processes(self, keys: Iterable[str] | None = None) -> list[Any]:
        """The server processes (infra.process.ServerProcess) of these servers (default: all), members included."""
        wanted = None if keys is None else set(keys)
        out = []
        for key, server in self.servers.items():
            if wanted is not None and key not in wanted:
                continue
            procs = getattr(server, "processes", None) or [getattr(server, "process", None)]
            out.extend(p for p in procs if p is not None and getattr(p, "log_path", None) is not None)
        return out

    def keep_logs(self, keys: Iterable[str] | None = None, why: str = "") -> dict[str, Path]:
        """Copy the logs of these servers (default: all) to :attr:`keep_logs_dir`; {process name: kept file}.

        Why: the work directory is deleted with the stack (and the scratch folder with bench), so
        an error that points at a server's log must point at a copy that stays. A process keeps
        one file for the stack's life, named the first time: ``<name>.log`` (``<name>.2.log`` for
        the same name in a later stack), or ``<name>.<why>-<n>.log`` (``start-failed``, ``died``).
        """
        return self._keep(self.processes(keys), why)

    def naming_logs(self, text: str) -> str:
        """``text`` (an error, a verdict's reason) with every server log it names replaced by its kept copy."""
        if self.keep_logs_dir is None or not text:
            return text
        named = [p for p in self.processes() if str(p.log_path) in text]
        for proc in named:
            kept = self._keep([proc]).get(proc.name)
            if kept is not None:
                text = text.replace(str(proc.log_path), str(kept))
        return text

    def _keep(self, processes: list[Any], why: str = "") -> dict[str, Path]:
        if self.keep_logs_dir is None:
            return {}
        out: dict[str, Path] = {}
        for proc in processes:
            dest = self.kept.get(proc.name)
            tmp = None
            try:
                if dest is None:
                    dest = self.kept[proc.name] = _free_name(self.keep_logs_dir, proc.name, why)
                tmp = dest.with_name(f".{dest.name}.tmp")
                if Path(proc.log_path).exists():
                    shutil.copyfile(proc.log_path, tmp)
                else:
                    tmp.write_text(f"({proc.name} wrote no log to {proc.log_path})\n")
                os.replace(tmp, dest)
            except OSError:
                if tmp is not None:  # a full disk must not hide the error being reported, nor leave a .tmp
                    with contextlib.suppress(OSError):
                        tmp.unlink(missing_ok=True)
                continue
            out[proc.name] = dest
        return out

    def close(self) -> None:
        for server in reversed(list(self.servers.values())):
            with contextlib.suppress(Exception):  # keep stopping the others
                server.stop()
        self.keep_logs()  # after the stop: the logs are whole
        self.servers.clear()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
