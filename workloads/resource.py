"""The protected resource of flash-sale: stock, an orders ledger and an entry witness, on Redis.

It always lives on its own server, never on the lock server, so a lock that loses its
state cannot take the evidence with it. Reads and writes are deliberately separate
commands: the lock is what must make read-modify-write safe.
"""

from __future__ import annotations

import redis


class FlashSaleResource:
    """Stock per item, a ledger of orders, and a witness counter of clients inside."""

    def __init__(self, url: str, namespace: str = "lockbench:res") -> None:
        self.client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=10)
        self.ns = namespace

    def _k(self, kind: str, item: str) -> str:
        return f"{self.ns}:{kind}:{item}"

    def reset(self, items: list[str], stock: int) -> None:
        pipe = self.client.pipeline(transaction=False)
        for item in items:
            pipe.set(self._k("stock", item), stock)
            pipe.set(self._k("initial", item), stock)
            pipe.delete(self._k("orders", item), self._k("witness", item))
        pipe.execute()

    def read_stock(self, item: str) -> int:
        return int(self.client.get(self._k("stock", item)) or 0)

    def write_stock(self, item: str, value: int) -> None:
        self.client.set(self._k("stock", item), value)

    def append_order(self, item: str, client: str, qty: int) -> None:
        self.client.rpush(self._k("orders", item), f"{client}:{qty}")

    def witness_enter(self, item: str) -> int:
        """INCR on entry; the value read says how many clients are inside, this one included."""
        return int(self.client.incr(self._k("witness", item)))

    def witness_exit(self, item: str) -> None:
        self.client.decr(self._k("witness", item))

    def final_state(self, items: list[str]) -> dict:
        items_state = {}
        for item in items:
            orders = self.client.lrange(self._k("orders", item), 0, -1)
            units = sum(int(o.rsplit(b":", 1)[1]) for o in orders)
            items_state[item] = {
                "initial": int(self.client.get(self._k("initial", item)) or 0),
                "stock": self.read_stock(item),
                "orders_units": units,
                "orders_count": len(orders),
            }
        return {"items": items_state}
