"""Canary locks: locks built to fail, the positive controls of ``bench matrix``.

A survived cell claims that an experiment which could have broken the lock did not. Where
no lock of the catalog is known to fail under a scenario (a ZooKeeper or etcd member kill,
an etcd restart), that claim needs a lock that must fail whenever the fault really touched
the service the holders depend on. The canary is such a lock: a catalog lock that, when
its server cannot be reached or answers with an error, *assumes the lock is free* and
grants it ("fail open", a mistake real code makes). So a fault that made the holder's
service unreachable to the waiters hands the lock to a second client while the first still
holds it, and the checkers see the overlap. A fault the clients never noticed (a member
nobody talked to) leaves the canary standing: the scenario *did not bite*.

Canaries are never ranked: they are not in the catalog (``registry.CANARIES``), and
``bench list`` marks them.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from lockimpls.base import (
    BackendUnavailable,
    Capabilities,
    Lease,
    Lock,
    LockOptions,
    LockOutcomeUnknown,
    LockTimeout,
    ParamSpec,
    new_owner_id,
)

#: A canary waits in slices this long, looking for an outage between them (seconds).
SLICE_S = 0.1


def fail_open(base: type[Lock], backend: str) -> type[Lock]:
    """A subclass of ``base`` that grants the lock whenever ``base`` cannot reach its server."""

    class FailOpen(base):  # type: ignore[valid-type, misc]
        __doc__ = f"""{base.__name__} that assumes the lock is free when its server fails (a canary).

        Why: a positive control must fail when a fault really cut the holders off from the
        service; this lock does exactly that, and nothing else differs from {base.__name__}.
        """

        id = f"canary.fail-open-{backend}"
        canary = True

        def acquire(self, timeout: float | None = None) -> Lease:
            # Waits in slices so that an outage seen while waiting opens the lock: a ZooKeeper
            # waiter parked on a watch gets no error when its connection drops, only a state
            # change (SUSPENDED) of its session, which the session counts.
            outages = self._outages()
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                step = SLICE_S if left is None else max(0.0, min(SLICE_S, left))
                try:
                    return super().acquire(step)
                except LockTimeout:
                    if self._outages() > outages:
                        return self._open_lease()
                    if left is not None and left <= SLICE_S:
                        raise
                except (BackendUnavailable, LockOutcomeUnknown, OSError):
                    return self._open_lease()

        def _outages(self) -> int:
            counters = getattr(getattr(self, "session", None), "counters", None) or {}
            return int(counters.get("suspensions", 0)) + int(counters.get("sessions_lost", 0))

        def _open_lease(self) -> Lease:
            now = time.monotonic_ns()
            return Lease(self.name, f"fail-open-{uuid.uuid4().hex[:8]}", None, now, None)

        def release(self, lease: Lease) -> bool:
            if lease.owner.startswith("fail-open-"):
                return False
            try:
                return super().release(lease)
            except (BackendUnavailable, LockOutcomeUnknown, OSError):
                return False

    FailOpen.__name__ = FailOpen.__qualname__ = f"FailOpen{base.__name__}"
    return FailOpen


def _make(module: str, cls: str, backend: str) -> Any:
    import importlib

    return fail_open(getattr(importlib.import_module(module), cls), backend)


def __getattr__(name: str) -> Any:
    """``lockimpls.canary:FailOpenEtcd`` and friends, built on first use."""
    table = {
        "FailOpenRedis": ("lockimpls.redis_locks", "SetNxPxLua", "redis"),
        "FailOpenPostgres": ("lockimpls.postgres_locks", "Advisory", "postgres"),
        "FailOpenEtcd": ("lockimpls.etcd_locks", "EtcdLease", "etcd"),
        "FailOpenZookeeper": ("lockimpls.zk_locks", "Sequential", "zookeeper"),
        "FailOpenMemcached": ("lockimpls.memcached_locks", "MemcachedAdd", "memcached"),
    }
    if name in table:
        made = _make(*table[name])
        globals()[name] = made
        return made
    if name in _BUILT:
        made = _BUILT[name]()
        globals()[name] = made
        return made
    raise AttributeError(name)


# --- canaries that never free a dead holder's lock: the crash scenario's controls ----------------
#
# Where every catalog lock of a backend frees a crashed holder's lock in its own time (etcd's lease,
# ZooKeeper's session, memcached's expiry, the kernel's flock), a control that must get *stuck*
# after a crash is a lock with no expiry at all: the mistake of seed 001's SETNX + DEL, on each
# backend. Nothing but its holder deletes the key, node or file, so a killed holder blocks it for
# good, and the crash scenario's stuck rule must see that.


#: The memcached key listing every key the no-expiry canary took (bench/run/reset.py empties them).
MEMCACHED_INDEX = "lockbench:canary:no-expiry-keys"


def _never(cls: type[Lock]) -> type[Lock]:
    cls.recovery_after_crash = classmethod(  # type: ignore[method-assign]
        lambda c, ttl, params: (None, "no expiry: a canary built to get stuck")
    )
    cls.canary = True  # type: ignore[attr-defined]
    return cls


def _no_expiry_memcached() -> type[Lock]:
    from lockimpls.memcached_locks import MemcachedAddCas

    class NoExpiryMemcached(MemcachedAddCas):
        """``add`` with no expiry (0): a crashed holder's key stays forever. Why: crash's control."""

        id = "canary.no-expiry-memcached"
        capabilities = Capabilities(ttl=False, fencing=False, notes="canary: no expiry, stuck after a crash")

        def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
            super().__init__(name, urls, options)
            self.expire = 0

        def _try_acquire(self) -> Lease | None:
            lease = super()._try_acquire()
            if lease is not None:
                lease.deadline_ns = None  # no expiry, no deadline
                # memcached cannot list its keys: bench's reset between cases reads this index
                with self._call("index", changes_state=True) as mc:
                    line = f"{self.key}\n".encode()
                    if not mc.append(MEMCACHED_INDEX, line, noreply=False):
                        mc.add(MEMCACHED_INDEX, line, expire=0, noreply=False)
            return lease

    return _never(NoExpiryMemcached)


def _no_expiry_etcd() -> type[Lock]:
    from lockimpls.etcd_client import b64, client_for

    class NoExpiryEtcd(Lock):
        """A key created with ``create_revision == 0`` and no lease: nothing expires it. Why: crash's control."""

        id = "canary.no-expiry-etcd"
        backend = "etcd"
        capabilities = Capabilities(ttl=False, fencing=False, notes="canary: no lease, stuck after a crash")
        params = {}  # noqa: RUF012

        def _key(self) -> str:
            return f"lockbench/canary/{self.name}"

        def _try_acquire(self) -> Lease | None:
            owner = new_owner_id(self.options.owner_prefix)
            key = b64(self._key())
            r = client_for(self.urls).txn(
                compare=[{"key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
                success=[{"request_put": {"key": key, "value": b64(owner)}}],
            )
            return self._new_lease(owner) if r["succeeded"] else None

        def owns(self, lease: Lease) -> bool | None:
            kvs = client_for(self.urls).range(self._key()).get("kvs") or []
            return any(kv.get("value") == b64(lease.owner) for kv in kvs)

        def _release(self, lease: Lease) -> bool:
            key = b64(self._key())
            r = client_for(self.urls).txn(
                compare=[{"key": key, "target": "VALUE", "result": "EQUAL", "value": b64(lease.owner)}],
                success=[{"request_delete_range": {"key": key}}],
            )
            return bool(r["succeeded"])

    return _never(NoExpiryEtcd)


def _no_expiry_zookeeper() -> type[Lock]:
    from kazoo.exceptions import NodeExistsError, NoNodeError

    from lockimpls.zk_conn import session_for
    from lockimpls.zk_locks import ROOT, node_name

    class NoExpiryZookeeper(Lock):
        """A persistent (not ephemeral) node: no session end removes it. Why: crash's control."""

        id = "canary.no-expiry-zookeeper"
        backend = "zookeeper"
        capabilities = Capabilities(
            ttl=False, fencing=False, notes="canary: persistent node, stuck after a crash"
        )
        params = {"session_timeout": ParamSpec(float, "ZooKeeper session timeout", 0.0, 600.0, open_low=True)}  # noqa: RUF012

        def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
            super().__init__(name, urls, options)
            self.session = session_for(self.urls, self.options.params)
            self.path = f"{ROOT}/canary/{node_name(name)}"

        def _try_acquire(self) -> Lease | None:
            owner = new_owner_id(self.options.owner_prefix)
            try:
                self.session.call(
                    f"{self.id} create", "create", self.path, owner.encode(), makepath=True, write=True
                )
            except NodeExistsError:
                return None
            return self._new_lease(owner)

        def owns(self, lease: Lease) -> bool | None:
            try:
                data, _ = self.session.call(f"{self.id} probe", "get", self.path)
            except NoNodeError:
                return False
            return data == lease.owner.encode()

        def _release(self, lease: Lease) -> bool:
            try:
                data, stat = self.session.call(f"{self.id} release", "get", self.path)
                if data != lease.owner.encode():
                    return False
                self.session.call(f"{self.id} release", "delete", self.path, version=stat.version, write=True)
            except NoNodeError:
                return False
            return True

    return _never(NoExpiryZookeeper)


def _no_expiry_file() -> type[Lock]:
    from lockimpls.file_locks import lock_dir, lock_file_name

    class NoExpiryFile(Lock):
        """``O_CREAT | O_EXCL`` of a lock file, removed by its holder only (a pidfile lock). Why: crash's control."""

        id = "canary.no-expiry-file"
        backend = "file"
        capabilities = Capabilities(
            ttl=False, fencing=False, multi_host=False, notes="canary: lock file, stuck after a crash"
        )
        params = {}  # noqa: RUF012

        def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
            super().__init__(name, urls, options)
            self.path = lock_dir(self.urls) / f"{lock_file_name(name)}.excl"

        def _try_acquire(self) -> Lease | None:
            owner = new_owner_id(self.options.owner_prefix)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return None
            try:
                os.write(fd, owner.encode())
            finally:
                os.close(fd)
            return self._new_lease(owner)

        def owns(self, lease: Lease) -> bool | None:
            try:
                return self.path.read_bytes() == lease.owner.encode()
            except FileNotFoundError:
                return False

        def _release(self, lease: Lease) -> bool:
            if not self.owns(lease):
                return False
            self.path.unlink(missing_ok=True)
            return True

    return _never(NoExpiryFile)


def _no_keepalive_etcd() -> type[Lock]:
    from lockimpls.etcd_locks import EtcdLease

    class NoKeepaliveEtcd(EtcdLease):
        """etcd.lease whose lease is never refreshed: a hold longer than the TTL loses it.

        Why: etcd.lease keeps its lease alive while the process runs, so no catalog lock of etcd
        fails a long critical section or a paused task; this one must, whenever the scenario
        really made a hold outlive its lease.
        """

        id = "canary.no-keepalive-etcd"

        def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
            super().__init__(name, urls, options)
            self.keepalive_interval = 3600.0  # never within a case

    NoKeepaliveEtcd.canary = True  # type: ignore[attr-defined]
    return NoKeepaliveEtcd


#: How much longer than the scenario's lease the RedLock control's lease is.
LONG_LEASE_FACTOR = 3.0


def _redlock_long_lease() -> type[Lock]:
    from lockimpls.redlock import RedLock

    class RedLockLongLease(RedLock):
        """RedLock with a lease three times the scenario's: the delayed restart comes back inside it.

        Why: restart-delayed keeps the killed master down past the lease (4.5 s against 4 s), which
        RedLock survives by design. Its control is the same lock restarted *before* its lease ends:
        this one, struck by the same strike in the same group, must lose its majority.
        """

        id = "canary.redlock-long-lease"

        def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
            options = options or LockOptions()
            super().__init__(name, urls, replace(options, ttl=options.ttl * LONG_LEASE_FACTOR))

    RedLockLongLease.canary = True  # type: ignore[attr-defined]
    return RedLockLongLease


#: One RedLock vote (SET NX PX) that neither the append-only file nor a replica sees: under
#: effects replication (the only kind since Redis 7) ``redis.set_repl`` leaves it in memory alone.
UNLOGGED_SET_LUA = """
redis.set_repl(redis.REPL_NONE)
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
"""


def _redlock_unlogged() -> type[Lock]:
    from lockimpls.redlock import RedLock

    class RedLockUnlogged(RedLock):
        """RedLock whose votes stay out of the append-only file: a restart from the AOF forgets them.

        Why: restart-aof restarts one of the holder's three masters from its AOF, which RedLock
        survives because its key is in the file. Its control must fail under the very same strike,
        so it is the same lock whose key lives in memory only: it loses its majority exactly when
        the strike really killed and restarted a master the holder depended on. The lock itself
        (redis.redlock) could never be that control: it cannot fail where it is right.
        """

        id = "canary.redlock-unlogged"

        def _set_command(self, owner: str) -> tuple:
            return ("EVAL", UNLOGGED_SET_LUA, 1, self.key, owner, self.ttl_ms)

    RedLockUnlogged.canary = True  # type: ignore[attr-defined]
    return RedLockUnlogged


_BUILT: dict[str, Any] = {
    "NoExpiryMemcached": _no_expiry_memcached,
    "NoExpiryEtcd": _no_expiry_etcd,
    "NoExpiryZookeeper": _no_expiry_zookeeper,
    "NoExpiryFile": _no_expiry_file,
    "NoKeepaliveEtcd": _no_keepalive_etcd,
    "RedLockLongLease": _redlock_long_lease,
    "RedLockUnlogged": _redlock_unlogged,
}
