"""redis.reentrant (Redisson's RLock) against a real redis-server: reentrancy, watchdog, pub/sub wake-up."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from infra.ports import free_port
from lockimpls.base import BackendUnavailable, Lease, LockOptions
from lockimpls.redis_reentrant import ReentrantLock, channel_name, close_subscribers, lock_key
from lockimpls.registry import resolve
from tests import lock_contract as contract

Make = Callable[..., ReentrantLock]


@pytest.fixture
def make(redis_url: str) -> Iterator[Make]:
    made: list[ReentrantLock] = []

    def build(name: str, **overrides: object) -> ReentrantLock:
        lock = ReentrantLock(name, [redis_url], LockOptions(**overrides))
        made.append(lock)
        return lock

    yield build
    for lock in made:
        lock.close()
    close_subscribers()


def raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def wait_until(predicate: Callable[[], bool], what: str, polls: int = 1000) -> None:
    """Poll (bounded, so a broken lock fails instead of hanging) until ``predicate`` holds."""
    for _ in range(polls):
        if predicate():
            return
        time.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


def test_registered_with_honest_capabilities() -> None:
    cls = resolve("redis.reentrant")
    assert cls is ReentrantLock and cls.backend == "redis" and cls.__doc__
    caps = cls.capabilities
    assert caps.reentrant is True and caps.wait == "notify" and caps.ttl is True and caps.fencing is True


def test_contract(make: Make) -> None:
    contract.check_acquire_release(make)
    contract.check_ownership_probe(make)
    contract.check_exclusive_and_timeout(make)
    contract.check_release_by_non_owner(make)
    contract.check_mutual_exclusion(make)


def test_reentrancy_counts_on_the_server(make: Make, redis_url: str) -> None:
    r = raw(redis_url)
    lock, other = make("nest"), make("nest")
    leases = [lock.acquire(timeout=1) for _ in range(3)]
    assert [le.extra["count"] for le in leases] == [1, 2, 3]
    assert len({le.owner for le in leases}) == 1, "one owner: this client and this thread"
    assert r.hgetall(lock_key("nest")) == {leases[0].owner.encode(): b"3"}
    assert lock.hold_count() == 3
    assert lock.stats()["reentries"] == 2
    for expected in (2, 1):
        assert lock.release(leases.pop()) is True
        assert lock.hold_count() == expected
        assert other.try_acquire() is None, "an inner release must not free the lock"
    assert lock.release(leases.pop()) is True
    assert not r.exists(lock_key("nest")), "the outermost release deletes the hash"
    assert lock.release(Lease("nest", lock.owner(), None, time.monotonic_ns(), None)) is False
    lease = other.acquire(timeout=1)
    assert other.release(lease) is True


def test_another_thread_of_the_same_client_is_another_owner(make: Make) -> None:
    lock = make("threads")
    lease = lock.acquire(timeout=1)
    seen: dict[str, object] = {}
    t = threading.Thread(target=lambda: seen.setdefault("lease", lock.try_acquire()))
    t.start()
    t.join()
    assert seen["lease"] is None, "Redisson's owner is client id + thread id"
    assert lock.release(lease) is True


def test_watchdog_keeps_the_lock_past_its_timeout_and_stops_after_release(make: Make, redis_url: str) -> None:
    r = raw(redis_url)
    lock = make("dog", ttl=0.6)  # watchdog timeout 600 ms: renewed every 200 ms
    lease = lock.acquire(timeout=1)
    watchdog = lock._holds[lease.owner].watchdog
    assert watchdog is not None and watchdog.thread.is_alive()
    first_deadline = lease.deadline_ns
    end = lease.acquired_at_ns + 3 * 600_000_000  # held for three watchdog timeouts
    while time.monotonic_ns() < end:
        assert r.exists(lock_key("dog")), "the lock expired while held"
        time.sleep(0.02)
    assert r.pttl(lock_key("dog")) > 0
    assert lock.stats()["renewals"] >= 3  # without them the hash would have expired at 600 ms
    assert lease.deadline_ns > first_deadline and not lease.lost
    assert make("dog").try_acquire() is None

    assert lock.release(lease) is True
    assert not r.exists(lock_key("dog"))
    watchdog.thread.join(2)
    assert not watchdog.thread.is_alive()
    renewals = lock.stats()["renewals"]
    r.config_resetstat()
    time.sleep(0.7)  # more than three renewal intervals
    assert lock.stats()["renewals"] == renewals
    assert "cmdstat_evalsha" not in r.info("commandstats"), "a renewal was sent after release"


def test_watchdog_stops_when_the_lock_is_lost(make: Make, redis_url: str) -> None:
    lock = make("lost", ttl=0.3)
    lease = lock.acquire(timeout=1)
    watchdog = lock._holds[lease.owner].watchdog
    raw(redis_url).delete(lock_key("lost"))  # the hash is gone (expired during a pause, flushed...)
    wait_until(lambda: lease.lost, "the watchdog noticed the loss")
    watchdog.thread.join(2)
    assert not watchdog.thread.is_alive()
    assert lock.stats()["lost"] == 1
    assert lock.release(lease) is False


def test_a_given_lease_has_no_watchdog_and_expires(make: Make, redis_url: str) -> None:
    r = raw(redis_url)
    lock = make("leased", ttl=10, params={"lease": 0.2})
    lease = lock.acquire(timeout=1)
    assert lock._holds[lease.owner].watchdog is None
    assert 0 < r.pttl(lock_key("leased")) <= 200
    wait_until(lambda: not r.exists(lock_key("leased")), "the lease expired")
    assert "renewals" not in lock.stats()
    assert make("leased").try_acquire() is not None


def test_try_lock_with_wait_and_lease(make: Make, redis_url: str) -> None:
    holder, other = make("try"), make("try")
    lease = holder.try_lock(wait=0, lease=5)
    assert lease is not None and 0 < raw(redis_url).pttl(lock_key("try")) <= 5000
    assert other.try_lock(wait=0.1, lease=5) is None
    assert holder.release(lease) is True
    got = other.try_lock(wait=1, lease=5)
    assert got is not None and other.release(got) is True


def test_waiter_wakes_on_the_unlock_message_not_the_ttl(make: Make, redis_url: str) -> None:
    holder = make("wake", params={"lease": 30})
    waiter = make("wake", params={"lease": 30})
    held = holder.acquire(timeout=1)
    got: dict[str, Lease] = {}
    t = threading.Thread(target=lambda: got.setdefault("lease", waiter.acquire(timeout=60)), daemon=True)
    t.start()
    wait_until(lambda: waiter.stats().get("waits", 0) >= 1, "the waiter is asleep on the channel")
    assert raw(redis_url).pubsub_numsub(channel_name("wake")) == [(channel_name("wake").encode(), 1)]
    assert holder.release(held) is True  # the holder still owned it: no expiry happened
    t.join(10)
    assert "lease" in got
    stats = waiter.stats()
    assert stats["woken_by_message"] == 1 and "woken_by_timeout" not in stats
    assert stats["attempts"] == 3, "first try, try after subscribing, try after the message"
    assert got["lease"].acquired_at_ns < held.deadline_ns, "granted before the holder's lease ran out"
    assert waiter.release(got["lease"]) is True
    wait_until(
        lambda: raw(redis_url).pubsub_numsub(channel_name("wake"))[0][1] == 0, "the last waiter unsubscribed"
    )


def test_waiter_wakes_at_the_ttl_when_the_holder_dies(make: Make) -> None:
    crashed = make("crash", params={"lease": 0.2})
    crashed.acquire(timeout=1)  # never released: the holder is gone
    waiter = make("crash")
    lease = waiter.acquire(timeout=10)
    stats = waiter.stats()
    assert stats.get("woken_by_timeout", 0) >= 1 and "woken_by_message" not in stats
    assert waiter.release(lease) is True


def test_waiters_share_one_subscription_connection(make: Make, redis_url: str) -> None:
    r = raw(redis_url)
    holders = [make(f"share-{i}") for i in range(2)]
    held = [h.acquire(timeout=1) for h in holders]
    waiters = [make(f"share-{i % 2}") for i in range(6)]
    released: list[bool] = []

    def wait_then_release(w: ReentrantLock) -> None:
        lease = w.acquire(timeout=30)
        released.append(w.release(lease))

    threads = [threading.Thread(target=wait_then_release, args=(w,), daemon=True) for w in waiters]
    for t in threads:
        t.start()
    wait_until(lambda: all(w.stats().get("waits", 0) >= 1 for w in waiters), "every waiter asleep")
    pubsub_clients = [c for c in r.client_list() if int(c.get("sub", 0)) > 0]
    assert len(pubsub_clients) == 1, pubsub_clients
    assert int(pubsub_clients[0]["sub"]) == 2, "one subscription per lock, not per waiter"
    for h, lease in zip(holders, held, strict=True):
        assert h.release(lease) is True
    for t in threads:
        t.join(30)
    assert released == [True] * 6
    assert sum(w.stats().get("woken_by_message", 0) for w in waiters) >= 6


def test_fencing_token_at_first_grant_only(make: Make, redis_url: str) -> None:
    a, b = make("fence", fencing=True), make("fence", fencing=True)
    outer = a.acquire(timeout=1)
    inner = a.acquire(timeout=1)
    assert isinstance(outer.token, int) and inner.token == outer.token
    assert a.release(inner) is True and a.release(outer) is True
    nxt = b.acquire(timeout=1)
    assert nxt.token is not None and nxt.token > outer.token
    assert b.release(nxt) is True
    plain = make("nofence")
    lease = plain.acquire(timeout=1)
    assert lease.token is None and not raw(redis_url).exists(lock_key("nofence") + ":fence")
    assert plain.release(lease) is True


def test_unreachable_server_is_backend_unavailable() -> None:
    lock = ReentrantLock("down", [f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"])
    with pytest.raises(BackendUnavailable) as info:
        lock.acquire(timeout=1)
    assert "s3cret-pw" not in str(info.value)


GEVENT_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()
    import json, sys, gevent
    from lockimpls.base import LockOptions
    from lockimpls.redis_reentrant import ReentrantLock

    url = sys.argv[1]
    state = {"inside": 0, "worst": 0, "done": 0}
    locks = []

    def user():
        lock = ReentrantLock("gevent", [url], LockOptions(ttl=0.3))
        locks.append(lock)
        for _ in range(5):
            outer = lock.acquire(timeout=30)
            inner = lock.acquire(timeout=0)
            state["inside"] += 1
            state["worst"] = max(state["worst"], state["inside"])
            gevent.sleep(0.002)
            state["inside"] -= 1
            assert lock.release(inner) and lock.release(outer)
            state["done"] += 1

    gevent.joinall([gevent.spawn(user) for _ in range(10)], raise_error=True)
    total = {}
    for lock in locks:
        for k, v in lock.stats().items():
            total[k] = total.get(k, 0) + v
    print(json.dumps({"state": state, "stats": total}))
    """
)


def test_cooperates_with_gevent(redis_url: str) -> None:
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT, redis_url],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["state"] == {"inside": 0, "worst": 1, "done": 50}, report
    assert report["stats"]["reentries"] == 50
    assert report["stats"].get("woken_by_message", 0) > 0, report  # waiters slept on the channel
