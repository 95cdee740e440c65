"""Redis master + replica behind three Sentinels: a failover loses a lock the master had granted.

Real processes throughout: the group is started by infra on loopback, the master is
SIGKILLed, the sentinels promote the replica. ``lose_writes_failover`` makes the loss
deterministic (the replica never receives what the lock holder wrote), so the test shows
the loss every run instead of hoping for a race.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from infra.ports import free_port
from infra.redis_sentinel import RedisSentinelGroup
from lockimpls import redis_conn
from lockimpls.base import BackendUnavailable, Lease, Lock, LockConfigError, LockOptions
from lockimpls.redis_conn import client_for
from lockimpls.redis_locks import lock_key
from lockimpls.registry import resolve

IMPL = "redis.set-nx-px-lua"
#: Long enough that every lease is still valid, client-side, when the failover is over.
TTL = 60.0


def make(url: str, name: str) -> Lock:
    return resolve(IMPL)(name, [url], LockOptions(ttl=TTL))


def raw(port: int) -> redis.Redis:
    return redis.Redis("127.0.0.1", port, decode_responses=True)


def process_groups_alive(pgids: set[int]) -> list[tuple[int, str]]:
    """(pid, state) of every process still in one of ``pgids`` (children and orphans included)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # after "(comm)": state, ppid, pgrp, ...
        fields = stat.rpartition(")")[2].split()
        if int(fields[2]) in pgids:
            found.append((int(entry), fields[0]))
    return found


def listening_on(port: int) -> set[str]:
    """Local addresses with a listening TCP socket on ``port`` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            local, state = line.split()[1], line.split()[3]
            addr, _, hexport = local.partition(":")
            if state != "0A" or int(hexport, 16) != port:  # 0A: LISTEN
                continue
            raw_ip = bytes.fromhex(addr)
            if len(raw_ip) == 4:
                found.add(".".join(str(b) for b in reversed(raw_ip)))
            else:
                found.add(addr)  # any IPv6 listener is a failure here; its hex form says which
    return found


@pytest.fixture
def group(tmp_path: Path) -> Iterator[RedisSentinelGroup]:
    g = RedisSentinelGroup(tmp_path, name="sentinel-test").start()
    try:
        yield g
    finally:
        redis_conn.close_clients()
        g.stop()


def test_group_on_loopback_and_stop_leaves_nothing(group: RedisSentinelGroup) -> None:
    master, replica = group.nodes
    assert group.master() == ("127.0.0.1", master.port)
    assert group.url.startswith("redis+sentinel://") and group.url.endswith("/lockbench")
    for port in [master.port, replica.port, *group.sentinel_ports]:
        assert listening_on(port) == {"127.0.0.1"}
    with raw(replica.port) as r:
        role = r.execute_command("ROLE")
        assert role[0] == "slave" and (role[1], role[2]) == ("127.0.0.1", master.port)
    for port in group.sentinel_ports:
        with raw(port) as s:
            assert {r["ip"] for r in s.sentinel_slaves("lockbench")} == {"127.0.0.1"}
            assert {x["ip"] for x in s.sentinel_sentinels("lockbench")} == {"127.0.0.1"}
    assert group.version()[0].isdigit()

    # A fault left in place (replica stopped) must not survive stop().
    group.pause_replica()
    # SIGSTOP lands when the kernel next schedules the replica: on a loaded machine it may still
    # read R for a moment
    deadline = time.monotonic() + 10
    while process_groups_alive({replica.process.pid})[0][1] != "T" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process_groups_alive({replica.process.pid})[0][1] == "T"
    pgids = {p.pid for p in group.processes}
    assert len(pgids) == 5 and all(p.alive() for p in group.processes)
    group.stop()
    assert process_groups_alive(pgids) == []
    assert not any(p.alive() for p in group.processes)


def test_failover_loses_the_unreplicated_lock_only(group: RedisSentinelGroup) -> None:
    url = group.url
    client = client_for(url)
    old_master = group.master()
    replica_port = group.replica().port

    kept_holder = make(url, "replicated")
    kept = kept_holder.try_acquire()
    assert kept is not None
    # WAIT: the replica has acknowledged the grant, so the failover cannot lose it.
    assert client.wait(1, 5000) == 1

    lost_holder = make(url, "lost")
    granted: list[Lease] = []

    def hold() -> None:
        lease = lost_holder.try_acquire()
        assert lease is not None
        granted.append(lease)

    timings = group.lose_writes_failover(hold)
    assert timings.old_master == old_master and timings.new_master != old_master
    assert timings.start_ns < timings.killed_ns < timings.end_ns
    assert len(granted) == 1
    new_port = timings.new_master[1]
    assert new_port == replica_port

    with raw(new_port) as r:
        assert r.execute_command("ROLE")[0] == "master"
        assert r.exists(lock_key("replicated")) == 1
        assert r.exists(lock_key("lost")) == 0  # acknowledged by the old master, never replicated

    # The same client, untouched, now talks to the promoted replica.
    assert client_for(url) is client
    assert client.ping()
    assert client.connection_pool.master_address == timings.new_master

    # A second client takes "lost" while its first holder's lease is still valid: a lost lock.
    holders = {"replicated": kept, "lost": granted[0]}
    lost = []
    for name, first in holders.items():
        assert first.remaining() is not None and first.remaining() > 0
        second = make(url, name).try_acquire()
        if second is not None:
            lost.append(name)
    assert lost == ["lost"]
    # The first holder's release finds the key holds someone else's value now.
    assert lost_holder.release(granted[0]) is False
    assert kept_holder.release(kept) is True


def test_sentinel_url_errors() -> None:
    with pytest.raises(LockConfigError, match="Sentinel URL"):
        client_for("redis+sentinel://127.0.0.1:1")  # no service
    with pytest.raises(LockConfigError, match="Sentinel URL"):
        client_for("redis+sentinel://127.0.0.1/lockbench")  # no port
    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/lockbench"
    try:
        # No sentinel answers: nothing was sent to any master, so the server is "unavailable".
        with pytest.raises(BackendUnavailable, match="unreachable"):
            make(url, "nobody").try_acquire()
    finally:
        redis_conn.close_clients()
