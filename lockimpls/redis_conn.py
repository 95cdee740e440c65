"""Redis clients for lock algorithms: one per (process, URL), and one way to read redis errors.

Locust forks its worker processes, so a client (and its sockets) made before a fork must
never be used after it: :func:`client_for` keys its cache by ``os.getpid()``.

Errors are translated once, here, by :class:`RedisCall`, so that every algorithm reports
the same thing for the same trouble:

- the server could not be reached before anything was sent (connect refused or timed out,
  no pooled connection) -> :class:`~lockimpls.base.BackendUnavailable`: nothing applied;
- a request was sent but its answer was lost (timeout, connection dropped mid-request), or an
  earlier command of the same attempt was already applied ->
  :class:`~lockimpls.base.LockOutcomeUnknown`: the history records an ``info``, not a ``fail``.

redis-py's own retries are switched off: a silently retried ``SET NX`` that was applied the
first time would come back "not acquired" while the caller holds the lock.

The seed locks' commands (every poll of a waiter) go through :func:`execute` instead of
the client: a connection of the same settings taken from a plain free list, one command
sent and its raw reply read. redis-py's client path spends about 4x the socket's own
cost per command (pool bookkeeping, a readiness poll, observability hooks, argument
checks), and under 50 polling clients in one process that CPU is what delayed the
holder (docs/architecture.md, "Client hot path"). The error rules above are unchanged.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from types import TracebackType
from urllib.parse import urlsplit

import redis
from redis.backoff import NoBackoff
from redis.commands.core import Script
from redis.retry import Retry
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

from lockimpls.base import BackendUnavailable, LockConfigError, LockOutcomeUnknown
from lockimpls.urls import redact_url

#: Seconds to wait for a TCP connect (an unreachable server fails fast).
CONNECT_TIMEOUT = 2.0
#: Seconds to wait for one reply before the outcome is declared unknown.
SOCKET_TIMEOUT = 5.0
#: Connections per (process, URL): room for ~100 greenlets each holding one mid-command,
#: plus headroom; beyond it callers wait (up to SOCKET_TIMEOUT) instead of failing.
MAX_CONNECTIONS = 256

_clients: dict[tuple[int, str], redis.Redis] = {}
_scripts: dict[tuple[int, str, str], Script] = {}
_direct: dict[tuple[int, str], DirectCommands | None] = {}
_take_hook: list[Callable[[redis.connection.AbstractConnection], None]] = []


class _NotSent(redis.ConnectionError):
    """Raised instead of any error met while getting a connection: no command was sent."""


class _Pool(redis.BlockingConnectionPool):
    """A pool that marks errors raised before a command leaves the client.

    redis-py raises the same ``ConnectionError`` for "connection refused" and for "the
    connection dropped while I waited for the reply"; only the first means nothing was
    applied, and it can only happen while a connection is being handed out.
    """

    def get_connection(self, *args: object, **kwargs: object) -> redis.connection.Connection:
        try:
            return super().get_connection(*args, **kwargs)
        except (redis.RedisError, OSError) as exc:
            raise _NotSent(str(exc)) from exc


class _SentinelPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """:class:`_Pool` for a master found through Sentinel (``redis+sentinel://`` URLs).

    The master's address is asked of the sentinels whenever a connection is (re)made, so
    after a failover the next command reaches the promoted replica: a pooled connection to
    the dead master reads as closed when it is handed out and is remade there. Asking the
    sentinels is part of getting a connection, so "no master known" is "not sent" too.
    Blocking like :class:`_Pool` (waits for a free connection instead of failing).
    """

    def get_connection(self, *args: object, **kwargs: object) -> redis.connection.Connection:
        try:
            return super().get_connection(*args, **kwargs)
        except (redis.RedisError, OSError) as exc:
            raise _NotSent(str(exc)) from exc


class _SentinelConnection(SentinelManagedConnection):
    """Keeps a demoted master's READONLY refusal a :class:`redis.ReadOnlyError`.

    redis-py turns it into a plain ConnectionError ("the previous master is now a
    slave"), which RedisCall would have to report as "outcome unknown"; the server
    refused the command, so nothing was applied. The connection is still dropped, so the
    next command asks the sentinels for the master again.
    """

    def read_response(self, *args: object, **kwargs: object) -> object:
        try:
            return redis.connection.Connection.read_response(self, *args, **kwargs)
        except redis.ReadOnlyError:
            self.disconnect()
            raise


def _sentinel_client(url: str) -> redis.Redis:
    """Client for ``redis+sentinel://host:port,host:port/service``: the service's current master."""
    parts = urlsplit(url)
    service = parts.path.strip("/")
    if parts.query or parts.fragment or "@" in parts.netloc or not service or "/" in service:
        raise ValueError("expected redis+sentinel://host:port[,host:port...]/service")
    sentinels = []
    for item in filter(None, (h.strip() for h in parts.netloc.split(","))):
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"sentinel address {item!r} is not host:port")
        sentinels.append((host, int(port)))
    if not sentinels:
        raise ValueError("no sentinel address")
    # Asking a sentinel is part of connecting: one that hangs gets the connect timeout,
    # then the next sentinel is asked.
    manager = Sentinel(
        sentinels,
        sentinel_kwargs={
            "socket_timeout": CONNECT_TIMEOUT,
            "socket_connect_timeout": CONNECT_TIMEOUT,
            "retry": Retry(NoBackoff(), 0),
        },
    )
    return manager.master_for(
        service,
        connection_pool_class=_SentinelPool,
        connection_class=_SentinelConnection,
        max_connections=MAX_CONNECTIONS,
        timeout=SOCKET_TIMEOUT,
        socket_connect_timeout=CONNECT_TIMEOUT,
        socket_timeout=SOCKET_TIMEOUT,
        health_check_interval=0,
        retry=Retry(NoBackoff(), 0),
    )


def client_for(url: str) -> redis.Redis:
    """The shared client of this process for ``url`` (made on first use, never across a fork).

    Replies are raw ``bytes`` (no decoding): compare against ``str.encode()`` values.
    ``redis+sentinel://host:port[,host:port...]/service`` gives a client of whichever
    node the sentinels name master of ``service`` (found again after a failover).
    Raises :class:`LockConfigError` for a URL redis-py cannot use.
    """
    pid = os.getpid()
    client = _clients.get((pid, url))
    if client is not None:
        return client
    for key in [k for k in _clients if k[0] != pid]:
        # Inherited from the parent: its sockets belong to the parent, never touch them.
        del _clients[key]
    if url.startswith("redis+sentinel://"):
        try:
            client = _sentinel_client(url)
        except (ValueError, TypeError) as exc:
            raise LockConfigError(f"invalid Redis Sentinel URL {redact_url(url)}: {exc}") from None
        return _clients.setdefault((pid, url), client)
    try:
        pool = _Pool.from_url(
            url,
            max_connections=MAX_CONNECTIONS,
            timeout=SOCKET_TIMEOUT,
            socket_connect_timeout=CONNECT_TIMEOUT,
            socket_timeout=SOCKET_TIMEOUT,
            health_check_interval=0,
            retry=Retry(NoBackoff(), 0),
        )
    except (ValueError, TypeError) as exc:
        raise LockConfigError(f"invalid Redis URL {redact_url(url)}: {exc}") from None
    client = redis.Redis(connection_pool=pool)
    return _clients.setdefault((pid, url), client)


def script_for(url: str, source: str) -> Script:
    """A registered Lua script (EVALSHA, loaded on first NOSCRIPT) for this process and URL."""
    key = (os.getpid(), url, source)
    script = _scripts.get(key)
    if script is None:
        script = _scripts.setdefault(key, client_for(url).register_script(source))
    return script


#: recv flags of :func:`_stale`, as a plain int (OR-ing the enum members costs an Enum per call)
_PEEK_NOW = int(socket.MSG_PEEK | socket.MSG_DONTWAIT)


def _stale(conn: redis.connection.AbstractConnection) -> bool:
    """True when an idle connection must not carry a command (closed by the server, or data waiting).

    What redis-py's pool checks before lending a connection, without its cost: under gevent
    its check is a ``select.poll`` of gevent's (watchers made and torn down per command);
    here it is one non-blocking ``recv(MSG_PEEK)`` on the OS socket gevent wraps. TLS
    sockets and plain blocking sockets keep redis-py's own check.
    """
    sock = conn._sock
    if sock is None:
        return False  # not connected: connect() makes a fresh one
    raw = getattr(sock, "_sock", None)  # gevent's socket keeps the OS socket, non-blocking
    if raw is None or hasattr(sock, "pending") or raw.gettimeout() != 0.0:
        try:
            return conn.can_read()
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            return True  # hiredis reports a closed connection by raising
    try:
        raw.recv(1, _PEEK_NOW)
    except BlockingIOError:
        return False
    except OSError:
        return True
    return True  # EOF (server closed it) or an unread reply: either way, not reusable


class DirectCommands:
    """Commands to one server on connections of ``client``'s settings, without its per-command work.

    Why not the client: redis-py spends about 4x the socket's own cost per command (pool
    bookkeeping, a readiness poll, observability hooks, argument checks); a waiter polls
    every ``retry_interval`` and a holder's every step waits behind that work. Here the
    bookkeeping is a list's pop and append (atomic under the GIL). No upper bound on
    connections: they follow the commands in flight (one per simulated client at most).
    Replies are raw (``SET`` answers ``b"OK"`` or None); errors are redis-py's, and a
    connection that could not be made raises :class:`_NotSent`, as through the pool.
    """

    def __init__(self, client: redis.Redis) -> None:
        pool = client.connection_pool
        self._make = lambda: pool.connection_class(**pool.connection_kwargs)
        self._idle: list[redis.connection.AbstractConnection] = []
        self._all: list[redis.connection.AbstractConnection] = []

    def execute(self, *args: object) -> object:
        """Send one command and return its raw reply.

        A command interrupted before its reply was read (timeout, dropped connection,
        greenlet killed) drops the connection, so no late reply is ever read as the
        answer to another command.
        """
        conn = self.take()
        try:
            conn.send_command(*args, check_health=False)
            reply = conn.read_response()
        except redis.ResponseError:
            self._idle.append(conn)  # the whole error reply was read: the connection is clean
            raise
        except BaseException:
            conn.disconnect()
            self._idle.append(conn)
            raise
        self._idle.append(conn)
        return reply

    def evalsha(self, script: Script, keys: list[str], args: list[object]) -> object:
        """Run a registered script by its SHA, loading it on NOSCRIPT (as ``Script.__call__``).

        EVALSHA refused with NOSCRIPT ran nothing, so sending it again cannot apply it twice.
        """
        try:
            return self.execute("EVALSHA", script.sha, len(keys), *keys, *args)
        except redis.exceptions.NoScriptError:
            self.execute("SCRIPT", "LOAD", script.script)
            return self.execute("EVALSHA", script.sha, len(keys), *keys, *args)

    def take(self) -> redis.connection.AbstractConnection:
        """A connected connection, ready for a command; errors are raised as :class:`_NotSent`."""
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = self._make()
            self._all.append(conn)
        try:
            if _stale(conn):
                conn.disconnect()
            if conn._sock is None:
                conn.connect()
            for hook in _take_hook:
                hook(conn)
        except (redis.RedisError, OSError) as exc:
            conn.disconnect()
            self._idle.append(conn)
            raise _NotSent(str(exc)) from exc
        except BaseException:
            self._idle.append(conn)
            raise
        return conn

    def close(self) -> None:
        """Disconnect every connection made here (the object stays usable)."""
        for conn in self._all:
            conn.disconnect()
        self._all.clear()
        self._idle.clear()


def set_take_hook(hook: Callable[[redis.connection.AbstractConnection], None] | None) -> None:
    """Call ``hook`` with every connection :class:`DirectCommands` lends, before its command.

    The load generator uses it to schedule a lock holder's replies before waiters'
    (``workloads.harness.holder_first``); lock algorithms never do. None removes it.
    """
    _take_hook[:] = [] if hook is None else [hook]


def _direct_pool(url: str) -> DirectCommands | None:
    """This process's direct commands for ``url``; None for Sentinel URLs (they use the client)."""
    key = (os.getpid(), url)
    try:
        return _direct[key]
    except KeyError:
        pass
    for old in [k for k in _direct if k[0] != key[0]]:
        del _direct[old]  # inherited across a fork: the parent's sockets
    client = client_for(url)
    pool = None if isinstance(client.connection_pool, _SentinelPool) else DirectCommands(client)
    return _direct.setdefault(key, pool)


def execute(url: str, *args: object) -> object:
    """One command to ``url``'s server through :class:`DirectCommands`; its raw reply.

    Sentinel URLs go through the client (the master is found per connection there), so
    their replies are the client's parsed ones (``SET``: True or None).
    """
    pool = _direct_pool(url)
    if pool is None:
        return client_for(url).execute_command(*args)
    return pool.execute(*args)


def evalsha(url: str, script: Script, keys: list[str], args: list[object]) -> object:
    """A registered script on ``url``'s server (see :meth:`DirectCommands.evalsha`)."""
    pool = _direct_pool(url)
    if pool is None:
        return script(keys=keys, args=args)
    return pool.evalsha(script, keys, args)


def close_clients() -> None:
    """Close this process's clients (tests and short-lived tools; workers just exit)."""
    pid = os.getpid()
    for key in [k for k in _direct if k[0] == pid]:
        pool = _direct.pop(key)
        if pool is not None:
            pool.close()
    for key in [k for k in _clients if k[0] == pid]:
        client = _clients.pop(key)
        client.close()
        if isinstance(client.connection_pool, _SentinelPool):
            client.connection_pool.sentinel_manager.close()
    for key in [k for k in _scripts if k[0] == pid]:
        del _scripts[key]


class RedisCall:
    """Context manager turning redis-py errors into the lock errors of ``lockimpls.base``.

    Call :meth:`applied` right after a command that changed server state succeeded: from
    then on, any failure of the same attempt means the outcome is unknown, even a failure
    to connect for the next command (the first one already took effect).
    """

    def __init__(self, what: str, url: str) -> None:
        self.what = what
        self.url = url
        self._applied = False

    def applied(self) -> None:
        """Mark that this attempt has changed server state."""
        self._applied = True

    def __enter__(self) -> RedisCall:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is None or not isinstance(exc, redis.RedisError):
            return
        where = f"{self.what} on {redact_url(self.url)}"
        cause = exc.__cause__ if isinstance(exc, _NotSent) else exc
        if isinstance(cause, redis.AuthenticationError):
            raise LockConfigError(f"{where}: authentication failed, check the URL's credentials") from exc
        if isinstance(exc, _NotSent) and not self._applied:
            raise BackendUnavailable(f"{where}: server unreachable ({exc})") from exc
        if isinstance(exc, redis.BusyLoadingError | redis.ReadOnlyError) and not self._applied:
            # The server refused the command (still loading, or a replica): nothing applied.
            raise BackendUnavailable(f"{where}: server cannot serve writes ({exc})") from exc
        if isinstance(exc, redis.TimeoutError | redis.ConnectionError | redis.ReadOnlyError):
            raise LockOutcomeUnknown(f"{where}: outcome unknown ({exc})") from exc
        # Anything else (WRONGTYPE, script errors) is a bug or a misused key: let it show.
