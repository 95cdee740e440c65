"""``bench run``: validate the request, plan cases, bring servers up, run, write, render."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench import meta
from bench.errors import UserError
from bench.faults import parse_fault
from bench.redact import redact_text
from bench.results import RunFolder, write_merged_histograms
from bench.runner import Case, RunSettings, ServerDied, endpoints_for_meta, run_plan
from infra.stack import Stack
from lockimpls import registry
from lockimpls.base import LockConfigError
from workloads.arrivals import parse_arrivals
from workloads.catalog import WORKLOADS, WorkloadInfo, open_model
from workloads.distributions import SpecError, parse_distribution


def _impl_backend(impl_id: str, cls: type) -> str:
    return getattr(cls, "backend", "") or impl_id.split(".", 1)[0]


def plan_impls(backends: list[str], impls: list[str]) -> list[tuple[str, str, type]]:
    """[(impl id, backend, class)] for the requested backends and impls, validated."""
    if not backends and not impls:
        raise UserError(f"say what to run: --backend {{{','.join(registry.backends())},all}} or --impl ID")
    chosen: list[str] = []
    valid_backends = registry.backends()
    for b in backends:
        if b == "all":
            chosen += registry.known_ids()
        elif b in valid_backends:
            chosen += registry.ids_for_backend(b)
        else:
            raise UserError(f"unknown backend {b!r}; valid: {', '.join(valid_backends)}, all")
    if impls and backends:
        # --impl narrows the backends' list; an impl of another backend is added
        narrowed = [i for i in chosen if i in impls]
        chosen = narrowed + [i for i in impls if i not in narrowed]
    elif impls:
        chosen = list(impls)
    out: list[tuple[str, str, type]] = []
    for impl_id in dict.fromkeys(chosen):
        if impl_id not in registry.known_ids(include_test=True) and ":" not in impl_id:
            raise UserError(
                f"unknown impl {impl_id!r}; valid: {', '.join(registry.known_ids())} or package.module:Class"
            )
        try:
            cls = registry.resolve(impl_id)
        except LockConfigError as exc:
            raise UserError(str(exc)) from None
        out.append((impl_id, _impl_backend(impl_id, cls), cls))
    return out


FENCING_CHOICES = ("off", "observe", "enforce", "both")

#: Workloads whose fault takes down a whole Locust process: someone else must carry on.
NEEDS_PROCESSES = ("crash", "lease-expiry")


def fencing_modes(fencing: str, cls: type, impl_id: str, console: Console, quiet: bool = False) -> list[str]:
    """The fencing modes to run an impl in; an impl without tokens runs unfenced and says so."""
    modes = ["observe", "enforce"] if fencing == "both" else [fencing]
    if modes != ["off"] and not cls.capabilities.fencing:
        if not quiet:
            console.print(f"lockbench: {impl_id} has no fencing tokens: it runs unfenced only")
        return ["off"]
    return modes


def _check_user_dsns(user_urls: dict[str, list[str]]) -> None:
    """A PostgreSQL DSN must log in, not just answer TCP: check it now, in one line."""
    from lockimpls.base import BackendUnavailable

    for dsn in user_urls.get("postgres") or []:
        from lockimpls.pg_conn import check_dsn

        try:
            check_dsn(dsn)
        except (BackendUnavailable, LockConfigError) as exc:
            raise UserError(f"--pg-dsn: {exc}") from None


def _check_numbers(**values: Any) -> None:
    for name, (value, minimum) in values.items():
        if value < minimum:
            raise UserError(f"--{name.replace('_', '-')} must be at least {minimum}, got {value}")


def _per_workload(info: WorkloadInfo, explicit: set[str], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the workload's own defaults where the user set nothing (flag, env, config)."""
    return {k: (v if k in explicit else info.defaults.get(k, v)) for k, v in values.items()}


def _plan_workload(
    info: WorkloadInfo, v: dict[str, Any], workload_options: dict[str, Any], console: Console
) -> dict[str, Any]:
    """Validate one workload's effective values; bump processes where the fault needs a survivor."""
    opts = {**workload_options, "cs": v["cs"]}
    _check_numbers(
        duration=(v["duration"], 1), users=(v["users"], 1), processes=(v["processes"], 1),
        items=(opts["items"], 1), stock=(opts["stock"], 0), max_qty=(opts["max_qty"], 1), ttl=(v["ttl"], 0.001),
    )  # fmt: skip
    try:
        parse_distribution(opts["cs"])
    except SpecError as exc:
        raise UserError(f"--cs: {exc}") from None
    if v["fencing"] not in FENCING_CHOICES:
        raise UserError(f"--fencing must be one of {', '.join(FENCING_CHOICES)}, got {v['fencing']!r}")
    world_pause = info.name != "lease-expiry" or opts.get("pause_kind") == "world"
    if info.name in NEEDS_PROCESSES and v["processes"] < 2 and world_pause:
        console.print(
            f"lockbench: {info.name} needs a second Locust process to survive it: using --processes 2"
        )
        v = {**v, "processes": 2}
    return {**v, "workload_options": opts}


def plan_open_model(
    workloads: list[str], arrivals: str | None, patience: float, max_in_flight: int, explicit: set[str]
) -> dict[str, WorkloadInfo]:
    """The workload each name runs as: its open model with ``--arrivals``, else itself; validated."""
    if arrivals is None:
        given = [f"--{n.replace('_', '-')}" for n in ("patience", "max_in_flight") if n in explicit]
        if given:
            raise UserError(f"{' and '.join(given)} only apply with --arrivals (the open model)")
        return {w: WORKLOADS[w] for w in workloads}
    try:
        parse_arrivals(arrivals)
    except SpecError as exc:
        raise UserError(str(exc)) from None
    if "users" in explicit:
        raise UserError(
            "--users does not apply with --arrivals: buyers come by the schedule; cap them with --max-in-flight"
        )
    _check_numbers(patience=(patience, 0.001), max_in_flight=(max_in_flight, 1))
    infos: dict[str, WorkloadInfo] = {}
    for w in workloads:
        variant = open_model(WORKLOADS[w])
        if variant is None:
            able = [n for n, i in WORKLOADS.items() if i.open_module]
            raise UserError(f"--arrivals does not apply to workload {w}; it applies to {', '.join(able)}")
        infos[w] = variant
    return infos


def run_command(
    *,
    backends: list[str],
    impls: list[str],
    workloads: list[str],
    duration: float,
    users: int,
    spawn_rate: float | None,
    processes: int,
    trials: int,
    workload_options: dict[str, Any],
    ttl: float,
    retry_interval: float,
    acquire_timeout: float,
    fencing: str,
    user_urls: dict[str, list[str]],
    resource_url: str | None,
    results_dir: Path,
    render: bool,
    argv: list[str],
    console: Console,
    lock_params: dict[str, Any] | None = None,
    suite: str | None = None,
    slo_us: float | None = None,
    fault: str | None = None,
    clock_skew: float = 0.0,
    skewed_clients: float = 0.0,
    explicit: set[str] | None = None,
    arrivals: str | None = None,
    patience: float = 2.0,
    max_in_flight: int = 50,
) -> int:
    """Run the benchmark; returns the exit code (0 ok, 1 a case could not run, 130 interrupted).

    ``explicit`` names the options the user set (flag, environment or config); every other
    option takes each workload's own default (long-cs: a 0.5 s lease ...) where it has one.
    """
    workloads = list(dict.fromkeys(workloads or ["flash-sale"]))
    for workload in workloads:
        if workload not in WORKLOADS:
            raise UserError(f"unknown workload {workload!r}; valid: {', '.join(WORKLOADS)}")
    _check_numbers(
        trials=(trials, 1), retry_interval=(retry_interval, 0), acquire_timeout=(acquire_timeout, 0)
    )
    infos = plan_open_model(workloads, arrivals, patience, max_in_flight, explicit or set())
    if arrivals is not None:
        workload_options = {**workload_options, "arrivals": arrivals, "patience": patience,
                            "max_in_flight": max_in_flight}  # fmt: skip
    base = {"ttl": ttl, "cs": workload_options["cs"], "fencing": fencing, "duration": duration, "users": users,
            "processes": processes}  # fmt: skip
    plans = {
        w: _plan_workload(
            infos[w], _per_workload(infos[w], explicit or set(), base), workload_options, console
        )
        for w in workloads
    }
    fault_spec = parse_fault(fault) if fault else None
    planned = plan_impls(backends, impls)
    _check_user_dsns(user_urls)
    if fault_spec is not None:
        for impl_id, backend, _ in planned:
            if not fault_spec.applies_to(backend):
                raise UserError(f"--fault {fault_spec.kind} does not apply to {impl_id} ({backend})")
    servers_needed: dict[str, int] = {}
    for _, backend, cls in planned:
        servers_needed[backend] = max(servers_needed.get(backend, 1), int(getattr(cls, "servers", 1)))
    runnable: dict[str, list[tuple[str, str]]] = {}
    for workload in workloads:
        info = infos[workload]
        runnable[workload] = []
        for impl_id, backend, cls in planned:
            if info.requires and not getattr(cls.capabilities, info.requires, False):
                console.print(
                    f"skipping {impl_id} for {workload}: it needs {info.requires}, which it does not declare"
                )
                continue
            runnable[workload].append((impl_id, backend))
    if not any(runnable.values()):
        raise UserError(f"no impl of those can run workload {', '.join(workloads)}")

    settings = {
        w: RunSettings(
            # the open model runs one scheduler user per process, all started at once
            users=p["processes"] if arrivals else p["users"],
            spawn_rate=100.0 * p["processes"] if arrivals else spawn_rate or float(p["users"]),
            duration=p["duration"],
            processes=p["processes"],
            ttl=p["ttl"],
            retry_interval=retry_interval,
            acquire_timeout=acquire_timeout,
            clock_skew=clock_skew,
            skewed_clients=skewed_clients,
            workload_options=p["workload_options"],
            lock_params=dict(lock_params or {}),
        )  # fmt: skip
        for w, p in plans.items()
    }
    first = plans[workloads[0]]
    params = {
        "workload": ",".join(workloads), "duration_s": first["duration"], "users": first["users"],
        "spawn_rate": settings[workloads[0]].spawn_rate, "processes": first["processes"], "trials": trials,
        "ttl_s": first["ttl"], "retry_interval_s": retry_interval, "acquire_timeout_s": acquire_timeout,
        "fencing": first["fencing"], "fault": fault or "", "clock_skew_s": clock_skew,
        "skewed_clients": skewed_clients, **first["workload_options"],
        **({"lock_params": lock_params} if lock_params else {}), **({"suite": suite} if suite else {}),
    }  # fmt: skip
    if len(workloads) > 1:
        params["per_workload"] = {
            w: {k: p[k] for k in ("duration", "users", "processes", "ttl", "cs", "fencing")}
            for w, p in plans.items()
        }
    impl_classes = {impl_id: cls for impl_id, _, cls in planned}
    cases = [
        Case(impl=impl_id, backend=backend, workload=infos[w], trial=t, params={"trials": trials},
             fencing=mode, fault=fault_spec, settings=settings[w])
        for t in range(trials)
        for w in workloads
        for impl_id, backend in runnable[w]
        for mode in fencing_modes(plans[w]["fencing"], impl_classes[impl_id], impl_id, console, quiet=t > 0)
    ]  # fmt: skip
    needed = list(dict.fromkeys(backend for w in workloads for _, backend in runnable[w]))
    all_impls = list(dict.fromkeys(i for w in workloads for i, _ in runnable[w]))
    started = datetime.now(UTC).isoformat()
    console.print(f"lockbench: starting servers for {', '.join(needed)} + resource")
    topology = {b: fault_spec.topology() for b in needed} if fault_spec and fault_spec.topology() else {}
    with Stack(
        needed,
        user_urls=user_urls,
        resource_url=resource_url,
        servers_per_backend=servers_needed,
        topology=topology,
    ) as stack:
        folder = RunFolder(
            results_dir,
            {
                "started_at": started,
                "command": redact_text(" ".join(["bench", *argv[1:]])),
                "git_commit": meta.git_commit(),
                "host": meta.host_info(),
                "versions": {"servers": stack.versions, "libraries": meta.library_versions()},
                "params": params,
                "impls": all_impls,
                "endpoints": endpoints_for_meta(stack),
            },
        )
        console.print(f"lockbench: results in {folder.path}")
        status = "complete"
        failures: list[str] = []
        try:
            failures = run_plan(
                cases, stack, folder,
                progress=lambda c, i, n: console.print(
                    f"[{i + 1}/{n}] {c.impl} x {c.scenario}"
                    + (f" (trial {c.trial + 1})" if trials > 1 else "")
                    + f": {c.settings.duration:g}s, {c.settings.users} users"
                ),
                on_failure=lambda c, msg: console.print(f"  case failed: {msg}"),
            )  # fmt: skip
            if failures:
                status = "complete-with-failures"
                folder.note("failures", failures)
        except KeyboardInterrupt:
            status = "incomplete"
            console.print("lockbench: interrupted; keeping finished cases")
        except ServerDied as exc:
            status = "incomplete"
            failures = [str(exc)]
            folder.note("failures", failures)
            console.print(f"lockbench: {exc}")
        finally:
            folder.finish(status)
    _write_trial_summaries(folder, console)
    _summary(folder, console)
    report_path = folder.path / "report.html"
    if render and folder.rows:
        from dashboards import render_report

        report_path = render_report([folder.path], slo_us=slo_us)
    print(report_path if render and folder.rows else folder.path)
    if status == "incomplete":
        return 1 if failures else 130
    return 1 if failures else 0


def _summary(folder: RunFolder, console: Console) -> None:
    if not folder.rows:
        return
    table = Table(title=f"lockbench run {folder.run_id}", title_justify="left")
    cols = [
        ("impl", "impl"), ("acq/s", "throughput_acq_s"), ("acquire p50 us", "acquire_p50_us"),
        ("acquire p99 us", "acquire_p99_us"), ("overlaps", "overlapping_holds"),
        ("oversold", "oversold_units"), ("lost upd.", "lost_updates"), ("verdict", "verdict"),
    ]  # fmt: skip
    for title, _ in cols:
        table.add_column(title, justify="left" if title in ("impl", "verdict") else "right", overflow="fold")
    several_scenarios = len({row.get("scenario") for row in folder.rows}) > 1
    for row in folder.rows:
        cells = []
        for _, key in cols:
            v = row.get(key, "")
            if isinstance(v, float):
                cells.append("-" if v != v else f"{v:,.0f}")  # NaN: no data for this column
            else:
                cells.append(str(v))
        if several_scenarios:
            cells[0] += f" {row['scenario']}"
        if row.get("trial"):
            cells[0] += f" #{row['trial'] + 1}"
        table.add_row(*cells, style="red" if row.get("verdict") == "invalid" else None)
    console.print(table)


def _write_trial_summaries(folder: RunFolder, console: Console) -> None:
    """Merged histograms and per-trial figures per impl x workload (hist/<group>.merged.json)."""
    if not folder.rows:
        return
    try:
        write_merged_histograms(folder.path)
    except (OSError, ValueError) as exc:  # the per-trial files are all there; only the merge is lost
        console.print(f"lockbench: could not merge trial histograms: {exc}")
