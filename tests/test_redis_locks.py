"""The five seed Redis locks against a real redis-server: the contract, and each documented flaw.

The flaw tests drive the exact interleaving the catalog names (DESIGN.md section 4) by
calling the algorithms' steps in order, so they show the violation every time instead of
hoping a race happens.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from infra.ports import free_port
from infra.redis_server import RedisServer
from lockimpls import redis_conn
from lockimpls.base import (
    BackendUnavailable,
    Lease,
    Lock,
    LockConfigError,
    LockOptions,
    LockOutcomeUnknown,
    LockTimeout,
)
from lockimpls.redis_conn import RedisCall, client_for, redact_url
from lockimpls.redis_locks import SetnxExpire, SetNxPx, lock_key
from lockimpls.registry import BUILTIN, TEST_ONLY, resolve
from tests import lock_contract as contract

REDIS_IDS = [
    "redis.setnx-del",
    "redis.setnx-expire",
    "redis.setnx-getset",
    "redis.set-nx-px",
    "redis.set-nx-px-lua",
]
#: Release is an unconditional DEL in the seed: anyone's release frees the lock.
UNCONDITIONAL_DEL = ["redis.setnx-del", "redis.setnx-expire", "redis.setnx-getset"]
OWNER_CHECKED = ["redis.set-nx-px", "redis.set-nx-px-lua"]
TTL_IDS = [i for i in REDIS_IDS if i != "redis.setnx-del"]

Make = Callable[..., Lock]


def factory(impl: str, url: str) -> Make:
    cls = resolve(impl)

    def make(name: str, **overrides: object) -> Lock:
        return cls(name, [url], LockOptions(**overrides))

    return make


def raw(url: str) -> redis.Redis:
    return redis.Redis.from_url(url)


def wait_gone(r: redis.Redis, key: str) -> None:
    """Poll until Redis expired ``key`` (bounded so a missing TTL fails instead of hanging)."""
    for _ in range(2000):
        if not r.exists(key):
            return
        time.sleep(0.005)
    raise AssertionError(f"{key} never expired")


def test_registry_ids_match_classes() -> None:
    for impl in REDIS_IDS:
        cls = resolve(impl)
        assert cls.id == impl and cls.backend == "redis"
        assert cls.capabilities.fencing is True and cls.capabilities.wait == "poll"
        assert cls.capabilities.ttl is (impl != "redis.setnx-del")
        assert cls.__doc__ and cls.capabilities.notes
    assert set(REDIS_IDS) == set(BUILTIN) & set(REDIS_IDS)
    assert resolve("test.no-mutex").id == "test.no-mutex" and "test.no-mutex" in TEST_ONLY


# --- the contract ------------------------------------------------------------------------


@pytest.mark.parametrize("impl", REDIS_IDS)
def test_contract_acquire_release(impl: str, redis_url: str) -> None:
    contract.check_acquire_release(factory(impl, redis_url))


@pytest.mark.parametrize("impl", REDIS_IDS)
def test_contract_ownership_probe(impl: str, redis_url: str) -> None:
    contract.check_ownership_probe(factory(impl, redis_url))


@pytest.mark.parametrize("impl", REDIS_IDS)
def test_contract_exclusive_and_timeout(impl: str, redis_url: str) -> None:
    contract.check_exclusive_and_timeout(factory(impl, redis_url))


@pytest.mark.parametrize("impl", REDIS_IDS)
def test_contract_mutual_exclusion(impl: str, redis_url: str) -> None:
    contract.check_mutual_exclusion(factory(impl, redis_url))


@pytest.mark.parametrize("impl", OWNER_CHECKED)
def test_contract_release_by_non_owner(impl: str, redis_url: str) -> None:
    contract.check_release_by_non_owner(factory(impl, redis_url))


@pytest.mark.parametrize("impl", UNCONDITIONAL_DEL)
def test_flaw_non_owner_release_frees_the_lock(impl: str, redis_url: str) -> None:
    """Documented violation of check_release_by_non_owner: the seed's DEL is unconditional."""
    make = factory(impl, redis_url)
    a, b = make("victim"), make("victim")
    lease = a.acquire(timeout=2)
    forged = Lease("victim", "someone-else", None, time.monotonic_ns(), None)
    assert b.release(forged) is True
    assert not raw(redis_url).exists(lock_key("victim"))
    intruder = make("victim").try_acquire()
    assert intruder is not None, "the non-owner's DEL should have freed the lock"
    assert a.release(lease) is True  # and the holder's DEL now deletes the intruder's lock
    assert not raw(redis_url).exists(lock_key("victim"))


# --- documented flaws ---------------------------------------------------------------------


def test_setnx_del_crashed_holder_blocks_forever(redis_url: str) -> None:
    make = factory("redis.setnx-del", redis_url)
    crashed = make("stuck")
    lease = crashed.acquire(timeout=2)
    assert lease.deadline_ns is None
    del crashed  # the holder dies without releasing
    r = raw(redis_url)
    assert r.pttl(lock_key("stuck")) == -1, "the lock key must have no expiry"
    other = make("stuck")
    assert other.try_acquire() is None
    with pytest.raises(LockTimeout):
        other.acquire(timeout=0.05)
    assert r.pttl(lock_key("stuck")) == -1


def test_setnx_expire_sets_ttl_when_not_interrupted(redis_url: str) -> None:
    lock = factory("redis.setnx-expire", redis_url)("fine", ttl=2.5)
    lease = lock.acquire(timeout=2)
    pttl = raw(redis_url).pttl(lock_key("fine"))
    assert 0 < pttl <= 2500
    assert lease.deadline_ns is not None and lease.deadline_ns > lease.acquired_at_ns
    assert lock.release(lease) is True


def test_setnx_expire_crash_between_setnx_and_expire_leaves_no_ttl(redis_url: str) -> None:
    make = factory("redis.setnx-expire", redis_url)
    crashed = make("half", ttl=0.05)
    assert isinstance(crashed, SetnxExpire)
    assert crashed._step_setnx() is True  # the process dies here, before EXPIRE
    r = raw(redis_url)
    assert r.pttl(lock_key("half")) == -1
    other = make("half", ttl=0.05)
    assert other.try_acquire() is None
    time.sleep(0.1)  # longer than the TTL the holder meant to set: still locked
    assert other.try_acquire() is None
    assert r.pttl(lock_key("half")) == -1


def test_setnx_expire_late_release_deletes_next_holders_lock(redis_url: str) -> None:
    make = factory("redis.setnx-expire", redis_url)
    r = raw(redis_url)
    a = make("late", ttl=0.05)
    lease_a = a.acquire(timeout=2)
    wait_gone(r, lock_key("late"))  # A's critical section outlives its TTL
    b = make("late")
    lease_b = b.acquire(timeout=2)
    assert a.release(lease_a) is True  # DEL succeeded: it removed B's key
    assert not r.exists(lock_key("late"))
    c = make("late")
    assert c.try_acquire() is not None, "C must get in while B still believes it holds the lock"
    assert lease_b.remaining() is not None and lease_b.remaining() > 0


def test_setnx_getset_clock_ahead_takes_over_a_valid_lock(redis_url: str) -> None:
    make = factory("redis.setnx-getset", redis_url)
    r = raw(redis_url)
    holder = make("skew", ttl=10)
    lease = holder.acquire(timeout=2)
    written = int(r.get(lock_key("skew")))
    assert written == lease.extra["expires_at_ms"]
    assert written > time.time() * 1000, "the holder's lock is valid by the true clock"
    assert 0 < r.pttl(lock_key("skew")) <= 10_000

    ahead = make("skew", ttl=10, clock=lambda: time.time() + 60)
    stolen = ahead.try_acquire()
    assert stolen is not None, "a client whose clock is 60 s ahead must take over"
    assert lease.remaining() is not None and lease.remaining() > 0  # the holder still holds it
    honest = make("skew", ttl=10)
    assert honest.try_acquire() is None, "for clients with the true clock the lock is taken"
    # The first holder's release (DEL) now deletes the lock the skewed client took over.
    assert holder.release(lease) is True
    assert honest.try_acquire() is not None


def test_setnx_getset_recovers_a_lock_left_without_ttl(redis_url: str) -> None:
    """The reason the seed exists: a holder that died before EXPIRE is taken over by GETSET."""
    make = factory("redis.setnx-getset", redis_url)
    r = raw(redis_url)
    past_ms = int(time.time() * 1000) - 1000
    r.set(lock_key("dead"), str(past_ms))  # what a holder that crashed before EXPIRE leaves
    lease = make("dead", ttl=5).acquire(timeout=2)
    assert int(r.get(lock_key("dead"))) == lease.extra["expires_at_ms"] > past_ms
    assert 0 < r.pttl(lock_key("dead")) <= 5000


def test_setnx_getset_lock_valid_for_client_clock_is_not_taken(redis_url: str) -> None:
    make = factory("redis.setnx-getset", redis_url)
    r = raw(redis_url)
    future_ms = int(time.time() * 1000) + 60_000
    r.set(lock_key("valid"), str(future_ms))
    assert make("valid").try_acquire() is None
    assert int(r.get(lock_key("valid"))) == future_ms  # no GETSET happened


def test_set_nx_px_non_atomic_release_deletes_next_holders_lock(redis_url: str) -> None:
    """A: GET (still mine) ... lease runs out, B acquires ... A: DEL -> B's lock is gone."""
    make = factory("redis.set-nx-px", redis_url)
    r = raw(redis_url)
    key = lock_key("race")
    a = make("race", ttl=10)
    assert isinstance(a, SetNxPx)
    lease_a = a.acquire(timeout=2)
    assert a._release_check(lease_a) is True  # release step 1: the key holds A's id
    # A pauses between GET and DEL for longer than its TTL: the key expires.
    r.pexpire(key, 1)
    wait_gone(r, key)
    b = make("race", ttl=10)
    lease_b = b.acquire(timeout=2)
    assert r.get(key) == lease_b.owner.encode()
    assert a._delete() is True  # release step 2: DEL without a second look
    assert not r.exists(key), "A's DEL must have deleted B's lock"
    c = make("race", ttl=10)
    assert c.try_acquire() is not None, "C gets in while B still holds its lease"
    assert lease_b.remaining() is not None and lease_b.remaining() > 0


def test_set_nx_px_release_after_takeover_without_interleaving_is_refused(redis_url: str) -> None:
    make = factory("redis.set-nx-px", redis_url)
    r = raw(redis_url)
    a = make("seq", ttl=0.05)
    lease_a = a.acquire(timeout=2)
    wait_gone(r, lock_key("seq"))
    lease_b = make("seq").acquire(timeout=2)
    assert a.release(lease_a) is False
    assert r.get(lock_key("seq")) == lease_b.owner.encode()


def test_set_nx_px_lua_late_release_does_not_delete_next_holders_lock(redis_url: str) -> None:
    make = factory("redis.set-nx-px-lua", redis_url)
    r = raw(redis_url)
    a = make("lua", ttl=0.3)
    lease_a = a.acquire(timeout=2)
    # a TTL was set: either still running (at most 300 ms), or already gone under load (-2); a
    # lock set without one would read -1
    assert r.pttl(lock_key("lua")) in (-2, *range(1, 301))
    wait_gone(r, lock_key("lua"))  # A's critical section outlives its TTL
    b = make("lua")
    lease_b = b.acquire(timeout=2)
    assert a.release(lease_a) is False
    assert r.get(lock_key("lua")) == lease_b.owner.encode(), "B's lock must survive A's release"
    assert make("lua").try_acquire() is None
    assert b.release(lease_b) is True


@pytest.mark.parametrize("impl", TTL_IDS)
def test_lease_expires_and_lock_is_granted_again(impl: str, redis_url: str) -> None:
    make = factory(impl, redis_url)
    lease = make("ttl", ttl=0.05).acquire(timeout=2)
    assert lease.deadline_ns is not None
    assert lease.deadline_ns - lease.acquired_at_ns <= 50_000_000
    wait_gone(raw(redis_url), lock_key("ttl"))
    assert make("ttl").acquire(timeout=2) is not None


COUNTED = ("setnx", "set", "get", "getset", "del", "pexpire", "expire", "incr", "incrby", "evalsha", "eval")

#: Commands per uncontended acquire and per release, as the seeds write them. Redis also
#: counts the commands a script runs, so EVALSHA comes with the GET and DEL inside it.
ROUND_TRIPS = {
    "redis.setnx-del": ({"setnx": 1}, {"del": 1}),
    "redis.setnx-expire": ({"setnx": 1, "pexpire": 1}, {"del": 1}),
    "redis.setnx-getset": ({"setnx": 1, "pexpire": 1}, {"del": 1}),
    "redis.set-nx-px": ({"set": 1}, {"get": 1, "del": 1}),
    "redis.set-nx-px-lua": ({"set": 1}, {"evalsha": 1, "get": 1, "del": 1}),
}


def command_counts(r: redis.Redis) -> dict[str, int]:
    stats = r.info("commandstats")
    return {c: stats[f"cmdstat_{c}"]["calls"] for c in COUNTED if f"cmdstat_{c}" in stats}


@pytest.mark.parametrize("impl", REDIS_IDS)
@pytest.mark.parametrize("fencing", [False, True])
def test_commands_sent_are_the_seeds(impl: str, fencing: bool, redis_url: str) -> None:
    """The production path sends exactly the seed's commands (e.g. GET then DEL, not a script)."""
    r = raw(redis_url)
    lock = factory(impl, redis_url)("count", fencing=fencing)
    lock.release(lock.acquire(timeout=2))  # loads scripts, so NOSCRIPT retries are not counted
    acquire, release = ROUND_TRIPS[impl]
    if fencing:
        # The token is one INCR; the Lua script grants and INCRs in one EVALSHA.
        lua = impl == "redis.set-nx-px-lua"
        acquire = {"evalsha": 1, "set": 1, "incr": 1} if lua else {**acquire, "incr": 1}
    r.config_resetstat()
    lease = lock.acquire(timeout=2)
    assert command_counts(r) == acquire
    r.config_resetstat()
    assert lock.release(lease) is True
    assert command_counts(r) == release


# --- fencing ---------------------------------------------------------------------------


@pytest.mark.parametrize("impl", REDIS_IDS)
def test_fencing_tokens_strictly_increase(impl: str, redis_url: str) -> None:
    make = factory(impl, redis_url)
    clients = [make("fenced", fencing=True) for _ in range(3)]
    tokens: list[int] = []
    for i in range(9):
        lock = clients[i % 3]
        lease = lock.acquire(timeout=2)
        assert isinstance(lease.token, int)
        tokens.append(lease.token)
        assert lock.release(lease) is True
    assert all(b > a for a, b in zip(tokens, tokens[1:], strict=False)), tokens
    assert int(raw(redis_url).get(lock_key("fenced") + ":fence")) == tokens[-1]


@pytest.mark.parametrize("impl", REDIS_IDS)
def test_no_token_without_fencing(impl: str, redis_url: str) -> None:
    lock = factory(impl, redis_url)("plain")
    lease = lock.acquire(timeout=2)
    assert lease.token is None
    assert lock.release(lease) is True
    assert not raw(redis_url).exists(lock_key("plain") + ":fence")


def test_set_nx_px_lua_failed_attempt_takes_no_token(redis_url: str) -> None:
    make = factory("redis.set-nx-px-lua", redis_url)
    a, b = make("atomic", fencing=True), make("atomic", fencing=True)
    lease = a.acquire(timeout=2)
    assert b.try_acquire() is None
    assert b.try_acquire() is None
    assert int(raw(redis_url).get(lock_key("atomic") + ":fence")) == lease.token


# --- the broken lock ---------------------------------------------------------------------


def test_no_mutex_lets_two_clients_in_at_once() -> None:
    cls = resolve("test.no-mutex")
    a, b = cls("n", []), cls("n", [])
    lease_a = a.acquire(timeout=0)
    lease_b = b.acquire(timeout=0)
    assert lease_a.owner != lease_b.owner
    assert a.release(lease_a) is True and b.release(lease_b) is True
    assert cls.capabilities.ttl is False and cls.capabilities.fencing is False


# --- errors and connections ----------------------------------------------------------------


@pytest.mark.parametrize("impl", REDIS_IDS)
def test_unreachable_server_is_backend_unavailable(impl: str) -> None:
    url = f"redis://:s3cret-pw@127.0.0.1:{free_port()}/0"
    lock = factory(impl, url)("down")
    with pytest.raises(BackendUnavailable) as info:
        lock.acquire(timeout=5)
    assert "s3cret-pw" not in str(info.value)
    assert "***" in str(info.value)
    with pytest.raises(BackendUnavailable):
        lock.release(Lease("down", "me", None, time.monotonic_ns(), None))


def test_bad_url_is_a_config_error() -> None:
    with pytest.raises(LockConfigError):
        factory("redis.set-nx-px", "http://:pw@127.0.0.1:1/")("x").acquire(timeout=0)
    with pytest.raises(LockConfigError):
        resolve("redis.set-nx-px")("x", [])


@pytest.mark.server
def test_wrong_password_is_a_config_error_without_the_password(server_dir: Path) -> None:
    server = RedisServer(server_dir, name="redis-auth").start()
    try:
        raw(server.url).config_set("requirepass", "right-pw")
        for url in (server.url, server.url.replace("redis://", "redis://:wrong-pw@")):
            with pytest.raises(LockConfigError) as info:
                factory("redis.set-nx-px-lua", url)("auth").acquire(timeout=1)
            assert "authentication failed" in str(info.value)
            assert "wrong-pw" not in str(info.value) and "right-pw" not in str(info.value)
        good = factory("redis.set-nx-px-lua", server.url.replace("redis://", "redis://:right-pw@"))("auth")
        assert good.release(good.acquire(timeout=1)) is True
    finally:
        redis_conn.close_clients()
        server.stop()


def test_redact_url() -> None:
    assert redact_url("redis://user:pw@h:1/0") == "redis://user:***@h:1/0"
    assert redact_url("redis://:pw@h:1/0") == "redis://:***@h:1/0"
    assert redact_url("redis://h:1/0?password=pw&db=2") == "redis://h:1/0?password=%2A%2A%2A&db=2"
    assert redact_url("redis://h:1/0") == "redis://h:1/0"


def test_error_after_an_applied_command_is_unknown_not_unavailable() -> None:
    """A connect failure for a second command does not undo the first one: outcome unknown."""
    not_sent = redis_conn._NotSent("Error 111 connecting")
    with pytest.raises(BackendUnavailable), RedisCall("t", "redis://:pw@h:1"):
        raise not_sent
    with pytest.raises(LockOutcomeUnknown), RedisCall("t", "redis://:pw@h:1") as call:
        call.applied()
        raise not_sent
    with pytest.raises(LockOutcomeUnknown), RedisCall("t", "redis://h:1"):
        raise redis.ConnectionError("Connection closed by server.")


@pytest.fixture
def paused_server(server_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RedisServer]:
    """Its own redis-server (the shared one is never paused) with a short reply timeout."""
    monkeypatch.setattr(redis_conn, "SOCKET_TIMEOUT", 0.3)
    server = RedisServer(server_dir, name="redis-paused").start()
    try:
        yield server
    finally:
        server.process.kill(signal.SIGCONT)
        redis_conn.close_clients()
        server.stop()


@pytest.mark.parametrize("impl", ["redis.set-nx-px", "redis.set-nx-px-lua"])
def test_lost_reply_is_outcome_unknown(impl: str, paused_server: RedisServer) -> None:
    url = paused_server.url
    lock = factory(impl, url)("paused")
    lease = lock.acquire(timeout=2)  # connected; warms the pool
    assert lock.release(lease) is True
    paused_server.process.kill(signal.SIGSTOP)
    try:
        with pytest.raises(LockOutcomeUnknown):
            lock.acquire(timeout=2)
    finally:
        paused_server.process.kill(signal.SIGCONT)


def test_client_is_cached_per_process_and_never_crosses_fork(redis_url: str) -> None:
    parent = client_for(redis_url)
    assert client_for(redis_url) is parent
    parent.ping()
    pid = os.fork()
    if pid == 0:  # child: must get its own client, and it must work
        code = 1
        try:
            child = client_for(redis_url)
            code = 0 if child is not parent and child.ping() and client_for(redis_url) is child else 3
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert client_for(redis_url) is parent and parent.ping()


GEVENT_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()
    import json, sys, gevent
    from lockimpls.base import LockOptions
    from lockimpls.registry import resolve

    from lockimpls.redis_conn import client_for

    url = sys.argv[1]
    results = {}

    def user(impl, state):
        lock = resolve(impl)(f"gevent-{impl}", [url], LockOptions(fencing=True))
        for _ in range(5):
            lease = lock.acquire(timeout=20)
            state["inside"] += 1
            state["worst"] = max(state["worst"], state["inside"])
            gevent.sleep(0.0005)
            state["inside"] -= 1
            assert lock.release(lease)
            state["done"] += 1

    for impl in sys.argv[2:]:
        state = results[impl] = {"inside": 0, "worst": 0, "done": 0}
        gevent.joinall([gevent.spawn(user, impl, state) for _ in range(20)], raise_error=True)
    pool = client_for(url).connection_pool
    conn = pool.get_connection()
    sock_module = type(conn._sock).__module__
    pool.release(conn)
    print(json.dumps({"results": results, "sock": sock_module}))
    """
)


def test_all_cooperate_with_gevent(redis_url: str) -> None:
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT, redis_url, *REDIS_IDS],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    for impl in REDIS_IDS:
        assert report["results"][impl] == {"inside": 0, "worst": 1, "done": 100}, (impl, report)
    # The locks' I/O goes through gevent's sockets: a greenlet waiting on Redis yields the hub.
    assert report["sock"].startswith("gevent"), report


IDLE_CLOSED_SCRIPT = textwrap.dedent(
    """
    import sys
    if sys.argv[2] == "gevent":
        from gevent import monkey
        monkey.patch_all()
    import redis
    from lockimpls.base import LockOptions
    from lockimpls.registry import resolve

    url = sys.argv[1]
    lock = resolve("redis.set-nx-px-lua")("idle-closed", [url], LockOptions())
    assert lock.release(lock.acquire(timeout=2))
    admin = redis.Redis.from_url(url)
    admin.client_setname("admin")
    killed = admin.execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    assert killed >= 1, killed
    lease = lock.acquire(timeout=0)
    print("ok" if lease is not None and lock.release(lease) else "not acquired")
    """
)


@pytest.mark.parametrize("mode", ["gevent", "threads"])
def test_connection_closed_by_server_while_idle_is_remade_not_unknown(mode: str, redis_url: str) -> None:
    """An idle connection the server closed is replaced before a command is sent on it.

    Sent on the dead socket, the acquire would fail as "outcome unknown" although nothing
    reached the server (after a server restart, every client would log one such info).
    """
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(
        [sys.executable, "-c", IDLE_CLOSED_SCRIPT, redis_url, mode],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
