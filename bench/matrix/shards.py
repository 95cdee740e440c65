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


#: How many lanes a shard is dealt for (what ``--lanes auto`` runs on a quiet 2-core runner). A
#: constant, not this machine's count: every machine must deal the same shards.
DEAL_LANES = 3


def lane_heavy(lane: Any, alone: bool = False) -> float:
    """The caps of a lane's heavy units (they run one at a time across the lanes: admission.py);
    with ``alone``, of only those that run with nothing beside them."""
    from bench.matrix.admission import ALONE, HEAVY, unit_weight

    least = ALONE if alone else HEAVY
    return sum(
        max(c.settings.duration for c in unit)
        for unit in lane.units or []
        if unit and unit_weight(unit) >= least
    )


def deal(lanes: list[Any], of: int) -> list[list[Any]]:
    """The lanes dealt to ``of`` shards, each to the shard it lengthens least; longest first (ties: lowest index).

    A shard's length is at least its units' caps spread over :data:`DEAL_LANES` lanes, with the
    units that run alone added whole, and at least its heavy units' caps one after another (they
    never meet): the larger of the two. Dealing by the total alone put a Sentinel failover, two
    etcd ensemble kills, PostgreSQL's restart and ZooKeeper's session pauses into one shard,
    which then took 698 s against 350-367 s.
    """
    shards: list[list[Any]] = [[] for _ in range(of)]
    load = [0.0] * of
    heavy = [0.0] * of
    alone = [0.0] * of

    def length(j: int, cost: float = 0.0, hv: float = 0.0, al: float = 0.0) -> float:
        spread = (load[j] + cost - alone[j] - al) / DEAL_LANES + alone[j] + al
        return max(spread, heavy[j] + hv)

    def own(lane: Any) -> tuple[float, float, float]:
        return lane_cost(lane), lane_heavy(lane), lane_heavy(lane, alone=True)

    for lane in sorted(
        lanes, key=lambda ln: (-max((own(ln)[0] - own(ln)[2]) / DEAL_LANES + own(ln)[2], own(ln)[1]), ln.name)
    ):
        cost, hv, al = own(lane)
        i = min(range(of), key=lambda j: (length(j, cost, hv, al), load[j], j))
        shards[i].append(lane)
        load[i] += cost
        heavy[i] += hv
        alone[i] += al
    return shards
