"""The workloads bench can run, by name, without importing Locust (which monkey-patches).

Each entry names its locustfile, the capability an impl needs to run it, and the
options it adds to ``bench run`` (passed through to the locustfile unchanged).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class WorkloadInfo:
    """What bench needs to know about a workload before launching Locust with it."""

    name: str
    module_file: str
    summary: str
    requires: str | None = None  # a Capabilities field that must be true, e.g. "read_write"
    checker: str = "workloads.checkers:check_flash_sale"  # pure (history, final_state) -> Verdict
    options: dict[str, str] = field(default_factory=dict)  # bench option -> locustfile flag

    @property
    def path(self) -> Path:
        return HERE / self.module_file

    def check_function(self) -> Callable:
        module, _, name = self.checker.partition(":")
        return getattr(importlib.import_module(module), name)


WORKLOADS: dict[str, WorkloadInfo] = {
    "flash-sale": WorkloadInfo(
        name="flash-sale",
        module_file="flash_sale.py",
        summary="contended inventory decrement: lock, read stock, think, write, order, unlock",
        options={
            "items": "--items",
            "skew": "--skew",
            "stock": "--stock",
            "max_qty": "--max-qty",
            "cs": "--cs",
        },
    ),
    "lock-pairs": WorkloadInfo(
        name="lock-pairs",
        module_file="lock_pairs.py",
        summary="acquire+release in a closed loop, each user its own lock: the cost of the lock alone",
        checker="workloads.checkers:check_lock_pairs",
        options={"shared_keys": "--shared-keys"},
    ),
}


def names() -> list[str]:
    return list(WORKLOADS)
