"""Which run parameters apply to a run's workloads, and which differ between compared runs.

bench records every option in run.json ``params``, including the defaults of workloads the
run did not use (``pause_every`` in a flash-sale run). A reader must see only what shaped
the run, and a comparison must say first when its runs were not run alike: a change in
throughput between 20 and 50 users is not a regression or an improvement.
"""

from __future__ import annotations

from typing import Any

#: Options that belong to particular workloads (mirrors workloads/harness/catalog.py; dashboards import no workloads).
_FLASH_SALE = ("items", "skew", "stock", "max_qty")
WORKLOAD_OPTIONS: dict[str, tuple[str, ...]] = {
    "flash-sale": _FLASH_SALE,
    "lock-pairs": ("shared_keys",),
    "read-mostly": ("items", "read_ratio"),
    "reentrant": ("depth", *_FLASH_SALE),
    "long-cs": _FLASH_SALE,
    "lease-expiry": (*_FLASH_SALE, "pause", "pause_every", "pause_kind"),
    "crash": (*_FLASH_SALE, "crash_after", "stuck_bound"),
}
_ALL_WORKLOAD_OPTIONS = {o for opts in WORKLOAD_OPTIONS.values() for o in opts}
#: Options that matter only when set.
_ONLY_WHEN_SET = ("fault", "clock_skew_s", "skewed_clients", "lock_params", "suite")


def workloads_of(meta: dict[str, Any]) -> list[str]:
    params = meta.get("params") if isinstance(meta.get("params"), dict) else {}
    value = params.get("workload")
    if isinstance(value, list):
        return [str(v) for v in value]
    return [w.strip() for w in str(value or "").split(",") if w.strip()]


def applicable_params(meta: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(parameters that shaped this run, recorded ones that did not) from run.json ``params``."""
    params = meta.get("params") if isinstance(meta.get("params"), dict) else {}
    workloads = workloads_of(meta)
    known = [w for w in workloads if w in WORKLOAD_OPTIONS]
    used = {o for w in known for o in WORKLOAD_OPTIONS[w]}
    applies: dict[str, Any] = {}
    unused: dict[str, Any] = {}
    for key, value in params.items():
        other_workload = key in _ALL_WORKLOAD_OPTIONS and bool(known) and key not in used
        unset = key in _ONLY_WHEN_SET and value in ("", 0, 0.0, None, {}, [])
        (unused if other_workload or unset else applies)[key] = value
    return applies, unused


def param_differences(metas: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(key, [value per run]) for every applicable parameter whose value is not the same in all runs."""
    shown = [_flat(applicable_params(m)[0]) for m in metas]
    keys = list(dict.fromkeys(k for p in shown for k in p))
    out = []
    for key in keys:
        values = [str(p[key]) if key in p else "absent" for p in shown]
        if len(set(values)) > 1:
            out.append((key, values))
    return out


def _flat(params: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested parameters (per_workload) as dotted keys, so a difference names the value that differs."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = value
    return out
