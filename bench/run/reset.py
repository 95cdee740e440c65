"""Empty lock state between cases, so no case inherits a lock another case left behind.

A crashed holder of a lock without expiry (``redis.setnx-del``) leaves its key for
good; without this, every later case on the same server would measure that stuck key.
Only lockbench's own keys, rows and nodes are removed, so a user's server given with
``--redis-url`` and friends keeps everything else.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit


def _redis(urls: list[str]) -> None:
    from lockimpls.redis_conn import client_for

    for url in urls:
        client = client_for(url)
        keys = list(client.scan_iter(match="lockbench:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i : i + 500])


def _postgres(urls: list[str]) -> None:
    from lockimpls.pg_conn import reset_state

    for url in urls:
        reset_state(url)


def _etcd(urls: list[str]) -> None:
    from lockimpls.etcd_client import b64, client_for, prefix_end

    prefix = b"lockbench/"
    client_for(urls).call("/v3/kv/deleterange", {"key": b64(prefix), "range_end": b64(prefix_end(prefix))})


def _zookeeper(urls: list[str]) -> None:
    from kazoo.client import KazooClient

    from lockimpls.zk_conn import parse_hosts

    client = KazooClient(hosts=parse_hosts(urls), timeout=5)
    client.start(timeout=10)
    try:
        if client.exists("/lockbench"):
            client.delete("/lockbench", recursive=True)
    finally:
        client.stop()
        client.close()


def _file(urls: list[str]) -> None:
    for url in urls:
        directory = Path(urlsplit(url).path)
        if directory.is_dir():
            for child in directory.iterdir():
                if child.is_dir():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)


def _memcached(urls: list[str]) -> None:
    """memcached cannot list keys; its catalog locks always expire (a stuck lock lasts one lease).
    The no-expiry canary's keys never do: it lists them in an index key, emptied here."""
    from pymemcache.client.base import Client

    from lockimpls.canary import MEMCACHED_INDEX
    from lockimpls.memcached_locks import parse_server

    client = Client(parse_server(urls), connect_timeout=2, timeout=5)
    try:
        index = client.get(MEMCACHED_INDEX)
        for key in (index or b"").decode(errors="replace").split():
            client.delete(key, noreply=False)
        client.delete(MEMCACHED_INDEX, noreply=False)
    finally:
        client.close()


#: Backends not listed: nothing to reset.
RESETTERS: dict[str, Callable[[list[str]], None]] = {
    "memcached": _memcached,
    "redis": _redis,
    "postgres": _postgres,
    "etcd": _etcd,
    "zookeeper": _zookeeper,
    "file": _file,
}


def reset_lock_state(backend: str, urls: list[str]) -> None:
    """Remove lockbench's lock state from the backend's servers (errors propagate)."""
    resetter = RESETTERS.get(backend)
    if resetter is not None:
        resetter(urls)
