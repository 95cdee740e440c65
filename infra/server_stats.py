"""Server-side counters no client can distort: commands sent and CPU the server spent.

``snapshot`` reads the server's own statistics (Redis ``INFO commandstats``); the runner
takes one before and one after a case and divides the difference by the acquisitions.
Backends without a reader return an empty dict, and the report shows n/a.

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


def _redis(urls: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for stats in _redis_info(urls, "commandstats"):
        for key, value in stats.items():
            name = key.removeprefix("cmdstat_")
            out[name] = out.get(name, 0) + int(value["calls"])
    return out


def _zookeeper(urls: list[str]) -> dict[str, int]:
    from infra.zookeeper_server import stats_snapshot  # mntr: packets received, summed over servers

    return stats_snapshot(urls)


READERS: dict[str, Callable[[list[str]], dict[str, int]]] = {"redis": _redis, "zookeeper": _zookeeper}

#: Commands the snapshot itself sends; subtracted so the count is the lock's alone.
OWN_COMMANDS = {"info", "ping", "hello", "client|setinfo", "client|setname"}


def snapshot(backend: str, urls: list[str]) -> dict[str, int]:
    """Cumulative command counts by command name, summed over the backend's servers."""
    reader = READERS.get(backend)
    if reader is None:
        return {}
    try:
        return reader(urls)
    except Exception:  # noqa: BLE001 - statistics are optional; a dead server is reported elsewhere
        return {}


def delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Commands sent between two snapshots, without the snapshots' own."""
    out = {k: after[k] - before.get(k, 0) for k in after if k not in OWN_COMMANDS}
    return {k: v for k, v in out.items() if v > 0}


# --- server CPU ----------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuReading:
    """Cumulative CPU seconds of a backend's servers and where the figure came from."""

    seconds: float
    source: str


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
            return CpuReading(reader(urls), source)
        if pids:
            return CpuReading(_process_tree_cpu(pids), "os: /proc of the server process(es) bench started")
    except Exception:  # noqa: BLE001 - statistics are optional; a dead server is reported elsewhere
        return None
    return None


def cpu_delta(before: CpuReading | None, after: CpuReading | None) -> CpuReading | None:
    """CPU seconds spent between two readings of the same source, or None."""
    if before is None or after is None or before.source != after.source:
        return None
    return CpuReading(max(0.0, after.seconds - before.seconds), after.source)
