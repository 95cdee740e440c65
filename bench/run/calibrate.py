"""``bench calibrate``: each backend's floor and each impl's solo hold, printed, nothing kept.

The same two figures every ``bench run`` measures and stores in run.json ``calibration``,
alone and quickly: to see what this machine can do before a long run, or to check that
a slow figure comes from the machine rather than from the lock.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.errors import UserError
from bench.measure import fidelity
from bench.measure.floors import floors as measure_floors
from bench.run.case import Case as RunCase
from bench.run.case import RunSettings
from bench.run.command import plan_impls
from bench.run.runner import calibrate_solo, new_calibration
from infra.stack import Stack
from workloads.harness.catalog import WORKLOADS


def _us(value: Any) -> str:
    return "-" if value is None or value != value else f"{value:,.0f}"


def calibrate_command(
    *,
    backends: list[str],
    impls: list[str],
    workload: str,
    settings: RunSettings,
    console: Console,
    out: Console,
) -> int:
    """Start servers, measure floors and solo holds, print one table; 0, or 1 when a calibration failed."""
    if workload not in fidelity.CALIBRATED_WORKLOADS:
        raise UserError(
            f"--workload {workload} has no solo calibration; use one of "
            f"{', '.join(sorted(fidelity.CALIBRATED_WORKLOADS))}"
        )
    info = WORKLOADS[workload]
    planned = [
        (i, b, c) for i, b, c in plan_impls(backends, impls)
        if not info.requires or getattr(c.capabilities, info.requires, False)
    ]  # fmt: skip
    if not planned:
        raise UserError(f"no impl of those can run workload {workload}")
    servers: dict[str, int] = {}
    for _, backend, cls in planned:
        servers[backend] = max(servers.get(backend, 1), int(getattr(cls, "servers", 1)))
    needed = list(servers)
    console.print(f"lockbench: starting servers for {', '.join(needed)} + resource")
    failed = 0
    rows: list[tuple[str, ...]] = []
    with (
        Stack(needed, servers_per_backend=servers) as stack,
        tempfile.TemporaryDirectory(prefix="lockbench-calibrate-") as tmp,
    ):
        floors = measure_floors(stack.urls, needed)
        calibration = new_calibration(floors)
        for impl_id, backend, _ in planned:
            case = RunCase(impl=impl_id, backend=backend, workload=info, settings=settings, solo=True)
            console.print(f"calibrating {impl_id}: 1 user, {case.settings.duration:g}s")
            solo = calibrate_solo(case, stack, Path(tmp), calibration)
            if solo is None:
                console.print(f"  {calibration['errors'][-1]}")
            failed += solo is None
            floor = floors.get(backend, {})
            ratio = (
                f"{solo.hold_p50_us / floor['p50_us']:,.0f}x"
                if solo is not None and floor.get("p50_us")
                else "-"
            )
            rows.append((
                backend, str(floor.get("op", "")), _us(floor.get("p50_us")), impl_id,
                _us(solo.hold_p50_us if solo else None), _us(solo.acquire_p50_us if solo else None),
                str(solo.acquisitions if solo else 0), ratio,
            ))  # fmt: skip
    table = Table(title=f"lockbench calibrate ({workload}, cs {settings.workload_options.get('cs')})",
                  title_justify="left")  # fmt: skip
    for title in ("backend", "floor op", "floor p50 us", "impl", "solo hold p50 us", "solo acquire p50 us",
                  "acquisitions", "hold / floor"):  # fmt: skip
        table.add_column(title, justify="left" if title in ("backend", "floor op", "impl") else "right")
    for row in rows:
        table.add_row(*row)
    out.print(table)
    return 1 if failed else 0
