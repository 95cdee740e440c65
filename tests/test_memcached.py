"""memcached locks against a real memcached: the contract, and the unsafe release shown.

``memcached.add`` releases with a plain delete, so it fails the "non-owner release"
contract and, after expiry, deletes the next holder's lock; ``memcached.add-cas`` does not.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from pymemcache.client.base import Client

from infra import catalog
from infra.memcached_server import MemcachedServer
from infra.ports import free_port
from infra.process import ServerProcess
from lockimpls import memcached_locks
from lockimpls.base import BackendUnavailable, Lease, Lock, LockConfigError, LockOptions, LockOutcomeUnknown
from lockimpls.memcached_locks import MemcachedAdd, MemcachedAddCas, lock_key
from lockimpls.registry import resolve
from tests import lock_contract as contract

IMPLS = ["memcached.add", "memcached.add-cas"]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def memcached_server(server_dir: Path) -> Iterator[MemcachedServer]:
    """A real memcached for the session's tests, stopped at the end."""
    server = MemcachedServer(server_dir, name="memcached-lock").start()
    try:
        yield server
    finally:
        memcached_locks.close_clients()
        server.stop()


@pytest.fixture
def raw(memcached_server: MemcachedServer) -> Iterator[Client]:
    """A plain client to look at the server's keys directly."""
    client = Client(("127.0.0.1", memcached_server.port), default_noreply=False)
    yield client
    client.close()


def factory(impl: str, url: str) -> Callable[..., Lock]:
    cls = resolve(impl)

    def make(name: str, **overrides: object) -> Lock:
        return cls(name, [url], LockOptions(**overrides))

    return make


def wait_until(predicate: Callable[[], bool], limit: float = 5.0) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def pause(proc: ServerProcess) -> None:
    """SIGSTOP a server and wait until every thread of it has really stopped.

    A stop signal takes effect only when the process gets scheduled; on a busy machine a
    request sent right after ``kill`` may still be served by a thread that has not stopped.
    """
    proc.kill(signal.SIGSTOP)
    tasks = Path(f"/proc/{proc.pid}/task")
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        states = []
        for stat in tasks.glob("*/stat"):
            try:
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
            except (OSError, IndexError):
                continue
        if states and all(s in ("T", "t") for s in states):
            return
        time.sleep(0.005)
    raise AssertionError(f"{proc.name} did not stop")


def test_registry_and_catalog() -> None:
    assert resolve("memcached.add") is MemcachedAdd
    assert resolve("memcached.add-cas") is MemcachedAddCas
    assert catalog.server_class("memcached") is MemcachedServer


def test_server_answers(memcached_server: MemcachedServer) -> None:
    assert memcached_server.url.startswith("memcached://127.0.0.1:")
    assert memcached_server.version().startswith("1.")


@pytest.mark.parametrize("impl", IMPLS)
def test_contract_acquire_release(impl: str, memcached_server: MemcachedServer) -> None:
    contract.check_acquire_release(factory(impl, memcached_server.url))


@pytest.mark.parametrize("impl", IMPLS)
def test_contract_ownership_probe(impl: str, memcached_server: MemcachedServer) -> None:
    contract.check_ownership_probe(factory(impl, memcached_server.url))


@pytest.mark.parametrize("impl", IMPLS)
def test_contract_exclusive_and_timeout(impl: str, memcached_server: MemcachedServer) -> None:
    contract.check_exclusive_and_timeout(factory(impl, memcached_server.url))


@pytest.mark.parametrize("impl", IMPLS)
def test_contract_mutual_exclusion(impl: str, memcached_server: MemcachedServer) -> None:
    contract.check_mutual_exclusion(factory(impl, memcached_server.url), threads=4, rounds=15)


@pytest.mark.parametrize("impl", IMPLS)
def test_stats_count_refused_adds(impl: str, memcached_server: MemcachedServer) -> None:
    make = factory(impl, memcached_server.url)
    name = contract.fresh_name("stats")
    holder, other = make(name), make(name)
    lease = holder.acquire(timeout=2)
    assert other.try_acquire() is None
    assert other.stats() == {"attempts": 1, "busy": 1}
    assert holder.stats() == {"attempts": 1, "busy": 0}
    assert holder.release(lease)


def test_contract_release_by_non_owner_safe_variant(memcached_server: MemcachedServer) -> None:
    contract.check_release_by_non_owner(factory("memcached.add-cas", memcached_server.url))


def test_flaw_non_owner_release_frees_the_lock(memcached_server: MemcachedServer) -> None:
    """The seed's plain delete does not look at the owner: anyone's release frees the lock."""
    make = factory("memcached.add", memcached_server.url)
    name = contract.fresh_name("flaw")
    holder = make(name)
    holder.acquire(timeout=2)
    forged = Lease(name, "someone-else", None, time.monotonic_ns(), None)
    assert make(name).release(forged) is False  # it did not own it, and says so...
    late = make(name).try_acquire()
    assert late is not None, "...but the delete freed the holder's lock anyway"


@pytest.mark.parametrize(
    ("impl", "deletes_next_holders_lock"), [("memcached.add", True), ("memcached.add-cas", False)]
)
def test_release_after_expiry(
    impl: str, deletes_next_holders_lock: bool, memcached_server: MemcachedServer, raw: Client
) -> None:
    make = factory(impl, memcached_server.url)
    name = contract.fresh_name("expiry")
    slow = make(name, ttl=1)
    lease_a = slow.acquire(timeout=2)
    assert lease_a.deadline_ns is not None and lease_a.remaining() is not None
    assert wait_until(lambda: raw.get(lock_key(name)) is None), "the key never expired"
    fast = make(name)
    lease_b = fast.acquire(timeout=2)
    assert raw.get(lock_key(name)) == lease_b.owner.encode()
    # A's critical section outlived its expiry; now A releases, late.
    assert slow.release(lease_a) is False
    if deletes_next_holders_lock:
        assert raw.get(lock_key(name)) is None, "plain delete should have removed B's key"
        intruder = make(name)
        assert intruder.try_acquire() is not None, "a third client should get in while B still works"
    else:
        assert raw.get(lock_key(name)) == lease_b.owner.encode()
        assert make(name).try_acquire() is None
        assert fast.release(lease_b) is True


def test_client_deadline_is_one_second_short_of_the_expiry(memcached_server: MemcachedServer) -> None:
    """memcached's clock ticks per second: a key added with expiry N may vanish after N-1 s."""
    lock = MemcachedAddCas(contract.fresh_name("deadline"), [memcached_server.url], LockOptions(ttl=3))
    lease = lock.acquire(timeout=2)
    remaining = lease.remaining()
    assert remaining is not None and 1.5 < remaining <= 2.0
    assert lock.release(lease)


def test_the_deadline_runs_from_the_add_not_from_when_the_lease_is_made(
    memcached_server: MemcachedServer,
) -> None:
    """The key's expiry started at the add: time lost before the lease is made (here a fencing
    counter answered 0.6 s late, as when the process stood still) is off the holder's lease."""

    class SlowFence(MemcachedAdd):
        def _next_token(self) -> int:
            time.sleep(0.6)
            return super()._next_token()

    lock = SlowFence(
        contract.fresh_name("late-lease"), [memcached_server.url], LockOptions(ttl=3, fencing=True)
    )
    lease = lock.acquire(timeout=2)
    remaining = lease.remaining()
    # 2 s from the add (expiry 3, one tick short), 0.6 s of them gone: about 1.4 s (not 2.0)
    assert remaining is not None and remaining < 1.5, remaining
    assert lock.release(lease)


def test_the_ok_row_carries_when_the_winning_add_was_sent(memcached_server: MemcachedServer) -> None:
    """The fencing-order checker places a grant from the send of the request that won (``sent_ns``):
    a polling waiter's lease knows its last add's send, after the holder let go and before the lease
    was made (not the start of its wait), and the recording keeps it on the ``acquire ok`` row."""
    import itertools
    import threading

    from workloads.harness.recording import RecordedLock, Recorder

    name = contract.fresh_name("sent")
    holder = MemcachedAdd(name, [memcached_server.url], LockOptions(ttl=5, fencing=True))
    first = holder.acquire(timeout=2)
    let_go: list[int] = []

    def release_later() -> None:
        time.sleep(0.3)
        let_go.append(time.monotonic_ns())
        holder.release(first)

    waiter = MemcachedAdd(name, [memcached_server.url], LockOptions(ttl=5, retry_interval=0.05, fencing=True))
    rec = Recorder()
    recorded = RecordedLock(waiter, rec, "p1-u0", itertools.count())
    releaser = threading.Thread(target=release_later)
    asked = time.monotonic_ns()
    releaser.start()
    lease, error = recorded.acquire(timeout=3)
    releaser.join()
    assert lease is not None and error is None
    assert lease.sent_ns is not None and let_go[0] - 50_000_000 <= lease.sent_ns <= lease.acquired_at_ns
    assert lease.sent_ns - asked > 200_000_000, "the send of the first attempt, not the winning one"
    ok = rec.history_frame().query("op == 'acquire' and type == 'ok'")
    assert ok["sent_ns"].tolist() == [lease.sent_ns] and ok["token"].tolist() == [lease.token]
    assert waiter.release(lease)


@pytest.mark.parametrize("impl", IMPLS)
def test_fencing_tokens_strictly_increase(impl: str, memcached_server: MemcachedServer) -> None:
    make = factory(impl, memcached_server.url)
    name = contract.fresh_name("fence")
    tokens = []
    for _ in range(3):
        lock = make(name, fencing=True)
        lease = lock.acquire(timeout=2)
        tokens.append(lease.token)
        assert lock.release(lease)
    assert all(isinstance(t, int) for t in tokens) and tokens == sorted(set(tokens)), tokens
    plain = make(name)
    lease = plain.acquire(timeout=2)
    assert lease.token is None
    assert plain.release(lease)


def test_long_and_odd_names_map_to_valid_keys(memcached_server: MemcachedServer) -> None:
    for name in ("with space", "x" * 400, "ünïcode"):
        lock = MemcachedAddCas(name, [memcached_server.url])
        lease = lock.acquire(timeout=2)
        assert lock.release(lease) is True
    assert lock_key("with space") != lock_key("with_space")


@pytest.mark.parametrize("impl", IMPLS)
def test_unreachable_server_is_backend_unavailable(impl: str) -> None:
    lock = factory(impl, f"memcached://127.0.0.1:{free_port()}")("nowhere")
    with pytest.raises(BackendUnavailable):
        lock.acquire(timeout=1)


@pytest.mark.parametrize(
    "urls", [["redis://127.0.0.1:6379"], ["memcached://"], ["memcached://a:1", "memcached://b:2"], []]
)
def test_bad_url_is_a_config_error(urls: list[str]) -> None:
    with pytest.raises(LockConfigError):
        MemcachedAdd("x", urls)


@pytest.fixture
def paused_server(server_dir: Path) -> Iterator[MemcachedServer]:
    """Its own memcached (the shared one is never paused)."""
    server = MemcachedServer(server_dir, name="memcached-paused").start()
    try:
        yield server
    finally:
        server.process.kill(signal.SIGCONT)
        memcached_locks.close_clients()
        server.stop()


@pytest.mark.parametrize("impl", IMPLS)
def test_lost_answer_is_outcome_unknown(impl: str, paused_server: MemcachedServer) -> None:
    lock = factory(impl, paused_server.url)("paused", params={"request_timeout": 0.3})
    lease = lock.acquire(timeout=2)  # connected: the pool now has an open connection
    assert lock.release(lease) is True
    pause(paused_server.process)
    try:
        with pytest.raises(LockOutcomeUnknown):
            lock.acquire(timeout=2)
    finally:
        paused_server.process.kill(signal.SIGCONT)


@pytest.mark.server
def test_restart_loses_the_lock_and_stale_connections_are_not_blamed(server_dir: Path) -> None:
    server = MemcachedServer(server_dir, name="memcached-restart").start()
    try:
        holder = MemcachedAddCas("restart", [server.url])
        lease = holder.acquire(timeout=2)
        server.restart()  # SIGKILL and start again: every key is gone
        other = MemcachedAddCas("restart", [server.url])
        lease_b = other.try_acquire()  # the pooled connection died: a fresh one is used, no error
        assert lease_b is not None, "after a restart the lock is free (memcached keeps nothing)"
        assert holder.release(lease) is False
        assert other.release(lease_b) is True
    finally:
        memcached_locks.close_clients()
        server.stop()


GEVENT_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()
    import json, sys, time, gevent
    from lockimpls.base import LockOptions
    from lockimpls.registry import resolve
    from lockimpls.memcached_locks import pool_for

    url, impl = sys.argv[1], sys.argv[2]
    ticks = []
    state = {"inside": 0, "worst": 0, "done": 0}

    def ticker():
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.005)

    def user():
        lock = resolve(impl)("gevent-" + impl, [url], LockOptions(retry_interval=0.002))
        for _ in range(5):
            lease = lock.acquire(timeout=30)
            state["inside"] += 1
            state["worst"] = max(state["worst"], state["inside"])
            gevent.sleep(0.005)
            state["inside"] -= 1
            assert lock.release(lease)
            state["done"] += 1

    t = gevent.spawn(ticker)
    started = time.monotonic()
    gevent.joinall([gevent.spawn(user) for _ in range(10)], raise_error=True)
    t.kill()
    lock = resolve(impl)("probe", [url])
    pool = pool_for(*lock._pool_args)
    client = pool.get()
    sock = type(client.sock).__module__
    pool.put(client)
    print(json.dumps({"ticks": len(ticks), "sock": sock, **state}))
    """
)


@pytest.mark.parametrize("impl", IMPLS)
def test_cooperates_with_gevent(impl: str, memcached_server: MemcachedServer) -> None:
    out = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT, memcached_server.url, impl],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["sock"].startswith("gevent"), report
    assert report == {**report, "inside": 0, "worst": 1, "done": 50}
    assert report["ticks"] > 5, report  # the ticker ran while users waited


def test_the_no_expiry_canary_keeps_the_contract_and_never_expires(memcached_server: MemcachedServer) -> None:
    """crash's control on memcached: a key with no expiry, which only its holder deletes."""
    make = factory("canary.no-expiry-memcached", memcached_server.url)
    contract.check_acquire_release(make)
    contract.check_ownership_probe(make)
    contract.check_exclusive_and_timeout(make)
    name = contract.fresh_name("forever")
    lease = make(name, ttl=1.0).acquire(timeout=2)
    assert lease.deadline_ns is None
    time.sleep(2.2)  # past any 1 s lease: the key is still there
    assert make(name, ttl=1.0).try_acquire() is None
    assert resolve("canary.no-expiry-memcached").recovery_after_crash(1.0, {})[0] is None
    # bench's reset between cases removes it (memcached cannot list keys: the canary indexes its own)
    from bench.run.reset import reset_lock_state

    reset_lock_state("memcached", [memcached_server.url])
    again = make(name, ttl=1.0)
    again.release(again.acquire(timeout=2))
