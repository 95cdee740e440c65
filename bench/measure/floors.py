"""Floors: one round trip to each backend, measured in the run, the yardstick of every figure.

A lock cannot hand over faster than one round trip to its server, so each run measures
that round trip next to its cases (the machine may be busy; a ratio to a floor of the
same run survives that). The bench process is not gevent-patched, so these are plain
blocking clients, one connection, after a warm-up.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

#: Round trips timed per backend (after :data:`WARMUP`); about 10-50 ms per backend.
SAMPLES = 200
WARMUP = 20

#: What the floor of each backend times.
FLOOR_OPS = {
    "redis": "PING",
    "postgres": "SELECT 1",
    "memcached": "get (missing key)",
    "etcd": "range (one key)",
    "zookeeper": "exists /",
    "file": "open+close",
}


@contextlib.contextmanager
def _redis(url: str) -> Iterator[Callable[[], object]]:
    from infra.server_stats import _redis_client

    client = _redis_client(url)
    try:
        yield client.ping
    finally:
        client.close()


@contextlib.contextmanager
def _postgres(url: str) -> Iterator[Callable[[], object]]:
    from lockimpls.pg_conn import connect

    conn = connect(url)
    try:
        yield lambda: conn.execute("SELECT 1").fetchone()
    finally:
        conn.close()


@contextlib.contextmanager
def _memcached(url: str) -> Iterator[Callable[[], object]]:
    from urllib.parse import urlsplit

    from pymemcache.client.base import Client

    parts = urlsplit(url if "://" in url else f"memcached://{url}")
    client = Client((parts.hostname or "127.0.0.1", parts.port or 11211), connect_timeout=2, timeout=5)
    try:
        yield lambda: client.get("lockbench-floor")
    finally:
        client.close()


@contextlib.contextmanager
def _etcd(url: str) -> Iterator[Callable[[], object]]:
    from lockimpls.etcd_client import client_for, close_clients

    client = client_for([url])
    try:
        yield lambda: client.range("lockbench-floor")
    finally:
        close_clients()  # this process's pools; the next user opens new ones


@contextlib.contextmanager
def _zookeeper(url: str) -> Iterator[Callable[[], object]]:
    from kazoo.client import KazooClient

    from lockimpls.zk_conn import parse_hosts

    client = KazooClient(hosts=parse_hosts([url]), timeout=10)
    client.start(timeout=15)
    try:
        yield lambda: client.exists("/")
    finally:
        client.stop()
        client.close()


@contextlib.contextmanager
def _file(url: str) -> Iterator[Callable[[], object]]:
    path = Path(url.removeprefix("file://")) / "lockbench-floor"

    def once() -> None:
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))

    yield once


_CLIENTS = {
    "redis": _redis,
    "postgres": _postgres,
    "memcached": _memcached,
    "etcd": _etcd,
    "zookeeper": _zookeeper,
    "file": _file,
}


def floor(backend: str, url: str, samples: int = SAMPLES) -> dict[str, float | str | int]:
    """``{"op", "p50_us", "p99_us", "samples"}`` of one round trip to ``url``; ``{"op", "error"}`` if it failed."""
    op = FLOOR_OPS.get(backend, "?")
    client = _CLIENTS.get(backend)
    if client is None:
        return {"op": op, "error": f"no floor for backend {backend}"}
    try:
        with client(url) as once:
            for _ in range(WARMUP):
                once()
            times = np.empty(samples)
            for i in range(samples):
                t0 = time.perf_counter_ns()
                once()
                times[i] = (time.perf_counter_ns() - t0) / 1000.0
    except Exception as exc:  # noqa: BLE001 - a floor is a label; the run goes on without it
        from bench.results.redact import redact_text

        return {"op": op, "error": redact_text(f"{type(exc).__name__}: {exc}")}
    return {
        "op": op,
        "p50_us": float(np.percentile(times, 50)),
        "p99_us": float(np.percentile(times, 99)),
        "samples": samples,
    }


def floors(urls: dict[str, list[str]], backends: list[str]) -> dict[str, dict]:
    """The floor of each backend, against its first server (RedLock's five are alike)."""
    return {b: floor(b, urls[b][0]) for b in backends if urls.get(b)}
