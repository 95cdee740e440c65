"""A fencing token outlives a server crash: after a SIGKILL restart, the next grant's token is larger.

Issue 39 ("two runs of one commit disagree"): two standard matrices of redis + postgres on one
machine differed in one cell, ``postgres.for-update x restart+fenced``: amber in the first, red
in the second, where the struck holder and the next one were both granted token 1156. The token
was a ``nextval`` inside the holder's transaction, which stays open over the critical section;
the ``nextval`` that writes the sequence's WAL record (one in 32) is flushed only by a commit,
so a crash took the record with it and the sequence handed 1156 out again. The test makes that
``nextval`` the holder's on purpose and kills the server at once.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from infra.postgres_server import PostgresServer
from lockimpls import pg_conn
from lockimpls.base import LockError, LockOptions
from lockimpls.registry import resolve

pytestmark = pytest.mark.server

SEQUENCE = f"{pg_conn.SCHEMA}.fence"


@pytest.fixture
def pg(tmp_path: Path):
    server = PostgresServer(tmp_path, name="pg-token-crash").start()
    try:
        with psycopg.connect(server.url, autocommit=True) as conn:
            # the WAL writer flushes on its own every 200 ms: 10 s keeps the record in memory
            # for the instant between the grant and the kill (a busy server may flush sooner)
            conn.execute("ALTER SYSTEM SET wal_writer_delay = '10s'")
            conn.execute("SELECT pg_reload_conf()")
        yield server
    finally:
        pg_conn.close_pools()
        server.stop()


def _next_nextval_logs(url: str) -> int:
    """Draw tokens until the sequence's prefetched values are spent: the next ``nextval`` writes WAL."""
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(70):
            last = conn.execute(f"SELECT nextval('{SEQUENCE}')").fetchone()[0]
            if conn.execute(f"SELECT log_cnt FROM {SEQUENCE}").fetchone()[0] == 0:
                return int(last)
    raise AssertionError("the sequence never ran out of prefetched values")


def _token_after_restart(impl: str, url: str, name: str) -> int:
    for _ in range(20):  # the pools' old connections died with the server: the first tries may fail
        lock = resolve(impl)(name, [url], LockOptions(fencing=True))
        try:
            lease = lock.acquire(timeout=5)
        except LockError:
            pg_conn.close_pools()
            continue
        lock.release(lease)
        return int(lease.token)
    raise AssertionError("no grant after the restart")


@pytest.mark.parametrize("impl", ["postgres.for-update", "postgres.advisory-xact"])
def test_a_token_is_never_granted_twice_across_a_server_crash(impl: str, pg: PostgresServer) -> None:
    lock = resolve(impl)("crash-token", [pg.url], LockOptions(fencing=True))
    lock.release(lock.acquire(timeout=5))  # the lock's row and schema exist before the sequence is set
    lock.close()
    pg_conn.close_pools()
    spent = _next_nextval_logs(pg.url)
    holder = resolve(impl)("crash-token", [pg.url], LockOptions(fencing=True))
    held = holder.acquire(timeout=5)
    assert held.token is not None and int(held.token) > spent
    pg.restart()  # SIGKILL while the holder is inside its critical section
    pg_conn.close_pools()
    after = _token_after_restart(impl, pg.url, "crash-token")
    assert after > int(held.token), (
        f"token {held.token} of the holder the crash cut off was granted again ({after}): "
        "two holders would pass the fence with one token"
    )
