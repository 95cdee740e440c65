"""Each workload's verdict, composed from the checkers of one property per module.

The checkers are pure functions of the history and the resource's final state, split by
what they judge (as Jepsen keeps ``checker.clj`` beside a ``checker/`` folder):

- :mod:`workloads.checks.common`: results, verdicts, holds, clock bounds;
- :mod:`workloads.checks.exclusion`: two clients holding one lock at once;
- :mod:`workloads.checks.witness`: the same, as the resource's witness counter saw it;
- :mod:`workloads.checks.ownership`: a holder that found its lock gone while it held it;
- :mod:`workloads.checks.stock`: oversold units and lost updates;
- :mod:`workloads.checks.fencing`: tokens in grant order, refusals earned;
- :mod:`workloads.checks.recovery`: pauses, killed holders, server-fault recovery.

This module composes them per workload and re-exports their public names, so
``workloads.checks.core`` stays the one import of callers that judge a case.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from workloads.checks.common import (
    COUNTER_COLUMNS,
    HOLD_COLUMNS,
    UNBOUNDED_NS,
    UNFINISHED,
    CheckResult,
    Status,
    Verdict,
    bounds_of,
    check_unknown,
    clock_uncertainty,
    crash_deaths,
    fenced,
    holds,
    process_deaths,
    process_of,
    tolerances,
    unmeasured_workers,
    worker_of,
)
from workloads.checks.exclusion import check_overlaps
from workloads.checks.fencing import (
    check_fencing,
    check_fencing_order,
    fencing_order_result,
    legitimate_refusals,
    order_flags,
    refusal_counts,
    token_promise,
)
from workloads.checks.ownership import check_ownership, lost_holds
from workloads.checks.recovery import (
    check_crashes,
    check_pauses,
    check_server_recovery,
    server_recovery_columns,
)
from workloads.checks.stock import check_stock, indeterminate_purchases
from workloads.checks.witness import check_witness

__all__ = [
    "COUNTER_COLUMNS",
    "HOLD_COLUMNS",
    "UNBOUNDED_NS",
    "UNFINISHED",
    "CheckResult",
    "Status",
    "Verdict",
    "bounds_of",
    "check_crash",
    "check_crashes",
    "check_fencing",
    "check_fencing_order",
    "check_flash_sale",
    "check_lease_expiry",
    "check_lock_pairs",
    "check_overlaps",
    "check_ownership",
    "check_pauses",
    "check_server_recovery",
    "check_stock",
    "check_unknown",
    "check_witness",
    "clock_uncertainty",
    "crash_deaths",
    "fenced",
    "fencing_order_result",
    "holds",
    "indeterminate_purchases",
    "legitimate_refusals",
    "lost_holds",
    "order_flags",
    "process_deaths",
    "process_of",
    "refusal_counts",
    "server_recovery_columns",
    "token_promise",
    "tolerances",
    "unmeasured_workers",
    "worker_of",
]


def check_flash_sale(history: pd.DataFrame, final_state: dict[str, Any] | None) -> Verdict:
    """The flash-sale verdict: overlaps, witness, stock invariant, fencing and unknown outcomes.

    Fencing-token order is checked wherever grants carried tokens; with ``--fencing off`` it
    is a finding that leaves the verdict alone (:func:`workloads.checks.fencing.token_promise`).
    """
    bounds = clock_uncertainty(final_state)
    h = holds(history)
    results = [
        check_overlaps(history, h, uncertainty_ns=bounds),
        check_ownership(history),
        check_witness(history, h),
        check_stock(final_state, indeterminate_purchases(history)),
        check_fencing(final_state, history, h, bounds),
    ]
    order = fencing_order_result(history, final_state, h, bounds)
    if order is not None:
        results.append(order)
    return Verdict.combine([*results, check_unknown(history)])


def check_lease_expiry(history: pd.DataFrame, final_state: dict[str, Any] | None) -> Verdict:
    """flash-sale's checkers plus the pause counts."""
    base = check_flash_sale(history, final_state)
    return Verdict.combine([*base.results, check_pauses(history)])


def check_crash(history: pd.DataFrame, final_state: dict[str, Any] | None) -> Verdict:
    """flash-sale's checkers plus stuck locks and recovery time after a killed holder."""
    base = check_flash_sale(history, final_state)
    return Verdict.combine([*base.results, check_crashes(history, final_state)])


def check_lock_pairs(history: pd.DataFrame, final_state: dict[str, Any] | None = None) -> Verdict:
    """The lock-pairs verdict: only the history can speak (there is no resource)."""
    bounds = clock_uncertainty(final_state)
    h = holds(history)
    results = [check_overlaps(history, h, uncertainty_ns=bounds), check_ownership(history)]
    order = fencing_order_result(history, final_state, h, bounds)
    if order is not None:
        results.append(order)
    return Verdict.combine([*results, check_unknown(history)])
