"""A lock on a local file (seed 003 names the file system as a lock engine): ``flock``.

``fcntl.flock(LOCK_EX)`` on ``<dir>/<name>.lock``. The kernel holds the lock for an open
file description and drops it when that description is closed, including when the
process dies: there is no expiry to tune and no lock left behind by a crash. It works on
ONE HOST ONLY: the lock lives in the local kernel, so processes on two machines (or
flock over most network file systems) never exclude each other. The capabilities say
``multi_host=False`` and a run that spans hosts must refuse this impl.

Each Lock instance opens its own descriptor, so two instances in one process exclude each
other just like two processes do; a forked child reopens instead of sharing its parent's.
Lock files are never deleted: unlinking a lock file while another process waits on the
old inode would let two holders in.

Waiting: a blocking ``flock`` sleeps in the kernel and, under gevent (Locust), would stop
every greenlet of the process. So ``acquire`` polls ``LOCK_EX | LOCK_NB`` every
``retry_interval`` (the template method). With ``params={"blocking": True}`` and no timeout,
outside gevent, it blocks in the kernel instead (the kernel then wakes one waiter).

With ``fencing=True`` the lock file holds a counter, incremented under the lock at each
grant: a fencing token that survives restarts (it lives on disk, not in memory).

URL: ``file:///absolute/dir`` (what ``infra.catalog.local_url`` gives) or a plain path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from lockimpls.base import (
    BackendUnavailable,
    Capabilities,
    Lease,
    Lock,
    LockConfigError,
    LockOptions,
    ParamSpec,
    new_owner_id,
)

_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_TOKEN_WIDTH = 20


def lock_dir(urls: Sequence[str]) -> Path:
    """The local directory named by the one ``file://`` URL (or plain path) in ``urls``."""
    if len(urls) != 1:
        raise LockConfigError(f"file locks take exactly one directory, got {len(urls)}")
    url = str(urls[0])
    if "://" not in url:
        return Path(url)
    parts = urlsplit(url)
    if parts.scheme != "file":
        raise LockConfigError(f"invalid file lock URL {url!r}: use file:///absolute/dir")
    if parts.netloc not in ("", "localhost"):
        raise LockConfigError(
            f"file locks work on one host only; {url!r} names host {parts.netloc!r}: use file:///absolute/dir"
        )
    return Path(unquote(parts.path))


def lock_file_name(name: str) -> str:
    """A file name for lock ``name``: readable when possible, unique always."""
    safe = _SAFE.sub("_", name)[:100]
    if safe != name or safe in ("", ".", ".."):
        safe = f"{safe}-{hashlib.sha1(name.encode()).hexdigest()[:12]}"
    return f"{safe}.lock"


def _under_gevent() -> bool:
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey and (monkey.is_module_patched("socket") or monkey.is_module_patched("threading")))


class FileFlock(Lock):
    """An exclusive ``flock`` on a file in a local directory: no server, one host only.

    Why it is in the suite: it is the floor of what a lock can cost (one system call)
    and the reference for "always safe on one host", against which every networked
    lock's price and failure modes can be read.
    """

    id = "file.flock"
    backend = "file"

    @classmethod
    def recovery_after_crash(cls, ttl: float, params: dict[str, Any]) -> tuple[float | None, str]:
        """The kernel drops a process's flocks when it dies."""
        return 0.0, "the kernel, when the holder's process dies"

    summary = "fcntl.flock(LOCK_EX) on <dir>/<name>.lock; one host only, no expiry"
    capabilities = Capabilities(
        ttl=False,
        fencing=True,
        multi_host=False,
        wait="poll",
        notes="ONE HOST ONLY (the kernel holds the lock); released when the holder closes or dies; "
        "polls LOCK_NB every retry_interval so gevent is never blocked; fencing counter in the file",
    )

    params = {"blocking": ParamSpec(bool, "block in flock() when acquiring without a timeout")}  # noqa: RUF012

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self.dir = lock_dir(self.urls)
        self.path = self.dir / lock_file_name(name)
        self.blocking = bool(self.options.params.get("blocking", False))
        self._fd: int | None = None
        self._pid: int | None = None
        self._owner: str | None = None
        self._stats = {"attempts": 0, "busy": 0}

    def stats(self) -> dict[str, int]:
        """attempts (non-blocking flock calls) and busy (refused because the lock was held)."""
        return dict(self._stats)

    def _descriptor(self) -> int:
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        # Either never opened, or inherited through fork: the parent's description (and its
        # lock) must not be shared, so this instance gets its own and holds nothing yet.
        self._fd, self._owner = None, None
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise BackendUnavailable(f"{self.id}: cannot open {self.path}: {exc.strerror}") from exc
        self._fd, self._pid = fd, os.getpid()
        return fd

    def acquire(self, timeout: float | None = None) -> Lease:
        """Poll for the lock (see the module docstring); block in the kernel only when asked."""
        if self.blocking and timeout is None and not _under_gevent():
            fd = self._descriptor()
            if self._owner is None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                except OSError as exc:
                    raise BackendUnavailable(
                        f"{self.id}: flock on {self.path} failed: {exc.strerror}"
                    ) from exc
                return self._granted(fd)
        return super().acquire(timeout)

    def _try_acquire(self) -> Lease | None:
        fd = self._descriptor()
        if self._owner is not None:
            return None  # this instance holds it already; flock would just say yes again
        self._stats["attempts"] += 1
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._stats["busy"] += 1
            return None
        except OSError as exc:
            raise BackendUnavailable(f"{self.id}: flock on {self.path} failed: {exc.strerror}") from exc
        return self._granted(fd)

    def _granted(self, fd: int) -> Lease:
        token = None
        if self.options.fencing:
            raw = os.pread(fd, _TOKEN_WIDTH, 0).strip()
            token = (int(raw) if raw.isdigit() else 0) + 1
            os.pwrite(fd, f"{token:0{_TOKEN_WIDTH}d}\n".encode(), 0)
        self._owner = new_owner_id(self.options.owner_prefix)
        return self._new_lease(self._owner, token=token, ttl=None)

    def owns(self, lease: Lease) -> bool | None:
        """This instance still holds the descriptor the kernel lock is on (only closing it lets go)."""
        return self._owner is not None and lease.owner == self._owner and self._pid == os.getpid()

    def _release(self, lease: Lease) -> bool:
        if self._owner is None or lease.owner != self._owner or self._pid != os.getpid():
            return False
        self._owner = None
        assert self._fd is not None
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        return True

    def close(self) -> None:
        """Close the descriptor (which also drops the lock if it is still held)."""
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd, self._pid, self._owner = None, None, None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()
