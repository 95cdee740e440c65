"""ZooKeeper locks: the seed recipes (000, 004) written on kazoo, and adapters for kazoo's own.

- ``zookeeper.ephemeral`` (seed 000): every contender tries to create the one ephemeral
  node of the lock; the losers all watch it, so one release wakes every waiter (the herd
  effect) and they all race to create it again.
- ``zookeeper.sequential`` (seed 004): every contender creates an ephemeral-sequential
  child; the lowest holds the lock and each waiter watches only its predecessor, so one
  release wakes one waiter.
- ``zookeeper.rwlock`` (seed 000, ``/share_lock``): read and write children under one
  parent; a reader proceeds when no write node precedes it, a writer when it is first.
- ``zookeeper.kazoo`` and ``zookeeper.kazoo-rw``: kazoo's ``Lock`` and its
  ``ReadLock``/``WriteLock`` pair, used as people use them.

Common to all of them:

- the lock is held by the client's ZooKeeper *session* (see :mod:`lockimpls.zk_conn`:
  one per process by default, timeout ``params["session_timeout"]``, default 10 s). There
  is no lease time: ``Lease.deadline_ns`` is None, and a holder whose session expires
  learns it through ``Lease.lost`` (its ephemeral node is gone);
- the read/write locks take ``params["mode"]``: ``"write"`` (the default, an exclusive
  lock, so flash-sale can run them) or ``"read"`` (shared with other readers);
- the fencing token is the node's sequence number (the czxid of the node for the
  ephemeral lock): it costs nothing, so it is always returned, fencing option or not;
- ``stats()`` counts ``watch_notifications`` (watch callbacks this instance received,
  stale ones included) and ``wakeups`` (waits that a notification ended), so the herd
  effect shows as notifications per release.

Some steps are separate methods (``_step_create``) so tests can drive a lost reply; the
production path calls them in order and nothing else.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any, ClassVar
from urllib.parse import quote

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.exceptions import LockTimeout as KazooLockTimeout
from kazoo.recipe.lock import Lock as KazooLockRecipe
from kazoo.recipe.lock import ReadLock as KazooReadLock
from kazoo.recipe.lock import WriteLock as KazooWriteLock

from lockimpls.base import (
    Capabilities,
    Lease,
    Lock,
    LockConfigError,
    LockOptions,
    LockOutcomeUnknown,
    LockTimeout,
    ParamSpec,
    new_owner_id,
    seconds,
)
from lockimpls.zk_conn import Session, session_for, session_options

ROOT = "/lockbench"
SEQ_DIGITS = 10  # ZooKeeper's sequence suffix: %010d


def node_name(name: str) -> str:
    """A lock name as one znode name (``/`` and other specials escaped)."""
    return quote(name, safe="")


def sequence_of(node: str) -> int:
    """The sequence number ZooKeeper appended to ``node`` (its last 10 digits)."""
    return int(node[-SEQ_DIGITS:])


def _mode(options: LockOptions, lock_id: str) -> str:
    mode = options.params.get("mode", "write")
    if mode not in ("read", "write"):
        raise LockConfigError(f"{lock_id}: params mode must be 'read' or 'write', got {mode!r}")
    return mode


class _ZkLock(Lock):
    """Shared plumbing: the session, its lifetime, owner bookkeeping and the herd counters."""

    backend = "zookeeper"
    kind: ClassVar[str] = ""

    params: ClassVar[dict[str, ParamSpec] | None] = {
        "session_timeout": seconds("ZooKeeper session timeout (default 10; the server clamps it)", high=600),
        "connect_timeout": seconds("seconds the first connect may take (default 5)", high=600),
        "op_timeout": seconds("longest wait for one request (default: the session timeout)", high=600),
        "session": ParamSpec(str, "one session per process or per lock", choices=("shared", "per-lock")),
    }

    @classmethod
    def recovery_after_crash(cls, ttl: float, params: dict[str, Any]) -> tuple[float | None, str]:
        """The dead client's ephemeral nodes go when its session expires on the servers."""
        return session_options(params)[0], "the session timeout"

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self.session: Session = session_for(self.urls, self.options.params)
        self.path = f"{ROOT}/{self.kind}/{node_name(name)}"
        self._held: dict[str, str] = {}  # owner id -> node path of leases this instance granted
        self._counters = {"watch_notifications": 0, "wakeups": 0, "leases_lost": 0}

    def _notified(self) -> None:
        self._counters["watch_notifications"] += 1

    def _deadline(self, timeout: float | None) -> float | None:
        return None if timeout is None else time.monotonic() + max(0.0, timeout)

    @staticmethod
    def _remaining(deadline: float | None) -> float | None:
        return None if deadline is None else max(0.0, deadline - time.monotonic())

    def _timeout(self, timeout: float | None) -> LockTimeout:
        return LockTimeout(f"{self.id}: {self.name!r} not acquired within {timeout or 0:.3f}s")

    def _wait(self, event: Any, deadline: float | None, between_attempts: bool = False) -> bool:
        """Wait for a watch to fire; True when it did (a wakeup), False at the deadline.

        ``between_attempts``: the caller holds no node and has no request in flight (a watch is
        not a request), so the wait goes through ``_between_attempts`` and may be ended there.
        A waiter that keeps a node in the queue must not say so: ending it leaves its node.
        """
        remaining = self._remaining(deadline)
        woken = self._between_attempts(remaining, event.wait) if between_attempts else event.wait(remaining)
        if not woken:
            return False
        self._counters["wakeups"] += 1
        return True

    def _grant(self, owner: str, node: str, token: int) -> Lease:
        lease = self._new_lease(owner, token)
        lease.extra["node"] = node
        self._held[owner] = node
        self.session.track(lease)
        return lease

    def _forget(self, lease: Lease) -> str | None:
        """The node of a lease this instance granted (None for anyone else's), forgotten."""
        node = self._held.pop(lease.owner, None)
        self.session.untrack(lease)
        if node is not None and lease.lost:
            self._counters["leases_lost"] += 1
        return node

    def owns(self, lease: Lease) -> bool | None:
        """The lease's node is still there (a sequential node's name is unique to its grant; the
        one ephemeral node must still carry this owner). A lost session took the node with it."""
        node = lease.extra.get("node")
        if lease.lost:
            return False
        if not node:
            return None
        path = node if node.startswith("/") else f"{self.path}/{node}"  # queue locks keep the child's name
        try:
            data, stat = self.session.call(f"{self.id} probe of {self.name!r}", "get", path)
        except NoNodeError:
            return False
        return path != self.path or (data == lease.owner.encode() and stat.czxid == lease.token)

    def _ensure_parent(self, parent: str) -> None:
        self.session.call(f"{self.id} create {parent}", "ensure_path", parent, write=True)

    def stats(self) -> dict[str, int]:
        return dict(self._counters)

    def close(self) -> None:
        if self.session.private:
            self.session.close()


class Ephemeral(_ZkLock):
    """Seed 000's exclusive lock: create the one ephemeral node; losers watch it (herd effect).

    Acquire: ``create(path, owner, ephemeral)``; on NodeExists, ``exists(path, watch)`` and
    wait for the watch, then try again. Every waiter watches the same node, so each
    release wakes all of them and all but one fail their create again (the herd effect
    the seed warns about). Release: ``get`` the node and delete it (with its version)
    only if it still carries this holder's owner id and czxid: two round trips, because a
    node recreated by another holder looks the same to a version check. The token is the
    node's czxid, which grows with every grant. A lost create reply is resolved by
    reading the node back (ours if it carries our owner id).
    """

    id = "zookeeper.ephemeral"
    kind = "ephemeral"
    summary = "one ephemeral node; every loser watches it (herd effect)"
    capabilities = Capabilities(
        ttl=False,
        fencing=True,
        wait="notify",
        notes="held while the session lives; every waiter watches the one node, so a release "
        "wakes all of them (herd effect); a holder paused past the session timeout loses it",
    )

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self._unknown: set[bytes] = set()  # owner values of creates whose outcome stayed unknown

    def _step_create(self, data: bytes) -> Any:
        """One create of the lock node; returns its Stat."""
        _, stat = self.session.call(
            f"{self.id} create", "create", self.path, data, ephemeral=True, include_data=True, write=True
        )
        return stat

    def _step_recheck(self) -> tuple[bytes, Any]:
        """Read the lock node back (its data and Stat) after a lost create reply."""
        return self.session.call(f"{self.id} recheck", "get", self.path)

    def _create(self, data: bytes) -> Any | None:
        """The node's Stat when this call created it, None when somebody else holds the lock."""
        try:
            return self._step_create(data)
        except NodeExistsError:
            return None
        except NoNodeError:
            self._ensure_parent(self.path.rsplit("/", 1)[0])
            return self._create(data)
        except LockOutcomeUnknown:
            # The reply was lost; the node says whether the create was applied.
            try:
                current, stat = self._step_recheck()
            except NoNodeError:
                return None
            except Exception as exc:
                self._unknown.add(data)
                raise LockOutcomeUnknown(f"{self.id} create of {self.name!r}: reply lost") from exc
            return stat if current == data else None

    def _sweep(self) -> None:
        """Delete the lock node if a create whose outcome stayed unknown did make it.

        Nobody else would: the node would block the lock until this session ends.
        """
        if not self._unknown:
            return
        try:
            current, stat = self.session.call(f"{self.id} sweep", "get", self.path)
            if current in self._unknown:
                self.session.call(f"{self.id} sweep", "delete", self.path, version=stat.version, write=True)
        except (NoNodeError, BadVersionError):
            pass
        except Exception:  # noqa: BLE001 - still unreachable: try again next time
            return
        self._unknown.clear()

    def acquire(self, timeout: float | None = None) -> Lease:
        self._sweep()
        deadline = self._deadline(timeout)
        owner = new_owner_id(self.options.owner_prefix)
        data = owner.encode()
        while True:
            stat = self._create(data)
            if stat is not None:
                return self._grant(owner, self.path, stat.czxid)
            if deadline is not None and self._remaining(deadline) <= 0:
                raise self._timeout(timeout)
            event, callback = self.session.watcher(self._notified)
            if self.session.call(f"{self.id} watch", "exists", self.path, callback) is None:
                continue  # released in between: try again at once
            if not self._wait(event, deadline, between_attempts=True):
                raise self._timeout(timeout)

    def _release(self, lease: Lease) -> bool:
        if self._forget(lease) is None or lease.lost:
            return False
        what = f"{self.id} release of {self.name!r}"
        try:
            current, stat = self.session.call(what, "get", self.path)
        except NoNodeError:
            return False
        if current != lease.owner.encode() or stat.czxid != lease.token:
            return False
        try:
            self.session.call(what, "delete", self.path, version=stat.version, write=True)
        except (NoNodeError, BadVersionError):
            return False
        return True


class _QueueLock(_ZkLock):
    """Ephemeral-sequential children under one parent, granted in sequence order.

    Subclasses say which earlier node blocks a contender (``_blocker``). The node name
    starts with a random prefix unique to the attempt, so after a lost create reply the
    contender finds its own node among the children instead of creating a second one.
    """

    def _tag(self) -> str:
        return "lock"

    def _prefix(self) -> str:
        return f"{uuid.uuid4().hex}-{self._tag()}-"

    def _blocker(self, mine: str, ahead: list[str]) -> str | None:
        """Among the nodes ``ahead`` of ``mine`` (in order), the one to wait for, or None."""
        raise NotImplementedError

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self._orphans: set[str] = set()  # our nodes a failed delete left behind
        self._lost_prefixes: set[str] = set()  # creates whose outcome stayed unknown

    def _step_create(self, prefix: str, data: bytes) -> str:
        """One create of this contender's node; returns its name (without the parent)."""
        path = self.session.call(
            f"{self.id} create",
            "create",
            f"{self.path}/{prefix}",
            data,
            ephemeral=True,
            sequence=True,
            write=True,
        )
        return path.rsplit("/", 1)[1]

    def _children(self) -> list[str]:
        return self.session.call(f"{self.id} children", "get_children", self.path)

    def _find_own(self, prefix: str) -> str | None:
        return next((c for c in self._children() if c.startswith(prefix)), None)

    def _create_own(self, prefix: str, data: bytes, deadline: float | None) -> str:
        """Create this contender's node, surviving a lost reply by looking for the prefix."""
        tries = 0
        while True:
            tries += 1
            try:
                return self._step_create(prefix, data)
            except NoNodeError:
                self._ensure_parent(self.path)
                continue
            except LockOutcomeUnknown:
                try:
                    found = self._find_own(prefix)
                except NoNodeError:
                    found = None
                except Exception as exc:
                    self._lost_prefixes.add(prefix)
                    raise LockOutcomeUnknown(f"{self.id} create of {self.name!r}: reply lost") from exc
                if found is not None:
                    return found
                out_of_time = deadline is not None and self._remaining(deadline) <= 0
                if out_of_time or tries >= 3:
                    self._lost_prefixes.add(prefix)
                    raise

    def _delete(self, node: str) -> bool:
        """Delete one of our nodes; True when it was there."""
        try:
            self.session.call(f"{self.id} delete", "delete", f"{self.path}/{node}", write=True)
        except NoNodeError:
            return False
        return True

    def _cleanup(self, node: str) -> None:
        """Withdraw a node that will not hold the lock; keep it for later if that fails.

        A node left behind would be granted the lock with nobody to release it, blocking
        everyone until the session ends, so failures are retried at the next call.
        """
        try:
            self._delete(node)
            self._orphans.discard(node)
        except Exception:  # noqa: BLE001 - retried by _sweep
            self._orphans.add(node)

    def _sweep(self) -> None:
        """Delete what earlier failures may have left: orphans, and nodes of unknown creates."""
        if self._lost_prefixes:
            try:
                children = self._children()
            except Exception:  # noqa: BLE001 - still unreachable: try again next time
                children = None
            if children is not None:
                prefixes = tuple(self._lost_prefixes)
                self._orphans.update(c for c in children if c.startswith(prefixes))
                self._lost_prefixes.clear()
        for node in list(self._orphans):
            self._cleanup(node)

    def acquire(self, timeout: float | None = None) -> Lease:
        self._sweep()
        deadline = self._deadline(timeout)
        owner = new_owner_id(self.options.owner_prefix)
        data = owner.encode()
        node = self._create_own(self._prefix(), data, deadline)
        try:
            while True:
                children = [c for c in self._children() if c[-SEQ_DIGITS:].isdigit()]
                order = sorted(children, key=sequence_of)
                if node not in order:
                    # Our node is gone: the session expired under us. Queue again.
                    node = self._create_own(self._prefix(), data, deadline)
                    continue
                blocker = self._blocker(node, order[: order.index(node)])
                if blocker is None:
                    return self._grant(owner, node, sequence_of(node))
                if deadline is not None and self._remaining(deadline) <= 0:
                    raise self._timeout(timeout)
                event, callback = self.session.watcher(self._notified)
                watched = f"{self.path}/{blocker}"
                if self.session.call(f"{self.id} watch", "exists", watched, callback) is None:
                    continue
                if not self._wait(event, deadline):
                    raise self._timeout(timeout)
        except BaseException:
            self._cleanup(node)
            raise

    def _release(self, lease: Lease) -> bool:
        self._sweep()
        node = self._forget(lease)
        if node is None or lease.lost:
            return False  # not ours, or gone with the expired session
        # The node name is unique to this grant, so deleting it can never hit another holder.
        return self._delete(node)


class Sequential(_QueueLock):
    """Seed 004: ephemeral-sequential children; the lowest holds, each waiter watches its predecessor.

    Acquire: create ``<parent>/<uuid>-lock-`` (ephemeral, sequential), list the children;
    the lowest sequence number holds the lock, anyone else watches the node just before
    its own (no herd: a release wakes one waiter). Release: delete the own node. A lost
    create reply is survived by finding the node by its unique prefix (as kazoo's Lock
    does). The token is the sequence number.
    """

    id = "zookeeper.sequential"
    kind = "sequential"
    summary = "ephemeral-sequential children; each waiter watches its predecessor"
    capabilities = Capabilities(
        ttl=False,
        fencing=True,
        wait="notify",
        notes="held while the session lives; FIFO, a release wakes one waiter; "
        "a holder paused past the session timeout loses it (lease.lost)",
    )

    def _blocker(self, mine: str, ahead: list[str]) -> str | None:
        return ahead[-1] if ahead else None


class ReadWrite(_QueueLock):
    """Seed 000's read/write lock (``/share_lock``): read and write children under one parent.

    Every contender creates ``<parent>/<uuid>-read-`` or ``<uuid>-write-`` (ephemeral,
    sequential) and lists the children. A reader holds the lock when no write node
    precedes it, and otherwise watches the nearest write node before it; a writer holds
    it when it is first, and otherwise watches the node just before it. ``params["mode"]``
    picks the side (``"write"`` by default, so it also serves as an exclusive lock).
    """

    id = "zookeeper.rwlock"
    kind = "share_lock"
    summary = "read/write sequential nodes under one parent (seed 000 /share_lock)"
    params = {**_ZkLock.params, "mode": ParamSpec(str, "read or write", choices=("read", "write"))}  # noqa: RUF012
    capabilities = Capabilities(
        ttl=False,
        fencing=True,
        read_write=True,
        wait="notify",
        notes="params mode=read|write (default write); readers share, a writer excludes everyone; "
        "held while the session lives",
    )

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self.mode = _mode(self.options, self.id)

    def _tag(self) -> str:
        return self.mode

    def _blocker(self, mine: str, ahead: list[str]) -> str | None:
        if self.mode == "write":
            return ahead[-1] if ahead else None
        writers = [n for n in ahead if n[:-SEQ_DIGITS].endswith("-write-")]
        return writers[-1] if writers else None


# kazoo's recipes --------------------------------------------------------------------------


class _Counting:
    """Mixin for kazoo's lock recipes: count the predecessor watches they receive."""

    on_notify: Any = None

    def _watch_predecessor(self, event: Any) -> None:
        if self.on_notify is not None:
            self.on_notify()
        super()._watch_predecessor(event)  # type: ignore[misc]


class _CountingLock(_Counting, KazooLockRecipe):
    pass


class _CountingReadLock(_Counting, KazooReadLock):
    pass


class _CountingWriteLock(_Counting, KazooWriteLock):
    pass


class _KazooAdapter(_ZkLock):
    """Drives one kazoo lock recipe object through the Lock interface."""

    def _recipe_class(self) -> type:
        raise NotImplementedError

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self._recipe: Any = None

    def _get_recipe(self) -> Any:
        if self._recipe is None:
            self.session.ensure_started()
            recipe = self._recipe_class()(self.session.client, self.path, self.options.owner_prefix or None)
            recipe.on_notify = self._notified
            self._recipe = recipe
        return self._recipe

    def acquire(self, timeout: float | None = None) -> Lease:
        recipe = self._get_recipe()
        what = f"{self.id} acquire of {self.name!r}"
        try:
            if timeout is not None and timeout <= 0:
                got = recipe.acquire(blocking=False)
            else:
                got = recipe.acquire(blocking=True, timeout=timeout)
        except KazooLockTimeout:
            got = False
        except KazooException as exc:
            if self.session.is_connection_error(exc):
                raise self.session.trouble(what, exc, write=True) from exc
            raise LockOutcomeUnknown(f"{what}: {exc!r}") from exc
        except self.session.timeout_errors as exc:
            raise self.session.trouble(what, exc, write=True) from exc
        if not got:
            raise self._timeout(timeout)
        owner = new_owner_id(self.options.owner_prefix)
        return self._grant(owner, recipe.node, sequence_of(recipe.node))

    def stats(self) -> dict[str, int]:
        # kazoo waits only on its predecessor watch, so every notification is a wakeup.
        return {**self._counters, "wakeups": self._counters["watch_notifications"]}

    def _release(self, lease: Lease) -> bool:
        if self._forget(lease) is None or self._recipe is None:
            return False
        what = f"{self.id} release of {self.name!r}"
        try:
            released = bool(self._recipe.release())
        except KazooException as exc:
            raise self.session.trouble(what, exc, write=True) from exc
        return released and not lease.lost


class KazooLock(_KazooAdapter):
    """Adapter for ``kazoo.recipe.lock.Lock``: what a Python team using ZooKeeper most likely runs.

    kazoo's recipe is seed 004's algorithm (sequential nodes, watch the predecessor, find
    the own node by a uuid prefix after a lost reply). Measured as shipped: after the
    first acquire, every acquire of the same recipe object lists the children once more
    before creating its node.
    """

    id = "zookeeper.kazoo"
    kind = "kazoo"
    summary = "kazoo's Lock recipe"
    capabilities = Capabilities(
        ttl=False,
        fencing=True,
        wait="notify",
        notes="kazoo.recipe.lock.Lock as shipped; held while the session lives",
    )

    def _recipe_class(self) -> type:
        return _CountingLock


class KazooReadWrite(_KazooAdapter):
    """Adapter for kazoo's ``ReadLock`` / ``WriteLock`` pair on one path (``params["mode"]``).

    The write side (the default) is exclusive, so flash-sale runs it too; the read side
    shares with other readers. Measured as shipped.
    """

    id = "zookeeper.kazoo-rw"
    kind = "kazoo-rw"
    summary = "kazoo's ReadLock / WriteLock pair"
    params = {**_ZkLock.params, "mode": ParamSpec(str, "read or write", choices=("read", "write"))}  # noqa: RUF012
    capabilities = Capabilities(
        ttl=False,
        fencing=True,
        read_write=True,
        wait="notify",
        notes="kazoo ReadLock/WriteLock as shipped; params mode=read|write (default write)",
    )

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self.mode = _mode(self.options, self.id)

    def _recipe_class(self) -> type:
        return _CountingReadLock if self.mode == "read" else _CountingWriteLock
