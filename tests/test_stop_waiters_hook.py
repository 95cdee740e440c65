"""Every lock in the catalog waits between attempts only through ``Lock._between_attempts`` (issue 42 item 3).

A case's stop ends the acquires of clients waiting there (``locust_glue._waiting_between_polls``
knows that frame); a lock that sleeps anywhere else keeps its waiters until they get the lock,
one by one, and the stop drains behind it. So for each lock the test holds the lock with one
instance and lets a second wait for it (a real server per backend), while a profiler notes every
sleep of the waiting thread and who asked for it: ``time.sleep`` from anywhere, and a timed
``threading.Condition`` wait (an Event's, a Semaphore's) asked for by a lock's own code (lockimpls,
or the recipe of a library an adapter drives). A client library's wait for its reply, its pool or
a thread's start is a wait for something in flight, not a sleep, and is not counted (nor could
the stop end it). The probe bounds every acquire, so a lock's own wait is always a timed one. A lock whose wait is not under the hook fails, unless it is
listed in :data:`KEEPS_ITS_PLACE` with the reason the wait may not be ended.

The waiter runs in a fresh interpreter without gevent (``python -m tests.test_stop_waiters_hook``):
under gevent a sleep is a greenlet switch the profiler sees differently, and whether this pytest
process has been patched depends on which modules it imported first.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from lockimpls.base import Lock, LockOptions, LockTimeout
from lockimpls.registry import BUILTIN, CANARIES, resolve
from tests.helpers import python_json

#: Locks whose waiter, while it waits, keeps a place the stop could not simply drop: ending the
#: wait would leave its node or key in the queue (or a grant pending for it), so it is left to
#: finish and its wait is not under the hook.
KEEPS_ITS_PLACE = {
    "zookeeper.sequential": "waits on a watch while its sequential node stands in the queue",
    "zookeeper.rwlock": "waits on a watch while its sequential node stands in the queue",
    "zookeeper.kazoo": "kazoo's recipe waits inside the library while its node stands in the queue",
    "zookeeper.kazoo-rw": "kazoo's recipe waits inside the library while its node stands in the queue",
    "canary.fail-open-zookeeper": "zookeeper.sequential's wait (the canary waits in slices of it)",
}

#: Modules whose timed waits are a lock's own choice to wait (not a client waiting for a reply).
LOCK_CODE = ("lockimpls.", "kazoo.recipe.", "redis.lock", "redis_lock", "pottery.")

#: Seconds the waiter waits (several retry intervals, a pottery pause, a watch round).
WAIT_S = 0.4


# ---- the probe, run in a fresh interpreter --------------------------------------------------------


def _caller_outside_threading(frame: FrameType | None) -> FrameType | None:
    while frame is not None and frame.f_globals.get("__name__") == "threading":
        frame = frame.f_back
    return frame


def _where(frame: FrameType | None) -> str:
    if frame is None:
        return "?"
    return f"{frame.f_code.co_qualname} ({Path(frame.f_code.co_filename).name}:{frame.f_lineno})"


def probe(impl: str, urls: list[str]) -> dict[str, Any]:
    """Hold ``impl``'s lock, let a second instance wait ``WAIT_S`` for it; where did the waiter sleep?"""
    cls = resolve(impl)
    name = f"hook-{uuid.uuid4().hex[:8]}"
    options = LockOptions(ttl=10.0)
    holder, waiter = cls(name, urls, options), cls(name, urls, options)
    hook, condition_wait, sleep = (
        Lock._between_attempts.__code__,
        threading.Condition.wait.__code__,
        time.sleep,
    )
    under_hook = 0
    outside: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal under_hook
        if event == "c_call" and arg is sleep:
            caller = frame  # a C call's event comes with its caller's frame
        elif event == "call" and frame.f_code is condition_wait and (frame.f_locals.get("timeout") or 0) > 0:
            caller = _caller_outside_threading(frame)
            if caller is None or not caller.f_globals.get("__name__", "").startswith(LOCK_CODE):
                return  # a client's wait for its reply, its pool, a thread's start: something in flight
        else:
            return
        if caller is not None and caller.f_code is hook:
            under_hook += 1
        else:
            outside.append(_where(caller))

    lease = holder.acquire(timeout=5.0)
    granted = False
    try:
        sys.setprofile(profile)
        try:
            waiter.release(waiter.acquire(timeout=WAIT_S))
            granted = True
        except LockTimeout:
            pass
        finally:
            sys.setprofile(None)
    finally:
        holder.release(lease)
        waiter.close()
        holder.close()
    return {"under_hook": under_hook, "outside": sorted(set(outside)), "granted": granted}


def run_probes(specs: dict[str, list[str]]) -> dict[str, dict[str, Any]]:
    """Each impl's probe in one fresh interpreter (no gevent), as JSON."""
    return python_json("-m", "tests.test_stop_waiters_hook", json.dumps(specs))


# ---- the servers and the catalog --------------------------------------------------------------


@pytest.fixture(scope="module")
def memcached_server(server_dir: Path) -> Iterator[Any]:
    from infra.memcached_server import MemcachedServer

    server = MemcachedServer(server_dir, name="memcached-hook").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def etcd_server(server_dir: Path) -> Iterator[Any]:
    from infra.etcd_server import EtcdServer

    server = EtcdServer(server_dir, name="etcd-hook").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from infra.zookeeper_server import ZooKeeperServer

    server = ZooKeeperServer(tmp_path_factory.mktemp("zk-hook")).start()
    try:
        yield server
    finally:
        server.stop()


def _catalog() -> list[str]:
    return [*BUILTIN, *CANARIES]


def _urls(impl: str, servers: dict[str, str]) -> list[str]:
    cls = resolve(impl)
    url = servers[cls.backend]
    if cls.servers > 1:  # RedLocks: databases 1..n of the one server, each its own keyspace
        return [url.rsplit("/", 1)[0] + f"/{i + 1}" for i in range(cls.servers)]
    return [url]


@pytest.fixture(scope="module")
def probed(
    redis_server: Any,
    postgres_server: Any,
    memcached_server: Any,
    etcd_server: Any,
    zk_server: Any,
    tmp_path_factory: pytest.TempPathFactory,
) -> dict[str, dict[str, Any]]:
    from infra import catalog

    servers = {
        "redis": redis_server.url,
        "postgres": postgres_server.url,
        "memcached": memcached_server.url,
        "etcd": etcd_server.url,
        "zookeeper": zk_server.url,
        "file": catalog.local_url("file", tmp_path_factory.mktemp("file-hook")),
    }
    return run_probes({impl: _urls(impl, servers) for impl in _catalog()})


@pytest.mark.parametrize("impl", _catalog())
def test_a_waiter_sleeps_only_between_attempts(impl: str, probed: dict[str, dict[str, Any]]) -> None:
    seen = probed[impl]
    assert not seen["granted"], f"{impl}: the waiter got a lock another instance held"
    if impl in KEEPS_ITS_PLACE:
        # the exemption stays true: this lock does wait outside the hook (drop it when it no longer does)
        assert seen["outside"], f"{impl} no longer waits outside the hook: drop it from KEEPS_ITS_PLACE"
        return
    assert not seen["outside"], (
        f"{impl} waits outside Lock._between_attempts, so a case's stop cannot end its waiters: "
        f"{seen['outside']}"
    )
    if resolve(impl).capabilities.wait == "poll":
        assert seen["under_hook"] > 0, f"{impl} polls, yet never waited through the hook"


if __name__ == "__main__":
    results = {impl: probe(impl, urls) for impl, urls in json.loads(sys.argv[1]).items()}
    print(json.dumps(results))
