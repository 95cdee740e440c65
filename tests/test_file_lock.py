"""file.flock: the contract, exclusion across processes, fork safety, blocking mode, gevent.

No server: the lock lives in this host's kernel, on a file under a temporary directory.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from infra import catalog
from lockimpls.base import Lock, LockConfigError, LockOptions
from lockimpls.file_locks import FileFlock, lock_dir, lock_file_name
from lockimpls.registry import resolve
from tests import lock_contract as contract

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def url(tmp_path: Path) -> str:
    """The URL bench gives file locks: ``file://<dir>`` under the run's directory."""
    return catalog.local_url("file", tmp_path)


def factory(url: str) -> Callable[..., Lock]:
    def make(name: str, **overrides: object) -> Lock:
        return FileFlock(name, [url], LockOptions(**overrides))

    return make


def test_registry_catalog_and_capabilities(url: str) -> None:
    assert resolve("file.flock") is FileFlock
    assert catalog.server_class("file") is None
    assert url.startswith("file:///")
    caps = FileFlock.capabilities
    assert caps.multi_host is False and caps.ttl is False
    assert "one host" in caps.notes.lower() and "one host" in (FileFlock.__doc__ or "").lower()


def test_contract(url: str) -> None:
    contract.check_all(factory(url))


def test_two_instances_in_one_process_exclude_each_other(url: str) -> None:
    a, b = FileFlock("same", [url]), FileFlock("same", [url])
    lease = a.acquire(timeout=1)
    assert b.try_acquire() is None
    assert a.try_acquire() is None, "not reentrant: a second acquire on the holder waits too"
    assert a.release(lease) is True
    lease_b = b.try_acquire()
    assert lease_b is not None and b.release(lease_b) is True
    assert b.stats() == {"attempts": 2, "busy": 1}


HOLDER = textwrap.dedent(
    """
    import sys
    from lockimpls.file_locks import FileFlock
    lock = FileFlock(sys.argv[2], [sys.argv[1]])
    lease = lock.acquire(timeout=10)
    print("held", flush=True)
    if sys.stdin.readline().strip() == "release":
        print("released" if lock.release(lease) else "not-owner", flush=True)
    """
)


def _holder(url: str, name: str) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, name],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_excludes_across_processes(url: str) -> None:
    proc = _holder(url, "across")
    try:
        mine = FileFlock("across", [url])
        assert mine.try_acquire() is None
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("release\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "released"
        lease = mine.acquire(timeout=5)
        assert mine.release(lease) is True
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_frees_the_lock(url: str) -> None:
    proc = _holder(url, "crash")
    mine = FileFlock("crash", [url])
    assert mine.try_acquire() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lease = mine.acquire(timeout=5)  # no expiry needed: the kernel dropped the dead holder's lock
    assert mine.release(lease) is True


def _child_tries(lock: FileFlock, out: multiprocessing.Queue) -> None:
    lease = lock.try_acquire()
    out.put(lease is not None)


def test_forked_child_does_not_share_the_parents_lock(url: str) -> None:
    lock = FileFlock("fork", [url])
    lease = lock.acquire(timeout=1)
    ctx = multiprocessing.get_context("fork")
    out: multiprocessing.Queue = ctx.Queue()
    child = ctx.Process(target=_child_tries, args=(lock, out))
    child.start()
    got_it = out.get(timeout=10)
    child.join(10)
    assert got_it is False, "the child reused the parent's descriptor and 'acquired' a held lock"
    assert lock.release(lease) is True


def test_blocking_mode_waits_in_the_kernel(url: str) -> None:
    holder = FileFlock("blocking", [url])
    lease = holder.acquire(timeout=1)
    waiter = FileFlock("blocking", [url], LockOptions(params={"blocking": True}))
    events: list[str] = []

    def wait() -> None:
        got = waiter.acquire()
        events.append("acquired")
        waiter.release(got)

    t = threading.Thread(target=wait)
    t.start()
    time.sleep(0.2)
    events.append("releasing")
    assert holder.release(lease) is True
    t.join(10)
    assert events == ["releasing", "acquired"]


def test_fencing_counter_lives_in_the_file(url: str) -> None:
    tokens = []
    for _ in range(3):
        lock = FileFlock("fence", [url], LockOptions(fencing=True))
        lease = lock.acquire(timeout=1)
        tokens.append(lease.token)
        assert lock.release(lease)
        lock.close()
    assert tokens == [1, 2, 3]
    plain = FileFlock("fence", [url])
    lease = plain.acquire(timeout=1)
    assert lease.token is None and plain.release(lease)


def test_close_drops_the_lock(url: str) -> None:
    a = FileFlock("closing", [url])
    a.acquire(timeout=1)
    a.close()
    b = FileFlock("closing", [url])
    lease = b.try_acquire()
    assert lease is not None and b.release(lease)


def test_urls_and_names(tmp_path: Path) -> None:
    assert lock_dir([f"file://{tmp_path}"]) == tmp_path
    assert lock_dir([str(tmp_path)]) == tmp_path
    assert lock_dir([f"file://localhost{tmp_path}"]) == tmp_path
    for bad in (["file://otherhost/tmp"], ["redis://127.0.0.1"], [], ["file:///a", "file:///b"]):
        with pytest.raises(LockConfigError):
            lock_dir(bad)
    assert lock_file_name("plain-name.1") == "plain-name.1.lock"
    odd = {lock_file_name(n) for n in ("a/b", "a_b", "..", "a b")}
    assert len(odd) == 4 and all("/" not in n and n not in ("..lock", ".lock") for n in odd)


def test_unwritable_directory_is_backend_unavailable(tmp_path: Path) -> None:
    from lockimpls.base import BackendUnavailable

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    lock = FileFlock("x", [f"file://{blocker}"])
    with pytest.raises(BackendUnavailable):
        lock.acquire(timeout=0.1)


GEVENT_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey
    monkey.patch_all()
    import json, sys, time, gevent
    from lockimpls.base import LockOptions
    from lockimpls.file_locks import FileFlock

    url = sys.argv[1]
    ticks = []
    def ticker():
        while True:
            ticks.append(time.monotonic())
            gevent.sleep(0.005)

    holder = FileFlock("gevent", [url])
    lease = holder.acquire(timeout=1)
    # blocking=True must not block the hub under gevent: it falls back to polling
    waiter = FileFlock("gevent", [url], LockOptions(params={"blocking": True}))
    result = {}
    def wait():
        got = waiter.acquire()
        result["acquired_after_ticks"] = len(ticks)
        waiter.release(got)
    t = gevent.spawn(ticker)
    w = gevent.spawn(wait)
    gevent.sleep(0.3)
    result["ticks_while_waiting"] = len(ticks)
    holder.release(lease)
    w.join(timeout=10)
    t.kill()
    print(json.dumps(result))
    """
)


def test_cooperates_with_gevent(url: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT, url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["ticks_while_waiting"] > 10, report
    assert report["acquired_after_ticks"] >= report["ticks_while_waiting"], report


def test_the_no_expiry_canary_keeps_the_contract(url: str) -> None:
    """crash's control for file locks: an O_EXCL lock file only its holder removes (the kernel frees flocks)."""
    cls = resolve("canary.no-expiry-file")

    def make(name: str, **overrides: object) -> Lock:
        return cls(name, [url], LockOptions(**overrides))

    contract.check_all(make)
    assert cls.recovery_after_crash(1.0, {})[0] is None
