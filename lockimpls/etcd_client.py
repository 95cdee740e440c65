"""A small client for etcd's v3 HTTP/JSON gateway, over pooled keep-alive HTTP connections.

Why the gateway rather than gRPC: Locust runs users as gevent greenlets, and grpcio's C
core does its own I/O that gevent cannot patch (``grpc.experimental.gevent`` exists, is
experimental, and must run before any channel is made). The gateway is plain HTTP/1.1.

Why ``http.client`` with a tiny pool rather than urllib3, requests or geventhttpclient:
it does its I/O through the ``socket`` module, so ``gevent.monkey`` makes it cooperative
with no special setup, and it works the same in plain threads (the tests, ``bench``'s own
measurements) where geventhttpclient's gevent-bound pool must not be shared between OS
threads. Measured on this machine (one etcd 3.4 node, loopback, p50 of a ``range``):
urllib3 2.x 630-740 us, http.client 510-600 us, geventhttpclient 420-470 us (under
gevent only); urllib3's per-request bookkeeping costs more than the HTTP work, and
geventhttpclient's edge is smaller than the fsync of one etcd write. The cost that
remains is JSON encoding on both sides; ``benchmarks/engines_floor.py`` measures a lock
pair against one ``put`` over this same client, so that cost is in the floor too.

Gateway pitfalls handled here (etcd 3.4): keys and values are base64; 64-bit integers
(revisions, lease ids, counts, TTLs) arrive as JSON strings; fields equal to their zero
value are omitted (a failed txn has no ``succeeded``, an empty range no ``kvs`` or
``count``, a keepalive of a dead lease no ``TTL``); streaming calls (watch, keepalive)
answer newline-separated ``{"result": ...}`` objects.

Errors, translated once here:

- nothing was sent (connect refused or timed out on every endpoint) ->
  :class:`~lockimpls.base.BackendUnavailable`;
- a request was sent and its answer was lost (read timeout, connection dropped), or etcd
  answered "unavailable"/"deadline exceeded" -> :class:`~lockimpls.base.LockOutcomeUnknown`
  for requests that change state, :class:`~lockimpls.base.BackendUnavailable` for reads.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import select
import threading
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn
from urllib.parse import urlsplit

from lockimpls.base import BackendUnavailable, LockConfigError, LockError, LockOutcomeUnknown

#: Seconds to wait for a TCP connect: an unreachable endpoint fails fast.
CONNECT_TIMEOUT = 2.0
#: Seconds to wait for the answer of one unary request before its outcome is unknown.
REQUEST_TIMEOUT = 5.0
#: Idle keep-alive connections kept per (process, endpoint); more are opened on demand.
POOL_SIZE = 128

_GRPC_UNAVAILABLE = {4, 14}  # DEADLINE_EXCEEDED, UNAVAILABLE
_GRPC_AUTH = {7, 16}  # PERMISSION_DENIED, UNAUTHENTICATED
_GRPC_NOT_FOUND = 5
_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


class EtcdError(LockError):
    """etcd refused a request for a reason that is neither transient nor about auth."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class _Lost(Exception):
    """A request may have reached etcd but no usable answer came back."""


class EtcdNotFound(EtcdError):
    """The lease (or other object) named in the request does not exist (gRPC NOT_FOUND)."""


def b64(data: bytes | str) -> str:
    """Base64 text of ``data`` as the gateway wants keys and values."""
    if isinstance(data, str):
        data = data.encode()
    return base64.b64encode(data).decode("ascii")


def unb64(text: str | None) -> bytes:
    return base64.b64decode(text) if text else b""


def num(value: Any) -> int:
    """A 64-bit number from the gateway (a string, or absent when zero) as int."""
    return int(value) if value not in (None, "") else 0


def prefix_end(prefix: bytes) -> bytes:
    """The ``range_end`` that selects every key starting with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\x00"  # etcd's "all keys"


def parse_endpoints(urls: Sequence[str]) -> tuple[str, ...]:
    """``http://host:port`` base URLs from URLs that may each hold a comma-separated list.

    Accepts ``http``, ``https`` and ``etcd`` (an alias of ``http``); port 2379 by default.
    """
    out: list[str] = []
    for url in urls:
        for part in str(url).split(","):
            part = part.strip()
            if not part:
                continue
            try:
                parts = urlsplit(part if "://" in part else f"http://{part}")
                port = parts.port or 2379
            except ValueError as exc:
                raise LockConfigError(f"invalid etcd URL {part!r}: {exc}") from None
            scheme = {"etcd": "http"}.get(parts.scheme, parts.scheme)
            if scheme not in ("http", "https") or not parts.hostname:
                raise LockConfigError(f"invalid etcd URL {part!r}: use http://host:port")
            host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
            out.append(f"{scheme}://{host}:{port}")
    if not out:
        raise LockConfigError("no etcd endpoint given; pass http://host:port")
    return tuple(out)


class _Endpoint:
    """Idle keep-alive connections to one etcd member, shared by the threads of a process."""

    def __init__(self, base: str, connect_timeout: float, max_idle: int) -> None:
        parts = urlsplit(base)
        self.base = base
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 2379
        self.https = parts.scheme == "https"
        self.connect_timeout = connect_timeout
        self.max_idle = max_idle
        self._idle: list[http.client.HTTPConnection] = []
        self._mutex = threading.Lock()

    def connect(self) -> http.client.HTTPConnection:
        """A new connected connection; OSError when the member cannot be reached."""
        cls = http.client.HTTPSConnection if self.https else http.client.HTTPConnection
        conn = cls(self.host, self.port, timeout=self.connect_timeout)
        try:
            conn.connect()
        except BaseException:
            conn.close()
            raise
        return conn

    def get(self) -> http.client.HTTPConnection:
        while True:
            with self._mutex:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self.connect()
            # An idle socket that is readable was closed by the server (or holds garbage):
            # reusing it would turn "never sent" into "answer lost".
            if conn.sock is not None and not select.select([conn.sock], [], [], 0)[0]:
                return conn
            conn.close()

    def put(self, conn: http.client.HTTPConnection) -> None:
        with self._mutex:
            if len(self._idle) < self.max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._mutex:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class EtcdClient:
    """The gateway calls the lock algorithms need, with failover across endpoints.

    Why one per (process, endpoints): connections must never cross a fork (Locust forks
    its workers), and sharing one pool between all locks of a process keeps the number
    of connections to etcd bounded by the concurrency, not by the number of locks.
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        connect_timeout: float = CONNECT_TIMEOUT,
        request_timeout: float = REQUEST_TIMEOUT,
        pool_size: int = POOL_SIZE,
    ) -> None:
        self.endpoints = parse_endpoints(endpoints)
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        self._members = [_Endpoint(ep, connect_timeout, pool_size) for ep in self.endpoints]
        self._current = 0

    # transport ------------------------------------------------------------------------
    def _send(
        self, path: str, body: dict, timeout: float | None, *, pooled: bool = True
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse, _Endpoint]:
        """Send to the current member, failing over while nothing could be sent.

        Raises BackendUnavailable when no member accepted a connection, and _Lost once the
        request may have left this process.
        """
        data = json.dumps(body, separators=(",", ":")).encode()
        start = self._current
        last: Exception | None = None
        for i in range(len(self._members)):
            index = (start + i) % len(self._members)
            member = self._members[index]
            try:
                conn = member.get() if pooled else member.connect()
            except OSError as exc:
                last = exc
                continue
            if index != start:
                self._current = index
            try:
                assert conn.sock is not None
                conn.sock.settimeout(timeout)
                conn.request("POST", path, body=data, headers=_HEADERS)
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise _Lost(str(exc) or type(exc).__name__) from exc
            return conn, resp, member
        raise BackendUnavailable(f"etcd {path}: no endpoint reachable ({', '.join(self.endpoints)}): {last}")

    def call(self, path: str, body: dict, *, read_only: bool = False, timeout: float | None = -1.0) -> dict:
        """One unary gateway request; the decoded JSON answer.

        ``timeout`` bounds the wait for the answer: negative (the default) means the
        client's request timeout, None waits for ever (server-side blocking calls).
        """
        if timeout is not None and timeout < 0:
            timeout = self.request_timeout
        try:
            conn, resp, member = self._send(path, body, timeout)
            try:
                raw = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise _Lost(str(exc) or type(exc).__name__) from exc
        except _Lost as exc:
            self._lost(path, exc, read_only)
        if resp.will_close:
            conn.close()
        else:
            member.put(conn)
        try:
            answer = json.loads(raw or b"{}")
        except ValueError:
            raise EtcdError(f"etcd {path}: not a JSON answer (HTTP {resp.status})") from None
        if resp.status != 200 or "error" in answer:
            self._refused(path, member.base, answer, resp.status, read_only)
        return answer["result"] if isinstance(answer.get("result"), dict) else answer

    def _lost(self, path: str, exc: BaseException, read_only: bool) -> NoReturn:
        if read_only:
            raise BackendUnavailable(f"etcd {path}: no answer ({exc})") from exc
        raise LockOutcomeUnknown(f"etcd {path}: sent, answer lost ({exc})") from exc

    def _refused(self, path: str, endpoint: str, answer: dict, status: int, read_only: bool) -> NoReturn:
        code = answer.get("code")
        message = answer.get("message") or answer.get("error") or f"HTTP {status}"
        where = f"etcd {path} on {endpoint}"
        if code == _GRPC_NOT_FOUND:
            raise EtcdNotFound(f"{where}: {message}", code)
        if code in _GRPC_AUTH:
            raise LockConfigError(f"{where}: {message} (this etcd needs authentication)")
        if code in _GRPC_UNAVAILABLE or status in (502, 503, 504):
            if read_only:
                raise BackendUnavailable(f"{where}: {message}")
            raise LockOutcomeUnknown(f"{where}: {message}")
        raise EtcdError(f"{where}: {message}", code)

    def stream(self, path: str, body: dict, *, timeout: float | None) -> Iterator[dict]:
        """A streaming request (watch): yields each ``result`` until the caller stops.

        ``timeout`` bounds each wait for data; when it passes a ``TimeoutError`` is raised.
        The stream gets its own connection, closed when the generator is closed (a
        cancelled stream cannot carry another request).
        """
        try:
            conn, resp, member = self._send(path, body, timeout, pooled=False)
        except _Lost as exc:
            raise BackendUnavailable(f"etcd {path}: no answer ({exc})") from exc
        try:
            if resp.status != 200:
                answer = json.loads(resp.read() or b"{}")
                self._refused(path, member.base, answer, resp.status, read_only=True)
            while True:
                try:
                    line = resp.readline()
                except TimeoutError:
                    raise TimeoutError(f"etcd {path}: nothing within {timeout}s") from None
                except (OSError, http.client.HTTPException) as exc:
                    raise BackendUnavailable(f"etcd {path}: stream broken ({exc})") from exc
                if not line:
                    raise BackendUnavailable(f"etcd {path}: stream ended by the server")
                if line.strip():
                    message = json.loads(line)
                    if "error" in message:
                        self._refused(path, member.base, message["error"], 200, read_only=True)
                    yield message.get("result", message)
        finally:
            conn.close()

    # etcd operations -------------------------------------------------------------------
    def grant(self, ttl: int) -> tuple[int, int]:
        """A new lease; (id, TTL the server granted, which may be raised to its minimum)."""
        r = self.call("/v3/lease/grant", {"TTL": ttl})
        return num(r.get("ID")), num(r.get("TTL"))

    def keepalive(self, lease_id: int, timeout: float = -1.0) -> int:
        """Refresh a lease; the TTL it has now, 0 when it no longer exists."""
        r = self.call("/v3/lease/keepalive", {"ID": str(lease_id)}, timeout=timeout)
        return num(r.get("TTL"))

    def revoke(self, lease_id: int) -> bool:
        """Revoke a lease (its keys are deleted with it); False when it was already gone."""
        try:
            self.call("/v3/lease/revoke", {"ID": str(lease_id)})
        except EtcdNotFound:
            return False
        return True

    def put(self, key: bytes | str, value: bytes | str = b"", lease: int = 0) -> int:
        """Put a key; the revision of the write."""
        body: dict[str, Any] = {"key": b64(key), "value": b64(value)}
        if lease:
            body["lease"] = str(lease)
        return num(self.call("/v3/kv/put", body)["header"].get("revision"))

    def range(
        self, key: bytes | str, range_end: bytes | None = None, timeout: float = -1.0, **options: Any
    ) -> dict:
        """A range request; ``options`` are gateway fields (``limit``, ``sort_order``...)."""
        body: dict[str, Any] = {"key": b64(key), **options}
        if range_end is not None:
            body["range_end"] = b64(range_end)
        return self.call("/v3/kv/range", body, read_only=True, timeout=timeout)

    def delete(self, key: bytes | str) -> int:
        """Delete one key; how many keys were deleted (0 or 1)."""
        return num(self.call("/v3/kv/deleterange", {"key": b64(key)}).get("deleted"))

    def txn(self, compare: list[dict], success: list[dict], failure: list[dict] | None = None) -> dict:
        """A transaction; the answer with ``succeeded`` filled in (the gateway omits False)."""
        r = self.call("/v3/kv/txn", {"compare": compare, "success": success, "failure": failure or []})
        r["succeeded"] = bool(r.get("succeeded", False))
        return r


def client_for(urls: Sequence[str], **settings: Any) -> EtcdClient:
    """The shared client of this process for these endpoints (never reused across a fork)."""
    endpoints = parse_endpoints(urls)
    pid = os.getpid()
    key = (pid, endpoints, tuple(sorted(settings.items())))
    client = _clients.get(key)
    if client is not None:
        return client
    for stale in [k for k in _clients if k[0] != pid]:
        del _clients[stale]  # the parent's sockets: never touch them in a child
    return _clients.setdefault(key, EtcdClient(endpoints, **settings))


_clients: dict[tuple, EtcdClient] = {}


def close_clients() -> None:
    """Close this process's connections (tests and short-lived tools)."""
    pid = os.getpid()
    for key in [k for k in _clients if k[0] == pid]:
        for member in _clients.pop(key)._members:
            member.close()
