"""What ``bench run`` was asked to do: one typed, checked object from options, variables and pyproject.

The CLI (bench/cli/app.py) builds it once the options passed bench/validate.py, and hands
it down; nothing below the CLI reads an option any other way. It imports nothing heavy, so
the CLI can build it before pandas or Locust is imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

#: the options that are a workload's own knobs: they travel together as ``workload_options``
WORKLOAD_OPTIONS = (
    "items", "skew", "stock", "max_qty", "cs", "shared_keys", "pause", "pause_every", "pause_kind",
    "crash_after", "stuck_bound", "read_ratio", "depth",
)  # fmt: skip
#: option name -> request field, where the field reads better in the plural or as a verb
RENAMED = {"backend": "backends", "impl": "impls", "workload": "workloads", "report": "render"}


def from_text(sources: Mapping[str, str], name: str) -> str:
    """`` (from LOCKBENCH_X)`` for an error naming option ``name``, or "" for a flag or a default."""
    return f" (from {sources[name]})" if sources.get(name) else ""


@dataclass(frozen=True)
class RunRequest:
    """One ``bench run``, as the user asked for it (after a suite filled in what they left out).

    Why one object: the run's planning takes it whole, so an option is added in one place
    (bench/cli/options.py), carried here, and read where it is used.
    """

    backends: tuple[str, ...] = ()
    impls: tuple[str, ...] = ()
    workloads: tuple[str, ...] = ("flash-sale",)
    duration: float = 8.0
    users: int = 50
    spawn_rate: float | None = None
    processes: int | str = "auto"
    trials: int = 1
    workload_options: Mapping[str, Any] = field(default_factory=dict)
    ttl: float = 10.0
    retry_interval: float = 0.01
    acquire_timeout: float = 5.0
    fencing: str = "off"
    lock_params: Mapping[str, Any] = field(default_factory=dict)
    fault: str | None = None
    clock_skew: float = 0.0
    skewed_clients: float = 0.0
    strikes: int = 1
    evidence: str = "standard"
    user_urls: Mapping[str, list[str]] = field(default_factory=dict)
    resource_url: str | None = None
    master_bind: str | None = None
    expect_workers: int = 0
    test_hosts: int = 0
    arrivals: str | None = None
    patience: float = 2.0
    max_in_flight: int = 50
    results_dir: Path = Path("results")
    render: bool = True
    slo_us: float | None = None
    suite: str | None = None
    recalibrate: bool = False
    #: None: ``LOCKBENCH_WARM`` decides (default on)
    warm: bool | None = None
    #: the command line, for run.json (passwords are redacted there)
    argv: tuple[str, ...] = ()
    #: the options the user set (flag, variable or pyproject): a workload's own defaults yield to them
    explicit: frozenset[str] = frozenset()
    #: option -> where its value came from ("" flag or default, LOCKBENCH_X, [tool.lockbench] x in FILE)
    sources: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_options(cls, values: Mapping[str, Any], **extra: Any) -> RunRequest:
        """The request from the command's option values (by option name), plus ``extra`` fields."""
        names = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {"workload_options": {k: values[k] for k in WORKLOAD_OPTIONS if k in values}}
        for name, value in values.items():
            key = RENAMED.get(name, name)
            if key in names and key != "workload_options":
                kwargs[key] = tuple(value) if isinstance(value, list) else value
        return cls(**{**kwargs, **extra})

    def source(self, name: str) -> str:
        """`` (from LOCKBENCH_X)`` for an error about option ``name``; "" for a flag or a default."""
        return from_text(self.sources, name)


def with_source(message: str, sources: Mapping[str, str]) -> str:
    """``message`` ending with where its first ``--flag``'s value came from, unless it says so already.

    Checks below the CLI name the option they refuse (``--fault restart does not apply to
    ...``); the request knows whether that value was a flag, a variable or a pyproject key.
    """
    import re

    m = re.search(r"--([a-z][a-z-]*)", message)
    if m is None or "(from " in message:
        return message
    return message + from_text(sources, m.group(1).replace("-", "_"))
