"""Holder-first scheduling: what a lock holder waits on runs before any waiter's poll.

Why: one process simulates many clients on one gevent loop. When a holder's reply from
the resource server (or the end of its critical-section sleep) becomes ready together
with the wake-ups of dozens of polling waiters, the loop would run them in arrival
order, so every step of the hold also waited for the waiters' polls. Independent clients
do not wait for each other's CPU; giving the holder's wake-ups libev's highest priority
brings the simulated hold back toward theirs. Nothing changes for the lock algorithms:
waiters poll exactly as often, on the same commands; they only yield to the holder when
both are ready at once. The plain gevent floor (benchmarks/plain_flash_sale_loop.py)
uses the same two helpers, so the harness is compared with the same scheduling.

On a gevent loop without watcher priorities (libuv) both helpers fall back to plain
gevent behaviour.
"""

from __future__ import annotations

from typing import Any

import gevent

#: libev's highest watcher priority (EV_MAXPRI); waiters keep the default, 0.
HOLDER_PRIORITY = 2


def _raise(watcher: Any) -> None:
    try:
        if not watcher.active:
            watcher.priority = HOLDER_PRIORITY
    except (AttributeError, TypeError):
        pass  # a loop without priorities: plain order


def prioritize_connection(conn: Any) -> None:
    """Give a just-connected redis-py connection's socket the holder's priority.

    For connections that only holders use (the resource's): passed as ``on_connect`` to
    :class:`lockimpls.redis_conn.DirectCommands`.
    """
    sock = getattr(conn, "_sock", None)
    for name in ("_read_event", "_write_event"):
        watcher = getattr(sock, name, None)
        if watcher is not None:
            _raise(watcher)


def holder_sleep(seconds: float) -> None:
    """``time.sleep`` for a holder: its wake-up runs before waiters' that are due with it."""
    if seconds <= 0:
        gevent.sleep(0)
        return
    hub = gevent.get_hub()
    timer = hub.loop.timer(seconds)
    _raise(timer)
    try:
        hub.wait(timer)
    finally:
        timer.close()
