"""Server restart: SIGKILL the lock server and start it again on the same port and data.

Redis runs without persistence here, so a restart forgets every lock; PostgreSQL's sessions die
with the server; etcd and ZooKeeper keep their state on disk. On a topology of several masters
(RedLock) a plain restart says nothing about which of a holder's votes it took, so those locks
are struck by their arms instead (:mod:`bench.nemesis.redlock_arms`), and this module's target
finder (the master holding the holder's key, by its owner value) serves them both.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from bench.nemesis.kind import FaultKind, namespace, noop
from bench.nemesis.window import FaultWindow

if TYPE_CHECKING:  # redis where a server is read: naming a kind must not import it
    import redis

RESTART = "restart"


def restart_server(server: Any) -> str:
    """Kill and start ``server`` again; returns once it answers its readiness probe."""
    if hasattr(server, "restart"):
        server.restart()  # the server knows how to come back on the same port and data
    else:
        server.process.kill()
        if server.process.popen is not None:
            server.process.popen.wait(10)
        server.start()
    return f"killed (SIGKILL) and restarted {server.process.name}"


def holders_on(client: redis.Redis, mailboxes: list[Any], by_name: bool = False) -> set[str]:
    """The labels of the cases whose strike holder has its key on this Redis server.

    Reach, per holder and per strike: a server holds a holder's key when some key there has the
    holder's owner value (a string equal to it, or a hash with it as a field: Redisson's layout),
    whatever the lock names its keys, so a user's own lock is struck as ours is. A holder whose
    owner is not known (a workload that did not send it), or every holder with ``by_name``, is
    found by bench's key names.
    """
    owners = {} if by_name else {b.owner: b.label for b in mailboxes if b.holder and b.owner}
    named = [b for b in mailboxes if b.holder and (by_name or not b.owner)]
    found: set[str] = set()
    for key in client.scan_iter(count=1000):
        text = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
        if named:
            found.update(
                b.label for b in named if f":{namespace(b.label)}" in text and not text.endswith(":fence")
            )
        if not owners:
            continue
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind == "string":
            value = client.get(key)
            value = value.decode(errors="replace") if isinstance(value, bytes) else value
            if value in owners:
                found.add(owners[value])
        elif kind == "hash":
            for name in client.hkeys(key):
                name = name.decode(errors="replace") if isinstance(name, bytes) else name
                if name in owners:
                    found.add(owners[name])
    return found


def _on_each(servers: list[Any], mailboxes: list[Any], by_name: bool = False) -> list[set[str]]:
    """:func:`holders_on` of each Redis server (an unreachable one: none)."""
    import redis

    out: list[set[str]] = []
    for server in servers:
        try:
            client = redis.Redis.from_url(server.url, socket_connect_timeout=1, socket_timeout=2)
            try:
                out.append(holders_on(client, mailboxes, by_name))
            finally:
                client.close()
        except (redis.RedisError, AttributeError):
            out.append(set())
    return out


def holders_by_server(servers: list[Any], mailboxes: list[Any]) -> list[set[str]]:
    """For each Redis server, the cases whose holder's key it holds (an unreachable one: none)."""
    out = _on_each(servers, mailboxes)
    # A lock whose stored value is not its owner (redis.setnx-getset keeps an expiry time there)
    # is found on no server by its owner. Its keys by bench's names decide, but only where one
    # server alone holds them: a single-server lock in a stack of several masters. Where several
    # do (a RedLock's waiters), a key by name may be a waiter's, and the strike stays missed.
    unfound = [b for b in mailboxes if b.holder and b.owner and not any(b.label in found for found in out)]
    if unfound and len(servers) > 1:
        by_name = _on_each(servers, unfound, by_name=True)
        for b in unfound:
            where = [i for i, labels in enumerate(by_name) if b.label in labels]
            if len(where) == 1:
                out[where[0]].add(b.label)
    return out


def restart_target(servers: list[Any], mailboxes: list[Any]) -> tuple[Any, dict[str, str]]:
    """Of several masters, the one holding the most holders' keys, and for whom the strike misses.

    A waiter's key is never a hit: only this strike's holder's is.
    """
    holding = holders_by_server(servers, mailboxes)
    best = max(range(len(servers)), key=lambda i: len(holding[i]))
    name = getattr(getattr(servers[best], "process", None), "name", f"master {best}")
    missed = {
        b.label: f"the restarted master {name} held no key of this holder"
        for b in mailboxes
        if b.holder and b.label not in holding[best]
    }
    return servers[best], missed


def strike(nemesis: Any, trigger: Callable[[], bool]) -> FaultWindow | None:
    """Restart the lock server (of several, the one holding the holders' keys) once a holder is inside."""
    if not trigger():
        return None
    missed: dict[str, str] = {}
    target = nemesis.server
    if len(nemesis.servers) > 1:
        target, missed = restart_target(nemesis.servers, nemesis.mailboxes)
    start = time.monotonic_ns()
    if noop():
        time.sleep(0.05)
        return FaultWindow(
            RESTART, start, time.monotonic_ns(), "no-op (test fault: nothing was done)", missed
        )
    detail = restart_server(target)
    return FaultWindow(RESTART, start, time.monotonic_ns(), detail, missed)


KIND = FaultKind(
    name=RESTART,
    reach="the server holding the holder's key, found by the holder's owner value on every server",
    precondition="the holder claimed the strike and was inside its critical section when the server died, "
    "and the struck server held its key",
    regrant_wait_s=3.0,
    hold_for_s=12.0,  # a cap: the restart (a ZooKeeper JVM takes seconds) plus the regrant wait
    controls={
        RESTART: {
            "redis": "redis.set-nx-px",
            "postgres": "postgres.advisory",
            "memcached": "memcached.add",
            "etcd": "canary.fail-open-etcd",
            "zookeeper": "canary.fail-open-zookeeper",
        }
    },
    strike=strike,
)
