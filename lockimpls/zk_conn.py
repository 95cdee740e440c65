"""ZooKeeper sessions for lock algorithms: one kazoo client per (process, hosts), and one way to read errors.

A ZooKeeper lock belongs to a *session*: ephemeral nodes vanish when it expires. This
module owns the sessions so that every algorithm gets the same behaviour:

- **one session per (process, hosts, session timeout)**, made lazily on first use and
  never carried across a fork (Locust forks its workers), as a kazoo user would share one
  ``KazooClient`` in a process. ``params["session"] = "per-lock"`` gives a lock instance a
  session of its own instead (every simulated client then is its own ZooKeeper client,
  which makes the server see the herd effect as N watches rather than one per process);
- kazoo's **gevent handler** when gevent has monkey-patched ``socket`` (running under
  Locust), its threading handler otherwise;
- **session loss is reported to holders**: a connection-state listener marks every lease
  held under a session ``lost`` when kazoo reports ``LOST`` (the session expired, so the
  server deleted its ephemeral nodes), and flags ``extra["suspended"]`` on ``SUSPENDED``;
- **bounded waits**: every request waits at most ``op_timeout`` seconds, so a server that
  never comes back cannot hang a caller.

Options read from ``LockOptions.params`` (seconds unless said otherwise):

``session_timeout`` (default 10): the ZooKeeper session timeout kazoo asks for. The
server clamps it to its own min/max (lockbench's servers allow 1..60 s).
``connect_timeout`` (default 5): how long the first connect may take before the lock
raises BackendUnavailable. ``op_timeout`` (default: the session timeout): longest wait for
one request. ``session``: ``"shared"`` (default) or ``"per-lock"``. From the command line:
``bench run --lock-params '{"session": "per-lock", "session_timeout": 5}'``.

Errors: a request that could not be sent or answered is ``BackendUnavailable`` when it
cannot have changed anything (a read, or a first connect) and ``LockOutcomeUnknown`` when
it was a write whose answer was lost.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import unquote

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.protocol.states import KazooState

from lockimpls.base import BackendUnavailable, Lease, LockConfigError, LockOutcomeUnknown

DEFAULT_SESSION_TIMEOUT = 10.0
DEFAULT_CONNECT_TIMEOUT = 5.0

#: kazoo errors that mean "the connection or session failed under this request".
CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    ConnectionLoss,
    OperationTimeoutError,
    SessionExpiredError,
    ConnectionClosedError,
)


def parse_hosts(urls: Sequence[str]) -> str:
    """kazoo's host string ``h:p,h:p[/chroot]`` from ``zookeeper://h:p,h:p[/chroot]`` URL(s).

    Several URLs (or one with comma-separated hosts) make one ensemble. A bare ``h:p`` is
    accepted too. Raises LockConfigError for anything else.
    """
    hosts: list[str] = []
    chroot = ""
    for url in urls:
        rest = url
        if "://" in url:
            scheme, _, rest = url.partition("://")
            if scheme not in ("zookeeper", "zk"):
                raise LockConfigError(f"not a ZooKeeper URL (zookeeper://host:port,...): {url!r}")
        rest, slash, path = rest.partition("/")
        if slash and path.strip("/"):
            chroot = "/" + unquote(path.strip("/"))
        for part in rest.split(","):
            part = part.strip()
            if not part:
                continue
            host, colon, port = part.rpartition(":")
            if not colon:
                host, port = part, "2181"
            if not host or not port.isdigit():
                raise LockConfigError(f"bad ZooKeeper host {part!r} in {url!r}; use host:port")
            hosts.append(f"{host}:{port}")
    if not hosts:
        raise LockConfigError("a ZooKeeper lock needs a URL: zookeeper://host:port[,host:port...]")
    return ",".join(hosts) + chroot


def gevent_patched() -> bool:
    """True when gevent has monkey-patched ``socket`` in this process (e.g. under Locust)."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey is not None and monkey.is_module_patched("socket"))


def _timeout_classes(client: KazooClient) -> tuple[type[BaseException], ...]:
    classes: list[type[BaseException]] = [client.handler.timeout_exception]
    if gevent_patched():
        import gevent

        classes.append(gevent.Timeout)  # gevent's AsyncResult.get raises the base class
    return tuple(classes)


class Session:
    """One kazoo client (one ZooKeeper session) plus the leases held under it.

    Why a wrapper: the session is what a ZooKeeper lock is really held by, so the place
    that sees the session die is the place that must tell the holders; and every lock
    needs the same bounded request helper and error translation.
    """

    def __init__(self, hosts: str, session_timeout: float, connect_timeout: float, op_timeout: float) -> None:
        self.hosts = hosts
        self.session_timeout = session_timeout
        self.connect_timeout = connect_timeout
        self.op_timeout = op_timeout
        self.pid = os.getpid()
        self.private = False  # True: owned by one lock instance, closed with it
        self._guard = threading.Lock()  # the leases; taken by the state listener
        self._start_guard = threading.Lock()
        self._leases: dict[int, Lease] = {}
        self.counters = {"sessions_lost": 0, "suspensions": 0}
        self.client = self._make_client()
        self.timeout_errors = _timeout_classes(self.client)
        self._connected = self.client.handler.event_object()
        self._started = False

    def _make_client(self) -> KazooClient:
        handler = None
        if gevent_patched():
            from kazoo.handlers.gevent import SequentialGeventHandler

            handler = SequentialGeventHandler()
        # Members in the order given, not shuffled: every client's session starts on the first
        # member (as an etcd client talks to its first endpoint), so a fault on that member
        # strikes every holder at once, and a run is the same from one time to the next.
        client = KazooClient(
            hosts=self.hosts,
            timeout=self.session_timeout,
            handler=handler,
            randomize_hosts=False,
            connection_retry={"max_tries": -1, "delay": 0.05, "backoff": 2, "max_delay": 1.0},
        )
        client.add_listener(self._on_state)
        return client

    # connection ---------------------------------------------------------------------
    def ensure_started(self) -> None:
        """Connect on first use; BackendUnavailable when nobody answers within connect_timeout."""
        if self._started:
            return
        with self._start_guard:
            if self._started:
                return
            try:
                self.client.start(timeout=self.connect_timeout)
            except self.timeout_errors as exc:
                raise BackendUnavailable(
                    f"cannot reach ZooKeeper at {self.hosts} within {self.connect_timeout:g}s"
                ) from exc
            except KazooException as exc:
                raise BackendUnavailable(f"cannot connect to ZooKeeper at {self.hosts}: {exc!r}") from exc
            self._started = True

    def _on_state(self, state: str) -> None:
        # Called on kazoo's connection thread/greenlet: must not block.
        if state == KazooState.CONNECTED:
            self._connected.set()
            return
        self._connected.clear()
        if state == KazooState.LOST:
            with self._guard:
                leases = list(self._leases.values())
                self._leases.clear()
                self.counters["sessions_lost"] += 1
            for lease in leases:
                lease.lost = True
        elif state == KazooState.SUSPENDED:
            with self._guard:
                self.counters["suspensions"] += 1
                for lease in self._leases.values():
                    lease.extra["suspended"] = True

    def track(self, lease: Lease) -> None:
        """Remember a lease held under this session, so its loss can be reported."""
        with self._guard:
            self._leases[id(lease)] = lease

    def untrack(self, lease: Lease) -> None:
        with self._guard:
            self._leases.pop(id(lease), None)

    # requests -------------------------------------------------------------------------
    def call(self, what: str, op: str, *args: Any, write: bool = False, **kwargs: Any) -> Any:
        """Run ``client.<op>_async(*args, **kwargs)`` and wait at most ``op_timeout`` for it.

        kazoo's own exceptions for a definite answer (NoNodeError, NodeExistsError, ...)
        pass through; connection trouble becomes BackendUnavailable for reads and
        LockOutcomeUnknown for writes (the request may have been applied).
        """
        self.ensure_started()
        for attempt in (1, 2):
            try:
                return getattr(self.client, f"{op}_async")(*args, **kwargs).get(timeout=self.op_timeout)
            except SessionExpiredError as exc:
                # The session is gone and with it everything it created, so nothing this
                # request did survives: wait for kazoo's new session and send it again.
                if attempt == 2 or not self._connected.wait(self.op_timeout):
                    raise BackendUnavailable(f"{what}: ZooKeeper at {self.hosts}: session expired") from exc
            except ConnectionClosedError as exc:
                raise BackendUnavailable(f"{what}: ZooKeeper client for {self.hosts} is closed") from exc
            except CONNECTION_ERRORS as exc:
                raise self.trouble(what, exc, write) from exc
            except self.timeout_errors as exc:
                raise self.trouble(what, exc, write) from exc
        raise AssertionError("unreachable")

    def trouble(self, what: str, exc: BaseException, write: bool) -> Exception:
        text = f"{what}: ZooKeeper at {self.hosts}: {type(exc).__name__}"
        return LockOutcomeUnknown(text) if write else BackendUnavailable(text)

    def is_connection_error(self, exc: BaseException) -> bool:
        return isinstance(exc, CONNECTION_ERRORS + self.timeout_errors)

    def event(self) -> Any:
        """An event object of the right kind for this client's handler (threading or gevent)."""
        return self.client.handler.event_object()

    def watcher(self, counter: Callable[[], None]) -> tuple[Any, Callable[[Any], None]]:
        """(event, callback): the callback counts one notification and sets the event."""
        event = self.event()

        def fire(_: Any) -> None:
            counter()
            event.set()

        return event, fire

    def close(self) -> None:
        """Stop the client: the session is closed on the server, its ephemeral nodes go."""
        try:
            if self._started and os.getpid() == self.pid:
                self.client.stop()
                self.client.close()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass
        self._started = False


_sessions: dict[tuple[int, str, float], Session] = {}
_sessions_guard = threading.Lock()


def session_options(params: dict) -> tuple[float, float, float]:
    """(session_timeout, connect_timeout, op_timeout) from a lock's params, validated."""
    try:
        session_timeout = float(params.get("session_timeout", DEFAULT_SESSION_TIMEOUT))
        connect_timeout = float(params.get("connect_timeout", DEFAULT_CONNECT_TIMEOUT))
        op_timeout = float(params.get("op_timeout", session_timeout))
    except (TypeError, ValueError) as exc:
        raise LockConfigError(f"ZooKeeper timeouts must be numbers of seconds: {exc}") from None
    if min(session_timeout, connect_timeout, op_timeout) <= 0:
        raise LockConfigError("ZooKeeper timeouts must be positive")
    return session_timeout, connect_timeout, op_timeout


def session_for(urls: Sequence[str], params: dict | None = None) -> Session:
    """This process's shared session for these hosts (or a new private one with ``session: per-lock``)."""
    params = params or {}
    hosts = parse_hosts(urls)
    session_timeout, connect_timeout, op_timeout = session_options(params)
    mode = params.get("session", "shared")
    if mode not in ("shared", "per-lock"):
        raise LockConfigError(f"params session must be 'shared' or 'per-lock', got {mode!r}")
    if mode == "per-lock":
        private = Session(hosts, session_timeout, connect_timeout, op_timeout)
        private.private = True
        return private
    pid = os.getpid()
    key = (pid, hosts, session_timeout)
    with _sessions_guard:
        session = _sessions.get(key)
        if session is None:
            for stale in [k for k in _sessions if k[0] != pid]:
                del _sessions[stale]  # the parent's, across a fork: never touch its sockets
            session = _sessions[key] = Session(hosts, session_timeout, connect_timeout, op_timeout)
    return session


def close_sessions() -> None:
    """Close this process's shared sessions (tests and short-lived tools)."""
    pid = os.getpid()
    with _sessions_guard:
        mine = [k for k in _sessions if k[0] == pid]
        sessions = [_sessions.pop(k) for k in mine]
    for s in sessions:
        s.close()
