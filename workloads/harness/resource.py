"""The protected resource of flash-sale: stock, an orders ledger and an entry witness, on Redis.

It always lives on its own server, never on the lock server, so a lock that loses its
state cannot take the evidence with it. Reads and writes are deliberately separate
commands: the lock is what must make read-modify-write safe.

Fencing: with a token, every access goes through a small script that remembers the
highest token seen per item. A token older than that is *stale*: its holder lost the
lock to someone newer. ``observe`` accepts stale accesses and counts them (what happens
without fencing); ``enforce`` refuses them and counts the refusals (what fencing buys).
"""

from __future__ import annotations

import redis

from lockimpls.redis_conn import DirectCommands

#: KEYS: stock, orders, fence-max, stale-counter, stale-log; ARGV: token, enforce(0/1),
#: then for a read [client], for a write [new stock, order "<client>:<qty>"]. Every stale
#: access is also logged as "<r|w>|<token>|<client>" (capped at STALE_LOG_MAX entries), so
#: the checkers can tell which holder was refused: a refused holder that overlapped nobody
#: means the tokens, not the holder, were wrong.
FENCED_READ = """
local max = tonumber(redis.call('GET', KEYS[3]) or '-1')
local token = tonumber(ARGV[1])
if token < max then
  redis.call('INCR', KEYS[4])
  if KEYS[5] and redis.call('LLEN', KEYS[5]) < 10000 then
    redis.call('RPUSH', KEYS[5], 'r|' .. ARGV[1] .. '|' .. (ARGV[3] or ''))
  end
  if ARGV[2] == '1' then return -1 end
else
  redis.call('SET', KEYS[3], token)
end
return tonumber(redis.call('GET', KEYS[1]) or '0')
"""

FENCED_WRITE = """
local max = tonumber(redis.call('GET', KEYS[3]) or '-1')
local token = tonumber(ARGV[1])
if token < max then
  redis.call('INCR', KEYS[4])
  if KEYS[5] and redis.call('LLEN', KEYS[5]) < 10000 then
    redis.call('RPUSH', KEYS[5], 'w|' .. ARGV[1] .. '|' .. (string.match(ARGV[4], '^(.*):') or ''))
  end
  if ARGV[2] == '1' then return 0 end
else
  redis.call('SET', KEYS[3], token)
end
redis.call('SET', KEYS[1], ARGV[3])
redis.call('RPUSH', KEYS[2], ARGV[4])
return 1
"""

FENCING_MODES = ("off", "observe", "enforce")
#: Most stale accesses the log keeps per item (the scripts' 10000); counters count them all.
STALE_LOG_MAX = 10_000


#: Where the resource's keys live (a case has a Redis database of its own, so one name serves).
NAMESPACE = "lockbench:res"

#: Keys (under the namespace) that count and sign every reset; no reset deletes them.
RESETS = "resets"
RESET_LOG = "reset_log"
#: Signatures the reset log keeps (the newest).
RESET_LOG_MAX = 100

#: Between a claiming holder's client id and its lock's owner value in the fault signal.
OWNER_SEP = "|owner="
#: Before the ms the claiming holder's lease still had to run.
LEFT_SEP = "|left="
#: A command on the ``healed`` list that is not the end of the fault: ``pause:task:<ms>`` or
#: ``pause:world:<ms>``, which the claimed holder obeys and then waits on (bench explore).
PAUSE_PREFIX = "pause:"


class StaleToken(Exception):
    """The resource refused an access: its token is older than one it has already seen."""


def grants_seen(client: redis.Redis, namespace: str = NAMESPACE) -> int:
    """The grants a case's buyers used so far, as the resource saw them: each order, and each
    access its fence refused (a refused access is a grant the fence turned away).

    Why both: where a restart or failover loses the token counter with the lock state, a fenced
    case's every access is refused and nothing is bought while the lock grants on; the nemesis,
    which paces its strikes by this count (``bench.nemesis.faults.Mailbox.ledger``), counted
    orders alone, read that as a service granting nothing and stopped striking the case, which
    ran to its duration cap (150 s beside its group's 17 s; full matrix, 2026-12-05).
    One SCAN: the nemesis polls it every 50 ms per case.
    """
    orders_prefix = f"{namespace}:orders:".encode()
    refused_prefixes = (f"{namespace}:stale_reads:".encode(), f"{namespace}:stale_writes:".encode())
    pipe = client.pipeline(transaction=False)
    queued = False
    for key in client.scan_iter(match=f"{namespace}:*", count=1000):
        if key.startswith(orders_prefix):
            pipe.llen(key)
        elif key.startswith(refused_prefixes):
            pipe.get(key)
        else:
            continue
        queued = True
    return sum(int(v or 0) for v in pipe.execute()) if queued else 0


class FlashSaleResource:
    """Stock per item, a ledger of orders, and a witness counter of clients inside.

    The steps a holder takes (witness, read, write, order) are sent through
    :class:`~lockimpls.redis_conn.DirectCommands`: they lie inside every hold, so the
    client's own cost per command would be measured as the lock's hold time.
    """

    def __init__(self, url: str, namespace: str = NAMESPACE) -> None:
        self.client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=10)
        self.ns = namespace
        self._read = self.client.register_script(FENCED_READ)
        self._write = self.client.register_script(FENCED_WRITE)
        self._direct = DirectCommands(self.client)
        self._keys: dict[tuple[str, str], str] = {}

    def _k(self, kind: str, item: str) -> str:
        key = self._keys.get((kind, item))
        if key is None:
            key = self._keys[(kind, item)] = f"{self.ns}:{kind}:{item}"
        return key

    def reset(self, items: list[str], stock: int, who: str = "") -> int:
        """Set every item's stock afresh and empty its ledger; the number of resets so far, this one included.

        Every reset is counted and signed (``who``) in two keys that no reset deletes, so the
        final state can tell whether the resource was reset again while the case ran (see
        :meth:`final_state`): such a reset empties the ledger under buyers already selling,
        and a holder that read the stock before it writes the old count back, so the stock
        and the ledger then disagree by the orders before the reset (a harness fault, never
        the lock's).
        """
        pipe = self.client.pipeline(transaction=False)
        for item in items:
            pipe.set(self._k("stock", item), stock)
            pipe.set(self._k("initial", item), stock)
            kinds = ("orders", "witness", "fence", "stale_reads", "stale_writes", "stale_log")
            pipe.delete(*(self._k(kind, item) for kind in kinds))
        pipe.delete(
            f"{self.ns}:signal", f"{self.ns}:armed", f"{self.ns}:healed",
            f"{self.ns}:crash:next", f"{self.ns}:crash:ledger", f"{self.ns}:crash:end",
        )  # fmt: skip
        pipe.set(f"{self.ns}:started", 1)  # a fault waiting for the load may arm now
        pipe.incr(f"{self.ns}:{RESETS}")
        pipe.rpush(f"{self.ns}:{RESET_LOG}", who or "unsigned")
        pipe.ltrim(f"{self.ns}:{RESET_LOG}", -RESET_LOG_MAX, -1)
        return int(pipe.execute()[-3])

    def _fence_keys(self, item: str, counter: str) -> list[str]:
        return [
            self._k("stock", item),
            self._k("orders", item),
            self._k("fence", item),
            self._k(counter, item),
            self._k("stale_log", item),
        ]

    def read_stock(self, item: str, token: int | None = None, enforce: bool = False, client: str = "") -> int:
        """The stock; with a token, a fenced read (raises StaleToken when enforced and stale)."""
        if token is None:
            return int(self._direct.execute("GET", self._k("stock", item)) or 0)
        keys = self._fence_keys(item, "stale_reads")
        value = int(self._direct.evalsha(self._read, keys, [token, int(enforce), client]))
        if value < 0:
            raise StaleToken(f"read of {item} with token {token} refused")
        return value

    def write_stock(self, item: str, value: int) -> None:
        self._direct.execute("SET", self._k("stock", item), value)

    def append_order(self, item: str, client: str, qty: int) -> None:
        self._direct.execute("RPUSH", self._k("orders", item), f"{client}:{qty}")

    def fenced_sale(
        self, item: str, token: int, new_stock: int, client: str, qty: int, enforce: bool
    ) -> bool:
        """Write the new stock and the order in one step, guarded by the token."""
        args = [token, int(enforce), new_stock, f"{client}:{qty}"]
        return bool(self._direct.evalsha(self._write, self._fence_keys(item, "stale_writes"), args))

    def witness_enter(self, item: str) -> int:
        """INCR on entry; the value read says how many clients are inside, this one included."""
        return int(self._direct.execute("INCR", self._k("witness", item)))

    def witness_exit(self, item: str) -> None:
        self._direct.execute("DECR", self._k("witness", item))

    # fault coordination (bench's fault thread <-> holders) ------------------------------
    def armed(self) -> bool:
        """True when a fault waits for a holder's signal (see bench.nemesis.faults)."""
        return self.armed_at() is not None

    def armed_at(self) -> int | None:
        """bench's ``time.monotonic_ns()`` when it armed the waiting fault; None when none waits.

        A holder claims a fault only with a lease granted after that moment, so a repeated
        fault strikes a grant the service made after its previous heal.
        """
        value = self._direct.execute("GET", f"{self.ns}:armed")
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            return 0  # an older bench armed with "1": any holder may claim it

    def wait_healed(self, timeout: float) -> str | None:
        """Block (cooperatively under gevent) until bench says the fault is over, at most ``timeout`` s.

        The holder of a strike keeps its lock until then, so it holds through the whole
        fault and no longer: a repeated fault spends no time on a fixed hold. Returns what
        bench said ("1", or "missed" when the strike did not count for this case), None when
        the time ran out first.
        """
        # a fractional timeout (Redis 6+): rounded up to a whole second, a holder told to let go
        # 0.25 s before its lease ran out held on 0.3 s past it (flash_sale.py LEASE_MARGIN_S)
        popped = self.client.blpop([f"{self.ns}:healed"], timeout=round(max(0.01, min(timeout, 9.0)), 3))
        if popped is None:
            return None
        value = popped[1]
        return value.decode() if isinstance(value, bytes) else str(value)

    def signal_held(self, client: str, owner: str = "", left_ms: int | None = None) -> bool:
        """Claim the armed fault for this holder (only one claims it); True when claimed.

        ``owner`` is the value the lock wrote for this grant (``Lease.owner``): bench finds the
        server holding the holder's key by it, whatever the lock names its keys. ``left_ms`` is
        what the holder's own lease still has to run (None: no lease): a strike keeps a holder
        only while its lease lasts.
        """
        if self.client.delete(f"{self.ns}:armed"):
            value = f"{client}{OWNER_SEP}{owner}" if owner else client
            if left_ms is not None:
                value += f"{LEFT_SEP}{int(left_ms)}"
            self.client.rpush(f"{self.ns}:signal", value)
            return True
        return False

    def resets_since(self, count: int) -> tuple[int, list[str]]:
        """Resets after the one that returned ``count``: how many, and who made them (oldest first)."""
        now = int(self.client.get(f"{self.ns}:{RESETS}") or 0)
        later = max(0, now - count)
        if not later:
            return 0, []
        signed = self.client.lrange(f"{self.ns}:{RESET_LOG}", -min(later, RESET_LOG_MAX), -1)
        return later, [s.decode(errors="replace") if isinstance(s, bytes) else str(s) for s in signed]

    def final_state(self, items: list[str], mode: str = "off", resets_at_start: int | None = None) -> dict:
        """Stock, ledger and fencing counters of ``items``, read at the end of a case.

        ``resets_at_start``: what this case's own reset returned; any later reset is reported as
        ``resets_during_case`` with its signatures (``reset_by``), for the stock check to refuse.
        """
        items_state = {}
        stale_reads = stale_writes = 0
        stale_log: list[list] = []
        for item in items:
            orders = self.client.lrange(self._k("orders", item), 0, -1)
            units = sum(int(o.rsplit(b":", 1)[1]) for o in orders)
            items_state[item] = {
                "initial": int(self.client.get(self._k("initial", item)) or 0),
                "stock": self.read_stock(item),
                "orders_units": units,
                "orders_count": len(orders),
                # the ledger's length again, after the stock was read: more means sales were still
                # running while the final state was read (stock and ledger then disagree by them)
                "orders_count_after": int(self.client.llen(self._k("orders", item))),
            }
            stale_reads += int(self.client.get(self._k("stale_reads", item)) or 0)
            stale_writes += int(self.client.get(self._k("stale_writes", item)) or 0)
            for entry in self.client.lrange(self._k("stale_log", item), 0, -1):
                kind, token, client = entry.decode().split("|", 2)
                stale_log.append([item, int(token), client, kind])
        state: dict = {"items": items_state, "fencing": {"mode": mode}}
        if resets_at_start is not None:
            later, signed = self.resets_since(resets_at_start)
            state["resets_during_case"] = later
            if later:
                state["reset_by"] = signed
        if mode != "off":
            # ``refused``: every stale access the resource logged (item, token, client, r|w);
            # in enforce mode each was refused
            state["fencing"].update(
                {"stale_reads": stale_reads, "stale_writes": stale_writes, "refused": stale_log}
            )
        return state
