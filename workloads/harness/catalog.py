"""The workloads bench can run, by name, without importing Locust (which monkey-patches).

Each entry names its locustfile, the capability an impl needs to run it, and the
options it adds to ``bench run`` (passed through to the locustfile unchanged).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # the locustfiles sit in workloads/


@dataclass(frozen=True)
class WorkloadInfo:
    """What bench needs to know about a workload before launching Locust with it."""

    name: str
    module_file: str
    summary: str
    requires: str | None = None  # a Capabilities field that must be true, e.g. "read_write"
    checker: str = "workloads.checks.core:check_flash_sale"  # pure (history, final_state) -> Verdict
    options: dict[str, str] = field(default_factory=dict)  # bench option -> locustfile flag
    #: bench option defaults of this workload, used when the user did not give the flag
    defaults: dict[str, object] = field(default_factory=dict)
    #: the locustfile of its open model (``--arrivals``), None when it has none
    open_module: str | None = None

    @property
    def path(self) -> Path:
        return HERE / self.module_file

    def check_function(self) -> Callable:
        module, _, name = self.checker.partition(":")
        return getattr(importlib.import_module(module), name)


_FLASH_SALE_OPTIONS = {
    "items": "--items",
    "skew": "--skew",
    "stock": "--stock",
    "max_qty": "--max-qty",
    "cs": "--cs",
    "pace": "--pace",
}

WORKLOADS: dict[str, WorkloadInfo] = {
    "flash-sale": WorkloadInfo(
        name="flash-sale",
        module_file="flash_sale.py",
        summary="contended inventory decrement: lock, read stock, think, write, order, unlock",
        options=_FLASH_SALE_OPTIONS,
        open_module="flash_sale_open.py",
    ),
    "lock-pairs": WorkloadInfo(
        name="lock-pairs",
        module_file="lock_pairs.py",
        summary="acquire+release in a closed loop, each user its own lock: the cost of the lock alone",
        checker="workloads.checks.core:check_lock_pairs",
        options={"shared_keys": "--shared-keys"},
    ),
    "read-mostly": WorkloadInfo(
        name="read-mostly",
        module_file="read_mostly.py",
        summary="readers share a document, writers exclude everyone (--read-ratio of reads)",
        requires="read_write",
        checker="workloads.checks.read_write:check_read_mostly",
        options={"items": "--items", "read_ratio": "--read-ratio", "cs": "--cs"},
    ),
    "reentrant": WorkloadInfo(
        name="reentrant",
        module_file="reentrant.py",
        summary="nested acquires of one lock to --depth inside the critical section; free after the last release",
        requires="reentrant",
        checker="workloads.checks.reentrant:check_reentrant",
        options={
            "depth": "--depth",
            "items": "--items",
            "skew": "--skew",
            "stock": "--stock",
            "max_qty": "--max-qty",
            "cs": "--cs",
        },
    ),
    "long-cs": WorkloadInfo(
        name="long-cs",
        module_file="long_cs.py",
        summary="flash-sale with heavy-tailed critical sections that outlast the lease",
        options=_FLASH_SALE_OPTIONS,
        defaults={"cs": "pareto:100ms:1.2", "ttl": 0.5, "fencing": "both", "duration": 8.0, "users": 10},
    ),
    "lease-expiry": WorkloadInfo(
        name="lease-expiry",
        module_file="lease_expiry.py",
        summary="flash-sale where a holder pauses longer than its lease (--pause-kind task or world)",
        checker="workloads.checks.core:check_lease_expiry",
        options={
            **_FLASH_SALE_OPTIONS,
            "pause": "--pause",
            "pause_every": "--pause-every",
            "pause_kind": "--pause-kind",
        },
        defaults={"ttl": 1.0, "cs": "5ms", "fencing": "both", "duration": 8.0, "users": 10},
    ),
    "crash": WorkloadInfo(
        name="crash",
        module_file="crash.py",
        summary="flash-sale where worker 0 is killed (SIGKILL) while it holds a lock",
        checker="workloads.checks.core:check_crash",
        options={
            **_FLASH_SALE_OPTIONS,
            "crash_after": "--crash-after",
            "stuck_bound": "--stuck-bound",
            "crashes": "--crashes",
            "crash_gap": "--crash-gap",
        },  # fmt: skip
        defaults={"ttl": 1.0, "cs": "5ms", "duration": 10.0, "users": 10, "processes": 2},
    ),
}


#: Options of an open-model workload (workloads/flash_sale_open.py): bench option -> flag.
ARRIVAL_OPTIONS = {"arrivals": "--arrivals", "patience": "--patience", "max_in_flight": "--max-in-flight"}


def open_model(info: WorkloadInfo) -> WorkloadInfo | None:
    """The arrival-driven variant of a workload (``flash-sale`` -> ``flash-sale-open``), or None."""
    if info.open_module is None:
        return None
    return replace(
        info,
        name=f"{info.name}-open",
        module_file=info.open_module,
        summary=f"{info.summary}; buyers arrive on a schedule (--arrivals) and try once",
        options={**info.options, **ARRIVAL_OPTIONS},
        open_module=None,
    )


def names() -> list[str]:
    return list(WORKLOADS)
