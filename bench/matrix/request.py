"""What ``bench matrix`` was asked to do: one typed, checked object, built by the CLI and handed down.

Imports nothing heavy: the CLI builds it before pandas or Locust is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.matrix.shards import Shard, parse_shard


@dataclass(frozen=True)
class MatrixRequest:
    """One ``bench matrix``: which impls and scenarios, how many lanes, which servers, where results go.

    Why one object: the matrix's outline (bench/matrix/command.py) takes it whole; an option
    is declared in bench/cli/options.py, carried here and read where it is used.
    """

    backends: tuple[str, ...] = ()
    impls: tuple[str, ...] = ()
    scenarios: tuple[str, ...] = ()
    #: lanes side by side; None: as many as the spare cores carry (bench/matrix/shards.py auto_lanes)
    parallel: int | None = None
    shard: Shard | None = None
    warm: bool = True
    user_urls: Mapping[str, list[str]] = field(default_factory=dict)
    resource_url: str | None = None
    results_dir: Path = Path("results")
    render: bool = True
    slo_us: float | None = None
    evidence: str = "standard"
    #: strikes per cell; None: the evidence level's k
    strikes: int | None = None
    argv: tuple[str, ...] = ()
    sources: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, values: Mapping[str, Any], **extra: Any) -> MatrixRequest:
        """The request from ``bench matrix``'s option values (checked by bench/validate.py first)."""
        lanes = str(values.get("lanes") or "auto")
        parallel = values.get("parallel")
        if parallel is None and lanes != "auto":
            parallel = int(lanes)
        return cls(
            backends=tuple(values.get("backend") or ()),
            impls=tuple(values.get("impl") or ()),
            scenarios=tuple(values.get("scenario") or ()),
            parallel=parallel,
            shard=parse_shard(values.get("shard")),
            warm=bool(values.get("warm", True)),
            resource_url=values.get("resource_url"),
            results_dir=Path(values.get("results_dir") or "results"),
            render=bool(values.get("report", True)),
            evidence=str(values.get("evidence") or "standard"),
            strikes=values.get("strikes"),
            **extra,
        )
