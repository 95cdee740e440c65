"""flash-sale with 50 ms between writing the stock and appending the order (tests only).

It widens the window in which Locust's ``--run-time`` stop cuts a purchase between its
two writes, so a test meets that case on every run instead of now and then.
"""

from __future__ import annotations

import time

from workloads.flash_sale import FlashSaleUser


class SlowLedgerUser(FlashSaleUser):
    """A buyer that takes its time between the stock write and the order."""

    def sell(self, item: str, new_stock: int, qty: int) -> None:
        self.resource.write_stock(item, new_stock)
        time.sleep(0.05)
        self.resource.append_order(item, self.client_id, qty)


FlashSaleUser.abstract = True
