"""A strike's holder keeps its lock until the service grants it again, or until the wait ends.

bench tells the holder of a server-fault strike that the fault is over (``lockbench:res:healed``).
With a fixed half second, a service whose clients reconnect after a second never showed the
lock it lost (PostgreSQL advisory locks "survived" restarts in the quick matrix). Now the
holder is let go as soon as another client has bought (a purchase on the order ledger while
the holder holds: the overlap the checker counts), or after ``REGRANT_WAIT_S``, never past
half the lease. Real Redis servers: one restarted as the lock server, one as the resource.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.nemesis import faults
from bench.nemesis.faults import FaultThread, parse_fault
from infra.redis_server import RedisServer
from tests.helpers import lock_and_resource_redis
from workloads.harness.resource import FlashSaleResource

pytestmark = pytest.mark.server

ITEM = "item-0"
#: a hang guard, not a speed claim: every wait below ends on an event long before it
GUARD_S = 9


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[RedisServer, RedisServer]]:
    with lock_and_resource_redis(tmp_path, "regrant") as pair:
        yield pair


def _strike(
    lock: RedisServer, resource: RedisServer, lease_s: float | None
) -> tuple[FaultThread, FlashSaleResource]:
    """Start the fault, then play the workload's side: reset (the load started) and claim the armed strike."""
    thread = FaultThread(parse_fault("restart@held"), lock, resource.url, deadline_s=60, lease_s=lease_s)
    thread.start()
    res = FlashSaleResource(resource.url)
    res.reset([ITEM], 100)
    deadline = time.monotonic() + GUARD_S
    while not res.armed():
        assert time.monotonic() < deadline, "the fault was never armed"
        time.sleep(0.02)
    assert res.signal_held("client-a")
    return thread, res


def test_the_holder_keeps_its_lock_until_another_client_has_bought(
    servers: tuple[RedisServer, RedisServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    lock, resource = servers
    monkeypatch.setitem(faults.REGRANT_WAIT_S, "restart", 3600.0)
    thread, res = _strike(lock, resource, lease_s=None)
    try:
        # nobody else has bought: the holder is kept (a fixed grace let it go after 0.5 s)
        assert not res.wait_healed(2)
        res.append_order(ITEM, "client-b", 1)  # the service granted it again
        assert res.wait_healed(GUARD_S)
        thread.join(GUARD_S)
        assert [w.kind for w in thread.windows] == ["restart"] and thread.holder == "client-a"
    finally:
        thread.stop()
        res.client.close()


def test_a_safe_lock_s_holder_is_let_go_after_the_wait_and_never_past_half_its_lease(
    servers: tuple[RedisServer, RedisServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    lock, resource = servers
    monkeypatch.setitem(faults.REGRANT_WAIT_S, "restart", 3600.0)
    thread, res = _strike(lock, resource, lease_s=1.0)
    try:
        assert thread.regrant_wait_s() == 0.5  # half the lease, not the hour
        # no purchase ever comes: only the bound can let the holder go
        assert res.wait_healed(GUARD_S)
        assert res.final_state([ITEM])["items"][ITEM]["orders_count"] == 0
        thread.join(GUARD_S)
        assert len(thread.windows) == 1
    finally:
        thread.stop()
        res.client.close()
