"""Server-side counters no client can distort: commands sent and CPU the server spent.

``snapshot`` reads the server's own statistics (Redis ``INFO commandstats``); the runner
takes one before and one after a case and divides the difference by the acquisitions.
Backends without a reader return an empty dict, and the report shows n/a. A read that
failed, or counters that restarted between the two snapshots (a server restart: Redis's
``run_id`` changed, or a count went down), give no count at all, with the reason in
:attr:`Commands.error`: a lifetime total or a clipped difference would be a wrong number.

``cpu_snapshot`` reads the server's CPU seconds from its own statistics where the backend
exposes them (Redis ``INFO cpu``, etcd ``/metrics``, memcached ``stats``), and otherwise
from the operating system for a server process bench started itself (ZooKeeper,
PostgreSQL with its backends); each reading says which source it came from.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import redis


def _redis_client(url: str) -> redis.Redis:
    """A short-lived client; for ``redis+sentinel://h:p,h:p/service``, the current master."""
    if url.startswith("redis+sentinel://"):
        from redis.sentinel import Sentinel

        netloc, _, service = url.removeprefix("redis+sentinel://").partition("/")
        hosts = [(h, int(p)) for h, p in (part.rsplit(":", 1) for part in netloc.split(","))]
        sentinel = Sentinel(hosts, socket_timeout=2, socket_connect_timeout=2)
        return sentinel.master_for(service or "lockbench", socket_timeout=5, socket_connect_timeout=2)
    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=5)


def _redis_info(urls: Sequence[str], section: str) -> Iterator[dict[str, Any]]:
    """``INFO <section>`` of each Redis server, one fresh connection each."""
    for url in urls:
        client = _redis_client(url)
        try:
            yield client.info(section)
        finally:
            client.close()


class Commands(dict):
    """Command counts by name (a plain dict for JSON), plus why there are none when a read failed.

    Why a dict subclass: the runner and the results store the counts as before, and the
    reason travels with them to the one place that divides by acquisitions.
    """

    def __init__(self, counts: dict[str, int] | None = None, error: str = "", identity: str = "") -> None:
        super().__init__(counts or {})
        #: why these counts are not usable ("" when they are)
        self.error = error
        #: which server incarnations were read (Redis run_ids); differs after a restart
        self.identity = identity


def _redis(urls: list[str]) -> Commands:
    out: dict[str, int] = {}
    ids: list[str] = []
    for url in urls:
        client = _redis_client(url)
        try:
            ids.append(str(client.info("server").get("run_id", "")))
            for key, value in client.info("commandstats").items():
                name = key.removeprefix("cmdstat_")
                out[name] = out.get(name, 0) + int(value["calls"])
        finally:
            client.close()
    return Commands(out, identity=",".join(ids))


def _zookeeper(urls: list[str]) -> dict[str, int]:
    from infra.zookeeper_server import stats_snapshot  # mntr: packets received, summed over servers

    return stats_snapshot(urls)


READERS: dict[str, Callable[[list[str]], dict[str, int]]] = {"redis": _redis, "zookeeper": _zookeeper}

#: Commands the snapshot itself sends; subtracted so the count is the lock's alone.
OWN_COMMANDS = {"info", "ping", "hello", "client|setinfo", "client|setname"}


def snapshot(backend: str, urls: list[str]) -> Commands:
    """Cumulative command counts by command name, summed over the backend's servers.

    Empty without a reader for the backend; empty with :attr:`Commands.error` set when the
    read failed (the reason, never a partial or zero count).
    """
    reader = READERS.get(backend)
    if reader is None:
        return Commands()
    try:
        got = reader(urls)
    except Exception as exc:  # noqa: BLE001 - statistics are optional; a dead server is reported elsewhere
        return Commands(
            error=f"reading {backend} command statistics failed: {type(exc).__name__}: {exc}"[:300]
        )
    return got if isinstance(got, Commands) else Commands(got)


def delta(before: dict[str, int], after: dict[str, int]) -> Commands:
    """Commands sent between two snapshots, without the snapshots' own.

    No counts, with the reason in ``error``, when either read failed or the counters were
    reset in between (another server incarnation, or a count that went down).
    """
    for snap, when in ((before, "before"), (after, "after")):
        error = getattr(snap, "error", "")
        if error:
            return Commands(error=f"{error} ({when} the case)")
    if not before and not after:
        return Commands()
    old_id, new_id = getattr(before, "identity", ""), getattr(after, "identity", "")
    if old_id and new_id and old_id != new_id:
        return Commands(
            error="the server restarted during the case (its run_id changed): its counters restarted"
        )
    out = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before) if k not in OWN_COMMANDS}
    fell = sorted(k for k, v in out.items() if v < 0)
    if fell:
        return Commands(
            error=f"command counters went down ({', '.join(fell[:3])}): the server restarted or was reset"
        )
    return Commands({k: v for k, v in out.items() if v > 0})


# --- server CPU ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuReading:
    """Cumulative CPU seconds of a backend's servers and where the figure came from."""

    seconds: float
    source: str
    #: which server incarnations were read (Redis run_ids, or pids); "" when not known
    identity: str = ""


def _redis_cpu(urls: Sequence[str]) -> float:
    return sum(float(i["used_cpu_user"]) + float(i["used_cpu_sys"]) for i in _redis_info(urls, "cpu"))


def _etcd_cpu(urls: Sequence[str]) -> float:
    total = 0.0
    for url in (u for entry in urls for u in entry.split(",")):
        with urllib.request.urlopen(f"{url.rstrip('/')}/metrics", timeout=5) as response:
            text = response.read().decode()
        line = next(ln for ln in text.splitlines() if ln.startswith("process_cpu_seconds_total "))
        total += float(line.split()[1])
    return total


def _memcached_cpu(urls: Sequence[str]) -> float:
    total = 0.0
    for url in urls:
        parts = urlsplit(url if "://" in url else f"memcached://{url}")
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 11211), timeout=5
        ) as sock:
            sock.sendall(b"stats\r\n")
            data = b""
            while not data.endswith(b"END\r\n"):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        stats = dict(ln.split()[1:3] for ln in data.decode().splitlines() if ln.startswith("STAT "))
        total += float(stats["rusage_user"]) + float(stats["rusage_system"])
    return total


#: Backends whose servers report their own CPU, and what the figure is called there.
CPU_READERS: dict[str, tuple[Callable[[Sequence[str]], float], str]] = {
    "redis": (_redis_cpu, "server: INFO cpu used_cpu_user+used_cpu_sys"),
    "etcd": (_etcd_cpu, "server: /metrics process_cpu_seconds_total"),
    "memcached": (_memcached_cpu, "server: stats rusage_user+rusage_system"),
}


def _process_tree_cpu(pids: Sequence[int]) -> float:
    """CPU seconds of processes and their descendants, living and reaped (PostgreSQL backends)."""
    import psutil

    total = 0.0
    for pid in pids:
        proc = psutil.Process(pid)
        t = proc.cpu_times()
        total += t.user + t.system + t.children_user + t.children_system
        for child in proc.children(recursive=True):
            try:
                c = child.cpu_times()
            except psutil.Error:  # gone between listing and reading: its time is in children_*
                continue
            total += c.user + c.system
    return total


def cpu_snapshot(backend: str, urls: Sequence[str], pids: Sequence[int] = ()) -> CpuReading | None:
    """Cumulative CPU seconds of the backend's servers, or None when nothing can tell.

    ``pids`` are server processes bench started: the fallback for backends whose servers
    do not report their own CPU. Servers given by the user or reused from ``bench infra up``
    without such statistics have no reading.
    """
    try:
        if backend in CPU_READERS:
            reader, source = CPU_READERS[backend]
            identity = _redis_identity(urls) if backend == "redis" else ""
            return CpuReading(reader(urls), source, identity)
        if pids:
            source = "os: /proc of the server process(es) bench started"
            return CpuReading(_process_tree_cpu(pids), source, ",".join(map(str, pids)))
    except Exception:  # noqa: BLE001 - statistics are optional; a dead server is reported elsewhere
        return None
    return None


def _redis_identity(urls: Sequence[str]) -> str:
    return ",".join(str(i.get("run_id", "")) for i in _redis_info(urls, "server"))


def cpu_delta(before: CpuReading | None, after: CpuReading | None) -> CpuReading | None:
    """CPU seconds spent between two readings of the same source and server incarnation, or None.

    A restart in between (another run_id or pid, or a total that went down) resets the
    server's counter: the difference would be a wrong number, so there is none.
    """
    if before is None or after is None or before.source != after.source:
        return None
    if before.identity != after.identity or after.seconds < before.seconds:
        return None
    return CpuReading(after.seconds - before.seconds, after.source, after.identity)
