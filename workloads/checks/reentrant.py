"""Checkers of the reentrant workload: pure functions of the history and the final state.

Mutual exclusion across nesting is what :func:`workloads.checks.exclusion.check_overlaps` already
judges (a client's nested holds are one hold; another client inside any part of it is an
overlap), the witness and the stock see it from the resource's side, and two checks are
added here:

- :func:`check_nesting`: nested acquires happened, and none of them failed (a reentrant
  lock that refuses its own holder would deadlock real code);
- :func:`check_free_at_end`: after every client's outermost release the lock is free, as
  a probe acquire made at the end of the run found it;
- :func:`check_reentrant_tokens`: a nested grant keeps its outer hold's fencing token.

Clock bounds of remote workers apply as in flash-sale (``clock_uncertainty_ns`` of the
final state): an overlap within them is uncertain, never a violation.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from workloads.checks.common import (
    CheckResult,
    Status,
    Verdict,
    check_unknown,
    clock_uncertainty,
    fenced,
    holds,
)
from workloads.checks.exclusion import check_overlaps
from workloads.checks.fencing import check_fencing, fencing_order_result
from workloads.checks.ownership import check_ownership
from workloads.checks.stock import check_stock, indeterminate_purchases
from workloads.checks.witness import check_witness


def _acquires_inside_own_hold(history: pd.DataFrame, outer: pd.DataFrame, types: tuple[str, ...]) -> int:
    """Acquires ending in one of ``types`` that a client invoked while it held the same lock."""
    is_end = (history["op"] == "acquire") & history["type"].isin(list(types))
    ends = history.loc[is_end.to_numpy(dtype=bool), ["client", "seq", "lock"]]
    if ends.empty or outer.empty:
        return 0
    inv = history.loc[((history["op"] == "acquire") & (history["type"] == "invoke")).to_numpy(dtype=bool)]
    inv = inv[["client", "seq", "t_ns"]].drop_duplicates(["client", "seq"])
    tried = ends.merge(inv, on=["client", "seq"], how="inner")
    if tried.empty:
        return 0
    pairs = pd.concat([outer[["client", "lock"]], tried[["client", "lock"]]], ignore_index=True)
    codes = pd.MultiIndex.from_frame(pairs.astype("string")).factorize()[0].astype(np.int64)
    h_pair, t_pair = codes[: len(outer)], codes[len(outer) :]
    starts = outer["start_ns"].to_numpy(dtype=np.int64)
    ends_ns = outer["end_ns"].to_numpy(dtype=np.int64)
    t = tried["t_ns"].to_numpy(dtype=np.int64)
    _, ranks = np.unique(np.concatenate([starts, t]), return_inverse=True)
    m = np.int64(ranks.max() + 1)
    h_key = h_pair * m + ranks[: len(starts)]
    t_key = t_pair * m + ranks[len(starts) :]
    order = np.argsort(h_key, kind="stable")
    j = np.searchsorted(h_key[order], t_key, side="right") - 1
    valid = j >= 0
    hold_idx = order[np.clip(j, 0, None)]
    same_pair = h_pair[hold_idx] == t_pair
    inside = valid & same_pair & (ends_ns[hold_idx] > t)
    return int(inside.sum())


def check_nesting(history: pd.DataFrame, hold_frame: pd.DataFrame | None = None) -> CheckResult:
    """Did clients nest acquires, and did every nested acquire succeed?

    ``nested_acquires`` counts holds deeper than the outermost, ``max_hold_depth`` the
    deepest nesting seen, ``reentry_failures`` acquires that timed out (or ended unknown)
    while their client already held that lock: a reentrant lock must grant those at once.
    """
    h = holds(history) if hold_frame is None else hold_frame
    nested = int((h["depth"] > 1).sum()) if not h.empty else 0
    deepest = int(h["depth"].max()) if not h.empty else 0
    outer = h[h["depth"] == 1] if not h.empty else h
    failures = _acquires_inside_own_hold(history, outer, ("fail", "info")) if history is not None else 0
    counters = {"nested_acquires": nested, "max_hold_depth": deepest, "reentry_failures": failures}
    status: Status
    if failures:
        status, detail = "invalid", f"{failures} acquires by a client that already held the lock were refused"
    elif h.empty:
        status, detail = "unknown", "no holds at all"
    elif not nested:
        status, detail = "unknown", "no nested acquire: reentrancy was not exercised"
    else:
        status, detail = "valid", f"{nested} nested acquires, up to depth {deepest}, all granted"
    return CheckResult("nesting", status, counters, detail)


def check_free_at_end(
    history: pd.DataFrame, final_state: dict[str, Any] | None, hold_frame: pd.DataFrame | None = None
) -> CheckResult:
    """Is every lock free after the last outermost release? (``final_state["locks"][name]["free"]``)

    A lock still taken at the end counts in ``locks_not_free_at_end`` and makes the verdict
    invalid, unless some client never released it (a hold left open when the run was
    stopped), in which case nothing can be said.
    """
    locks = (final_state or {}).get("locks") or {}
    if not locks:
        return CheckResult("free-at-end", "unknown", {"locks_not_free_at_end": 0}, "no probe of the locks")
    h = holds(history) if hold_frame is None else hold_frame
    open_locks = set(h.loc[h["open"].to_numpy(dtype=bool), "lock"].astype(str)) if not h.empty else set()
    taken = sorted(name for name, probe in locks.items() if probe.get("free") is False)
    unknown = sorted(name for name, probe in locks.items() if probe.get("free") is None)
    blamed = [name for name in taken if name not in open_locks]
    counters = {"locks_not_free_at_end": len(blamed)}
    if blamed:
        return CheckResult(
            "free-at-end", "invalid", counters, f"still taken after every release: {', '.join(blamed[:5])}"
        )
    if taken or unknown:
        why = "a hold was left open" if taken else "the probe failed"
        return CheckResult("free-at-end", "unknown", counters, f"{why}: {', '.join((taken + unknown)[:5])}")
    return CheckResult("free-at-end", "valid", counters, f"{len(locks)} locks free after the last release")


def check_reentrant_tokens(hold_frame: pd.DataFrame) -> CheckResult:
    """A reentrant hold keeps its token: a nested grant's token equals its outer hold's.

    A lock that hands its own holder a new token on reentry makes the resource refuse the
    outer hold's next write (or accept an older one): ``reentrant_token_changes`` counts
    nested grants whose token differs from the enclosing outermost hold's (invalid).
    """
    h = hold_frame
    if h.empty or not h["token"].notna().any() or not (h["depth"] > 1).any():
        return CheckResult(
            "reentrant-tokens", "valid", {"reentrant_token_changes": 0}, "no nested token to compare"
        )
    ordered = h.sort_values("start_ns", kind="stable")
    outer = ordered[ordered["depth"] == 1][["client", "lock", "start_ns", "token"]]
    inner = ordered[ordered["depth"] > 1][["client", "lock", "start_ns", "token"]]
    key = ["client", "lock"]
    matched = pd.merge_asof(
        inner.astype({"client": str, "lock": str}),
        outer.astype({"client": str, "lock": str}).rename(columns={"token": "outer_token"}),
        on="start_ns",
        by=key,
        direction="backward",
    )
    both = matched["token"].notna() & matched["outer_token"].notna()
    changed = int((both & (matched["token"] != matched["outer_token"])).sum())
    status: Status = "invalid" if changed else "valid"
    detail = (
        f"{changed} nested grants came with a token other than their outer hold's"
        if changed
        else f"{int(both.sum())} nested grants kept their outer hold's token"
    )
    return CheckResult("reentrant-tokens", status, {"reentrant_token_changes": changed}, detail)


def check_reentrant(history: pd.DataFrame, final_state: dict[str, Any] | None) -> Verdict:
    """The reentrant workload's verdict: exclusion across nesting, resource, nesting, free at end.

    Fencing-token order wherever grants carried tokens (a finding only, with ``--fencing
    off``); with fencing on, also the stale-access check and :func:`check_reentrant_tokens`.
    """
    h = holds(history)
    bounds = clock_uncertainty(final_state)
    results = [
        check_overlaps(history, h, uncertainty_ns=bounds),
        check_ownership(history),
        check_witness(history, h),
        check_stock(final_state, indeterminate_purchases(history)),
        check_nesting(history, h),
        check_free_at_end(history, final_state, h),
    ]
    if fenced(final_state):
        results += [check_fencing(final_state, history, h, bounds), check_reentrant_tokens(h)]
    order = fencing_order_result(history, final_state, h, bounds)
    if order is not None:
        results.append(order)
    return Verdict.combine([*results, check_unknown(history)])
