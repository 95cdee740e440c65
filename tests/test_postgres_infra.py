"""infra.postgres_server: a real throwaway cluster on 127.0.0.1, as an unprivileged user when root."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import psycopg
import pytest

from infra.catalog import server_class
from infra.postgres_server import DB_NAME, OS_USER, PostgresServer
from lockimpls import pg_conn
from lockimpls.base import BackendUnavailable, LockOutcomeUnknown
from lockimpls.registry import resolve

pytestmark = (
    pytest.mark.server
)  # starts servers itself (bench in a subprocess, or infra directly): not for --quick


def _ids_of(pid: int) -> tuple[int, int]:
    """(real uid, real gid) of a running process."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    uid = next(int(line.split()[1]) for line in lines if line.startswith("Uid:"))
    gid = next(int(line.split()[1]) for line in lines if line.startswith("Gid:"))
    return uid, gid


def _settle(call, tries: int = 20):
    """Run ``call`` until it answers: each stale pooled connection fails once after a restart."""
    for _ in range(tries):
        try:
            return call()
        except (LockOutcomeUnknown, BackendUnavailable):
            time.sleep(0.05)
    raise AssertionError("no answer after the restart")


def test_catalog_maps_postgres() -> None:
    assert server_class("postgres") is PostgresServer


def test_session_server_is_loopback_with_its_own_database(postgres_server: PostgresServer) -> None:
    url = postgres_server.url
    assert url.startswith("postgresql://") and "@127.0.0.1:" in url and url.endswith(f"/{DB_NAME}")
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT current_database()").fetchone()[0] == DB_NAME
        assert conn.execute("SHOW listen_addresses").fetchone()[0] == "127.0.0.1"
        assert conn.execute("SHOW port").fetchone()[0] == str(postgres_server.port)
    assert postgres_server.settings() == {"fsync": "off", "synchronous_commit": "on"}
    assert re.fullmatch(r"\d+(\.\d+)+", postgres_server.version())


def test_wrong_password_is_refused(postgres_server: PostgresServer) -> None:
    bad = postgres_server.url.replace(postgres_server.password, "not-the-password")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(bad, connect_timeout=3).close()


@pytest.mark.server
def test_start_restart_stop_own_cluster(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """A durable cluster: root runs it as 'postgres' and says so; rows survive a SIGKILL; stop cleans up."""
    server = PostgresServer(tmp_path, name="pg-own", fsync=True)
    try:
        server.start()
        err = capfd.readouterr().err
        pid = server.process.pid
        if os.geteuid() == 0:
            assert f"runs as the OS user {OS_USER!r}" in err and err.count("\n") == 1
            assert _ids_of(pid) != (0, 0) and 0 not in _ids_of(pid)
            assert b"postgres" in Path(f"/proc/{pid}/cmdline").read_bytes()  # the postmaster itself
        assert server.settings() == {"fsync": "on", "synchronous_commit": "on"}
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v int)")
            conn.execute("INSERT INTO kept VALUES (42)")
        row_lock = resolve("postgres.unique-insert")("restart", [server.url])
        session_lock = resolve("postgres.advisory")("restart", [server.url])
        row_lease, session_lease = row_lock.acquire(timeout=2), session_lock.acquire(timeout=2)
        server.restart()
        assert server.process.pid != pid
        with psycopg.connect(server.url, autocommit=True) as conn:
            assert conn.execute("SELECT v FROM kept").fetchone()[0] == 42
        # Committed lock rows survive a server crash; session locks do not.
        assert session_lock.release(session_lease) is False
        assert (
            _settle(lambda: resolve("postgres.unique-insert")("restart", [server.url]).try_acquire()) is None
        )
        assert _settle(lambda: row_lock.release(row_lease)) is True
        other = resolve("postgres.advisory")("restart", [server.url])
        other.release(_settle(lambda: other.acquire(timeout=2)))
        assert (server.logdir / "server.log").exists()
    finally:
        pg_conn.close_pools()
        server.stop()
    assert not server.process.alive()
    assert not server.datadir.exists() or server.base == server.logdir
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(server.url, connect_timeout=2).close()


def test_a_restart_kills_every_backend_and_a_failed_try_keeps_the_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39: backends setsid(), so killing the postmaster's group left them running; a new postmaster
    that came first exited ("shared memory block is still in use"), and that failed try deleted the data
    directory of a root run, so the second try found nothing and the server stayed dead."""
    from infra.process import FAIL_START_ENV

    monkeypatch.setenv(FAIL_START_ENV, "pg-backends:2-2")  # test-only: the restart's first try fails
    server = PostgresServer(tmp_path, name="pg-backends")
    conns = []
    try:
        server.start()
        with psycopg.connect(server.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (v int)")
            conn.execute("INSERT INTO kept VALUES (7)")
        conns = [psycopg.connect(server.url, autocommit=True) for _ in range(20)]
        backends = [c.info.backend_pid for c in conns]
        server.restart()
        assert not [pid for pid in backends if Path(f"/proc/{pid}").exists() and _alive(pid)]
        assert "start 2 of pg-backends fails" in (server.logdir / "server.log").read_text()
        assert server.process.alive()
        with psycopg.connect(server.url, autocommit=True) as conn:
            assert conn.execute("SELECT v FROM kept").fetchone()[0] == 7
    finally:
        for c in conns:
            c.close()
        server.stop()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
