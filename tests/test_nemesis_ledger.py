"""What the nemesis counts as the service granting again: purchases and refused accesses alike.

A restart or failover that loses the token counter with the lock state leaves a fenced case's
new tokens below the fence: every access is refused, nothing is bought, and the lock grants on.
Counting purchases alone, the nemesis read that as a service that grants nothing, stopped
striking the case after one strike, and the case ran to its duration cap (150 s beside its
group's 17 s; full matrix, 2026-12-05). Real Redis as the resource.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.nemesis.faults import Mailbox
from infra.redis_server import RedisServer
from workloads.harness.resource import FlashSaleResource, StaleToken

pytestmark = pytest.mark.server

ITEM = "item-0"


@pytest.fixture
def resource(tmp_path: Path) -> Iterator[tuple[FlashSaleResource, Mailbox]]:
    server = RedisServer(tmp_path, name="ledger-resource").start()
    try:
        res = FlashSaleResource(server.url)
        res.reset([ITEM], stock=1_000)
        box = Mailbox(server.url, label="0")
        yield res, box
        box.client.close()
        res.client.close()
    finally:
        server.stop()


def test_a_purchase_moves_the_ledger(resource: tuple[FlashSaleResource, Mailbox]) -> None:
    res, box = resource
    before = box.ledger()
    assert res.fenced_sale(ITEM, token=5, new_stock=999, client="c1", qty=1, enforce=True)
    assert box.ledger() == before + 1


def test_accesses_refused_below_the_fence_move_the_ledger_too(
    resource: tuple[FlashSaleResource, Mailbox],
) -> None:
    res, box = resource
    assert res.fenced_sale(ITEM, token=1_299, new_stock=999, client="c1", qty=1, enforce=True)
    after_sale = box.ledger()
    # the counter restarted with the server: token 1 onwards, each grant's write refused
    refused = [
        res.fenced_sale(ITEM, token=t, new_stock=998, client="c2", qty=1, enforce=True) for t in (1, 2, 3)
    ]
    assert refused == [False, False, False]
    with pytest.raises(StaleToken):
        res.read_stock(ITEM, token=4, enforce=True, client="c3")
    assert box.ledger() == after_sale + 4  # three refused writes and one refused read: four grants
