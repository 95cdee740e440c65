"""Every lock algorithm by id, loaded lazily so a missing client library only hurts its own ids.

Ids are ``backend.algorithm`` (DESIGN.md section 4). Third parties add theirs through the
``lockbench.locks`` entry-point group or by naming ``package.module:Class`` directly.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from importlib.metadata import entry_points

from lockimpls.base import Capabilities, Lock, LockConfigError

#: id -> "module:Class". Order is the order of the catalog, used for reports.
BUILTIN: dict[str, str] = {
    "redis.setnx-del": "lockimpls.redis_locks:SetnxDel",
    "redis.setnx-expire": "lockimpls.redis_locks:SetnxExpire",
    "redis.setnx-getset": "lockimpls.redis_locks:SetnxGetset",
    "redis.set-nx-px": "lockimpls.redis_locks:SetNxPx",
    "redis.set-nx-px-lua": "lockimpls.redis_locks:SetNxPxLua",
    "redis.reentrant": "lockimpls.redis_reentrant:ReentrantLock",
    "redis.redlock": "lockimpls.redlock:RedLock",
    "redis.redis-py": "lockimpls.redis_adapters:RedisPyLock",
    "redis.python-redis-lock": "lockimpls.redis_adapters:PythonRedisLock",
    "redis.pottery-redlock": "lockimpls.redis_adapters:PotteryRedlock",
    "postgres.unique-insert": "lockimpls.postgres_locks:UniqueInsert",
    "postgres.unique-insert-expiry": "lockimpls.postgres_locks:UniqueInsertExpiry",
    "postgres.version": "lockimpls.postgres_locks:Version",
    "postgres.for-update": "lockimpls.postgres_locks:ForUpdate",
    "postgres.advisory": "lockimpls.postgres_locks:Advisory",
    "postgres.advisory-xact": "lockimpls.postgres_locks:AdvisoryXact",
    "etcd.lease": "lockimpls.etcd_locks:EtcdLease",
    "etcd.lock-api": "lockimpls.etcd_locks:EtcdLockApi",
    "memcached.add": "lockimpls.memcached_locks:MemcachedAdd",
    "memcached.add-cas": "lockimpls.memcached_locks:MemcachedAddCas",
    "file.flock": "lockimpls.file_locks:FileFlock",
    "zookeeper.ephemeral": "lockimpls.zk_locks:Ephemeral",
    "zookeeper.sequential": "lockimpls.zk_locks:Sequential",
    "zookeeper.rwlock": "lockimpls.zk_locks:ReadWrite",
    "zookeeper.kazoo": "lockimpls.zk_locks:KazooLock",
    "zookeeper.kazoo-rw": "lockimpls.zk_locks:KazooReadWrite",
}

#: Impls that exist only to prove the checkers catch a broken lock; never in a backend's list.
TEST_ONLY: dict[str, str] = {
    "test.no-mutex": "lockimpls.broken:NoMutex",
    "test.slowed": "lockimpls.broken:Slowed",
}

#: Canary locks (lockimpls/canary.py): built to fail, the positive controls of ``bench matrix``
#: where no catalog lock fails; never in a backend's list, never ranked.
CANARIES: dict[str, str] = {
    f"canary.fail-open-{b}": f"lockimpls.canary:FailOpen{b.capitalize()}"
    for b in ("redis", "postgres", "etcd", "zookeeper", "memcached")
} | {
    # crash's controls where every catalog lock of the backend frees a dead holder in its own time
    **{
        f"canary.no-expiry-{b}": f"lockimpls.canary:NoExpiry{b.capitalize()}"
        for b in ("etcd", "zookeeper", "memcached", "file")
    },
    # long-cs and lease-expiry-task on etcd (etcd.lease keeps its lease alive while the process runs)
    "canary.no-keepalive-etcd": "lockimpls.canary:NoKeepaliveEtcd",
    # restart-delayed: the same lock, its lease outlasting the delay
    "canary.redlock-long-lease": "lockimpls.canary:RedLockLongLease",
    # restart-aof: the same lock, its votes kept out of the append-only file
    "canary.redlock-unlogged": "lockimpls.canary:RedLockUnlogged",
}

ENTRY_POINT_GROUP = "lockbench.locks"

#: Set by bench: whether a Ctrl-C or SIGTERM really arrived, so that a KeyboardInterrupt raised by a
#: lock module at import is an error naming it, not "interrupted" (lockimpls may not import bench).
SIGNALLED: Callable[[], bool] | None = None


def _entry_point_specs() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_ids(include_test: bool = False) -> list[str]:
    """All ids a user may pass to ``--impl`` (built-in, then entry points)."""
    ids = list(BUILTIN) + [i for i in _entry_point_specs() if i not in BUILTIN]
    if include_test:
        ids += list(TEST_ONLY)
    return ids


def ids_for_backend(backend: str) -> list[str]:
    """The built-in and entry-point ids whose backend prefix is ``backend``."""
    return [i for i in known_ids() if i.split(".", 1)[0] == backend]


def backends() -> list[str]:
    """Backends that have at least one impl, in catalog order."""
    seen: list[str] = []
    for i in known_ids():
        b = i.split(".", 1)[0]
        if b not in seen:
            seen.append(b)
    return seen


def _load_spec(spec: str) -> type:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise LockConfigError(f"{spec!r} is not of the form package.module:Class")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # a user's module lives beside the user, as in the workers
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LockConfigError(f"cannot import module {module_name!r} ({exc})") from exc
    except SystemExit as exc:  # sys.exit() at import: bench would exit with the plug-in's code, silently
        raise LockConfigError(
            f"importing module {module_name!r} called sys.exit({exc.code!r}); a lock module must not exit"
        ) from None
    except KeyboardInterrupt:  # a Ctrl-C, or the module raised it itself
        if SIGNALLED is not None and not SIGNALLED():
            raise LockConfigError(
                f"importing module {module_name!r} raised KeyboardInterrupt without a Ctrl-C; "
                "a lock module must not raise it"
            ) from None
        raise
    except Exception as exc:  # noqa: BLE001 - the user's module failed while being imported
        raise LockConfigError(
            f"importing module {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from None
    obj = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise LockConfigError(f"module {module_name!r} has no attribute {attr!r}") from None
    return obj


def validate_class(cls: object, spec: str) -> type[Lock]:
    """Check that ``cls`` satisfies the Lock interface; say exactly what is missing."""
    if not isinstance(cls, type):
        raise LockConfigError(f"{spec} is not a class")
    if not issubclass(cls, Lock):  # duck typing fails later, after servers start: say it now
        raise LockConfigError(
            f"{spec} is not a subclass of lockimpls.base.Lock; subclass it (examples/my_lock.py is a complete one)"
        )
    servers = getattr(cls, "servers", 1)
    if isinstance(servers, bool) or not isinstance(servers, int) or servers < 1:
        raise LockConfigError(
            f"{spec}.servers must be a whole number >= 1 (servers it needs), got {servers!r}"
        )
    missing = [m for m in ("acquire", "release") if not callable(getattr(cls, m, None))]
    if not isinstance(getattr(cls, "capabilities", None), Capabilities):
        missing.append("capabilities (a lockimpls.base.Capabilities)")
    if not getattr(cls, "id", ""):
        missing.append("id (a 'backend.algorithm' string)")
    if getattr(cls, "__abstractmethods__", None):
        missing += sorted(cls.__abstractmethods__)
    if missing:
        raise LockConfigError(f"{spec} does not satisfy the Lock interface: missing {', '.join(missing)}")
    return cls  # type: ignore[return-value]


def resolve(id_or_spec: str) -> type[Lock]:
    """The Lock class for a catalog id, an entry-point name, or ``package.module:Class``."""
    table = {**TEST_ONLY, **CANARIES, **_entry_point_specs(), **BUILTIN}
    if id_or_spec in table:
        spec = table[id_or_spec]
    elif ":" in id_or_spec:
        spec = id_or_spec
    else:
        raise LockConfigError(
            f"unknown impl {id_or_spec!r}{suggest(id_or_spec, known_ids(include_test=True))}"
        )
    return validate_class(_load_spec(spec), spec)


def suggest(word: str, choices: list[str]) -> str:
    """``; did you mean a, b or c? (bench list shows every id)``: the three closest ids (difflib)."""
    import difflib

    close = difflib.get_close_matches(word, choices, n=3, cutoff=0.5)
    if not close:
        return "; `bench list` shows every id, or give package.module:Class"
    shown = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
    return f"; did you mean {shown}? (`bench list` shows every id)"
