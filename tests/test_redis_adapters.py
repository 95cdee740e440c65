"""The adapters for third-party Redis locks against a real redis-server: contract, honesty, errors."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from infra.ports import free_port
from lockimpls.base import BackendUnavailable, Lease, Lock, LockOptions, LockTimeout
from lockimpls.registry import resolve
from tests import lock_contract as contract

ADAPTERS = ["redis.redis-py", "redis.python-redis-lock", "redis.pottery-redlock"]


def factory(impl: str, url: str) -> Callable[..., Lock]:
    cls = resolve(impl)

    def make(name: str, **overrides: object) -> Lock:
        return cls(name, [url], LockOptions(**overrides))

    return make


@pytest.mark.parametrize("impl", ADAPTERS)
def test_declares_what_the_library_lacks(impl: str, redis_url: str) -> None:
    cls = resolve(impl)
    assert cls.id == impl and cls.backend == "redis" and cls.__doc__
    assert cls.capabilities.fencing is False and cls.capabilities.reentrant is False
    lock = factory(impl, redis_url)("honest", fencing=True)
    lease = lock.acquire(timeout=2)
    assert lease.token is None, "no fencing token may be invented"
    assert lease.deadline_ns is not None and lease.deadline_ns > lease.acquired_at_ns
    assert lock.release(lease) is True


@pytest.mark.parametrize("impl", ADAPTERS)
def test_contract(impl: str, redis_url: str) -> None:
    make = factory(impl, redis_url)
    contract.check_acquire_release(make)
    contract.check_ownership_probe(make)
    contract.check_exclusive_and_timeout(make)
    contract.check_release_by_non_owner(make)
    contract.check_mutual_exclusion(make, threads=4, rounds=15)


@pytest.mark.parametrize("impl", ADAPTERS)
def test_not_reentrant(impl: str, redis_url: str) -> None:
    lock = factory(impl, redis_url)("again")
    lease = lock.acquire(timeout=2)
    with pytest.raises(LockTimeout):
        lock.acquire(timeout=0)
    assert lock.release(lease) is True


@pytest.mark.parametrize("impl", ADAPTERS)
def test_release_after_expiry_is_not_owned(impl: str, redis_url: str) -> None:
    """A lease that ran out (the library's key expired) releases as False, never an exception."""
    lock = factory(impl, redis_url)("expired", ttl=1)
    lease = lock.acquire(timeout=2)
    r = redis.Redis.from_url(redis_url)
    keys = r.keys("*expired*")
    assert keys, "the library must have written its key"
    for key in keys:
        if r.type(key) == b"string":
            r.delete(key)  # as if it expired
    assert lock.release(lease) is False


@pytest.mark.parametrize("impl", ADAPTERS)
def test_unreachable_server_is_backend_unavailable(impl: str) -> None:
    url = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"
    lock = factory(impl, url)("down")
    with pytest.raises(BackendUnavailable) as info:
        lock.acquire(timeout=1)
    assert "s3cret-pw" not in str(info.value)
    with pytest.raises(BackendUnavailable):
        lock.release(Lease("down", "me", None, time.monotonic_ns(), None))


def test_python_redis_lock_rounds_to_whole_seconds(redis_url: str) -> None:
    """The library speaks whole seconds; the lease says what the server was really told."""
    lock = factory("redis.python-redis-lock", redis_url)("round", ttl=0.3)
    lease = lock.acquire(timeout=2)
    pttl = redis.Redis.from_url(redis_url).pttl("lock:lockbench:adapter:round")
    assert 300 < pttl <= 1000
    assert 300_000_000 < lease.deadline_ns - lease.acquired_at_ns <= 1_000_000_000
    assert lock.release(lease) is True


def test_python_redis_lock_waiter_is_woken_by_the_signal(redis_url: str) -> None:
    """A waiter blocks in BLPOP and the release's LPUSH lets it in, long before the 10 s expiry."""
    make = factory("redis.python-redis-lock", redis_url)
    holder, waiter = make("signal"), make("signal")
    lease = holder.acquire(timeout=2)
    r = redis.Redis.from_url(redis_url)
    got: dict[str, Lease] = {}
    t = threading.Thread(target=lambda: got.setdefault("lease", waiter.acquire(timeout=8)), daemon=True)
    t.start()
    for _ in range(500):  # until the waiter is parked in BLPOP
        if any(c.get("cmd") == "blpop" for c in r.client_list()):
            break
        time.sleep(0.01)
    else:
        raise AssertionError("the waiter never blocked in BLPOP")
    assert holder.release(lease) is True
    t.join(10)
    assert "lease" in got
    assert got["lease"].acquired_at_ns < lease.deadline_ns, "woken by the release, not by expiry"
    assert waiter.release(got["lease"]) is True


GEVENT_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()
    import json, sys, gevent
    from lockimpls.base import LockOptions
    from lockimpls.registry import resolve

    url = sys.argv[1]
    results = {}

    def user(impl, state):
        lock = resolve(impl)(f"gevent-{impl}", [url], LockOptions())
        for _ in range(4):
            lease = lock.acquire(timeout=30)
            state["inside"] += 1
            state["worst"] = max(state["worst"], state["inside"])
            gevent.sleep(0.0005)
            state["inside"] -= 1
            assert lock.release(lease)
            state["done"] += 1

    for impl in sys.argv[2:]:
        state = results[impl] = {"inside": 0, "worst": 0, "done": 0}
        gevent.joinall([gevent.spawn(user, impl, state) for _ in range(8)], raise_error=True)
    print(json.dumps(results))
    """
)


def test_adapters_cooperate_with_gevent(redis_url: str) -> None:
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT, redis_url, *ADAPTERS],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    for impl in ADAPTERS:
        assert results[impl] == {"inside": 0, "worst": 1, "done": 32}, (impl, results)
