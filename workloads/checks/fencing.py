"""Fencing tokens: in grant order, kept by reentrant holds, and refusals that were earned. Pure.

Two questions, judged from the history and the resource's final state:

- :func:`check_fencing_order`: does each grant's token exceed every grant certainly before
  it, and is no token handed out twice? Run wherever tokens exist. With ``--fencing off``
  the tokens protected nothing, so an out-of-order grant is a finding about the lock's
  token promise (:func:`token_promise`: counted and shown, failing the decision table's
  fencing column) and leaves the mutual-exclusion verdict alone; with ``observe`` or
  ``enforce`` it makes the verdict invalid.
- :func:`check_fencing`: stale accesses the resource saw, and whether a refusal was fencing
  doing its job (the refused holder had lost the lock), fencing broken (it was alone), or
  undecidable by the clocks (unknown, never "fencing worked").

Two holds of one worker share one clock: no tolerance between them. Across workers each
comparison adds both clocks' bounds (``clock_uncertainty_ns``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from workloads.checks.common import (
    MAX_WITNESSES,
    UNBOUNDED_NS,
    CheckResult,
    Status,
    Witness,
    fenced,
    hold_record,
    holds,
    process_of,
    tolerances,
    worker_of,
)


def _grants(h: pd.DataFrame) -> pd.DataFrame:
    """Outermost grants that carry a token (a reentrant hold keeps its outer token)."""
    if h.empty:
        return h
    if "seen_ns" not in h.columns:
        h = h.assign(seen_ns=h["end_ns"], open_ended=False)
    keep = (h["depth"] == 1).to_numpy(dtype=bool) & h["token"].notna().to_numpy(dtype=bool)
    return h[keep].reset_index(drop=True)


def _prefix_before(token: np.ndarray, ends: np.ndarray, rows: np.ndarray, at: np.ndarray) -> np.ndarray:
    """For each query time in ``at``: the highest token among ``rows`` whose end is <= it (-inf if none)."""
    if not len(rows):
        return np.full(len(at), -np.inf)
    order = rows[np.argsort(ends[rows], kind="stable")]
    prefix = np.maximum.accumulate(token[order])
    k = np.searchsorted(ends[order], at, side="right")
    return np.where(k > 0, prefix[np.maximum(k - 1, 0)], -np.inf)


def _earliest_grants(g: pd.DataFrame, history: pd.DataFrame | None) -> np.ndarray:
    """When each grant may have been made at the earliest.

    The lock made the grant after the winning request was sent and before the client saw it
    (``acquire ok``); a hold that ended in between ran concurrently with it, which either order
    of tokens satisfies (Jepsen's real-time order, not a clock's doubt: no "uncertain"). So a
    grant is placed at the send of the request that won (``sent_ns`` of its ok row, recorded by
    every lock that knows it: the polling template, the Redis, memcached and PostgreSQL leases).
    2026-12-06 (Y): ``memcached.add`` fenced took token 1990, and its client saw the ok 15 ms
    after sending the add, behind its busy process; token 1991's whole acquire and hold fell in
    between: tokens in grant order, drawn red when the grant was placed at its ok.

    Where the send is unknown (a lock with its own wait, an old history): the ok, or the
    ``acquire invoke`` where the whole process stood still in between. A process paused whole
    (lease-expiry-world: the holder's blocking sleep stops every user of the process) sees, after
    the pause, grants the lock made before it (2026-12-06, H: ``memcached.add`` took token 1739
    just before a 2 s pause and recorded its ok after token 1848's hold had ended).
    """
    early = g["start_ns"].to_numpy(dtype=np.int64).copy()
    if history is None or history.empty:
        return early
    keys = pd.MultiIndex.from_arrays([g["client"].astype(object), g["acquire_seq"].astype("int64")])
    if "sent_ns" in history.columns:
        oks = history[((history["op"] == "acquire") & (history["type"] == "ok")).to_numpy(dtype=bool)]
        oks = oks[oks["sent_ns"].notna().to_numpy(dtype=bool)]
        if not oks.empty:
            sent = oks.set_index(["client", "seq"])["sent_ns"].astype("float64")
            at = sent[~sent.index.duplicated()].reindex(keys).to_numpy(dtype=np.float64)
            known = ~np.isnan(at)
            early[known] = np.minimum(early[known], at[known].astype(np.int64))
    if not (history["op"] == "pause").any():
        return early
    pause = history[(history["op"] == "pause").to_numpy(dtype=bool)]
    begun = pause[pause["type"] == "invoke"]
    over = pause[pause["type"] != "invoke"].set_index(["client", "seq"])["t_ns"]
    # a pause never over (its process killed) lasts to the end of the history
    ends = over.reindex(pd.MultiIndex.from_frame(begun[["client", "seq"]])).fillna(history["t_ns"].max())
    procs = process_of(history["client"]).to_numpy(dtype=object)
    t_all = history["t_ns"].to_numpy(dtype=np.int64)
    spans = []
    for proc, t0, t1 in zip(process_of(begun["client"]), begun["t_ns"], ends, strict=True):
        # stood still: nobody of the process recorded anything meanwhile (a task's pause lets the
        # others run on, and their grants are seen when made)
        if not ((procs == proc) & (t_all > t0) & (t_all < t1)).any():
            spans.append((proc, int(t0), int(t1)))
    acq = history[((history["op"] == "acquire") & (history["type"] == "invoke")).to_numpy(dtype=bool)]
    invoked = acq.set_index(["client", "seq"])["t_ns"]
    inv = invoked.reindex(keys).to_numpy(dtype=np.float64)
    known = ~np.isnan(inv)
    process = process_of(g["client"]).to_numpy(dtype=object)
    start = g["start_ns"].to_numpy(dtype=np.int64)
    for proc, t0, t1 in spans:
        stood = known & (process == proc) & (start > t0) & (np.where(known, inv, np.inf) < t1)
        early[stood] = np.minimum(early[stood], inv[stood].astype(np.int64))
    return early


def order_flags(
    history: pd.DataFrame,
    hold_frame: pd.DataFrame | None = None,
    uncertainty_ns: dict[str, int | None] | None = None,
) -> pd.DataFrame:
    """The grants with tokens, each flagged: ``violation`` (certain), ``uncertain``, ``before`` token.

    ``violation``: the token is not above a grant certainly before it, or another grant of the
    lock had the same token (whichever came first, the second one is wrong). ``uncertain``:
    only clock error could put a higher token before it. ``before`` is the highest token of
    the grants certainly before (NaN when none), for the sentence that explains it.
    """
    h = holds(history) if hold_frame is None else hold_frame
    g = _grants(h)
    if g.empty:
        return g.assign(
            violation=pd.Series([], dtype=bool),
            uncertain=pd.Series([], dtype=bool),
            before=pd.Series([], dtype=float),
        )
    tol = tolerances(g, uncertainty_ns)
    start = g["start_ns"].to_numpy(dtype=np.int64)
    early = _earliest_grants(g, history)
    end = g["end_ns"].to_numpy(dtype=np.int64)
    seen = g["seen_ns"].to_numpy(dtype=np.int64)
    open_ended = g["open_ended"].to_numpy(dtype=bool)
    token = g["token"].to_numpy(dtype=np.float64)  # float: -inf pads the prefix maxima below
    lock = np.asarray(g["lock"].astype(str), dtype=object)
    worker = np.array([worker_of(str(c)) for c in g["client"]], dtype=object)
    never = np.int64(UNBOUNDED_NS) * 2
    # one clock (same worker): the plain times; two clocks: A certainly over by end + its bound,
    # B certainly begun after start - its bound; A possibly over from end - its bound
    surely_same = np.where(open_ended, never, end)
    maybe_same = np.where(open_ended, seen, end)
    surely_other = np.where(open_ended, never, end + tol)
    maybe_other = np.where(open_ended, seen, end) - tol
    bad = np.zeros(len(g), dtype=bool)
    maybe = np.zeros(len(g), dtype=bool)
    before = np.full(len(g), -np.inf)
    for name in pd.unique(lock):
        on_lock = lock == name
        for w in pd.unique(worker[on_lock]):
            b_rows = np.flatnonzero(on_lock & (worker == w))
            same = b_rows
            other = np.flatnonzero(on_lock & (worker != w))
            sure = np.maximum(
                _prefix_before(token, surely_same, same, early[b_rows]),
                _prefix_before(token, surely_other, other, early[b_rows] - tol[b_rows]),
            )
            possible = np.maximum(
                _prefix_before(token, maybe_same, same, early[b_rows]),
                _prefix_before(token, maybe_other, other, early[b_rows] + tol[b_rows]),
            )
            bad[b_rows] = token[b_rows] <= sure
            maybe[b_rows] = token[b_rows] < possible
            before[b_rows] = sure
    # the same token twice on one lock: both orders are wrong, so the later grant is a violation
    dup = pd.DataFrame({"lock": lock, "token": token, "start": start}).sort_values("start", kind="stable")
    repeated = dup.duplicated(["lock", "token"], keep="first")
    bad[repeated.index[repeated.to_numpy(dtype=bool)]] = True
    return g.assign(
        violation=bad, uncertain=maybe & ~bad, before=np.where(np.isfinite(before), before, np.nan)
    )


def check_fencing_order(
    history: pd.DataFrame,
    hold_frame: pd.DataFrame | None = None,
    uncertainty_ns: dict[str, int | None] | None = None,
) -> CheckResult:
    """Fencing tokens in grant order: per lock, each grant's token above every earlier grant's.

    The rule of Hazelcast's FencedLock (as Jepsen checks it) and SyncGuard's contract tests.
    A grant is an outermost ``acquire ok`` with a token (a reentrant hold keeps its outer
    token: see ``workloads.checks.reentrant``). Grant A is *earlier* than grant B when A's
    hold certainly ended (release invoke, death of its process) before B's grant could have
    been made (the send of B's winning request where known, else its ok: :func:`_earliest_grants`);
    clock bounds are added only between two workers (one worker has one clock): a correct
    lock can grant B only after A let go, so its token must be higher. Holds that overlap
    are not ordered (the overlap checker speaks for them), but two grants with one token are
    a violation in any order; an open-ended hold (lost worker) never certainly ended.
    ``fencing_order_violations`` counts grants whose token is not strictly above the highest
    token of the grants certainly before them, or repeats one (invalid). Where only clock
    error could order two grants the other way, ``uncertain_fencing_order`` counts them
    (unknown).
    """
    g = order_flags(history, hold_frame, uncertainty_ns)
    if g.empty:
        return CheckResult("fencing-order", "valid", {"fencing_order_violations": 0}, "no tokens to order")
    bad = g["violation"].to_numpy(dtype=bool)
    violations = int(bad.sum())
    uncertain = int(g["uncertain"].sum())
    example = ""
    if violations:
        first = g[bad].sort_values("start_ns", kind="stable").iloc[0]
        was = first["before"]
        after = f"granted after {int(was)}" if was == was else "granted twice"
        example = f" (e.g. {first['lock']}: token {int(first['token'])} {after})"
    counters: dict[str, int | float] = {"fencing_order_violations": violations}
    if uncertain:
        counters["uncertain_fencing_order"] = uncertain
    if violations:
        status: Status = "invalid"
        detail = f"fencing tokens out of grant order: {violations} grants{example}"
    elif uncertain:
        status, detail = "unknown", f"{len(g)} grants in token order as far as the clocks tell"
    else:
        status, detail = "valid", f"{len(g)} grants, every token above every earlier grant's"
    if uncertain:
        detail += f"; {uncertain} grants below an earlier token unless the clocks err (cannot tell)"
    return CheckResult("fencing-order", status, counters, detail, witnesses=order_witnesses(g))


def order_witnesses(g: pd.DataFrame) -> list[Witness]:
    """The first grants out of order: the earlier grant with the higher (or same) token, then the wrong one."""
    bad = np.flatnonzero(g["violation"].to_numpy(dtype=bool))
    if not len(bad):
        return []
    start = g["start_ns"].to_numpy(dtype=np.int64)
    end = g["end_ns"].to_numpy(dtype=np.int64)
    token = g["token"].to_numpy(dtype=np.float64, na_value=np.nan)
    lock = g["lock"].astype(str).to_numpy(dtype=object)
    before = g["before"].to_numpy(dtype=np.float64)
    out: list[Witness] = []
    for j in bad[np.argsort(start[bad], kind="stable")][:MAX_WITNESSES]:
        same = (lock == lock[j]) & (np.arange(len(g)) != j)
        # a repeated token: its first grant; else the earlier grant whose token it should have passed
        cands = np.flatnonzero(same & (token == token[j]) & (start <= start[j]))
        if not len(cands) and before[j] == before[j]:
            cands = np.flatnonzero(same & (token == before[j]) & (end <= start[j]))
        pair = (hold_record(g, cands[0]), hold_record(g, j)) if len(cands) else (hold_record(g, j),)
        out.append(Witness("tokens", int(start[j]), str(lock[j]), pair))
    return out


def token_promise(result: CheckResult) -> CheckResult:
    """The order check of a case that did not use its tokens (``--fencing off``): a finding, not a verdict.

    The tokens protected nothing in this case, so tokens out of order broke no data and leave
    the mutual-exclusion verdict as it is (valid); the counters still say what the lock's
    tokens did, and the decision table's fencing column fails on them.
    """
    detail = f"tokens unused (--fencing off), so this does not change the verdict: {result.detail}"
    return CheckResult(result.name, "valid", dict(result.counters), detail, witnesses=result.witnesses)


def fencing_order_result(
    history: pd.DataFrame,
    final_state: dict[str, Any] | None,
    hold_frame: pd.DataFrame,
    uncertainty_ns: dict[str, int | None] | None,
) -> CheckResult | None:
    """The order check for any case whose grants carried tokens (None when none did)."""
    if hold_frame.empty or not hold_frame["token"].notna().any():
        return None
    r = check_fencing_order(history, hold_frame, uncertainty_ns)
    return r if fenced(final_state) else token_promise(r)


def _alone(h: pd.DataFrame, rows: np.ndarray, tol: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For the holds at ``rows``: (certainly overlapped no other client's hold, certainly overlapped one).

    Neither: only clock error decides. Holds of one worker share one clock (no tolerance).
    """
    lock = np.asarray(h["lock"].astype(str), dtype=object)
    client = np.asarray(h["client"].astype(str), dtype=object)
    worker = np.array([worker_of(c) for c in client], dtype=object)
    start = h["start_ns"].to_numpy(dtype=np.int64)
    end = h["end_ns"].to_numpy(dtype=np.int64)  # an open hold counts to the history's end
    alone = np.zeros(len(rows), dtype=bool)
    crowded = np.zeros(len(rows), dtype=bool)
    longest = int((end - start).max()) if len(h) else 0
    by_lock: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for k, i in enumerate(rows):
        if lock[i] not in by_lock:
            mine = np.flatnonzero(lock == lock[i])
            mine = mine[np.argsort(start[mine], kind="stable")]
            by_lock[lock[i]] = (mine, start[mine])
        mine, s = by_lock[lock[i]]
        pad = int(tol[i]) + int(tol.max())
        lo = np.searchsorted(s, start[i] - longest - pad, side="left")
        hi = np.searchsorted(s, end[i] + pad, side="right")
        j = mine[lo:hi]
        j = j[client[j] != client[i]]
        slack = np.where(worker[j] == worker[i], 0, np.minimum(tol[i] + tol[j], UNBOUNDED_NS))
        near = (start[j] < end[i] + slack) & (end[j] + slack > start[i])
        sure = (start[j] + slack < end[i]) & (end[j] > start[i] + slack)
        alone[k] = not near.any()
        crowded[k] = bool(sure.any())
    return alone, crowded


def refusal_counts(
    final_state: dict[str, Any] | None,
    history: pd.DataFrame | None,
    hold_frame: pd.DataFrame | None = None,
    uncertainty_ns: dict[str, int | None] | None = None,
) -> tuple[int, int]:
    """(refusals of holders that certainly overlapped nobody, refusals only the clocks could decide).

    See :func:`legitimate_refusals`; a refusal is undecided when none of the holds that could
    have made it certainly overlapped another client's and not all were certainly alone.
    """
    if history is None or history.empty:
        return 0, 0
    h = holds(history) if hold_frame is None else hold_frame
    if h.empty:
        return 0, 0
    refused = _refused_holds(final_state, history, h)
    if not refused:
        return 0, 0
    tol = tolerances(h, uncertainty_ns)
    involved = np.unique(np.concatenate([np.asarray(c, dtype=np.int64) for c in refused]))
    alone, crowded = _alone(h, involved, tol)
    is_alone = dict(zip(involved.tolist(), alone.tolist(), strict=True))
    is_crowded = dict(zip(involved.tolist(), crowded.tolist(), strict=True))
    # a refusal several holds could have made is legitimate only if every one of them was alone,
    # and explained (fencing working) if any one of them certainly lost the lock to another
    legit = sum(1 for cands in refused if all(is_alone[i] for i in cands))
    explained = sum(1 for cands in refused if any(is_crowded[i] for i in cands))
    return legit, len(refused) - legit - explained


def legitimate_refusals(
    final_state: dict[str, Any] | None,
    history: pd.DataFrame | None,
    hold_frame: pd.DataFrame | None = None,
    uncertainty_ns: dict[str, int | None] | None = None,
) -> int:
    """Accesses the resource refused as stale from holders that certainly overlapped nobody.

    A token is stale when an older holder's is higher; a holder alone on its lock holds the
    newest grant, so refusing it means the tokens do not follow grant order: fencing is
    broken, not working. Which accesses were refused comes from the resource's own log
    (``fencing.refused``: item, token, client) when it kept one, else from the history
    (``purchase`` ``fail`` with error ``stale``).
    """
    return refusal_counts(final_state, history, hold_frame, uncertainty_ns)[0]


def _refused_holds(
    final_state: dict[str, Any] | None, history: pd.DataFrame, h: pd.DataFrame
) -> list[list[int]]:
    """Per refusal the resource logged (or the history's ``purchase fail stale``), the holds it may have come from."""
    fencing = (final_state or {}).get("fencing") or {}
    log = fencing.get("refused")
    refused: list[list[int]] = []  # per refusal, the holds it may have come from
    if log is not None:
        item = h["lock"].astype(str).str.rsplit(":", n=1).str[-1].to_numpy(dtype=object)
        tokens = h["token"].to_numpy(dtype=np.float64, na_value=np.nan)
        clients = np.asarray(h["client"].astype(str), dtype=object)
        index: dict[tuple[str, float], list[int]] = {}
        for i, (it, tk) in enumerate(zip(item, tokens, strict=True)):
            if tk == tk:
                index.setdefault((str(it), float(tk)), []).append(i)
        for entry in log:
            it, tk, who = str(entry[0]), float(entry[1]), str(entry[2] or "")
            cands = index.get((it, tk), [])
            if who:
                cands = [i for i in cands if clients[i] == who or clients[i].endswith("/" + who)]
            if cands:
                refused.append(cands)
    else:
        is_stale = (history["op"] == "purchase") & (history["type"] == "fail") & (history["error"] == "stale")
        stale = history.loc[is_stale.to_numpy(dtype=bool), ["client", "lock", "t_ns"]]
        starts = h["start_ns"].to_numpy(dtype=np.int64)
        seen = h["seen_ns"].to_numpy(dtype=np.int64) if "seen_ns" in h.columns else h["end_ns"].to_numpy()
        key = h["client"].astype(str) + "\x00" + h["lock"].astype(str)
        groups = {k: np.asarray(v) for k, v in key.groupby(key).groups.items()} if not stale.empty else {}
        for client, lock, t in stale.itertuples(index=False):
            rows = groups.get(f"{client}\x00{lock}")
            if rows is None:
                continue
            inside = rows[(starts[rows] <= t) & (seen[rows] >= t)]
            if len(inside):
                refused.append([int(inside[np.argmax(starts[inside])])])
    return refused


def check_fencing(
    final_state: dict[str, Any] | None,
    history: pd.DataFrame | None = None,
    hold_frame: pd.DataFrame | None = None,
    uncertainty_ns: dict[str, int | None] | None = None,
) -> CheckResult:
    """Stale accesses the resource saw: a token older than the newest it had already seen.

    In ``observe`` mode the resource accepted them (a holder that had lost the lock
    wrote anyway: invalid); in ``enforce`` mode it refused them. A refusal is fencing doing
    its job only when the refused holder had lost the lock to a newer one: a refusal of a
    holder that overlapped nobody (``legit_writes_refused``, needs the history) means the
    tokens are wrong, and the result is invalid; one the clocks cannot decide
    (``uncertain_writes_refused``) makes it unknown. ``off``: no tokens, nothing to count.
    """
    fencing = (final_state or {}).get("fencing") or {}
    mode = fencing.get("mode", "off")
    if mode == "off":
        return CheckResult("fencing", "valid", {}, "unfenced: no tokens were used")
    writes, reads = int(fencing.get("stale_writes", 0)), int(fencing.get("stale_reads", 0))
    if mode == "observe":
        counters = {"stale_writes_accepted": writes, "stale_writes_refused": 0, "stale_reads": reads}
        status: Status = "invalid" if writes else "valid"
        detail = f"{writes} writes carried a stale token and were accepted (fencing observed, not enforced)"
        found = stale_write_witnesses(final_state, history, hold_frame) if writes else []
        return CheckResult("fencing", status, counters, detail, witnesses=found)
    legit, undecided = (
        refusal_counts(final_state, history, hold_frame, uncertainty_ns) if history is not None else (0, 0)
    )
    counters: dict[str, int | float] = {
        "stale_writes_accepted": 0,
        "stale_writes_refused": writes,
        "stale_reads": reads,
        "legit_writes_refused": legit,
    }
    if undecided:
        counters["uncertain_writes_refused"] = undecided
    if legit:
        status = "invalid"
        detail = (
            f"fencing is broken: it refused {legit} accesses of holders that overlapped nobody "
            f"(legitimate writes refused; {writes} stale writes and {reads} stale reads refused in all)"
        )
    elif undecided:
        status = "unknown"
        detail = (
            f"fencing refused {writes} stale writes and {reads} stale reads; for {undecided} of them only "
            "the clocks could tell whether the refused holder had lost the lock (cannot tell fencing "
            "working from fencing broken)"
        )
    else:
        status = "valid"
        detail = f"fencing refused {writes} stale writes and {reads} stale reads"
    return CheckResult("fencing", status, counters, detail)


def stale_write_witnesses(
    final_state: dict[str, Any] | None, history: pd.DataFrame | None, hold_frame: pd.DataFrame | None
) -> list[Witness]:
    """The first stale writes the resource accepted: the stale writer's hold, then the newer grant.

    The resource logs each stale access (item, token, client, ``w``); the writer's hold is found as
    for a refusal (:func:`_refused_holds`), the newer grant is the first of that lock with a higher
    token granted while the writer held it, and the time is the writer's first write after that grant.
    """
    log = [e for e in (((final_state or {}).get("fencing") or {}).get("refused") or []) if str(e[-1]) == "w"]
    if history is None or history.empty or not log:
        return []
    h = holds(history) if hold_frame is None else hold_frame
    if h.empty:
        return []
    lock = h["lock"].astype(str).to_numpy(dtype=object)
    start = h["start_ns"].to_numpy(dtype=np.int64)
    end = h["end_ns"].to_numpy(dtype=np.int64)
    token = h["token"].to_numpy(dtype=np.float64, na_value=np.nan)
    buys = history[((history["op"] == "purchase") & (history["type"] != "invoke")).to_numpy(dtype=bool)]
    out: list[Witness] = []
    for cands in _refused_holds({"fencing": {"refused": log}}, history, h):
        i = int(cands[0])
        newer = np.flatnonzero((lock == lock[i]) & (token > token[i]) & (start < end[i]))
        if not len(newer):
            continue
        j = int(newer[np.argmin(start[newer])])
        mine = buys[(buys["client"].astype(str) == str(h["client"].iloc[i])).to_numpy(dtype=bool)]
        t = mine["t_ns"].to_numpy(dtype=np.int64)
        t = t[(t >= max(start[i], start[j])) & (t <= end[i])]
        at = int(t.min()) if len(t) else int(start[j])
        out.append(Witness("stale-write", at, str(lock[i]), (hold_record(h, i), hold_record(h, j))))
        if len(out) >= MAX_WITNESSES:
            break
    return sorted(out, key=lambda w: w.at_ns)
