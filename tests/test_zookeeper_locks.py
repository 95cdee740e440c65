"""The ZooKeeper locks against a real server: the contract, session loss, lost replies, herd, rwlock."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pandas as pd
import pytest
from kazoo.client import KazooClient

from infra.ports import free_port
from infra.zookeeper_server import ZooKeeperServer
from lockimpls import zk_conn
from lockimpls.base import BackendUnavailable, Lease, Lock, LockConfigError, LockOptions, LockOutcomeUnknown
from lockimpls.registry import BUILTIN, ids_for_backend, resolve
from lockimpls.zk_locks import ROOT, Ephemeral, Sequential, node_name
from tests import lock_contract as contract
from tests.helpers import PROJECT, bench

ZK_IDS = [
    "zookeeper.ephemeral",
    "zookeeper.sequential",
    "zookeeper.rwlock",
    "zookeeper.kazoo",
    "zookeeper.kazoo-rw",
]
RW_IDS = ["zookeeper.rwlock", "zookeeper.kazoo-rw"]

Make = Callable[..., Lock]


@pytest.fixture(scope="module")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk-locks")).start()
    try:
        yield server
    finally:
        zk_conn.close_sessions()
        server.stop()


def factory(impl: str, url: str, **params: object) -> Make:
    cls = resolve(impl)

    def make(name: str, **overrides: object) -> Lock:
        extra = dict(overrides.pop("params", {}))  # type: ignore[arg-type]
        return cls(name, [url], LockOptions(params={**params, **extra}, **overrides))  # type: ignore[arg-type]

    return make


def raw(server: ZooKeeperServer) -> KazooClient:
    client = KazooClient(hosts=server.hosts, timeout=10)
    client.start(timeout=20)
    return client


def expire_session(server: ZooKeeperServer, lock: Lock) -> None:
    """Close the lock's session from a second handle with the same id and password.

    The server expires the session (its ephemeral nodes go) exactly as after a pause
    longer than the session timeout, without waiting for that timeout.
    """
    session_id, password = lock.session.client.client_id  # type: ignore[attr-defined]
    other = KazooClient(hosts=server.hosts, client_id=(session_id, password), timeout=10)
    other.start(timeout=20)
    other.stop()
    other.close()


def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.005)


def test_registry_ids_match_classes() -> None:
    assert ids_for_backend("zookeeper") == ZK_IDS
    for impl in ZK_IDS:
        cls = resolve(impl)
        assert cls.id == impl and cls.backend == "zookeeper" and impl in BUILTIN
        assert cls.capabilities.fencing and cls.capabilities.wait == "notify"
        assert cls.capabilities.read_write is (impl in RW_IDS)
        assert cls.__doc__ and cls.capabilities.notes


# --- the contract (default mode: exclusive) ------------------------------------------------


@pytest.mark.parametrize("impl", ZK_IDS)
def test_contract(impl: str, zk: ZooKeeperServer) -> None:
    contract.check_all(factory(impl, zk.url))


@pytest.mark.parametrize("impl", ZK_IDS)
def test_fencing_tokens_strictly_increase(impl: str, zk: ZooKeeperServer) -> None:
    make = factory(impl, zk.url)
    clients = [make("fenced") for _ in range(3)]
    tokens = []
    for i in range(9):
        lease = clients[i % 3].acquire(timeout=5)
        assert isinstance(lease.token, int)
        tokens.append(lease.token)
        assert clients[i % 3].release(lease) is True
    assert all(b > a for a, b in zip(tokens, tokens[1:], strict=False)), tokens


@pytest.mark.parametrize("impl", ["zookeeper.sequential", "zookeeper.rwlock", "zookeeper.kazoo"])
def test_timed_out_waiter_withdraws_its_node(impl: str, zk: ZooKeeperServer) -> None:
    make = factory(impl, zk.url)
    holder, waiter = make("withdraw"), make("withdraw")
    lease = holder.acquire(timeout=5)
    with pytest.raises(contract.LockTimeout):
        waiter.acquire(timeout=0.1)
    client = raw(zk)
    try:
        assert len(client.get_children(f"{ROOT}/{resolve(impl).kind}/withdraw")) == 1
    finally:
        client.stop()
        client.close()
    assert holder.release(lease) is True
    assert waiter.release(waiter.acquire(timeout=5)) is True


# --- session loss --------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ZK_IDS)
def test_session_loss_is_reported_to_the_holder(impl: str, zk: ZooKeeperServer) -> None:
    # a session of its own (timeout 2 s) so the other tests' shared session is untouched
    make = factory(impl, zk.url, session_timeout=2)
    holder = make("expiry")
    lease = holder.acquire(timeout=5)
    node = lease.extra["node"]
    assert lease.lost is False
    expire_session(zk, holder)
    wait_for(lambda: lease.lost)
    other = factory(impl, zk.url)("expiry")
    taken = other.acquire(timeout=5)  # the holder's node went with its session
    assert taken.token != lease.token
    assert impl == "zookeeper.ephemeral" or taken.extra["node"] != node
    assert holder.release(lease) is False
    assert other.release(taken) is True
    assert holder.stats()["leases_lost"] == 1
    again = holder.acquire(timeout=5)  # a new session takes over
    assert again.lost is False and holder.release(again) is True


# --- lost create replies -------------------------------------------------------------------


def test_sequential_survives_a_lost_create_reply(
    zk: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = factory("zookeeper.sequential", zk.url)("lost-reply")
    assert isinstance(lock, Sequential)
    real = lock._step_create
    calls = []

    def applied_but_reply_lost(prefix: str, data: bytes) -> str:
        real(prefix, data)  # the server created the node ...
        calls.append(prefix)
        raise LockOutcomeUnknown("reply lost")  # ... and the answer never came back

    monkeypatch.setattr(lock, "_step_create", applied_but_reply_lost)
    lease = lock.acquire(timeout=5)
    assert len(calls) == 1, "the node was found by its prefix, not created twice"
    client = raw(zk)
    try:
        children = client.get_children(f"{ROOT}/sequential/lost-reply")
        assert children == [lease.extra["node"]] and children[0].startswith(calls[0])
        assert lock.release(lease) is True
        assert client.get_children(f"{ROOT}/sequential/lost-reply") == []
    finally:
        client.stop()
        client.close()


def test_ephemeral_resolves_a_lost_create_reply_by_reading_the_node(
    zk: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    make = factory("zookeeper.ephemeral", zk.url)
    lock = make("lost-reply")
    assert isinstance(lock, Ephemeral)
    real = lock._step_create

    def applied_but_reply_lost(data: bytes) -> object:
        real(data)
        raise LockOutcomeUnknown("reply lost")

    monkeypatch.setattr(lock, "_step_create", applied_but_reply_lost)
    lease = lock.acquire(timeout=5)
    assert make("lost-reply").try_acquire() is None
    assert lock.release(lease) is True
    # a lost reply of a create that failed (someone else holds it) is not a grant
    other = make("lost-reply")
    held = other.acquire(timeout=5)
    with pytest.raises(contract.LockTimeout):
        lock.acquire(timeout=0)
    assert other.release(held) is True


def test_unknown_create_outcome_leaves_no_blocking_node(
    zk: ZooKeeperServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create applied on the server whose outcome the client never learned is swept next time."""

    def unreachable(*_: object) -> object:
        raise BackendUnavailable("still unreachable")

    seq = factory("zookeeper.sequential", zk.url)("sweep")
    real_seq = seq._step_create

    def seq_lost(prefix: str, data: bytes) -> str:
        real_seq(prefix, data)
        raise LockOutcomeUnknown("reply lost")

    eph = factory("zookeeper.ephemeral", zk.url)("sweep")
    real_eph = eph._step_create

    def eph_lost(data: bytes) -> object:
        real_eph(data)
        raise LockOutcomeUnknown("reply lost")

    for lock, step, recheck, lost in ((seq, "_step_create", "_find_own", seq_lost),
                                      (eph, "_step_create", "_step_recheck", eph_lost)):  # fmt: skip
        with monkeypatch.context() as m:
            m.setattr(lock, step, lost)
            m.setattr(lock, recheck, unreachable)
            with pytest.raises(LockOutcomeUnknown):
                lock.acquire(timeout=5)
        other = factory(lock.id, zk.url)("sweep")
        assert other.try_acquire() is None, "the unknown create did take a node"
        lease = lock.acquire(timeout=5)  # sweeps its leftover first, then queues normally
        assert lock.release(lease) is True
        assert other.release(other.acquire(timeout=5)) is True


# --- the herd effect ---------------------------------------------------------------------


def watching(locks: list[Lock]) -> int:
    """Watch callbacks registered on the lock's nodes, over the sessions of ``locks``."""
    path = locks[0].path  # type: ignore[attr-defined]
    clients = {id(lk.session.client): lk.session.client for lk in locks}  # type: ignore[attr-defined]
    return sum(
        len(callbacks)
        for client in clients.values()
        for p, callbacks in list(client._data_watchers.items())
        if p == path or p.startswith(path + "/")
    )


def _one_handoff(zk: ZooKeeperServer, impl: str, session: str, waiters: int) -> tuple[int, int]:
    """(watch notifications the waiters received, watches the server fired) for one release."""
    make = factory(impl, zk.url, session=session)
    name = f"herd-{session}-{node_name(impl)}"
    holder = make(name)
    held = holder.acquire(timeout=5)
    locks = [make(name) for _ in range(waiters)]
    granted: list[tuple[Lock, Lease]] = []
    guard = threading.Lock()

    def wait(lock: Lock) -> None:
        lease = lock.acquire(timeout=30)
        with guard:
            granted.append((lock, lease))

    threads = [threading.Thread(target=wait, args=(lock,)) for lock in locks]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: watching(locks) == waiters)
        before = zk.mntr()["zk_sum_node_deleted_watch_count"]
        assert holder.release(held) is True
        wait_for(lambda: len(granted) == 1)
        time.sleep(0.3)  # let every notified waiter settle back into its wait
        fired = int(zk.mntr()["zk_sum_node_deleted_watch_count"]) - int(before)
        notified = sum(lk.stats()["watch_notifications"] for lk in locks)
    finally:
        released = 0
        while released < waiters:
            wait_for(lambda released=released: len(granted) > released)
            lock, lease = granted[released]
            lock.release(lease)
            released += 1
        for t in threads:
            t.join(10)
        for lk in [holder, *locks]:
            lk.close()
    return notified, fired


@pytest.mark.parametrize("session", ["per-lock", "shared"])
def test_herd_ephemeral_wakes_every_waiter_sequential_one(zk: ZooKeeperServer, session: str) -> None:
    n = 8
    notified, fired = _one_handoff(zk, "zookeeper.ephemeral", session, n)
    assert notified == n, "every waiter of the ephemeral lock is notified by one release"
    # the server sends one notification per session: per-lock N, shared one that kazoo fans out
    assert fired == (n if session == "per-lock" else 1)
    notified, fired = _one_handoff(zk, "zookeeper.sequential", session, n)
    assert notified == 1 and fired == 1, "only the successor of the sequential lock is notified"


# --- read/write ----------------------------------------------------------------------------


@pytest.mark.parametrize("impl", RW_IDS)
def test_readers_share_and_a_writer_excludes(impl: str, zk: ZooKeeperServer) -> None:
    make = factory(impl, zk.url)
    name = f"rw-{node_name(impl)}"
    r1, r2 = make(name, params={"mode": "read"}), make(name, params={"mode": "read"})
    w = make(name, params={"mode": "write"})
    l1 = r1.acquire(timeout=5)
    l2 = r2.acquire(timeout=1)  # a second reader gets in while the first reads
    assert w.try_acquire() is None, "a writer must wait for the readers"
    assert r1.release(l1) is True
    assert w.try_acquire() is None, "one reader left is enough to keep the writer out"
    assert r2.release(l2) is True
    lw = w.acquire(timeout=5)
    assert make(name, params={"mode": "read"}).try_acquire() is None, "a reader must wait for the writer"
    assert make(name).try_acquire() is None, "the default side is the exclusive one"
    assert w.release(lw) is True


@pytest.mark.parametrize("impl", RW_IDS)
def test_reader_queues_behind_a_waiting_writer(impl: str, zk: ZooKeeperServer) -> None:
    make = factory(impl, zk.url)
    name = f"rw-queue-{node_name(impl)}"
    reader = make(name, params={"mode": "read"})
    held = reader.acquire(timeout=5)
    writer = make(name, params={"mode": "write"})
    got: list[Lease] = []
    t = threading.Thread(target=lambda: got.append(writer.acquire(timeout=30)))
    t.start()
    try:
        client = raw(zk)
        try:
            wait_for(lambda: len(client.get_children(writer.path)) == 2)  # the writer has queued
        finally:
            client.stop()
            client.close()
        late = make(name, params={"mode": "read"})
        assert late.try_acquire() is None, "a reader behind a waiting writer must not overtake it"
    finally:
        reader.release(held)
        t.join(30)
    assert got and writer.release(got[0]) is True


# --- errors --------------------------------------------------------------------------------


@pytest.mark.parametrize("impl", ZK_IDS)
def test_unreachable_server_is_backend_unavailable(impl: str) -> None:
    lock = factory(impl, f"zookeeper://127.0.0.1:{free_port()}", connect_timeout=0.5, session="per-lock")("x")
    # the connect timeout decides (0.5 s), not the acquire's 5 s
    with pytest.raises(BackendUnavailable, match=r"cannot reach ZooKeeper at 127\.0\.0\.1:\d+ within 0\.5s"):
        lock.acquire(timeout=5)


def test_bad_configuration_is_a_config_error() -> None:
    with pytest.raises(LockConfigError):
        resolve("zookeeper.sequential")("x", ["redis://127.0.0.1:6379/0"])
    with pytest.raises(LockConfigError):
        resolve("zookeeper.sequential")("x", [])
    with pytest.raises(LockConfigError):
        resolve("zookeeper.rwlock")("x", ["zookeeper://127.0.0.1:1"], LockOptions(params={"mode": "both"}))
    with pytest.raises(LockConfigError):
        resolve("zookeeper.ephemeral")(
            "x", ["zookeeper://127.0.0.1:1"], LockOptions(params={"session_timeout": 0})
        )
    assert zk_conn.parse_hosts(["zookeeper://a:1,b:2/app", "c:3"]) == "a:1,b:2,c:3/app"


GEVENT_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()
    import json, sys, gevent
    from lockimpls.base import LockOptions
    from lockimpls.registry import resolve
    from lockimpls.zk_conn import session_for

    url = sys.argv[1]
    results = {}

    def user(impl, state):
        lock = resolve(impl)(f"gevent-{impl}", [url], LockOptions())
        for _ in range(5):
            lease = lock.acquire(timeout=30)
            state["inside"] += 1
            state["worst"] = max(state["worst"], state["inside"])
            gevent.sleep(0.0005)
            state["inside"] -= 1
            assert lock.release(lease)
            state["done"] += 1

    for impl in sys.argv[2:]:
        state = results[impl] = {"inside": 0, "worst": 0, "done": 0}
        gevent.joinall([gevent.spawn(user, impl, state) for _ in range(10)], raise_error=True)
    handler = type(session_for([url]).client.handler).__name__
    print(json.dumps({"results": results, "handler": handler}))
    """
)


def test_all_cooperate_with_gevent(zk: ZooKeeperServer) -> None:
    out = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT, zk.url, *ZK_IDS],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["handler"] == "SequentialGeventHandler"
    for impl in ZK_IDS:
        assert report["results"][impl] == {"inside": 0, "worst": 1, "done": 50}, (impl, report)


# --- end to end ----------------------------------------------------------------------------


@pytest.mark.slow
def test_bench_run_flash_sale_on_every_zookeeper_impl(zk: ZooKeeperServer, tmp_path: Path) -> None:
    """``bench run --backend zookeeper`` (here against --zk-hosts) is valid for every impl."""
    results = tmp_path / "results"
    r = bench("run", "--backend", "zookeeper", "--zk-hosts", zk.hosts, "--duration", "2", "--users", "8",
              "--no-report", "--results-dir", str(results))  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    cases = pd.read_csv(run / "cases.csv")
    assert list(cases["impl"]) == ZK_IDS
    assert (cases["verdict"] == "valid").all(), cases[["impl", "verdict"]]
    assert (cases["acquisitions"] > 0).all()
    assert (cases["overlapping_holds"] == 0).all() and (cases["witness_violations"] == 0).all()
    assert (cases["lost_updates"] == 0).all() and (cases["oversold_units"] == 0).all()
    assert (cases["server_cmds_per_acquire"] > 0).all()
    ephemeral, sequential = cases.iloc[0], cases.iloc[1]
    # the herd: with 8 contenders the ephemeral lock is notified several times per grant
    assert ephemeral["lockstat_watch_notifications"] > 2 * ephemeral["acquisitions"]
    assert sequential["lockstat_watch_notifications"] <= sequential["acquisitions"]


def test_the_no_expiry_canary_keeps_the_contract(zk: ZooKeeperServer) -> None:
    """crash's control on ZooKeeper: a persistent node no session end removes."""
    contract.check_all(factory("canary.no-expiry-zookeeper", zk.url))
    assert resolve("canary.no-expiry-zookeeper").recovery_after_crash(1.0, {})[0] is None
