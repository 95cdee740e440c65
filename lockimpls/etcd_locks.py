"""etcd locks (seed 003 names etcd as a lock engine): a lease, a key per waiter, revisions.

``etcd.lease`` is the recipe of etcd's own ``concurrency.Mutex``, spoken over the HTTP/JSON
gateway (see :mod:`lockimpls.etcd_client` for why): every acquire grants a lease, writes
``<prefix>/<name>/<lease id hex>`` in a transaction guarded by ``create_revision == 0``,
and owns the lock when its key has the lowest create revision under the prefix. A waiter
watches only the key with the next-lower create revision (no herd: one deletion wakes
one waiter), so waiters are served in FIFO order. The create revision is the fencing
token: it grows with every grant and etcd gives it for free.

Waiting is a watch rather than polling: over the gateway a watch is a streaming HTTP
response, so each waiting client holds one extra connection of its own (closed after).
The watch starts at the revision of the read that found the predecessor, so a deletion
between that read and the watch is replayed, never missed. After each wake-up (or every
``watch_round`` seconds) the waiter reads again who is ahead of it, in one transaction
that also checks its own key still exists (its lease may have expired while it waited).

``etcd.lock-api`` is the same algorithm run by the server (``/v3/lock/lock``): the request
is parked in etcd until the lock is granted; it costs fewer round trips when contended.

While a lease is registered, a background thread per process (a greenlet under gevent)
watches when it is due, every ``ttl / 3``, and sends each due refresh from a thread of its own,
so one slow answer never delays another lease's refresh (at most one is in flight per lease).
A refresh unanswered within its interval is tried again at once, never waiting past the
lease's deadline, so one lost answer never costs a lease. When a refresh says the lease is gone (TTL 0), the key
is gone, or the client's own deadline passed without a successful refresh, the holder's
``Lease.lost`` becomes True and ``Lease.deadline_ns`` stops moving: a holder that checks
either before touching the resource learns it lost the lock. Release deletes the key
(the answer says whether we still owned it) and revokes the lease.

Options (``LockOptions.params``): ``prefix`` (default ``lockbench/lock``; the lock API
uses ``lockbench/lockapi``), ``keepalive_interval`` (seconds, default ttl/3),
``connect_timeout``, ``request_timeout``, ``pool_size``, ``watch_round`` (seconds a
single watch waits before the waiter re-reads its predecessor, default 5).
TTLs are whole seconds in etcd: ``ttl`` is rounded up, minimum 1, and the server may
raise it to its own minimum (1.5 election timeouts); the granted TTL is what counts.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Sequence

from lockimpls.base import (
    BackendUnavailable,
    Capabilities,
    Lease,
    Lock,
    LockError,
    LockOptions,
    LockOutcomeUnknown,
    LockTimeout,
    ParamSpec,
    new_owner_id,
    seconds,
)
from lockimpls.etcd_client import EtcdClient, EtcdNotFound, b64, client_for, num, prefix_end, unb64

#: Seconds one watch waits before the waiter re-reads who is ahead of it (a safety net
#: against a watch that silently stopped; no event is missed, watches start at a revision).
WATCH_ROUND = 5.0
#: A server-side lock request with timeout 0 (after seeing the lock free) still needs one
#: round trip to be granted: it may wait this long (seconds) for it.
LOCK_API_MIN_WAIT = 0.25
#: The shortest wait any server-side lock request gets (about a loaded round trip).
LOCK_API_FLOOR = 0.05
#: Seconds between a renewal that went unanswered within its budget and the next try.
RETRY_GAP_S = 0.02


class _Held:
    """One granted lease the keepalive thread refreshes, and what it learned about it."""

    def __init__(
        self,
        client: EtcdClient,
        lease_id: int,
        ttl: int,
        interval: float,
        sent_ns: int,
        stats: dict[str, int],
    ) -> None:
        self.client = client
        self.lease_id = lease_id
        self.ttl = ttl
        self.interval = interval
        self.key: bytes | None = None  # set once the lock key is written: then it is checked too
        self.deadline_ns = sent_ns + ttl * 1_000_000_000
        self.next_due = time.monotonic() + interval
        self.lease: Lease | None = None
        self.lost = False
        self.done = False
        #: a refresh of this lease is in flight (the loop sends none other until it is answered)
        self.busy = False
        #: the owning lock's counters (``renewals`` and the rest), where its renewals are told
        self.stats = stats


class _Keepalive:
    """One background thread per process that sends every registered lease's refresh when due.

    Why one loop per process instead of one thread per lock: most leases are released long
    before their first refresh, so a lock costs no thread unless its lease lives an interval.
    Why each refresh then runs in a thread of its own: the loop once sent them one after
    another, and on a slow etcd (applies over 100 ms) the refreshes queued behind a slow one
    came late enough that 1 s leases ran out (the full matrix's I and J, docs/catalog.md).
    """

    def __init__(self) -> None:
        self._entries: set[_Held] = set()
        self._mutex = threading.Lock()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="lockbench-etcd-keepalive", daemon=True)
        self._thread.start()

    def add(self, held: _Held) -> None:
        with self._mutex:
            self._entries.add(held)
        self._wake.set()

    def remove(self, held: _Held) -> None:
        """Stop refreshing ``held``; from now on nothing marks it lost."""
        with self._mutex:
            held.done = True
            self._entries.discard(held)

    def attach(self, held: _Held, lease: Lease) -> None:
        """Give ``held`` the Lease its holder sees, carrying over a loss already noticed."""
        with self._mutex:
            held.lease = lease
            lease.deadline_ns = held.deadline_ns
            if held.lost:
                lease.lost = True

    def _lose(self, held: _Held) -> None:
        with self._mutex:
            if held.done:
                return
            held.lost = True
            held.done = True
            if held.lease is not None:
                held.lease.lost = True
            self._entries.discard(held)

    def _run(self) -> None:
        while True:
            self._wake.clear()
            now = time.monotonic()
            with self._mutex:
                idle = [h for h in self._entries if not h.busy]
                due = [h for h in idle if h.next_due <= now]
                for held in due:
                    held.busy = True
                upcoming = min((h.next_due for h in idle if h.next_due > now), default=now + 60.0)
            for held in due:
                threading.Thread(target=self._renew_apart, args=(held,), daemon=True).start()
            self._wake.wait(max(0.0, upcoming - time.monotonic()))

    def _renew_apart(self, held: _Held) -> None:
        try:
            self._renew(held)
        except Exception:  # noqa: BLE001 - one lease's trouble must not end its refreshes
            held.next_due = time.monotonic() + held.interval
        finally:
            with self._mutex:
                held.busy = False
            self._wake.set()

    def _count(self, held: _Held, sent_ns: int, due: float, failed: bool = False) -> None:
        """Tell the owning lock how this renewal went: how late it was sent, how long it took, whether it failed."""
        took_s = (time.monotonic_ns() - sent_ns) / 1e9
        stats = held.stats
        with self._mutex:
            stats["renewals"] += 1
            if failed:
                stats["renewals_failed"] += 1
            elif took_s > held.interval:
                stats["renewals_slow"] += 1
            if sent_ns / 1e9 - due > held.interval:
                stats["renewals_behind"] += 1

    def _renew(self, held: _Held) -> None:
        if held.done:
            return
        due = held.next_due
        sent = time.monotonic_ns()
        budget = max(0.2, min(held.interval, held.client.request_timeout))
        # a renewal answered after the deadline comes too late for the holder: wait no longer
        budget = min(budget, max(RETRY_GAP_S, (held.deadline_ns - sent) / 1e9))
        try:
            ttl = held.client.keepalive(held.lease_id, timeout=budget)
            alive = ttl > 0
            if alive and held.key is not None:
                r = held.client.range(held.key, timeout=budget, count_only=True)
                alive = num(r.get("count")) > 0
        except LockError:
            self._count(held, sent, due, failed=True)
            if time.monotonic_ns() >= held.deadline_ns:
                self._lose(held)  # no refresh within the TTL: the server has expired it by now
            else:
                # Again at once: the unanswered request already waited its budget, and waiting a
                # further interval would leave a lease of three intervals no second try before it
                # lapses (this holds no other lease's refresh: each runs apart). A prompt refusal
                # (nothing listening) tries again an interval after it was sent, so nothing spins.
                held.next_due = max(sent / 1e9 + held.interval, time.monotonic() + RETRY_GAP_S)
            return
        self._count(held, sent, due)
        if not alive:
            self._lose(held)
            return
        with self._mutex:
            held.deadline_ns = sent + ttl * 1_000_000_000
            if held.lease is not None and not held.lost:
                held.lease.deadline_ns = held.deadline_ns
        held.next_due = time.monotonic() + held.interval


_keepalives: dict[int, _Keepalive] = {}
_keepalive_guard = threading.Lock()


def _keepalive() -> _Keepalive:
    """The keepalive loop of this process (a forked child starts its own)."""
    pid = os.getpid()
    manager = _keepalives.get(pid)
    if manager is None:
        with _keepalive_guard:
            manager = _keepalives.get(pid)
            if manager is None:
                _keepalives.clear()
                manager = _keepalives[pid] = _Keepalive()
    return manager


class _EtcdLeaseLock(Lock):
    """Shared lease handling of the etcd locks: grant, keepalive, give up, release."""

    backend = "etcd"
    default_prefix = "lockbench/lock"

    params = {  # noqa: RUF012
        "prefix": ParamSpec(str, "key prefix of the locks"),
        "keepalive_interval": seconds("seconds between lease refreshes (default ttl/3)", high=3600),
        "watch_round": seconds("seconds one watch waits before re-reading (default 5)", high=3600),
        "connect_timeout": seconds("seconds a connect may take", high=600),
        "request_timeout": seconds("seconds one request may take", high=600),
        "pool_size": ParamSpec(int, "keep-alive connections per process", 1, 1000),
    }

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        params = self.options.params
        self._settings = {
            k: float(params[k]) if k != "pool_size" else int(params[k])
            for k in ("connect_timeout", "request_timeout", "pool_size")
            if k in params
        }
        client_for(self.urls, **self._settings)  # validates the URLs now: a bad one fails at construction
        self.ttl = max(1, math.ceil(self.options.ttl))
        self.keepalive_interval = float(params.get("keepalive_interval", self.ttl / 3))
        self.watch_round = float(params.get("watch_round", WATCH_ROUND))
        self.prefix = str(params.get("prefix", self.default_prefix)).rstrip("/")
        self._held: dict[int, _Held] = {}
        self._stats = {"grants": 0, "leases_lost": 0, "renewals": 0, "renewals_slow": 0,
                       "renewals_failed": 0, "renewals_behind": 0}  # fmt: skip

    def stats(self) -> dict[str, int]:
        """grants; leases_lost (seen at release); the keepalive's ``renewals`` of this instance's
        leases, of them ``renewals_slow`` (its round trips together longer than the keepalive
        interval, a third of the TTL by default), ``renewals_failed`` (unanswered or refused in
        time) and ``renewals_behind`` (sent more than an interval after due: the
        process's one keepalive loop was behind). etcd.lease adds queued and watch_rounds."""
        return dict(self._stats)

    def _client(self) -> EtcdClient:
        return client_for(self.urls, **self._settings)

    def _grant(self, client: EtcdClient) -> _Held:
        """A new lease, already refreshed by the keepalive loop."""
        sent = time.monotonic_ns()
        try:
            lease_id, ttl = client.grant(self.ttl)
        except LockOutcomeUnknown as exc:
            # A lease with no key holds no lock: nothing that matters was applied.
            raise BackendUnavailable(f"{self.id}: lease grant unanswered ({exc})") from exc
        held = _Held(client, lease_id, ttl or self.ttl, self.keepalive_interval, sent, self._stats)
        _keepalive().add(held)
        return held

    def _give_up(self, held: _Held) -> bool:
        """Withdraw: revoke the lease (etcd deletes its keys with it). True when certainly gone."""
        _keepalive().remove(held)
        try:
            held.client.revoke(held.lease_id)
        except EtcdNotFound:
            return True
        except LockError:
            return False
        return True

    def _hand_out(self, held: _Held, owner: str, token: int | None, key: bytes) -> Lease:
        lease = self._new_lease(owner, token=token, ttl=held.ttl)
        lease.extra = {"lease_id": held.lease_id, "key": key.decode(errors="replace")}
        _keepalive().attach(held, lease)
        self._held[held.lease_id] = held
        self._stats["grants"] += 1
        return lease

    def owns(self, lease: Lease) -> bool | None:
        """The lock key is still there and still attached to this grant's lease (a read)."""
        held = self._held.get(lease.extra.get("lease_id", -1))
        if held is None or held.lease is not lease or held.key is None:
            return False
        if held.lost:
            return False
        kvs = self._client().range(held.key).get("kvs") or []
        return any(str(kv.get("lease", "")) == str(held.lease_id) for kv in kvs)

    def _release(self, lease: Lease) -> bool:
        held = self._held.get(lease.extra.get("lease_id", -1))
        if held is None or held.lease is not lease or held.key is None:
            return False  # not a lease this instance handed out: touch nothing
        del self._held[held.lease_id]
        _keepalive().remove(held)
        client = held.client
        try:
            deleted = client.delete(held.key)
        except LockError as exc:
            if self._give_up(held):
                # Revoking deleted the key if it was still there; whether it was, we cannot say.
                return not held.lost
            raise LockOutcomeUnknown(f"{self.id}: release of {self.name!r} unanswered ({exc})") from exc
        with contextlib.suppress(LockError):
            client.revoke(held.lease_id)  # on failure it expires by itself, no key is attached any more
        if not deleted:
            lease.lost = True
        if lease.lost:
            self._stats["leases_lost"] += 1
        return deleted == 1

    def close(self) -> None:
        """Stop refreshing this instance's leases (they expire after their TTL)."""
        for held in self._held.values():
            _keepalive().remove(held)
        self._held.clear()


class EtcdLease(_EtcdLeaseLock):
    """etcd's Mutex recipe over the JSON gateway: lease + revision-ordered keys + watch.

    Why this shape: the create revision orders waiters and fences writes without any
    extra round trip, and watching only the predecessor means a release wakes exactly
    one waiter (ZooKeeper's sequential-node recipe, in etcd's terms).
    """

    id = "etcd.lease"
    summary = "lease + txn(create_revision == 0) + watch predecessor; token = create revision"
    capabilities = Capabilities(
        ttl=True,
        fencing=True,
        wait="notify",
        notes="FIFO; waiters watch their predecessor over a streaming HTTP request; "
        "fencing token = create revision; keepalive every ttl/3, Lease.lost on loss",
    )

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self._stats.update(queued=0, watch_rounds=0)

    def acquire(self, timeout: float | None = None) -> Lease:
        """Queue behind the current holders and wait up to ``timeout`` seconds for our turn."""
        start = time.monotonic()
        client = self._client()
        owner = new_owner_id(self.options.owner_prefix)
        held = self._grant(client)
        key = f"{self.prefix}/{self.name}/{held.lease_id:x}".encode()
        try:
            token = self._queue(client, held, key, owner, start, timeout)
        except BaseException:
            _keepalive().remove(held)
            raise
        return self._hand_out(held, owner, token, key)

    def _queue(
        self, client: EtcdClient, held: _Held, key: bytes, owner: str, start: float, timeout: float | None
    ) -> int:
        lock_prefix = f"{self.prefix}/{self.name}/".encode()
        span = {
            "key": b64(lock_prefix),
            "range_end": b64(prefix_end(lock_prefix)),
            "keys_only": True,
            "limit": "1",
        }
        first = {"request_range": {**span, "sort_order": "ASCEND", "sort_target": "CREATE"}}
        try:
            r = client.txn(
                compare=[{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": "0"}],
                success=[
                    {"request_put": {"key": b64(key), "value": b64(owner), "lease": str(held.lease_id)}},
                    first,
                ],
                failure=[{"request_range": {"key": b64(key)}}, first],
            )
        except (LockOutcomeUnknown, BackendUnavailable):
            self._give_up(held)
            raise
        held.key = key
        responses = r.get("responses", [])
        if r["succeeded"]:
            my_rev = num(r["header"].get("revision"))
        else:  # our key already exists (cannot happen with a fresh lease, kept as etcd does)
            my_rev = num(responses[0]["response_range"]["kvs"][0].get("create_revision"))
        kvs = responses[1]["response_range"].get("kvs", [])
        if kvs and num(kvs[0].get("create_revision")) == my_rev:
            return my_rev
        ahead = {"request_range": {**span, "max_create_revision": str(my_rev - 1), "sort_order": "DESCEND",
                                   "sort_target": "CREATE"}}  # fmt: skip
        mine = {"request_range": {"key": b64(key), "count_only": True}}
        self._stats["queued"] += 1
        while True:
            remaining = None if timeout is None else timeout - (time.monotonic() - start)
            if remaining is not None and remaining <= 0:
                if self._give_up(held):
                    raise LockTimeout(f"{self.id}: {self.name!r} not acquired within {timeout:.3f}s")
                raise LockOutcomeUnknown(f"{self.id}: gave up on {self.name!r} but could not withdraw")
            try:
                r = client.txn([], [ahead, mine])
                if not num(r["responses"][1]["response_range"].get("count")):
                    self._give_up(held)
                    raise LockTimeout(f"{self.id}: lease of {self.name!r} expired while waiting")
                preds = r["responses"][0]["response_range"].get("kvs", [])
                if not preds:
                    return my_rev
                wait = self.watch_round if remaining is None else min(remaining, self.watch_round)
                self._wait_deleted(client, preds[0]["key"], num(r["header"].get("revision")) + 1, wait)
            except (LockOutcomeUnknown, BackendUnavailable) as exc:
                if self._give_up(held):
                    raise BackendUnavailable(
                        f"{self.id}: waiting for {self.name!r} failed, withdrew ({exc})"
                    ) from exc
                raise LockOutcomeUnknown(f"{self.id}: waiting for {self.name!r} failed ({exc})") from exc

    def _wait_deleted(self, client: EtcdClient, key_b64: str, from_revision: int, wait: float) -> None:
        """Return when ``key`` is deleted at or after ``from_revision``, or after ``wait`` s."""
        self._stats["watch_rounds"] += 1
        request = {
            "create_request": {"key": key_b64, "start_revision": str(from_revision), "filters": ["NOPUT"]}
        }
        with contextlib.closing(client.stream("/v3/watch", request, timeout=wait)) as events:
            deadline = time.monotonic() + wait
            try:
                for message in events:
                    if message.get("canceled") or message.get("compact_revision"):
                        return  # the caller re-reads who is ahead
                    if any(e.get("type") == "DELETE" for e in message.get("events", [])):
                        return
                    if time.monotonic() >= deadline:
                        return
            except TimeoutError:
                return


class EtcdLockApi(_EtcdLeaseLock):
    """The lock service built into etcd (``/v3/lock/lock``), parked server-side until granted.

    Why keep it next to ``etcd.lease``: it is the same algorithm executed inside the
    server, so comparing the two isolates what the client-side round trips cost.
    """

    id = "etcd.lock-api"
    default_prefix = "lockbench/lockapi"
    summary = "etcd's server-side lock API (v3lock) on a lease with keepalive"
    capabilities = Capabilities(
        ttl=True,
        fencing=True,
        wait="server-queue",
        notes="request parked in etcd until granted; fencing token (create revision) costs one "
        "extra range, only with fencing=True; timeout 0 checks the lock is free, then asks",
    )

    def acquire(self, timeout: float | None = None) -> Lease:
        """Ask etcd for the lock and wait up to ``timeout`` seconds for its answer."""
        start = time.monotonic()
        client = self._client()
        owner = new_owner_id(self.options.owner_prefix)
        name = f"{self.prefix}/{self.name}"
        held = self._grant(client)
        try:
            if timeout is not None and timeout <= 0:
                # One attempt: do not queue behind a holder, only take a free lock.
                taken = client.range(f"{name}/".encode(), prefix_end(f"{name}/".encode()), count_only=True)
                if num(taken.get("count")):
                    raise LockTimeout(f"{self.id}: {self.name!r} is held")
                wait: float | None = LOCK_API_MIN_WAIT
            elif timeout is None:
                wait = None
            else:
                wait = max(LOCK_API_FLOOR, timeout - (time.monotonic() - start))
            r = client.call("/v3/lock/lock", {"name": b64(name), "lease": str(held.lease_id)}, timeout=wait)
        except LockTimeout:
            self._give_up(held)
            raise
        except (LockOutcomeUnknown, BackendUnavailable) as exc:
            # The server may still grant it after we stopped listening: revoking the lease
            # withdraws the request and frees anything granted to it.
            if not self._give_up(held):
                raise LockOutcomeUnknown(f"{self.id}: {self.name!r}: {exc}") from exc
            if timeout is not None and time.monotonic() - start >= timeout:
                raise LockTimeout(f"{self.id}: {self.name!r} not acquired within {timeout:.3f}s") from exc
            raise BackendUnavailable(f"{self.id}: {self.name!r}: {exc}") from exc
        except BaseException:
            self._give_up(held)
            raise
        key = unb64(r.get("key"))
        held.key = key
        token = None
        if self.options.fencing:
            try:
                kvs = client.range(key, keys_only=True).get("kvs", [])
            except LockError as exc:
                withdrawn = self._give_up(held)
                raise LockOutcomeUnknown(
                    f"{self.id}: granted, but reading the token failed ({exc}); "
                    f"{'released' if withdrawn else 'may still be held until its lease expires'}"
                ) from exc
            if not kvs:
                # etcd answered "granted" for a key that is already gone: its lease ran out
                # while the request was parked (a paused client). The caller holds nothing.
                self._give_up(held)
                raise LockTimeout(f"{self.id}: {self.name!r} was granted after its lease expired; not held")
            token = num(kvs[0].get("create_revision"))
        return self._hand_out(held, owner, token, key)
