"""Server-side command counters, so a report can say how many round trips an acquire cost.

``snapshot`` reads the server's own statistics (Redis ``INFO commandstats``); the runner
takes one before and one after a case and divides the difference by the acquisitions.
Backends without a reader return an empty dict, and the report shows n/a.
"""

from __future__ import annotations

from collections.abc import Callable

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


def _redis(urls: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for url in urls:
        client = _redis_client(url)
        try:
            stats = client.info("commandstats")
        finally:
            client.close()
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
