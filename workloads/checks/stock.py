"""The resource's invariant: units ordered = units taken from stock <= initial (no lost updates).

Pure, no I/O: reads the resource's final state and, for purchases cut off mid critical
section, the history.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from workloads.checks.common import CheckResult


def indeterminate_purchases(history: pd.DataFrame | None) -> dict[str, tuple[int, int | None]]:
    """Purchases that began and never finished, per item: (how many, units they may have taken).

    A purchase is ``invoke`` then ``ok`` or ``fail`` (same client and seq). One without
    either was cut off mid critical section (Locust stopping its users at ``--run-time``,
    a killed process): it may have written the stock and not yet appended its order, so
    the ledger and the stock may disagree by up to its units without any lost update.
    The invoke's ``value`` is the quantity it wanted (None in histories that lack it).
    """
    if history is None or history.empty:
        return {}
    p = history.loc[
        (history["op"] == "purchase").to_numpy(dtype=bool), ["client", "seq", "type", "lock", "value"]
    ]
    if p.empty:
        return {}
    done = p.loc[p["type"].isin(["ok", "fail"]), ["client", "seq"]].drop_duplicates()
    invoked = p[p["type"] == "invoke"]
    open_ = invoked.merge(done, on=["client", "seq"], how="left", indicator=True)
    open_ = open_[open_["_merge"] == "left_only"]
    out: dict[str, tuple[int, int | None]] = {}
    for lock, group in open_.groupby("lock"):
        item = str(lock).rsplit(":", 1)[-1]
        units = None if group["value"].isna().any() else int(group["value"].astype("int64").sum())
        n, u = out.get(item, (0, 0))
        out[item] = (n + len(group), None if units is None or u is None else u + units)
    return out


def check_stock(
    final_state: dict[str, Any] | None, indeterminate: dict[str, tuple[int, int | None]] | None = None
) -> CheckResult:
    """The resource invariant of flash-sale: units ordered = units taken from stock <= initial.

    ``oversold_units`` are units ordered beyond the initial stock; ``lost_updates`` are
    units ordered but never taken from the stock: two holders read the same stock and one
    write was lost.

    The reverse, stock taken without an order, is no lock's doing. Every sale writes the
    stock as a value it read minus its own quantity, then appends its order; whatever the
    holders' interleaving, the stock can lose decrements but never gain units no order
    accounts for, except those of a sale that wrote the stock and then stopped: the item's
    ``indeterminate`` purchases (cut off between the two writes; each wanted at most
    ``max_qty`` units when the history does not say how many). Beyond those, the ledger lost
    orders or the stock was reset while the case ran: the harness's fault, so the check says
    ``unknown`` (the case decides nothing) rather than blaming the lock. Seen once, on a
    machine with a CPU burner beside a ``--suite ci`` run: 61 orders missing from the
    ledger of ``redis.set-nx-px-lua``, which was drawn red before this rule. The missing
    orders were the case's first 61 (117 units, exactly the gap), and the next time its first
    7: a reset of the resource that landed after the first worker had begun to sell. The
    final state now counts resets made after the case's own (``resets_during_case``), and
    any such reset makes the check ``unknown`` whatever the counts say: a reset between two
    holders leaves stock and ledger agreeing while the history holds sales neither shows.
    """
    items = (final_state or {}).get("items") or {}
    indeterminate = indeterminate or {}
    n_indeterminate = sum(n for n, _ in indeterminate.values())
    reset = _reset_during_case(final_state or {}, n_indeterminate)
    if reset is not None:
        return reset
    if not items:
        return CheckResult(
            "stock",
            "unknown",
            {"oversold_units": 0, "lost_updates": 0, "indeterminate_purchases": n_indeterminate},
            "no final state of the resource",
        )
    max_qty = int((final_state or {}).get("max_qty") or 0)
    oversold = lost = excused = unexplained = 0
    bad: list[str] = []
    for name, it in items.items():
        initial, stock, units = int(it["initial"]), int(it["stock"]), int(it["orders_units"])
        o = max(0, units - initial)
        taken_not_ordered = (initial - stock) - units
        n_open, open_units = indeterminate.get(name, (0, 0))
        allowance = open_units if open_units is not None else n_open * max_qty
        excuse = min(max(taken_not_ordered, 0), allowance)
        lu = max(0, -taken_not_ordered)
        gap = max(0, taken_not_ordered) - excuse
        oversold += o
        lost += lu
        excused += excuse
        unexplained += gap
        if o or lu or gap:
            bad.append(f"{name}: initial {initial}, stock {stock}, ordered {units}")
    counters = {"oversold_units": oversold, "lost_updates": lost, "indeterminate_purchases": n_indeterminate}
    cut = (
        f"; {n_indeterminate} purchases cut off mid critical section (indeterminate) explain {excused} units"
        if n_indeterminate
        else ""
    )
    more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
    if oversold or lost:
        detail = f"oversold {oversold} units, {lost} units lost; " + "; ".join(bad[:3]) + more + cut
        return CheckResult("stock", "invalid", counters, detail)
    if unexplained:
        still = {n: int(it["orders_count_after"]) - int(it["orders_count"]) for n, it in items.items()
                 if "orders_count_after" in it and int(it["orders_count_after"]) != int(it["orders_count"])}  # fmt: skip
        if still:  # the case's clients were still selling while the final state was read
            bad.append(
                "orders appended while the final state was read: "
                + ", ".join(f"{n} +{d}" for n, d in still.items())
            )
        detail = (
            f"{unexplained} units taken from stock with no order and no purchase left open to explain "
            "them, which no interleaving of holders produces: the ledger lost orders or the stock was "
            "reset during the case (a harness fault; this case decides nothing); "
            + "; ".join(bad[:3])
            + more
            + cut
        )
        return CheckResult("stock", "unknown", counters, detail)
    detail = f"{len(items)} items, ledger and stock agree, nothing oversold" + cut
    return CheckResult("stock", "valid", counters, detail)


def _reset_during_case(final_state: dict[str, Any], n_indeterminate: int) -> CheckResult | None:
    """``unknown`` when the resource was reset after the case's own reset (None: it was not).

    Only the harness resets the resource (``FlashSaleResource.reset``): no lock can, so this
    never hides a lock's fault; the case's evidence is simply gone.
    """
    later = int(final_state.get("resets_during_case") or 0)
    if not later:
        return None
    signed = [str(s) for s in final_state.get("reset_by") or []]
    by = f" by {', '.join(signed[-3:])}" if signed else ""
    detail = (
        f"the resource was reset {later} time(s) while the case ran{by}: its ledger lost the orders "
        "before that reset and its stock no longer counts this case's sales (a harness fault; this "
        "case decides nothing)"
    )
    counters = {"oversold_units": 0, "lost_updates": 0, "indeterminate_purchases": n_indeterminate}
    return CheckResult("stock", "unknown", counters, detail)
