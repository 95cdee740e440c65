"""Recovery: after a holder dies or the service is struck, how long until the lock is granted again.

Pure, no I/O. Two different clocks start two different figures, and they are never named
alike (docs/architecture.md "How a cell is decided"):

- a killed holder (``crash`` workload): from the confirmed death of its process
  (:func:`workloads.checks.common.crash_deaths`: the ``crash ok`` the harness stamps with
  the instant of SIGKILL, not the ``crash info`` mark written before the final send and
  sleep) to the next grant of that lock to anyone. Beyond ``stuck_bound_s`` the lock is
  *stuck* (liveness).
- a server fault (restart, partition, ...): "the service answered again after X" (from the
  heal to the ``service ok`` row bench writes once the struck service first answers) and
  "the next grant after Y" (from the service being back, or the heal when the history has
  no ``service`` row, to the next grant). A strike never followed by a grant is
  ``unrecovered_strikes``: a liveness failure, shown as such, never as a thin survival.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from workloads.checks.common import (
    UNBOUNDED_NS,
    CheckResult,
    Status,
    clock_uncertainty,
    crash_deaths,
    worker_of,
)

NAN = float("nan")


def check_pauses(history: pd.DataFrame) -> CheckResult:
    """How many holders paused (lease-expiry) and for how long in total; counts only."""
    mask = ((history["op"] == "pause") & (history["type"] == "ok")).to_numpy(dtype=bool)
    values = history.loc[mask, "value"].dropna().to_numpy(dtype=np.int64) if mask.any() else np.array([])
    counters = {"pauses": int(mask.sum()), "pause_ms_total": int(values.sum()) if len(values) else 0}
    return CheckResult("pauses", "valid", counters, f"{counters['pauses']} holders paused while holding")


def check_crashes(history: pd.DataFrame, final_state: dict[str, Any] | None) -> CheckResult:
    """Recovery after a holder was killed: its process's death -> next successful acquisition of that lock.

    A lock is *stuck* when nobody acquired it within ``stuck_bound_s`` (from the final
    state, default 5 s) of the kill, including never before the history ends: the
    guarantee "a crashed holder does not block everyone forever" failed.

    The death is the ``crash ok`` the harness stamps at the instant of SIGKILL (the ``crash
    info`` mark in histories without one). The death is timed on the dead worker's clock and the next grant on its own: with clients
    on several hosts, a recovery time within the two clocks' bounds of the stuck bound cannot
    be decided (unknown), nor can one involving a worker whose bound was not measured.
    """
    bound_ns = int(float((final_state or {}).get("stuck_bound_s", 5.0)) * 1e9)
    clocks = clock_uncertainty(final_state)

    def tol(client: str) -> int:
        b = (clocks or {}).get(worker_of(str(client)), 0) if clocks else 0
        return UNBOUNDED_NS if b is None else int(b)

    crashes = crash_deaths(history)[["lock", "died_ns", "client"]]
    if crashes.empty:
        return CheckResult("crash", "unknown", {"crashes": 0, "stuck_locks": 0}, "no holder was killed")
    ok = history[(history["op"] == "acquire") & (history["type"] == "ok")]
    end_ns = int(history["t_ns"].max())
    recoveries: list[float] = []
    stuck = undecided = 0
    for lock, t, client in crashes.itertuples(index=False):
        after = ok.loc[(ok["lock"] == lock) & (ok["t_ns"] > t), ["t_ns", "client"]]
        if not after.empty:
            first = after.loc[after["t_ns"].idxmin()]
            recovery_ns = int(first["t_ns"]) - t
            margin = (
                0
                if worker_of(str(first["client"])) == worker_of(str(client))
                else tol(client) + tol(first["client"])
            )
            recoveries.append(recovery_ns / 1e6)
            if recovery_ns - margin > bound_ns:
                stuck += 1
            elif recovery_ns + margin > bound_ns:
                undecided += 1  # stuck or not depends on clock error
        elif end_ns - t - tol(client) >= bound_ns:  # never acquired again, and the run lasted past the bound
            stuck += 1
        else:  # not acquired again, but the run ended before the bound: cannot tell
            undecided += 1
    counters: dict[str, int | float] = {
        "crashes": len(crashes),
        "stuck_locks": stuck,
        "recovery_ms_p50": float(np.median(recoveries)) if recoveries else float("nan"),
        "recovery_ms_max": float(max(recoveries)) if recoveries else float("nan"),
    }
    # A stuck lock is a liveness failure, not a safety one: nobody held it twice. The verdict
    # stays about safety; ``stuck_locks`` (and the bound) carry the liveness finding.
    status: Status = "unknown" if undecided and not stuck else "valid"
    if stuck:
        detail = (
            f"{stuck} of {len(crashes)} locks stayed stuck: nobody got them within {bound_ns / 1e9:g}s "
            "after their holder was killed (liveness)"
        )
    elif undecided:
        detail = (
            f"{undecided} killed holders' locks: not acquired again before the run ended (< {bound_ns / 1e9:g}s), "
            "or recovered within the clocks' uncertainty of the bound"
        )
    else:
        detail = f"every crashed holder's lock was acquired again (p50 {counters['recovery_ms_p50']:.0f} ms)"
    return CheckResult("crash", status, counters, detail)


def strike_windows(history: pd.DataFrame) -> pd.DataFrame:
    """Each server-fault strike of the history that hit the case: seq, kind, start_ns, healed_ns (NaN: never
    healed), back_ns. With bench's ``strike`` rows (one per strike), only those marked ``ok`` count.

    ``back_ns`` is when the struck service first answered again (the ``bench`` ``service ok``
    row of the same seq), NaN when the history has none.
    """
    bench = history[(history["client"] == "bench").to_numpy(dtype=bool)] if not history.empty else history
    f = bench[(bench["op"] == "fault").to_numpy(dtype=bool)]
    inv = f[f["type"] == "invoke"].groupby("seq").agg(kind=("lock", "first"), start_ns=("t_ns", "min"))
    ok = f[f["type"] == "ok"].groupby("seq")["t_ns"].max().rename("healed_ns")
    svc = bench[((bench["op"] == "service") & (bench["type"] == "ok")).to_numpy(dtype=bool)]
    back = svc.groupby("seq")["t_ns"].min().rename("back_ns")
    out = inv.join(ok).join(back).reset_index().sort_values("start_ns", kind="stable")
    marks = bench[(bench["op"] == "strike").to_numpy(dtype=bool)]
    if not marks.empty:  # only the strikes that hit this case (a group's others were not its own)
        hit = set(marks.loc[(marks["type"] == "ok").to_numpy(dtype=bool), "seq"].astype(int))
        out = out[out["seq"].astype(int).isin(hit)]
    return out.reset_index(drop=True)


def server_recovery_columns(history: pd.DataFrame | None) -> dict[str, Any]:
    """cases.csv columns of recovery after each server-fault strike, named apart from a crash's.

    Per strike: ``service_back_ms`` = heal end -> the struck service first answered (the
    ``service ok`` row bench writes; NaN without one), and ``recovery_ms`` = the service
    back (else the heal end) -> the next grant to anyone; p50 and max over strikes.
    ``recovery_from`` says which start was used ("service", "heal", or "mixed"), and
    ``unrecovered_strikes`` counts strikes after which nobody got the lock before the history
    ended (a liveness failure). Empty for a history without a strike.
    """
    if history is None or history.empty:
        return {}
    s = strike_windows(history)
    if s.empty:
        return {}
    grants = np.sort(
        history.loc[
            ((history["op"] == "acquire") & (history["type"] == "ok")).to_numpy(dtype=bool), "t_ns"
        ].to_numpy(dtype=np.int64)
    )
    waits: list[float] = []
    backs: list[float] = []
    froms: set[str] = set()
    unrecovered = 0
    for row in s.itertuples(index=False):
        healed, back = row.healed_ns, row.back_ns
        if back == back:
            froms.add("service")
            base = int(back)
            if healed == healed:
                # a service that answered before the fault ended (RedLock's quorum while one master is
                # down, an ensemble after a member kill) never stopped: 0, never a negative time
                backs.append(max(0.0, (int(back) - int(healed)) / 1e6))
        else:
            froms.add("heal")
            base = int(healed) if healed == healed else int(row.start_ns)
        i = int(np.searchsorted(grants, base, side="right"))
        if i < len(grants):
            waits.append((int(grants[i]) - base) / 1e6)
        else:
            unrecovered += 1
    return {
        "recovery_ms_p50": float(np.median(waits)) if waits else NAN,
        "recovery_ms_max": float(max(waits)) if waits else NAN,
        "service_back_ms_p50": float(np.median(backs)) if backs else NAN,
        "service_back_ms_max": float(max(backs)) if backs else NAN,
        "recovery_from": froms.pop() if len(froms) == 1 else "mixed",
        "unrecovered_strikes": unrecovered,
    }


def recovery_sentence(cols: dict[str, Any]) -> str:
    """The plain words of :func:`server_recovery_columns`: "the service answered again after X; the next grant after Y"."""

    def ms(v: Any) -> str:
        return f"{v / 1000:.2f} s" if v >= 1000 else f"{v:.0f} ms"

    parts = []
    back = cols.get("service_back_ms_p50", NAN)
    if back == back:
        parts.append(f"the service answered again {ms(back)} after the heal (p50)")
    rec = cols.get("recovery_ms_p50", NAN)
    if rec == rec:
        since = "it answered" if cols.get("recovery_from") == "service" else "the heal"
        parts.append(f"the next grant {ms(rec)} after {since} (p50, max {ms(cols['recovery_ms_max'])})")
    n = int(cols.get("unrecovered_strikes") or 0)
    if n:
        parts.append(f"{n} strikes were never followed by a grant (liveness failure)")
    return "; ".join(parts)


def check_server_recovery(history: pd.DataFrame) -> CheckResult:
    """A server fault's liveness: every strike followed by a grant. Safety verdicts stay with the others.

    Valid either way (a lock nobody can take again broke no data); the counters, and the
    sentence, say how long the service and the lock took, and ``unrecovered_strikes`` is
    the liveness failure the report shows as such.
    """
    cols = server_recovery_columns(history)
    if not cols:
        return CheckResult("recovery", "valid", {}, "no server-fault strike")
    counters = {k: v for k, v in cols.items() if k != "recovery_from"}
    n = int(cols["unrecovered_strikes"])
    detail = recovery_sentence(cols)
    if n:
        detail = (
            f"{n} strikes never recovered: the lock was never granted again before the run ended (liveness); "
            + detail
        )
    return CheckResult("recovery", "valid", counters, detail)
