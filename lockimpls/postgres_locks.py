"""PostgreSQL locks: unique insert (with and without expiry), optimistic version, FOR UPDATE, advisory.

The database algorithms of seeds 000 and 004 ("基于数据库"), plus PostgreSQL's own advisory
locks. All run on psycopg 3 over one pool per process (``lockimpls.pg_conn``), in schema
``lockbench``. Fencing tokens come from the sequence ``lockbench.fence`` (read after the
grant, so a later grant always gets a larger number) or, for the version lock, from the
version column itself.

Two families:

* polling (unique-insert, unique-insert-expiry, version): one short autocommit statement
  per attempt on any pooled connection; the lock is a committed row, so it outlives the
  client's connection (and its crash).
* pinned (for-update, advisory, advisory-xact): the server queues the waiter and the lock
  lives in the session (or its open transaction); the connection stays with the lease until
  release, and a dead session frees the lock.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import psycopg
from psycopg import errors as pg_errors
from psycopg import sql

from lockimpls import pg_conn
from lockimpls.base import (
    BackendUnavailable,
    Capabilities,
    Lease,
    Lock,
    LockConfigError,
    LockError,
    LockOptions,
    LockOutcomeUnknown,
    LockTimeout,
    ParamSpec,
    new_owner_id,
)

if TYPE_CHECKING:
    from psycopg_pool import ConnectionPool

S = pg_conn.SCHEMA
FENCE = f"nextval('{S}.fence')"

#: How long ``release`` and ``acquire(timeout=None)`` wait for a pooled connection.
POOL_WAIT = 30.0
#: Connections per process for fencing tokens taken after a grant (``_PinnedPgLock._durable_token``).
TOKEN_POOL_MAX = 4


class _PgLock(Lock):
    """What every PostgreSQL lock shares: the DSN, the pool, error translation."""

    backend = "postgres"

    params = {"pool_max": ParamSpec(int, "connections per process in the pool", 1, 1000)}  # noqa: RUF012

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        if not self.urls:
            raise LockConfigError(f"{self.id}: needs a postgresql:// DSN")
        self.dsn = self.urls[0]
        self._pool_max = self.options.params.get("pool_max")

    # connections --------------------------------------------------------------------
    def _pool(self) -> ConnectionPool:
        return pg_conn.get_pool(self.dsn, self._pool_max)

    def _getconn(self, timeout: float | None, pool: ConnectionPool | None = None) -> psycopg.Connection:
        """A connection of ``pool`` (the lock pool unless given) within ``timeout`` (None: POOL_WAIT).

        Never waits less than 0.1 s.
        """
        from psycopg_pool import PoolTimeout

        pool = pool or self._pool()
        wait = POOL_WAIT if timeout is None else max(timeout, 0.1)
        try:
            return pool.getconn(timeout=wait)
        except PoolTimeout as exc:
            if pool.get_stats().get("pool_size", 0) == 0 or timeout is None:
                raise BackendUnavailable(
                    f"{self.id}: no connection to {pg_conn.redact_dsn(self.dsn)}"
                ) from exc
            raise LockTimeout(f"{self.id}: no pooled connection within {wait:.3f}s") from exc

    def _putconn(self, conn: psycopg.Connection, pool: ConnectionPool | None = None) -> None:
        try:
            (pool or self._pool()).putconn(conn)
        except Exception:  # noqa: BLE001 - a connection the pool no longer wants is just closed
            conn.close()

    def _fail(self, exc: BaseException, maybe_applied: bool) -> LockError:
        """The lockbench error for a psycopg error (messages password-free)."""
        msg = f"{self.id} {self.name!r}: {pg_conn.scrub(' '.join(str(exc).split()), self.dsn)}"
        if isinstance(exc, pg_errors.LockNotAvailable | pg_errors.QueryCanceled):
            return LockTimeout(msg)  # the server refused to wait longer: nothing applied
        if isinstance(exc, psycopg.OperationalError):
            return LockOutcomeUnknown(msg) if maybe_applied else BackendUnavailable(msg)
        return LockError(msg)

    def _token_sql(self) -> str:
        return FENCE if self.options.fencing else "NULL::bigint"


# --- polling locks ----------------------------------------------------------------------
class _PollingPgLock(_PgLock):
    """A lock that is a committed row: one statement per attempt, the base class polls."""

    _deadline: float | None = None

    def acquire(self, timeout: float | None = None) -> Lease:
        self._deadline = None if timeout is None else time.monotonic() + timeout
        return super().acquire(timeout)

    def _remaining(self) -> float | None:
        return None if self._deadline is None else self._deadline - time.monotonic()

    #: Is the row still this owner's (a read)? Subclasses with an expiry add it.
    _owns_sql = "SELECT owner = %s FROM {table} WHERE name = %s"

    def owns(self, lease: Lease) -> bool | None:
        """The lock row still names this grant's owner (and, with an expiry, has not expired)."""
        self._deadline = None
        row = self._run(
            self._owns_sql.format(table=self._table), (lease.owner, self.name), maybe_applied=False
        )
        return bool(row and row[0])

    def _run(
        self, sql: str, params: tuple, maybe_applied: bool, conn: psycopg.Connection | None = None
    ) -> Any:
        """Execute one statement on a pooled connection; the first row or None."""
        own = conn is None
        if conn is None:
            conn = self._getconn(self._remaining())
        try:
            cur = conn.execute(sql, params)
            return cur.fetchone() if cur.description is not None else None
        except psycopg.Error as exc:
            raise self._fail(exc, maybe_applied) from None
        finally:
            if own:
                self._putconn(conn)


class UniqueInsert(_PollingPgLock):
    """Seed 000/004 "基于表主键唯一": INSERT a row keyed by the lock name; DELETE releases.

    Why it is here: the textbook database lock. The primary key makes the insert of a
    second holder fail; ``ON CONFLICT DO NOTHING`` is that same failed insert without a
    server-side ERROR (which would fill the server log at 50 spinning clients). It cannot
    wait (seed 004: "只能是非阻塞锁"), so the client polls. Unsafe where the seed says:
    no expiry ("锁没有失效时间"), so a holder that dies before its DELETE leaves the lock
    taken forever (stuck lock), and it is not reentrant. Fencing (``options.fencing``):
    ``nextval`` in RETURNING, evaluated after the row went in.
    """

    id = "postgres.unique-insert"
    capabilities = Capabilities(
        ttl=False, fencing=True, wait="poll", notes="committed row: a crashed holder blocks it forever"
    )
    summary = "INSERT row keyed by the lock name (primary key), DELETE to release; no expiry"

    _table = f"{S}.insert_locks"

    def _try_acquire(self) -> Lease | None:
        owner = new_owner_id(self.options.owner_prefix)
        row = self._run(
            f"INSERT INTO {self._table} (name, owner) VALUES (%s, %s) "
            f"ON CONFLICT (name) DO NOTHING RETURNING {self._token_sql()}",
            (self.name, owner),
            maybe_applied=True,
        )
        return None if row is None else self._new_lease(owner, token=row[0])

    def _release(self, lease: Lease) -> bool:
        self._deadline = None
        row = self._run(
            f"DELETE FROM {self._table} WHERE name = %s AND owner = %s RETURNING 1",
            (self.name, lease.owner),
            maybe_applied=True,
        )
        return row is not None


class UniqueInsertExpiry(_PollingPgLock):
    """Unique insert with an ``expires_at`` column that a waiter may take over.

    Why: the usual fix for the seed's stuck lock. The INSERT carries ``expires_at =
    now() + ttl``; on conflict it takes the row over only when ``expires_at < now()``
    (one statement, ``ON CONFLICT DO UPDATE ... WHERE``), so a crashed holder blocks the
    lock for at most ``ttl``. Both times are the server's clock, so client clock skew
    cannot shorten a lease. Unsafe when the critical section outlives ``ttl`` (long GC
    pause, paused client): the lease is taken over while the old holder still works. The
    client's own deadline is counted from before the INSERT was sent, so it never runs
    past the server's expiry. A separate id (not a param) because its capabilities
    differ (``ttl=True``) and it keeps its rows in its own table.
    """

    id = "postgres.unique-insert-expiry"
    capabilities = Capabilities(
        ttl=True, fencing=True, wait="poll", notes="expiry by the server clock; taken over after ttl"
    )
    summary = "INSERT row with expires_at; a waiter takes over an expired row (ON CONFLICT DO UPDATE WHERE)"

    _table = f"{S}.insert_locks_ttl"
    _owns_sql = "SELECT owner = %s AND expires_at >= now() FROM {table} WHERE name = %s"

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self.takeovers = 0

    def stats(self) -> dict[str, int]:
        """takeovers: grants that replaced an expired holder's row."""
        return {**super().stats(), "takeovers": self.takeovers}

    def _try_acquire(self) -> Lease | None:
        owner = new_owner_id(self.options.owner_prefix)
        ttl = self.options.ttl
        sent = time.monotonic_ns()
        row = self._run(
            f"INSERT INTO {self._table} AS l (name, owner, expires_at) "
            "VALUES (%s, %s, now() + make_interval(secs => %s)) "
            "ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at "
            "WHERE l.expires_at < now() "
            f"RETURNING {self._token_sql()}, l.xmax <> 0",
            (self.name, owner, float(ttl)),
            maybe_applied=True,
        )
        if row is None:
            return None
        lease = Lease(self.name, owner, row[0], time.monotonic_ns(), sent + int(ttl * 1e9), sent_ns=sent)
        if row[1]:
            self.takeovers += 1
            lease.extra["takeover"] = True
        return lease

    def _release(self, lease: Lease) -> bool:
        """Deletes the caller's row; True only when it had not expired yet."""
        self._deadline = None
        row = self._run(
            f"DELETE FROM {self._table} WHERE name = %s AND owner = %s RETURNING expires_at >= now()",
            (self.name, lease.owner),
            maybe_applied=True,
        )
        return bool(row and row[0])


class Version(_PollingPgLock):
    """Seed 000/004 "基于表字段版本号" / "采用乐观锁": the optimistic version-number lock.

    Why: the seeds' MVCC-style lock. An attempt reads ``(owner, version)``; when the row is
    free it claims it with ``UPDATE ... SET owner = me, version = v + 1 WHERE version = v
    AND owner = ''``. Zero rows updated means someone else changed the row since the read:
    a *conflict*, and the attempt fails (seed 004: "如果被更新过，则获取锁失败"); the base
    class polls again. Release also bumps the version. The version is the fencing token
    (it grows with every grant), free of charge. Costs two round trips per attempt (the
    seed's "对数据库连接的开销无法忍受"). Unsafe: no expiry, so a crashed holder leaves
    ``owner`` set forever (stuck lock). Counters: ``stats()`` per instance (conflict rate
    = conflicts / attempts) and ``lease.extra`` per acquire.
    """

    id = "postgres.version"
    capabilities = Capabilities(
        ttl=False, fencing=True, wait="poll", notes="optimistic; counts conflicts; a crashed holder blocks it"
    )
    summary = "optimistic: read (owner, version), UPDATE ... WHERE version = v; retry on conflict"

    _table = f"{S}.version_locks"

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self._stats = {"attempts": 0, "grants": 0, "retries": 0, "busy": 0, "conflicts": 0}

    def stats(self) -> dict[str, int]:
        """attempts, grants, retries (failed attempts) = busy (read a held row) + conflicts
        (read it free, lost the UPDATE race); the harness sums them over clients."""
        return dict(self._stats)

    def _count(self, key: str) -> None:
        self._stats[key] += 1
        if key in ("busy", "conflicts"):
            self._stats["retries"] += 1

    def acquire(self, timeout: float | None = None) -> Lease:
        before = dict(self._stats)
        lease = super().acquire(timeout)
        lease.extra["attempts"] = self._stats["attempts"] - before["attempts"]
        lease.extra["conflicts"] = self._stats["conflicts"] - before["conflicts"]
        return lease

    def _try_acquire(self) -> Lease | None:
        owner = new_owner_id(self.options.owner_prefix)
        conn = self._getconn(self._remaining())
        try:
            self._count("attempts")
            row = self._run(
                f"SELECT owner, version FROM {self._table} WHERE name = %s", (self.name,), False, conn
            )
            if row is None:
                self._run(
                    f"INSERT INTO {self._table} (name) VALUES (%s) ON CONFLICT (name) DO NOTHING",
                    (self.name,),
                    False,
                    conn,
                )
                row = ("", 0)
            holder, version = row
            if holder:
                self._count("busy")
                return None
            won = self._run(
                f"UPDATE {self._table} SET owner = %s, version = version + 1 "
                "WHERE name = %s AND version = %s AND owner = '' RETURNING version",
                (owner, self.name, version),
                True,
                conn,
            )
        finally:
            self._putconn(conn)
        if won is None:
            self._count("conflicts")
            return None
        self._count("grants")
        return self._new_lease(owner, token=int(won[0]))

    def _release(self, lease: Lease) -> bool:
        self._deadline = None
        row = self._run(
            f"UPDATE {self._table} SET owner = '', version = version + 1 "
            "WHERE name = %s AND owner = %s RETURNING version",
            (self.name, lease.owner),
            maybe_applied=True,
        )
        return row is not None


# --- pinned locks -----------------------------------------------------------------------
def _lock_timeout_ms(timeout: float | None, started: float) -> int:
    """``lock_timeout`` for what is left of ``timeout`` (0 means wait forever)."""
    if timeout is None:
        return 0
    return max(1, math.ceil((timeout - (time.monotonic() - started)) * 1000))


def _last_row(cur: psycopg.Cursor) -> Any:
    while cur.nextset():
        pass
    return cur.fetchone()


class _PinnedPgLock(_PgLock):
    """A lock the server keeps in a session: the connection stays with the lease until release.

    Subclasses give the SQL. ``_acquire_sql(conn, wait_ms)`` returns ``(query, params)``
    for one round trip: with params None it goes by the simple protocol and may hold
    several statements (``BEGIN; SET LOCAL ...; SELECT ...``); ``wait_ms`` is None for a
    single non-waiting attempt, 0 to wait forever, else the lock_timeout in ms. Its last
    statement returns ``(granted, token)``, or no row when not granted.
    """

    capabilities = Capabilities(ttl=False, fencing=True, wait="server-queue")
    #: The lock lives in a transaction left open over the critical section (FOR UPDATE,
    #: pg_advisory_xact_lock): its fencing token is taken after the grant (:meth:`_durable_token`).
    _open_transaction: ClassVar[bool] = False

    @classmethod
    def recovery_after_crash(cls, ttl: float, params: dict[str, Any]) -> tuple[float | None, str]:
        """The server ends a dead client's session (and its locks) once it sees the connection close.

        A killed process's kernel closes its sockets, so that is at once; a client cut off by the
        network instead holds until TCP keepalives give up (not this case).
        """
        return 0.0, "the server noticing the dead connection"

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self._held: tuple[str, psycopg.Connection] | None = None

    def _prepare(self, conn: psycopg.Connection) -> None:
        """Per-connection or per-instance setup before the first attempt (default: none)."""

    def _acquire_sql(self, conn: psycopg.Connection, wait_ms: int | None) -> tuple[str, tuple | None]:
        raise NotImplementedError

    def _release_sql(self) -> tuple[str, tuple | None]:
        return "COMMIT", None

    def _token_sql(self) -> str:
        return "NULL::bigint" if self._open_transaction else super()._token_sql()

    def _durable_token(self) -> int:
        """The grant's fencing token: a ``nextval`` committed on another connection, after the grant.

        Why not in the holder's own transaction: a ``nextval`` that writes the sequence's WAL
        record (one in 32 does) is flushed when its transaction commits, and this one stays open
        over the critical section. Killed and restarted then, the server recovers the sequence
        from the record before and hands the same token to the next holder: two holders with one
        token, both admitted by a fence that refuses only smaller ones (postgres.for-update x
        restart, fenced, 2026-12-05: token 1156 twice). In autocommit the logging ``nextval``
        takes a transaction id, so its commit flushes the record before the token comes back;
        taken after the grant and before ``acquire`` returns, tokens still follow grant order.
        """
        pool = pg_conn.get_pool(self.dsn, TOKEN_POOL_MAX, purpose="tokens")
        conn = self._getconn(None, pool)
        try:
            return int(_last_row(conn.execute(f"SELECT {FENCE}"))[0])
        finally:
            self._putconn(conn, pool)

    def _release_ok(self, cur: psycopg.Cursor) -> bool:
        # COMMIT of a transaction the server already aborted answers ROLLBACK, not an error.
        return cur.statusmessage == "COMMIT"

    @staticmethod
    def _discard(conn: psycopg.Connection) -> None:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            try:
                conn.rollback()
            except psycopg.Error:
                conn.close()

    def acquire(self, timeout: float | None = None) -> Lease:
        started = time.monotonic()
        conn = self._getconn(timeout)
        try:
            for _ in range(3):
                try:
                    self._prepare(conn)
                    wait_ms = None if timeout == 0 else _lock_timeout_ms(timeout, started)
                    row = _last_row(conn.execute(*self._acquire_sql(conn, wait_ms)))
                    if row is not None and row[0] and self._open_transaction and self.options.fencing:
                        row = (row[0], self._durable_token())
                except psycopg.Error as exc:
                    self._discard(conn)
                    raise self._fail(exc, maybe_applied=True) from None
                except BaseException:
                    self._discard(conn)  # granted, but no token: let the lock go with the transaction
                    raise
                if row is not None and row[0]:
                    owner = new_owner_id(self.options.owner_prefix)
                    self.close()  # a lease never released (its session lost): give its slot back
                    self._held = (owner, conn)
                    conn = None
                    return self._new_lease(owner, token=row[1])
                self._discard(conn)
                if row is not None or wait_ms is None or not self._missing_row():
                    break
            raise LockTimeout(f"{self.id}: {self.name!r} not acquired within {timeout}s")
        finally:
            if conn is not None:
                self._putconn(conn)

    def _missing_row(self) -> bool:
        """Called when the attempt returned no row: True to set things up and try again."""
        return False

    def owns(self, lease: Lease) -> bool | None:
        """The session that took the lock is alive: the server keeps the lock as long as it is.

        A connection the server dropped (a restart, a cut the server gave up on) ended the
        session and with it the lock; a query on it fails, and that is the answer.
        """
        if self._held is None or self._held[0] != lease.owner:
            return False
        try:
            self._held[1].execute("SELECT 1").fetchone()
        except psycopg.OperationalError:
            return False
        return True

    def _release(self, lease: Lease) -> bool:
        if self._held is None or self._held[0] != lease.owner:
            return False
        _, conn = self._held
        self._held = None
        try:
            ok = self._release_ok(conn.execute(*self._release_sql()))
        except psycopg.Error:
            conn.close()  # the session (and with it the lock) is gone or unusable
            ok = False
        self._discard(conn)
        self._putconn(conn)
        return ok

    def close(self) -> None:
        if self._held is not None:
            _, conn = self._held
            self._held = None
            conn.close()  # ending the session frees whatever it held
            self._putconn(conn)


class ForUpdate(_PinnedPgLock):
    """Seed 000 "基于数据库排他锁" (``select xxx for update``): a row lock in an open transaction.

    Why: the pessimistic database lock. ``BEGIN; SELECT ... FOR UPDATE`` on the lock's
    row, the transaction held open over the critical section, ``COMMIT`` releases. The
    server queues waiters (``lock_timeout`` bounds the wait; ``timeout=0`` uses SKIP
    LOCKED). Safe while the holder's session lives: a dead session ends the transaction
    and frees the row. Unsafe: a client paused past a server-side timeout
    (``idle_in_transaction_session_timeout``, a proxy's idle timeout) loses the lock while
    it still believes it holds it; one connection per holder *and per waiter*. Fencing:
    a ``nextval`` committed on a second connection after the row lock was granted (one in
    the open transaction could be handed out again after a server crash: ``_durable_token``).
    """

    id = "postgres.for-update"
    _open_transaction = True
    capabilities = Capabilities(
        ttl=False,
        fencing=True,
        wait="server-queue",
        notes="row lock in an open transaction; one connection per client",
    )
    summary = "SELECT ... FOR UPDATE in a transaction held over the critical section; COMMIT releases"

    _table = f"{S}.row_locks"

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self._row_ready = False
        self._literal: str | None = None

    def _prepare(self, conn: psycopg.Connection) -> None:
        if self._literal is None:
            self._literal = sql.Literal(self.name).as_string(conn)
        if not self._row_ready:
            conn.execute(
                f"INSERT INTO {self._table} (name) VALUES (%s) ON CONFLICT (name) DO NOTHING", (self.name,)
            )
            self._row_ready = True

    def _missing_row(self) -> bool:
        self._row_ready = False
        return True

    def _acquire_sql(self, conn: psycopg.Connection, wait_ms: int | None) -> tuple[str, tuple | None]:
        lock = f"SELECT name FROM {self._table} WHERE name = {self._literal} FOR UPDATE"
        if wait_ms is None:
            lock += " SKIP LOCKED"
            head = "BEGIN; "
        else:
            head = f"BEGIN; SET LOCAL lock_timeout = {wait_ms}; "
        return head + f"WITH l AS MATERIALIZED ({lock}) SELECT true, {self._token_sql()} FROM l", None


class Advisory(_PinnedPgLock):
    """PostgreSQL's session-level advisory lock: ``pg_advisory_lock`` / ``pg_advisory_unlock``.

    Why: the lock PostgreSQL users actually pick (not in the seeds). No table row: the
    server keeps the lock in its lock manager for the session, queues waiters, and frees
    it when the session ends. ``lock_timeout`` bounds a wait (``set_config(...,
    is_local)`` in the same prepared statement, so the setting does not outlive the
    attempt); ``timeout=0`` uses ``pg_try_advisory_lock``. Names map to 64-bit keys through the table
    ``lockbench.advisory_keys`` (no collisions). Unsafe as FOR UPDATE: a paused client
    whose session a proxy or the server drops loses the lock unknowingly; a pooler in
    transaction mode (PgBouncer) would hand the session to someone else. Fencing:
    ``nextval`` read after the grant.
    """

    id = "postgres.advisory"
    capabilities = Capabilities(
        ttl=False, fencing=True, wait="server-queue", notes="session lock; one connection per client"
    )
    summary = "session-level pg_advisory_lock with lock_timeout; pg_advisory_unlock releases"

    def __init__(self, name: str, urls: Sequence[str], options: LockOptions | None = None) -> None:
        super().__init__(name, urls, options)
        self.key: int | None = None

    def _prepare(self, conn: psycopg.Connection) -> None:
        if self.key is None:
            self.key = pg_conn.advisory_key(conn, self.dsn, self.name)

    def _acquire_sql(self, conn: psycopg.Connection, wait_ms: int | None) -> tuple[str, tuple | None]:
        # One prepared statement: set_config(..., is_local => true) comes first in the target
        # list and lapses with the statement's own transaction; the session lock stays.
        fencing = self.options.fencing
        if wait_ms is None:
            if not fencing:
                return "SELECT pg_try_advisory_lock(%s), NULL::bigint", (self.key,)
            return (
                "WITH l AS MATERIALIZED (SELECT pg_try_advisory_lock(%s) AS ok) "
                f"SELECT ok, CASE WHEN ok THEN {FENCE} END FROM l"
            ), (self.key,)
        params = (str(wait_ms), self.key)
        if not fencing:
            return (
                "SELECT true, NULL::bigint, set_config('lock_timeout', %s, true), pg_advisory_lock(%s)",
                params,
            )
        return (
            "WITH l AS MATERIALIZED (SELECT set_config('lock_timeout', %s, true), pg_advisory_lock(%s)) "
            f"SELECT true, {FENCE} FROM l"
        ), params

    def _release_sql(self) -> tuple[str, tuple | None]:
        return "SELECT pg_advisory_unlock(%s)", (self.key,)

    def _release_ok(self, cur: psycopg.Cursor) -> bool:
        row = cur.fetchone()
        return bool(row and row[0])


class AdvisoryXact(Advisory):
    """Transaction-level advisory lock: ``pg_advisory_xact_lock`` inside an open transaction.

    Why a variant: it cannot be leaked by a forgotten unlock (COMMIT or ROLLBACK frees it)
    and works through transaction-mode poolers, at the price of a transaction held open
    over the critical section, like FOR UPDATE but without a table row. ``timeout=0``
    uses ``pg_try_advisory_xact_lock``. Unsafe as the session variant. Its fencing token is
    taken as FOR UPDATE's is, after the grant on a second connection (``_durable_token``).
    """

    id = "postgres.advisory-xact"
    _open_transaction = True
    capabilities = Capabilities(
        ttl=False, fencing=True, wait="server-queue", notes="transaction lock; one connection per client"
    )
    summary = "pg_advisory_xact_lock in an open transaction; COMMIT releases"

    def _acquire_sql(self, conn: psycopg.Connection, wait_ms: int | None) -> tuple[str, tuple | None]:
        if wait_ms is None:
            return (
                f"BEGIN; WITH l AS MATERIALIZED (SELECT pg_try_advisory_xact_lock({self.key}) AS ok) "
                f"SELECT ok, CASE WHEN ok THEN {self._token_sql()} END FROM l"
            ), None
        return (
            f"BEGIN; SET LOCAL lock_timeout = {wait_ms}; "
            f"WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock({self.key})) SELECT true, {self._token_sql()} FROM l"
        ), None

    def _release_sql(self) -> tuple[str, tuple | None]:
        return "COMMIT", None

    def _release_ok(self, cur: psycopg.Cursor) -> bool:
        return cur.statusmessage == "COMMIT"
