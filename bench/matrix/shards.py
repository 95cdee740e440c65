"""Shards of a matrix: a deterministic slice of whole lanes, and how many lanes fit this machine.

Why shards: the distribution belongs to the engine a team already has (CI's job matrix, a
Kubernetes Indexed Job); lockbench adds only the slice (``bench matrix --shard I/N``) and the
merge (``bench merge``, :mod:`bench.matrix.merge`). A shard is made of whole lanes because a
lane owns its servers and its groups share strikes: cutting one would pay the strikes twice.

Every shard plans the whole matrix (same commit, same options: same plan) and keeps the
lanes dealt to it, longest first to the shard each lengthens least (ties to the lowest index), so
shard I of N is the same set of lanes on every machine, and the shards together are the
plan, each lane exactly once. run.json ``shard`` records the slice and the whole plan's case
ids, which is what the merge checks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bench.errors import UserError


@dataclass(frozen=True)
class Shard:
    """``I/N``: this process runs the I-th of N slices (1-based, as CI matrices count)."""

    index: int
    of: int

    @property
    def text(self) -> str:
        return f"{self.index}/{self.of}"


def parse_shard(text: str | None) -> Shard | None:
    """``2/4`` -> Shard(2, 4); None for no sharding; UserError (one line) for anything else."""
    if text is None or text == "":
        if text == "":
            raise UserError("--shard is empty; give I/N, e.g. --shard 1/4 (the first of four slices)")
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m:
        raise UserError(f"bad --shard {text!r}; give I/N, e.g. --shard 1/4 (the first of four slices)")
    index, of = int(m.group(1)), int(m.group(2))
    if of < 1 or not 1 <= index <= of:
        raise UserError(f"bad --shard {text!r}: I must be between 1 and N, and N at least 1 (e.g. 1/4)")
    return Shard(index, of)


def lane_cost(lane: Any) -> float:
    """A lane's expected length: each unit's cap (a group's cases run side by side: its longest)."""
    if not getattr(lane, "units", None):
        from bench.matrix.plan import _capped_s

        return _capped_s(lane.cases)
    return sum(max(c.settings.duration for c in unit) for unit in lane.units if unit)


def lane_slot_seconds(lane: Any) -> float:
    """The lane slots its units hold, times their caps: how much of the machine's time the lane takes.

    A heavy unit holds two of three slots and keeps every other heavy unit waiting, a unit that
    runs alone holds them all (bench/matrix/admission.py), so its cap counts that many times: the
    caps once, the heavy ones (alone included) once more, those alone a third time
    (:func:`lane_parts`). The order lanes start in (:func:`start_order`).
    """
    return sum(lane_parts(lane))


def start_order(lanes: list[Any]) -> list[Any]:
    """The lanes in the order they start: most slot-seconds first (ties: name), the longest-job-first rule.

    Why not the plan's order (the sum of the cases' durations): it started a lane of two heavy
    units last, because it has few cases; heavy units never meet, so both then ran one after the
    other with the machine 0.4 cores busy (shard 4, 2026-12-06: etcd's ensemble partitions took
    the last 250 s of 810 s alone, after 500 s at 1.6-1.9 cores).
    """
    return sorted(lanes, key=lambda ln: (-lane_slot_seconds(ln), ln.name))


#: How many lanes a shard is dealt for (what ``--lanes auto`` runs on a quiet 2-core runner). A
#: constant, not this machine's count: every machine must deal the same shards.
DEAL_LANES = 3


def lane_parts(lane: Any) -> tuple[float, float, float]:
    """(the lane's caps, those of its heavy units, those of its units that run alone).

    Heavy units run one at a time across the lanes, units that run alone beside nothing
    (bench/matrix/admission.py); a unit's cap is its longest case's.
    """
    from bench.matrix.admission import ALONE, HEAVY, unit_weight

    heavy = alone = 0.0
    for unit in lane.units or []:
        if unit and (weight := unit_weight(unit)) >= HEAVY:
            cap = max(c.settings.duration for c in unit)
            heavy += cap
            alone += cap if weight >= ALONE else 0.0
    return lane_cost(lane), heavy, alone


def deal(lanes: list[Any], of: int) -> list[list[Any]]:
    """The lanes dealt to ``of`` shards, each to the shard it lengthens least; longest first (ties: lowest index).

    A shard's length is at least its units' caps spread over :data:`DEAL_LANES` lanes, with the
    units that run alone added whole, and at least its heavy units' caps one after another (they
    never meet): the larger of the two. Dealing by the total alone put a Sentinel failover, two
    etcd ensemble kills, PostgreSQL's restart and ZooKeeper's session pauses into one shard,
    which then took 698 s against 350-367 s.
    """

    def length(cost: float, heavy: float, alone: float) -> float:
        return max((cost - alone) / DEAL_LANES + alone, heavy)

    parts = {id(lane): lane_parts(lane) for lane in lanes}
    shards: list[list[Any]] = [[] for _ in range(of)]
    sums = [(0.0, 0.0, 0.0)] * of
    for lane in sorted(lanes, key=lambda ln: (-length(*parts[id(ln)]), ln.name)):
        mine = parts[id(lane)]
        added = [tuple(x + y for x, y in zip(sums[j], mine, strict=True)) for j in range(of)]
        i = min(range(of), key=lambda j: (length(*added[j]), sums[j][0], j))
        shards[i].append(lane)
        sums[i] = added[i]
    return shards
