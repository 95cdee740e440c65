"""redis.redlock against five real redis-servers: quorum, validity, parallel fan-out, failed attempts."""

from __future__ import annotations

import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from infra.redis_server import RedisServer
from lockimpls.base import BackendUnavailable, LockOptions, LockTimeout
from lockimpls.redlock import ANSWERED, DRIFT_FIXED_MS, RedLock, close_pools, fan_out, lock_key
from lockimpls.registry import resolve
from tests import lock_contract as contract
from tests.helpers import python_json


def _start_five(server_dir: Path, tag: str) -> list[RedisServer]:
    servers: list[RedisServer] = []
    try:
        for i in range(5):
            servers.append(RedisServer(server_dir, name=f"redlock-{tag}-{i}").start())
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers


@pytest.fixture(scope="module")
def masters(server_dir: Path) -> Iterator[list[str]]:
    """Five independent masters shared by the tests that stop none of them."""
    servers = _start_five(server_dir, "shared")
    try:
        yield [s.url for s in servers]
    finally:
        close_pools()
        for s in servers:
            s.stop()


@pytest.fixture
def own_masters(server_dir: Path) -> Iterator[list[RedisServer]]:
    """Five masters of its own, for a test that stops some of them."""
    servers = _start_five(server_dir, "own")
    try:
        yield servers
    finally:
        close_pools()
        for s in servers:
            s.stop()


def maker(urls: list[str]) -> Callable[..., RedLock]:
    def make(name: str, **overrides: object) -> RedLock:
        return RedLock(name, urls, LockOptions(**overrides))

    return make


def test_registered_as_five_masters_without_fencing() -> None:
    cls = resolve("redis.redlock")
    assert cls is RedLock and cls.servers == 5 and cls.backend == "redis"
    assert cls.capabilities.fencing is False and cls.capabilities.ttl is True and cls.__doc__


def test_contract(masters: list[str]) -> None:
    make = maker(masters)
    contract.check_acquire_release(make)
    contract.check_ownership_probe(make)
    contract.check_exclusive_and_timeout(make)
    contract.check_release_by_non_owner(make)
    contract.check_mutual_exclusion(make, threads=4, rounds=15)


def test_grant_sets_the_key_on_every_master_with_validity(masters: list[str]) -> None:
    lock = RedLock("valid", masters, LockOptions(ttl=10))
    lease = lock.acquire(timeout=2)
    for url in masters:
        r = redis.Redis.from_url(url)
        assert r.get(lock_key("valid")) == lease.owner.encode()
        assert 0 < r.pttl(lock_key("valid")) <= 10_000
    drift_ms = 10_000 * 0.01 + DRIFT_FIXED_MS
    assert lease.extra["votes"] == 5
    assert 0 < lease.extra["validity_ms"] < 10_000 - drift_ms
    assert lease.deadline_ns - lease.acquired_at_ns < (10_000 - drift_ms) * 1_000_000
    stats = lock.stats()
    assert stats["acquired"] == stats["first_try_quorum"] == stats["attempts"] == 1
    assert stats["validity_left_ms_sum"] == int(lease.extra["validity_ms"])
    assert lock.release(lease) is True
    assert not any(redis.Redis.from_url(u).exists(lock_key("valid")) for u in masters)


def test_split_vote_fails_and_unlocks_what_it_got(masters: list[str]) -> None:
    """Three masters hold someone else's value: two votes are no quorum, and those two are undone."""
    for url in masters[:3]:
        redis.Redis.from_url(url).set(lock_key("split"), "someone-else", px=10_000)
    lock = RedLock("split", masters)
    with pytest.raises(LockTimeout):
        lock.acquire(timeout=0.05)
    stats = lock.stats()
    assert stats["attempts"] >= 1 and stats["split_votes"] == stats["attempts"]
    assert "acquired" not in stats
    for url in masters[3:]:
        assert not redis.Redis.from_url(url).exists(lock_key("split")), "a failed attempt left its key"
    for url in masters[:3]:
        assert redis.Redis.from_url(url).get(lock_key("split")) == b"someone-else"
        redis.Redis.from_url(url).delete(lock_key("split"))


def test_two_masters_down_still_acquires_three_down_cannot(own_masters: list[RedisServer]) -> None:
    urls = [s.url for s in own_masters]
    lock = RedLock("quorum", urls)
    lease = lock.acquire(timeout=2)  # warm: every master answered once
    assert lock.release(lease) is True

    own_masters[0].stop()
    own_masters[1].stop()
    lease = lock.acquire(timeout=2)
    assert lease.extra["votes"] == 3
    assert make_other(urls).try_acquire() is None, "three of five masters still exclude others"
    assert lock.release(lease) is True

    own_masters[2].stop()
    with pytest.raises(BackendUnavailable) as info:
        lock.acquire(timeout=2)
    assert "2 of 5 masters reachable" in str(info.value)
    assert lock.stats()["quorum_impossible"] == 1


def make_other(urls: list[str]) -> RedLock:
    return RedLock("quorum", urls)


def blocked_everywhere(urls: list[str]) -> bool:
    """True when every master has a client parked in BLPOP right now."""
    return all(any(c.get("cmd") == "blpop" for c in redis.Redis.from_url(u).client_list()) for u in urls)


def open_gates(urls: list[str]) -> None:
    for url in urls:
        redis.Redis.from_url(url).lpush("gate", "open")


def test_fan_out_has_a_request_pending_on_every_master_at_once(masters: list[str]) -> None:
    """All five masters hold a request of one fan-out at the same moment: nothing waited for a reply.

    A client that sent one request after the other would have at most one master blocked
    in BLPOP, and the others idle, until that master's gate opened.
    """
    lock = RedLock("gate", masters)
    replies: list = []
    t = threading.Thread(
        target=lambda: replies.extend(fan_out(lock.masters, ("BLPOP", "gate", 20), 25.0)), daemon=True
    )
    t.start()
    try:
        for _ in range(2000):
            if blocked_everywhere(masters):
                break
            time.sleep(0.005)
        else:
            raise AssertionError("the five requests were never pending together")
    finally:
        open_gates(masters)
        t.join(30)
    assert [(r.status, r.value) for r in replies] == [(ANSWERED, [b"gate", b"open"])] * 5


GEVENT_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()
    import json, sys, time, gevent, redis
    from lockimpls.base import LockOptions
    from lockimpls.redlock import RedLock, fan_out

    urls = sys.argv[1:]
    lock = RedLock("gevent-gate", urls)
    job = gevent.spawn(fan_out, lock.masters, ("BLPOP", "gate", 20), 25.0)
    together = False
    for _ in range(2000):
        if all(any(c.get("cmd") == "blpop" for c in redis.Redis.from_url(u).client_list()) for u in urls):
            together = True
            break
        gevent.sleep(0.005)
    for u in urls:
        redis.Redis.from_url(u).lpush("gate", "open")
    answered = [r.status for r in job.get(timeout=30)]
    state = {"inside": 0, "worst": 0, "done": 0}

    def user():
        mine = RedLock("gevent-mutex", urls, LockOptions())
        for _ in range(4):
            lease = mine.acquire(timeout=30)
            state["inside"] += 1
            state["worst"] = max(state["worst"], state["inside"])
            gevent.sleep(0.001)
            state["inside"] -= 1
            assert mine.release(lease)
            state["done"] += 1

    gevent.joinall([gevent.spawn(user) for _ in range(8)], raise_error=True)
    print(json.dumps({"together": together, "answered": answered, "state": state}))
    """
)


def test_parallel_and_exclusive_under_gevent(masters: list[str]) -> None:
    report = python_json("-c", GEVENT_SCRIPT, *masters)
    assert report["together"] is True, "under gevent the fan-out must also be pending on every master at once"
    assert report["answered"] == ["answered"] * 5
    assert report["state"] == {"inside": 0, "worst": 1, "done": 32}
