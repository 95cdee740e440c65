"""Which server class runs each backend, so bench and tests start servers by backend name.

A server class takes ``(workdir: Path, name: str)``, has ``start(detached=False) -> self``,
``stop()``, ``url`` (the URL a Lock receives) and ``version() -> str``.
Backends mapped to None need no server (their impls get a URL from ``local_url``).
"""

from __future__ import annotations

import importlib
from pathlib import Path

SERVERS: dict[str, str | None] = {
    "redis": "infra.redis_server:RedisServer",
    "postgres": "infra.postgres_server:PostgresServer",
    "test": None,  # lockimpls.broken: test-only locks that need no server
    "etcd": "infra.etcd_server:EtcdServer",
    "memcached": "infra.memcached_server:MemcachedServer",
    "file": None,
    "zookeeper": "infra.zookeeper_server:ZooKeeperServer",
}


#: (backend, topology) -> server class for the multi-node set-ups faults need.
TOPOLOGIES: dict[tuple[str, str], str] = {
    ("redis", "sentinel"): "infra.redis_sentinel:RedisSentinelGroup",
    ("redis", "aof-everysec"): "infra.redis_server:RedisAofEverysec",
    ("zookeeper", "ensemble"): "infra.zookeeper_server:ZooKeeperEnsemble",
    ("etcd", "ensemble"): "infra.etcd_server:EtcdCluster",
}


def server_class(backend: str, topology: str | None = None) -> type | None:
    """The server class for ``backend`` (None when it needs no server), or for a topology of it."""
    if topology is not None:
        if (backend, topology) not in TOPOLOGIES:
            raise KeyError(f"no {topology} topology for {backend}")
        module, _, cls = TOPOLOGIES[(backend, topology)].partition(":")
        return getattr(importlib.import_module(module), cls)
    spec = SERVERS[backend]
    if spec is None:
        return None
    module, _, cls = spec.partition(":")
    return getattr(importlib.import_module(module), cls)


def local_url(backend: str, workdir: Path) -> str:
    """URL for a backend that needs no server (e.g. a directory for file locks)."""
    path = workdir / backend
    path.mkdir(parents=True, exist_ok=True)
    return f"{backend}://{path}"
