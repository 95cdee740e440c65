"""The resource's invariant: units ordered = units taken from stock <= initial (no lost updates).

Pure, no I/O: reads the resource's final state and, for purchases cut off mid critical
section, the history.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from workloads.checks.common import CheckResult, Status


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
    units the order ledger and the stock disagree on (two writers read the same stock and
    one write was lost, or the reverse). Stock taken without an order is excused up to the
    units of that item's ``indeterminate`` purchases (cut off between writing the stock and
    appending the order: an unknown outcome, not a lost update); each of them wanted at
    most ``max_qty`` units when the history does not say how many.
    """
    items = (final_state or {}).get("items") or {}
    indeterminate = indeterminate or {}
    n_indeterminate = sum(n for n, _ in indeterminate.values())
    if not items:
        return CheckResult(
            "stock",
            "unknown",
            {"oversold_units": 0, "lost_updates": 0, "indeterminate_purchases": n_indeterminate},
            "no final state of the resource",
        )
    max_qty = int((final_state or {}).get("max_qty") or 0)
    oversold = 0
    lost = 0
    excused = 0
    bad: list[str] = []
    for name, it in items.items():
        initial, stock, units = int(it["initial"]), int(it["stock"]), int(it["orders_units"])
        o = max(0, units - initial)
        taken_not_ordered = (initial - stock) - units
        n_open, open_units = indeterminate.get(name, (0, 0))
        allowance = open_units if open_units is not None else n_open * max_qty
        excuse = min(max(taken_not_ordered, 0), allowance)
        lu = abs(taken_not_ordered) - excuse
        oversold += o
        lost += lu
        excused += excuse
        if o or lu:
            bad.append(f"{name}: initial {initial}, stock {stock}, ordered {units}")
    status: Status = "invalid" if oversold or lost else "valid"
    counters = {"oversold_units": oversold, "lost_updates": lost, "indeterminate_purchases": n_indeterminate}
    cut = (
        f"; {n_indeterminate} purchases cut off mid critical section (indeterminate) explain {excused} units"
        if n_indeterminate
        else ""
    )
    if bad:
        more = f" (+{len(bad) - 3} more)" if len(bad) > 3 else ""
        detail = f"oversold {oversold} units, {lost} units lost; " + "; ".join(bad[:3]) + more + cut
    else:
        detail = f"{len(items)} items, ledger and stock agree, nothing oversold" + cut
    return CheckResult("stock", status, counters, detail)
