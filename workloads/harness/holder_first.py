"""Holder-first scheduling: what a lock holder waits on runs before any waiter's poll.

Why: one process simulates many clients on one gevent loop. When a holder's reply (from
the resource server, or of its release) or the end of its critical-section sleep becomes
ready together with the wake-ups of dozens of polling waiters, the loop would run them
in arrival order, so every step of the hold also waited for the waiters' polls.
Independent clients do not wait for each other's CPU; giving the holder's wake-ups
libev's highest priority brings the simulated hold back toward theirs. Nothing changes
for the lock algorithms: waiters poll exactly as often, with the same commands; they only
yield to a holder when both are ready in the same loop turn. The plain gevent floor
(``benchmarks/plain_flash_sale_loop.py``) uses the same helpers, so the harness is
compared under the same scheduling.

A client is a holder inside :func:`holding` (from its acquire's return to the end of its
release). Its commands through :class:`lockimpls.redis_conn.DirectCommands` (the seed
Redis locks' release, the flash-sale resource's steps) and its :func:`holder_sleep` get
the priority. On a gevent loop without watcher priorities (libuv) everything keeps the
plain order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import gevent

from lockimpls import redis_conn

#: libev's highest watcher priority (EV_MAXPRI); everything else keeps the default, 0.
HOLDER_PRIORITY = 2

_holders: set[int] = set()


def _set_priority(watcher: Any, priority: int) -> None:
    try:
        if watcher.priority != priority and not watcher.active:
            watcher.priority = priority
    except (AttributeError, TypeError):
        pass  # a loop without priorities: plain order


def _on_take(conn: Any) -> None:
    """Connections are shared: each command gets the priority of the client sending it."""
    priority = HOLDER_PRIORITY if id(gevent.getcurrent()) in _holders else 0
    sock = getattr(conn, "_sock", None)
    for name in ("_read_event", "_write_event"):
        watcher = getattr(sock, name, None)
        if watcher is not None:
            _set_priority(watcher, priority)


def install() -> None:
    """Give holders' Redis commands the priority (call once per process, gevent-patched)."""
    redis_conn.set_take_hook(_on_take)


@contextmanager
def holding() -> Iterator[None]:
    """Mark the calling client as the holder of a lock for the block's duration."""
    me = id(gevent.getcurrent())
    _holders.add(me)
    try:
        yield
    finally:
        _holders.discard(me)


def holder_sleep(seconds: float) -> None:
    """``time.sleep`` for a holder: its wake-up runs before waiters' that are due with it."""
    if seconds <= 0:
        gevent.sleep(0)
        return
    hub = gevent.get_hub()
    timer = hub.loop.timer(seconds)
    _set_priority(timer, HOLDER_PRIORITY)
    try:
        hub.wait(timer)
    finally:
        timer.close()
