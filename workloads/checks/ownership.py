"""Ownership: did a holder lose its lock while it believed it held it? Pure, no I/O.

Why a checker of its own: an overlap is seen only when a waiter happens to be granted the
lock while the old holder still works, and whether one comes in time depends on how fast
clients reconnect, how long the harness keeps the holder, how busy the machine is. The
holder itself knows better. Its release says whether it still owned the lock
(``release ok`` with value 0: "not owned"), and after every strike the harness asks the
lock directly (``probe``, through ``Lock.owns``). A "no" from either, from a holder that ran
its critical section believing it held the lock, is a lost lock: a failure of mutual
exclusion whoever came in. This is how a linearizable-mutex model judges it (Jepsen's
``knossos`` mutex: a release of a lock not held has no legal order), and how Jepsen's etcd
lock test reads a release that finds the lock gone.

Each loss is told apart by the client's own deadline (the ``value`` of the release or
probe invoke: ms left, None for a lock without a lease): *within its lease* (the lock or
its server lost it: a restart, a failover, a cut, a lapsed renewal) or *past its own
deadline* (the holder overstayed a lease it was told about: long-cs, a paused task).
Both are failures of the lock as used; the detail says which.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from workloads.checks.common import MAX_WITNESSES, CheckResult, Witness, hold_record, holders_at, holds

#: The counters this checker writes (cases.csv columns).
OWNERSHIP_COLUMNS = ("locks_lost", "locks_lost_in_lease", "ownership_probes", "ownership_probes_untold")


def lost_events(history: pd.DataFrame) -> pd.DataFrame:
    """Every "not owned" answer of a release or probe: client, lock, op, t_ns (the answer), left_ms.

    ``left_ms`` is what the client's own deadline still had to run when it asked (NaN: no deadline).
    """
    empty = pd.DataFrame({"client": [], "lock": [], "op": [], "t_ns": [], "left_ms": []})
    if history is None or history.empty:
        return empty
    asks = history[history["op"].isin(["release", "probe"]).to_numpy(dtype=bool)]
    if asks.empty:
        return empty
    answers = asks[
        (asks["type"] == "ok").to_numpy(dtype=bool) & (asks["value"].fillna(1) == 0).to_numpy(dtype=bool)
    ]
    if answers.empty:
        return empty
    invokes = asks[(asks["type"] == "invoke").to_numpy(dtype=bool)][["client", "seq", "op", "value"]]
    invokes = invokes.rename(columns={"value": "left_ms"})
    out = answers[["client", "seq", "op", "lock", "t_ns"]].merge(
        invokes, on=["client", "seq", "op"], how="left"
    )
    out["left_ms"] = pd.to_numeric(out["left_ms"].astype("Float64"), errors="coerce").astype(float)
    return out[["client", "lock", "op", "t_ns", "left_ms"]].reset_index(drop=True)


def _per_hold(lost: pd.DataFrame, history: pd.DataFrame) -> pd.DataFrame:
    """One row per hold that lost its lock (a probe and the release of one hold are one loss)."""
    acq = history[((history["op"] == "acquire") & (history["type"] == "ok")).to_numpy(dtype=bool)]
    acq = acq[["client", "lock", "t_ns"]].rename(columns={"t_ns": "granted_ns"})
    acq = acq.astype({"client": object, "lock": object}).sort_values("granted_ns", kind="stable")
    lost = lost.astype({"client": object, "lock": object}).sort_values("t_ns", kind="stable")
    joined = pd.merge_asof(
        lost, acq, left_on="t_ns", right_on="granted_ns", by=["client", "lock"], direction="backward"
    )
    joined["granted_ns"] = joined["granted_ns"].fillna(-1).astype(np.int64)
    joined["in_lease"] = joined["left_ms"].isna() | (joined["left_ms"] > 0)
    first = joined.groupby(["client", "lock", "granted_ns"], sort=False).agg(
        t_ns=("t_ns", "min"), in_lease=("in_lease", "any"), op=("op", "first")
    )
    return first.reset_index()


def check_ownership(history: pd.DataFrame) -> CheckResult:
    """``invalid`` when a holder found its lock gone while it held it (release or probe said so).

    Counters: ``locks_lost`` (holds whose lock was gone before their release), of them
    ``locks_lost_in_lease`` (within the client's own deadline, or a lock without one),
    ``ownership_probes`` (probes asked) and ``ownership_probes_untold`` (probes the lock could
    not answer). The witnesses are the losses themselves (:func:`lost_holds`).
    """
    probes = history[((history["op"] == "probe") & (history["type"] != "invoke")).to_numpy(dtype=bool)]
    untold = int((probes["type"] == "info").sum())
    lost = lost_events(history)
    counters: dict[str, int | float] = {
        "locks_lost": 0,
        "locks_lost_in_lease": 0,
        "ownership_probes": len(probes),
        "ownership_probes_untold": untold,
    }
    if lost.empty:
        asked = f"; {len(probes)} probes after strikes said owned" if len(probes) else ""
        if untold:
            asked += f" ({untold} could not tell)"
        return CheckResult("ownership", "valid", counters, f"no holder found its lock gone{asked}")
    per_hold = _per_hold(lost, history)
    n = len(per_hold)
    in_lease = int(per_hold["in_lease"].sum())
    counters.update(locks_lost=n, locks_lost_in_lease=in_lease)
    by = per_hold["op"].value_counts()
    how = ", ".join(
        f"{int(v)} by its {'release' if k == 'release' else 'probe after a strike'}" for k, v in by.items()
    )
    lease = (
        f"{in_lease} within the holder's own lease"
        + (f", {n - in_lease} past its own deadline" if n - in_lease else "")
        if in_lease
        else "all past the holder's own deadline (it overstayed its lease)"
    )
    detail = f"lost the lock: {n} holds found their lock gone while they held it ({how}; {lease})"
    return CheckResult(
        "ownership", "invalid", counters, detail, first_ns=int(per_hold["t_ns"].min()),
        witnesses=lost_witnesses(per_hold, history),
    )  # fmt: skip


def lost_witnesses(per_hold: pd.DataFrame, history: pd.DataFrame) -> list[Witness]:
    """The first losses in time: the hold that lost its lock, then the other client's hold granted meanwhile.

    The lost hold is found by its grant (client, lock, start); the taker is the other client's
    hold of the lock at the moment the holder was told "not owned", if one was granted then.
    """
    h = holds(history)
    out: list[Witness] = []
    for row in per_hold.sort_values("t_ns", kind="stable").head(MAX_WITNESSES).itertuples(index=False):
        mine = np.flatnonzero(
            (h["client"].astype(str) == str(row.client)).to_numpy(dtype=bool)
            & (h["lock"].astype(str) == str(row.lock)).to_numpy(dtype=bool)
            & (h["start_ns"].to_numpy(dtype=np.int64) == int(row.granted_ns))
        )
        if not len(mine):
            continue
        lost = hold_record(h, mine[0])
        at = holders_at(h, str(row.lock), int(row.t_ns))
        others = [k for k in at if str(h["client"].iloc[k]) != str(row.client)]
        pair = (lost, hold_record(h, others[-1])) if others else (lost,)
        out.append(Witness("lost-lock", int(row.t_ns), str(row.lock), pair))
    return out


def lost_holds(history: pd.DataFrame) -> pd.DataFrame:
    """The witnesses: one row per hold that lost its lock (client, lock, granted_ns, t_ns, in_lease, op)."""
    lost = lost_events(history)
    if lost.empty:
        return pd.DataFrame(
            {"client": [], "lock": [], "granted_ns": [], "t_ns": [], "in_lease": [], "op": []}
        )
    return _per_hold(lost, history)
