"""``bench run``: validate the request, plan cases, bring servers up, run, write, render."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from rich import box
from rich.console import Console
from rich.table import Table

from bench import validate
from bench.errors import Interrupted, UserError, raise_if_interrupted
from bench.measure import evidence, fidelity, strikes
from bench.measure.strikes import LEVELS, grants_between, stuck_bound
from bench.nemesis.faults import parse_fault
from bench.results import meta
from bench.results.folder import ResultsWriteError, RunFolder, write_merged_histograms
from bench.results.matrices import sources_for_run
from bench.results.redact import redact_text
from bench.run import clock_watch
from bench.run.calibration_cache import CalibrationCache, default_folder
from bench.run.case import Case, RunSettings, ServerDied, with_calibration
from bench.run.impls import plan_impls
from bench.run.progress import LiveProgress
from bench.run.request import RunRequest, with_source
from bench.run.runner import endpoints_for_meta, run_plan
from bench.run.testhost_stack import TestHostStack
from bench.run.timing import RunTiming
from bench.run.warm import WarmLocust
from infra.stack import Stack
from infra.testhosts import TestHostNet
from lockimpls.base import LockConfigError
from workloads.harness.arrivals import parse_arrivals
from workloads.harness.catalog import WORKLOADS, WorkloadInfo, open_model
from workloads.harness.distributions import SpecError, parse_distribution

FENCING_CHOICES = validate.FENCING_CHOICES

#: Workloads whose fault takes down a whole Locust process: someone else must carry on.
NEEDS_PROCESSES = ("crash", "lease-expiry")

#: Most Locust workers ``--processes auto`` starts: beyond this many, the workers' own
#: coordination with the master costs more than the cores they add on a loopback run.
AUTO_PROCESSES_CAP = 8


def resolve_processes(value: str | int, users: int) -> int:
    """``--processes``: an integer, or ``auto`` = one Locust worker per core when users > 1.

    Simulated clients that share a process delay each other's steps (docs/architecture.md,
    "Fidelity"), so ``auto`` spreads them over every core; a single client needs no
    workers. Never more workers than users.
    """
    if str(value).strip().lower() == "auto":
        if users <= 1:
            return 1
        return max(1, min(os.cpu_count() or 1, AUTO_PROCESSES_CAP, users))
    try:
        number = int(str(value))
    except ValueError:
        raise UserError(f"--processes must be a whole number or auto, got {value!r}") from None
    return number


def fencing_modes(fencing: str, cls: type, impl_id: str, console: Console, quiet: bool = False) -> list[str]:
    """The fencing modes to run an impl in; an impl without tokens runs unfenced and says so."""
    modes = ["observe", "enforce"] if fencing == "both" else [fencing]
    if modes != ["off"] and not cls.capabilities.fencing:
        if not quiet:
            console.print(f"lockbench: {impl_id} has no fencing tokens: it runs unfenced only")
        return ["off"]
    return modes


#: user_urls key (a backend) -> the option that gave it, for validation messages
_URL_OPTIONS = {
    "redis": "redis_url", "postgres": "pg_dsn", "zookeeper": "zk_hosts", "etcd": "etcd_url",
    "memcached": "memcached_url",
}  # fmt: skip


def with_recovery_bound(case: Case, cls: type, keep_bound: bool = False) -> Case:
    """A crash case with its stuck bound derived from the lock's own timeout (issue 26).

    The lock says how long its service takes to free a dead holder's lock
    (``Lock.recovery_after_crash``: lease TTL, session timeout, the connection's close, or
    never); the case waits ``bench.measure.strikes.stuck_bound`` of that before it calls the
    lock stuck, unless the user gave ``--stuck-bound`` (``keep_bound``). The expectation goes
    into the row (``recovery_expected_s``, ``recovery_by``) so the report can say "recovered in
    10.0 s, the session timeout".
    """
    if case.workload.name != "crash":
        return case
    expected, by = cls.recovery_after_crash(case.settings.ttl, case.settings.lock_params)
    options = dict(case.settings.workload_options)
    if not keep_bound:
        options["stuck_bound"] = stuck_bound(expected, case.settings.ttl)
    params = {**case.params, "recovery_expected_s": expected if expected is not None else float("inf"),
              "recovery_by": by}  # fmt: skip
    return replace(case, params=params, settings=replace(case.settings, workload_options=options))


def _per_workload(info: WorkloadInfo, explicit: set[str], values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the workload's own defaults where the user set nothing (flag, env, config)."""
    return {k: (v if k in explicit else info.defaults.get(k, v)) for k, v in values.items()}


def _plan_workload(
    info: WorkloadInfo, v: dict[str, Any], workload_options: dict[str, Any], console: Console
) -> dict[str, Any]:
    """Validate one workload's effective values; bump processes where the fault needs a survivor."""
    opts = {**workload_options, "cs": v["cs"]}
    v = {**v, "processes": resolve_processes(v["processes"], v["users"])}
    validate.check_numbers({**opts, **{k: v[k] for k in ("duration", "users", "processes", "ttl")}})
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


def _is_loopback(host: str) -> bool:
    return host == "localhost" or host.startswith("127.") or host == "::1"


def _check_master_mode(request: RunRequest) -> tuple[str, int] | None:
    """Validate --master-bind / --expect-workers; returns the address to listen on."""
    from bench.run.worker import parse_host_port

    master_bind, expect_workers, test_hosts = request.master_bind, request.expect_workers, request.test_hosts
    processes, user_urls, resource_url = request.processes, request.user_urls, request.resource_url

    if test_hosts:
        if test_hosts < 1:
            raise UserError(f"--test-hosts must be at least 1, got {test_hosts}")
        if resource_url or any(user_urls.values()):
            raise UserError(
                "--test-hosts starts every server on a test host of its own; drop the server URLs"
            )
        from infra.testhosts import check_available

        check_available()  # one line naming the fix (root, CAP_NET_ADMIN, iproute2) when it fails
    if master_bind is None:
        if expect_workers:
            raise UserError("--expect-workers needs --master-bind HOST[:PORT] (where the workers connect)")
        return None
    if test_hosts:
        raise UserError("--test-hosts places the master itself; drop --master-bind")
    host, port = parse_host_port(master_bind, "--master-bind")
    if expect_workers < 1:
        raise UserError("--master-bind needs --expect-workers N (Locust worker processes to wait for)")
    if str(processes).strip().lower() != "auto" and resolve_processes(processes, 2) > 1:
        raise UserError(
            "--processes is for one host; with --master-bind run `bench worker --processes N` on each"
        )
    if not _is_loopback(host) and not (resource_url and any(user_urls.values())):
        raise UserError(
            "workers on other hosts cannot reach servers started here on 127.0.0.1: give the lock server "
            "(--redis-url, --pg-dsn, ...) and --resource-url at addresses the workers can reach"
        )
    return host, port


@contextlib.contextmanager
def on_test_hosts(needed: bool) -> Iterator[TestHostNet | None]:
    """Test hosts for the whole run when ``needed`` (partition faults), else None.

    Bench's main thread moves to a ``control`` host first, so every check, reset and
    fault it runs (and every thread it starts) reaches the servers on their hosts.
    Everything is torn down on the way out, Ctrl-C and SIGTERM included.
    """
    if not needed:
        yield None
        return
    with TestHostNet(0) as net:
        control = net.add_host("control")
        with net.enter(control):
            yield net


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
    if not (0.001 <= patience <= 3600):  # also false for NaN
        raise UserError(f"--patience must be a number of seconds from 0.001 to 3600, got {patience}")
    if not (1 <= max_in_flight <= 1_000_000):
        raise UserError(f"--max-in-flight must be a whole number from 1 to 1000000, got {max_in_flight}")
    infos: dict[str, WorkloadInfo] = {}
    for w in workloads:
        variant = open_model(WORKLOADS[w])
        if variant is None:
            able = [n for n, i in WORKLOADS.items() if i.open_module]
            raise UserError(f"--arrivals does not apply to workload {w}; it applies to {', '.join(able)}")
        infos[w] = variant
    return infos


@dataclass
class RunPlan:
    """A checked ``bench run``, ready to start: its cases, the backends they need and run.json's params.

    Why a class: planning decides everything that can refuse the run (exit 2) before any
    server starts; starting (:func:`_start`) only carries it out.
    """

    cases: list[Case]
    needed: list[str]
    settings: dict[str, RunSettings]
    params: dict[str, Any]
    impl_classes: dict[str, type]
    all_impls: list[str]
    partitioned: bool
    bind: tuple[str, int] | None
    stack_args: dict[str, Any] = field(default_factory=dict)


def run_command(request: RunRequest, console: Console) -> int:
    """Run the benchmark; returns the exit code (0 ok, 1 a case could not run, 130 interrupted).

    Options the user did not set (``request.explicit``) take each workload's own default
    (long-cs: a 0.5 s lease ...) where it has one. ``request.warm`` (None: ``LOCKBENCH_WARM``,
    default on) starts local cases' Locust from a warm process; runs with --master-bind,
    --test-hosts or a partition fault always start it cold.
    """
    try:
        plan = plan_run(request, console)
    except UserError as exc:  # name where the refused value came from (flag, variable, pyproject)
        raise UserError(with_source(str(exc), request.sources)) from None
    return _start(plan, request, console)


def plan_run(request: RunRequest, console: Console) -> RunPlan:
    """Everything that can refuse the run, in the order a user fixes it; nothing is started."""
    workloads = _check_request(request)
    infos = plan_open_model(
        workloads, request.arrivals, request.patience, request.max_in_flight, set(request.explicit)
    )
    plans = _plan_workloads(request, workloads, infos, console)
    fault_spec = parse_fault(request.fault) if request.fault else None
    partitioned = fault_spec is not None and fault_spec.is_partition
    if partitioned:
        _plan_partition(request, fault_spec.kind, plans, console)
    bind = _check_master_mode(request)
    planned = plan_impls(request.backends, request.impls)
    check_user_servers(request.user_urls, planned, request.impls)
    if fault_spec is not None:
        for impl_id, backend, _ in planned:
            if not fault_spec.applies_to(backend):
                raise UserError(f"--fault {fault_spec.kind} does not apply to {impl_id} ({backend})")
    runnable = _runnable(workloads, infos, planned, console)
    settings = _settings(request, plans, bind)
    impl_classes = {impl_id: cls for impl_id, _, cls in planned}
    cases = _cases(request, infos, plans, runnable, settings, impl_classes, bind, console)
    needed = list(dict.fromkeys(backend for w in workloads for _, backend in runnable[w]))
    if not request.test_hosts:  # test hosts reach their servers from their own network
        refuse_before_start(needed, request.user_urls, request.resource_url)
    servers_needed: dict[str, int] = {}
    for _, backend, cls in planned:
        servers_needed[backend] = max(servers_needed.get(backend, 1), int(getattr(cls, "servers", 1)))
    stack_args = {
        "backends": needed, "user_urls": dict(request.user_urls), "resource_url": request.resource_url,
        "servers_per_backend": servers_needed,
        "topology": {b: fault_spec.topology(b) for b in needed} if fault_spec else {},
    }  # fmt: skip
    return RunPlan(
        cases, needed, settings, _params(request, workloads, plans, settings, bind), impl_classes,
        list(dict.fromkeys(i for w in workloads for i, _ in runnable[w])), partitioned, bind, stack_args,
    )  # fmt: skip


def _check_request(request: RunRequest) -> list[str]:
    """The checks that do not depend on the plan (the CLI made them too; other callers may not); the workloads."""
    if request.evidence not in LEVELS:
        raise UserError(
            f"--evidence must be one of {', '.join(LEVELS)}, got {request.evidence!r}{request.source('evidence')}"
        )
    workloads = list(dict.fromkeys(request.workloads or ["flash-sale"]))
    for workload in workloads:
        if workload not in WORKLOADS:
            hint = validate.did_you_mean(workload, WORKLOADS, "`bench list`")
            raise UserError(f"unknown workload {workload!r}{hint}{request.source('workload')}")
    r = request
    numbers = {"trials": r.trials, "retry_interval": r.retry_interval, "acquire_timeout": r.acquire_timeout,
               "spawn_rate": r.spawn_rate, "clock_skew": r.clock_skew, "skewed_clients": r.skewed_clients,
               "slo_us": r.slo_us}  # fmt: skip
    validate.check_numbers(numbers, r.sources)
    validate.check_urls({_URL_OPTIONS.get(b, b): urls for b, urls in r.user_urls.items()}, r.sources)
    validate.check_urls({"resource_url": r.resource_url}, r.sources)
    return workloads


def _plan_workloads(
    request: RunRequest, workloads: list[str], infos: dict[str, WorkloadInfo], console: Console
) -> dict[str, dict[str, Any]]:
    """Each workload's effective values (its own defaults where the user set nothing)."""
    options = dict(request.workload_options)
    if request.arrivals is not None:
        options |= {"arrivals": request.arrivals, "patience": request.patience,
                    "max_in_flight": request.max_in_flight}  # fmt: skip
    base = {"ttl": request.ttl, "cs": options.get("cs", "1ms"), "fencing": request.fencing,
            "duration": request.duration, "users": request.users, "processes": request.processes}  # fmt: skip
    explicit = set(request.explicit)
    plans = {
        w: _plan_workload(infos[w], _per_workload(infos[w], explicit, base), options, console)
        for w in workloads
    }
    if "crash" in plans:  # --strikes N kills N workers, one after another: N + 1 processes
        plan, strikes = plans["crash"], request.strikes
        gap = grants_between(LEVELS[request.evidence], strikes)
        plan["workload_options"] = {**plan["workload_options"], "crashes": strikes, "crash_gap": gap}
        if plan["processes"] < strikes + 1:
            console.print(
                f"lockbench: crash with --strikes {strikes} kills {strikes} workers: using --processes {strikes + 1}"
            )
            plan["processes"] = strikes + 1
    return plans


def _plan_partition(
    request: RunRequest, kind: str, plans: dict[str, dict[str, Any]], console: Console
) -> None:
    """A partition fault places its own hosts and servers: refuse what clashes, give it two processes."""
    if request.test_hosts or request.master_bind:
        raise UserError(f"--fault {kind} places its own client hosts: drop --test-hosts / --master-bind")
    if any(request.user_urls.values()) or request.resource_url:
        raise UserError(f"--fault {kind} starts its own servers on test hosts: drop the server URLs")
    for w, p in plans.items():
        if p["processes"] < 2:
            console.print(f"lockbench: {kind} cuts one client host off: using --processes 2")
            plans[w] = {**p, "processes": 2}


def _runnable(
    workloads: list[str],
    infos: dict[str, WorkloadInfo],
    planned: list[tuple[str, str, type]],
    console: Console,
) -> dict[str, list[tuple[str, str]]]:
    """workload -> the (impl, backend) pairs that declare what it needs; refused when none can run."""
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
    return runnable


def _settings(
    request: RunRequest, plans: dict[str, dict[str, Any]], bind: tuple[str, int] | None
) -> dict[str, RunSettings]:
    """Each workload's RunSettings: what every case of it hands to Locust and the lock."""
    r, target = request, LEVELS[request.evidence]
    settings = {
        w: RunSettings(
            # the open model runs one scheduler user per process, all started at once
            users=p["processes"] if r.arrivals else p["users"],
            spawn_rate=100.0 * p["processes"] if r.arrivals else r.spawn_rate or float(p["users"]),
            duration=p["duration"],
            processes=p["processes"],
            ttl=p["ttl"],
            retry_interval=r.retry_interval,
            acquire_timeout=r.acquire_timeout,
            clock_skew=r.clock_skew,
            skewed_clients=r.skewed_clients,
            workload_options=p["workload_options"],
            lock_params=dict(r.lock_params),
            master_bind=bind,
            expect_workers=r.expect_workers,
            strikes=r.strikes,
            grants_between=grants_between(target, r.strikes),
            evidence=target,
        )  # fmt: skip
        for w, p in plans.items()
    }
    if bind is not None:
        for s in settings.values():
            s.processes = 1  # the workers are remote; their own --processes says how many
    return settings


def _params(
    request: RunRequest, workloads: list[str], plans: dict[str, dict[str, Any]],
    settings: dict[str, RunSettings], bind: tuple[str, int] | None,
) -> dict[str, Any]:  # fmt: skip
    """run.json ``params``: the first workload's values, and every workload's where they differ."""
    r, first = request, plans[workloads[0]]
    params = {
        "workload": ",".join(workloads), "duration_s": first["duration"], "users": first["users"],
        "spawn_rate": settings[workloads[0]].spawn_rate, "processes": first["processes"], "trials": r.trials,
        "ttl_s": first["ttl"], "retry_interval_s": r.retry_interval, "acquire_timeout_s": r.acquire_timeout,
        "fencing": first["fencing"], "fault": r.fault or "", "strikes": r.strikes, "evidence": r.evidence,
        "clock_skew_s": r.clock_skew, "skewed_clients": r.skewed_clients, **first["workload_options"],
        **({"lock_params": dict(r.lock_params)} if r.lock_params else {}),
        **({"suite": r.suite} if r.suite else {}),
        **({"master_bind": r.master_bind, "expect_workers": r.expect_workers} if bind else {}),
        **({"test_hosts": r.test_hosts} if r.test_hosts else {}),
    }  # fmt: skip
    if len(workloads) > 1:
        params["per_workload"] = {
            w: {k: p[k] for k in ("duration", "users", "processes", "ttl", "cs", "fencing")}
            for w, p in plans.items()
        }
    return params


def _cases(
    request: RunRequest, infos: dict[str, WorkloadInfo], plans: dict[str, dict[str, Any]],
    runnable: dict[str, list[tuple[str, str]]], settings: dict[str, RunSettings], impl_classes: dict[str, type],
    bind: tuple[str, int] | None, console: Console,
) -> list[Case]:  # fmt: skip
    """Every case of the run, interleaved by trial, with its recovery bound and, locally, its calibration."""
    trials = request.trials
    fault_spec = parse_fault(request.fault) if request.fault else None
    cases = [
        Case(impl=impl_id, backend=backend, workload=infos[w], trial=t, params={"trials": trials},
             fencing=mode, fault=fault_spec, settings=settings[w])
        for t in range(trials)
        for w in plans
        for impl_id, backend in runnable[w]
        for mode in fencing_modes(plans[w]["fencing"], impl_classes[impl_id], impl_id, console, quiet=t > 0)
    ]  # fmt: skip
    keep_bound = "stuck_bound" in request.explicit
    cases = [with_recovery_bound(c, impl_classes[c.impl], keep_bound) for c in cases]
    if bind is None and not request.test_hosts:
        # each impl's solo hold, measured next to its cases (local runs: remote workers serve
        # only the cases they were started for)
        cases = with_calibration(cases)
    return cases


def _start(plan: RunPlan, request: RunRequest, console: Console) -> int:
    """Servers up, the cases run, the folder written and the report rendered: the run itself."""
    hosted = TestHostStack(request.test_hosts, **plan.stack_args) if request.test_hosts else None

    @contextlib.contextmanager
    def open_stack() -> Iterator[Any]:
        with (
            on_test_hosts(plan.partitioned) as net,
            hosted if hosted is not None else Stack(**plan.stack_args, hosts=net) as stack,
        ):
            if hosted is not None:
                for s in plan.settings.values():
                    s.master_bind, s.expect_workers, s.processes = hosted.master_bind, request.test_hosts, 1
            yield stack

    # warm: local cases only (remote workers and test hosts start their own Locust)
    local = plan.bind is None and not request.test_hosts and not plan.partitioned
    run = _Execution(
        plan.cases, console, warm=_use_warm(request.warm) and local, recalibrate=request.recalibrate
    )
    classes = plan.impl_classes
    meta_fields = {
        "started_at": datetime.now(UTC).isoformat(), "command": redact_text(" ".join(["bench", *request.argv[1:]])),
        "git_commit": meta.git_commit(), "host": meta.host_info(), "params": plan.params, "impls": plan.all_impls,
        # what each lock promises, for readers that may not import it (the timeline's lease marks)
        "impl_capabilities": {
            i: {"ttl": classes[i].capabilities.ttl, "fencing": classes[i].capabilities.fencing}
            for i in plan.all_impls if i in classes
        },
    }  # fmt: skip
    try:
        return run.execute(
            plan.needed, open_stack=open_stack,
            extra_meta=lambda: {"test_hosts": hosted.roles()} if hosted is not None else {},
            meta_fields=meta_fields, output=(request.results_dir, request.render, request.slo_us),
        )  # fmt: skip
    except KeyboardInterrupt:
        raise Interrupted(run.interrupted_message()) from None


def _distinct_servers(urls: list[str]) -> set[tuple[str, int | None]]:
    """(host, port) of each server URL: two databases of one Redis are one server."""
    out = set()
    for url in urls:
        try:
            parts = urlsplit(url)
            out.add(((parts.hostname or parts.path or url).lower(), parts.port))
        except ValueError:
            out.add((url, None))
    return out


def check_user_servers(
    user_urls: Mapping[str, list[str]], planned: list[tuple[str, str, type]], named: Sequence[str] = ()
) -> None:
    """The servers a user gave can carry the locks: enough distinct ones, and a PostgreSQL that logs in.

    A RedLock given one Redis five times has one point of failure, not five: refused, in one
    line, before anything starts (a majority of one server is no quorum). So is one named
    with ``--impl`` (``named``) and given fewer servers than it needs; ``--backend redis
    --redis-url URL`` alone still runs every Redis lock on that one server, as it always did.
    """
    for impl_id, backend, cls in planned:
        urls, needs = list(user_urls.get(backend) or []), int(getattr(cls, "servers", 1))
        distinct = _distinct_servers(urls)
        short = needs > 1 and len(distinct) < needs
        if urls and short and (len(urls) > 1 or impl_id in named):
            option = validate.flag(_URL_OPTIONS.get(backend, backend))
            raise UserError(
                f"{option}: {impl_id} needs {needs} independent servers, got {len(urls)} URL(s) naming "
                f"{len(distinct)} distinct server(s); give {needs} URLs of different servers (host:port), "
                f"or leave {option} out and bench starts them"
            )
    from lockimpls.base import BackendUnavailable

    for dsn in user_urls.get("postgres") or []:
        from lockimpls.pg_conn import check_dsn

        try:
            check_dsn(dsn)
        except (BackendUnavailable, LockConfigError) as exc:
            raise UserError(f"--pg-dsn: {exc}") from None


def refuse_before_start(
    needed: list[str], user_urls: Mapping[str, list[str]], resource_url: str | None
) -> None:
    """An unknown backend, a server URL nobody answers at, or a Redis that refuses its password is
    refused before any server or warm Locust starts."""
    from infra import catalog
    from infra.stack import probe

    for backend in needed:
        if backend not in catalog.SERVERS:
            raise UserError(
                f"no server for backend {backend!r} (an impl's `backend`); bench starts: {', '.join(catalog.SERVERS)}"
            )
    for backend in needed:
        for url in user_urls.get(backend) or []:
            probe(url)  # InfraError: one line naming the URL without its password
            if backend == "redis":
                _check_redis_login(url, "--redis-url")
    if resource_url:
        probe(resource_url)
        _check_redis_login(resource_url, "--resource-url")


def _check_redis_login(url: str, option: str) -> None:
    """A Redis that answers must also accept the URL's password (or need none): AUTH now, not in a case."""
    if not url.lower().startswith(("redis://", "rediss://", "unix://")):
        return  # a sentinel URL names no data server to log in to
    import redis

    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=3, socket_timeout=3)
        try:
            client.ping()
        finally:
            client.close()
    except redis.AuthenticationError as exc:
        raise UserError(
            f"{option} {redact_text(url)}: the server refused the login ({exc}); give its password in the "
            f"URL (redis://:PASSWORD@host:port), best through {validate.env_name(option)}"
        ) from None
    except redis.ResponseError as exc:
        if "NOAUTH" in str(exc) or "WRONGPASS" in str(exc):
            raise UserError(
                f"{option} {redact_text(url)}: the server needs a password ({exc}); give it in the URL "
                f"(redis://:PASSWORD@host:port), best through {validate.env_name(option)}"
            ) from None
    except redis.RedisError:
        return  # reachable (probe) but not answering like Redis: the run's own start says more


def _use_warm(warm: bool | None) -> bool:
    """``warm`` as given, else ``LOCKBENCH_WARM`` (1/0, true/false, yes/no, on/off; default on).

    Why an environment variable: a cold run is for comparing against a warm one
    (tests/test_run_timing.py), not something a user needs a flag for.
    """
    if warm is not None:
        return warm
    value = os.environ.get("LOCKBENCH_WARM", "1").strip().lower()
    if value in ("1", "true", "yes", "on", ""):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise UserError(f"LOCKBENCH_WARM must be 1 or 0 (true/false, yes/no, on/off), got {value!r}")


def _cpu_times() -> tuple[float, float]:
    """(steal, total) jiffies of all CPUs from /proc/stat; (0, 0) where there is none."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = [float(v) for v in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    return (fields[7] if len(fields) > 7 else 0.0), sum(fields[:8])


class LoadSampler:
    """The load average (highest seen, every 2 s) and the CPU steal share while the cases run.

    Why: a generator-bound figure on a machine whose load is above its cores was starved by
    the machine, not by Locust; the closing line must say which (fidelity.bottleneck_line).
    """

    def __init__(self) -> None:
        import threading

        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.load_max = 0.0
        self._start = self._end = (0.0, 0.0)

    def _sample(self) -> None:
        while True:
            with contextlib.suppress(OSError):
                self.load_max = max(self.load_max, os.getloadavg()[0])
            if self._stop.wait(2.0):
                return

    def __enter__(self) -> LoadSampler:
        import threading

        self._start = _cpu_times()
        self._thread = threading.Thread(target=self._sample, name="load-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._end = _cpu_times()

    def result(self) -> fidelity.MachineLoad | None:
        if self._thread is None:
            return None
        steal = self._end[0] - self._start[0]
        total = self._end[1] - self._start[1]
        return fidelity.MachineLoad(self.load_max, os.cpu_count() or 1, steal / total if total > 0 else 0.0)


class _Execution:
    """One ``bench run`` from servers up to the report, and what to say if Ctrl-C stops it.

    Why a class: the interrupt message must name the folder and the stage that was cut
    short, wherever the KeyboardInterrupt lands (server start, a case, rendering).
    """

    def __init__(
        self, cases: list[Case], console: Console, warm: bool = False, recalibrate: bool = False
    ) -> None:
        self.cases = cases
        self.console = console
        #: measure every lock alone again instead of reusing a kept calibration (--recalibrate)
        self.recalibrate = recalibrate
        #: start local cases' Locust from a warm process (bench/run/warm.py)
        self.warm = warm
        self.timing = RunTiming()
        self.folder: RunFolder | None = None
        self.stage = "starting servers"
        #: the machine's load while the cases run: the closing advice names the real bottleneck
        self.load = LoadSampler()

    def kept_calibrations(self, folder: RunFolder, console: Console) -> CalibrationCache:
        """The calibrations earlier runs of this commit kept beside this run's folder."""
        host = folder.meta.get("host") if isinstance(folder.meta.get("host"), dict) else {}
        kept = CalibrationCache(
            default_folder(), str(folder.meta.get("git_commit") or ""), str(host.get("machine_class") or ""),
            recalibrate=self.recalibrate,
        )  # fmt: skip
        why = kept.why_not()
        if why and any(getattr(c, "solo", False) for c in self.cases):
            console.print(f"lockbench: calibrating every lock afresh ({why})", highlight=False, markup=False)
        return kept

    def interrupted_message(self) -> str:
        if self.folder is None:
            return f"interrupted while {self.stage}; no case had started, nothing was written"
        done = len(self.folder.rows)
        path = self.folder.path
        if self.stage == "rendering":
            return (
                f"interrupted; finished cases in {path} (report.html not written: run `bench report {path}`)"
            )
        cases = [c for c in self.cases if not getattr(c, "solo", False)]  # calibrations are no cases
        return f"interrupted; finished cases in {path} ({done} of {len(cases)} finished)"

    def execute(
        self,
        needed: list[str],
        *,
        open_stack: Callable[[], contextlib.AbstractContextManager[Any]],
        extra_meta: Callable[[], dict[str, Any]],
        meta_fields: dict[str, Any],
        output: tuple[Path, bool, float | None],
    ) -> int:
        """Servers up, every case run into a new folder, then :meth:`finish`; the exit code.

        ``output`` is (results folder, render the report, SLO line of the report).
        """
        results_dir, render, slo_us = output
        console = self.console
        timing = self.timing
        timing.phases["bench_start"] = time.monotonic() - timing.t0
        console.print(f"lockbench: starting servers for {', '.join(needed)} + resource")
        with contextlib.ExitStack() as up:
            # the warm Locust imports while the servers start; run_plan waits for it before the floors
            warm = up.enter_context(WarmLocust()) if self.warm else None
            if warm is not None:
                warm.spawn()
            with timing.phase("server_start"):
                stack = up.enter_context(open_stack())
            meta_fields.update(extra_meta())
            meta_fields["versions"] = {"servers": stack.versions, "libraries": meta.library_versions()}
            meta_fields["endpoints"] = endpoints_for_meta(stack)
            raise_if_interrupted()
            folder = self.folder = RunFolder(results_dir, {**meta_fields, "report": "missing"})
            console.print(f"lockbench: results in {folder.path}")
            status = "complete"
            failures: list[str] = []
            self.stage = "running cases"
            live = LiveProgress(console, self.cases)
            try:
                with live, self.load:
                    failures = run_plan(
                        self.cases, stack, folder, progress=live.case_started, on_tick=live.tick,
                        on_failure=lambda c, msg: console.print(f"  case failed: {msg}"),
                        warm=warm, timing=timing, kept=self.kept_calibrations(folder, console),
                    )  # fmt: skip
                if failures:
                    status = "complete-with-failures"
                    folder.note("failures", failures)
            except ServerDied as exc:
                status = "incomplete"
                failures = [str(exc)]
                folder.note("failures", failures)
                console.print(
                    f"lockbench: {exc}", soft_wrap=True, highlight=False, markup=False
                )  # a path in it stays whole
            except BaseException:  # Ctrl-C, a full disk: the finished cases stay readable
                folder.finish("incomplete")
                raise
            folder.finish(status)
            stopping = time.monotonic()
        timing.phases["server_stop"] += time.monotonic() - stopping  # servers and the warm Locust down
        return self.finish(folder, status, failures, render, slo_us)

    def finish(
        self, folder: RunFolder, status: str, failures: list[str], render: bool, slo_us: float | None
    ) -> int:
        """Summary, report and the closing lines once every case is in ``folder``; the exit code."""
        console, timing = self.console, self.timing
        self.stage = "rendering"  # every case is in the folder; what is left is the summary and report
        rendering = time.monotonic()
        _write_trial_summaries(folder, console)
        _summary(folder, console)
        report_path = folder.path / "report.html"
        report_failed = ""
        if render and folder.rows:
            from dashboards import ReportWriteError, render_report

            raise_if_interrupted()
            sources = sources_for_run(folder.path)  # the newest matrix of each lock answers "is it safe?"
            try:
                report_path = render_report([folder.path], slo_us=slo_us, safety_sources=sources)
                folder.note("report", "report.html")
            except ReportWriteError as exc:  # a full disk: the cases are safe, say how to get the report
                report_failed = f"{exc.strerror}; free some space, then run `bench report {folder.path}`"
                with contextlib.suppress(ResultsWriteError, OSError):
                    folder.note("report", f"not written: {exc.strerror}")
        elif not render:
            folder.note("report", "not requested (--no-report): bench report <folder> makes it")
        timing.phases["render"] += time.monotonic() - rendering
        if report_failed:
            console.print(f"lockbench: {report_failed}", soft_wrap=True, highlight=False, markup=False)
            print(folder.path)
            return 1
        print(report_path if render and folder.rows else folder.path)
        return self.closing(folder, status, failures)

    def closing(self, folder: RunFolder, status: str, failures: list[str]) -> int:
        """The lines after the report's path: cases without a verdict, short strikes, broken locks, timing."""
        console, timing = self.console, self.timing
        lacking = evidence.lacking(folder.rows)
        if lacking:
            first = lacking[0]
            more = f" (+{len(lacking) - 1} more case(s), see the table)" if len(lacking) > 1 else ""
            console.print(
                f"lockbench: case {first['case']} has no verdict: {first['verdict_reason']}{more}",
                soft_wrap=True,
            )
        for line in strikes.shortfall(folder.rows, int(folder.meta.get("params", {}).get("strikes") or 1)):
            console.print(f"lockbench: {line}", soft_wrap=True, highlight=False, markup=False)
        broken = [r for r in folder.rows if r.get("verdict") == "invalid"]
        if broken:
            # as Jepsen's runner fails a test whose checker found it invalid: CI learns the lock broke
            names = ", ".join(str(r.get("case")) for r in broken[:3])
            more = f" (+{len(broken) - 3} more)" if len(broken) > 3 else ""
            console.print(
                f"lockbench: {len(broken)} case(s) found the lock unsafe (verdict invalid): {names}{more}",
                soft_wrap=True,
                highlight=False,
                markup=False,
            )
        advice = fidelity.bottleneck_line(folder.rows, os.cpu_count() or 1, self.load.result())
        if advice is not None:  # what was short: Locust's processes, the machine, or neither
            # wrapped at words on a terminal; one line in a log or pipe, for grep
            console.print(advice, soft_wrap=not console.is_terminal, highlight=False, markup=False)
        # the last line: the run's wall time and how much of it was load (run.json timing has the parts)
        with contextlib.suppress(ResultsWriteError):
            if steps := clock_watch.steps_json():
                folder.note("clock_steps", steps)
            folder.note("timing", timing.as_json())
        console.print(timing.last_line(), soft_wrap=True, highlight=False, markup=False)
        if status == "incomplete":
            return 1
        return 1 if failures or lacking or broken else 0


def _number(value: Any) -> str:
    if value is None or value == "" or (isinstance(value, float) and value != value):
        return "-"  # NaN / missing: no data for this column
    if isinstance(value, float) and 0 < abs(value) < 10:
        return f"{value:.1f}"
    return f"{value:,.0f}" if isinstance(value, (int, float)) else str(value)


def _latency(us: Any) -> str:
    """Microseconds in the unit that keeps the cell short: 850us, 3.12ms, 854ms, 1.23s."""
    if not isinstance(us, (int, float)) or us != us:
        return "-"
    if us < 1000:
        return f"{us:.0f}us"
    if us < 10_000:
        return f"{us / 1000:.2f}ms"
    if us < 1_000_000:
        return f"{us / 1000:.0f}ms"
    return f"{us / 1e6:.2f}s" if us < 1e8 else f"{us / 1e6:,.0f}s"


def _is_true(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "1")


def _safety(row: dict[str, Any]) -> str:
    """The verdict as a person reads it, with the damage counted when the lock failed."""
    verdict = str(row.get("verdict", ""))
    stuck = _number(row.get("stuck_locks")) not in ("-", "0")
    if verdict == "valid" and stuck:
        bound = _number(row.get("stuck_bound_s"))
        return f"valid, STUCK: none got the lock within {bound} s of its holder's death"
    if verdict != "invalid":
        return verdict
    damage = [
        f"{_number(row.get(key))} {label}"
        for key, label in (("overlapping_holds", "overlaps"), ("locks_lost", "locks lost"),
                           ("oversold_units", "oversold"), ("lost_updates", "lost"))
        if _number(row.get(key)) not in ("-", "0")
    ]  # fmt: skip
    from dashboards.cells import fencing_saved  # the cells' rule: amber needs a refused stale write

    if fencing_saved([row]):
        return "lock unsafe, data safe (fenced)" + (f": {', '.join(damage)}" if damage else "")
    return "INVALID" + (f": {', '.join(damage)}" if damage else "")


def _fidelity(row: dict[str, Any]) -> str:
    """hold inflation and whether the load generator was the bottleneck, e.g. "3.1x†" (short: 80 columns)."""
    parts = []
    inflation = row.get("hold_inflation")
    if isinstance(inflation, (int, float)) and inflation == inflation:
        parts.append(f"{inflation:.1f}x")
    bound = row.get("generator_bound")
    if _is_true(bound):
        parts.append("†")
    elif "generator_bound" in row and str(bound).lower() not in ("false", "0"):
        parts.append("?")  # None / NaN: not measured, which is never a "no"
    return "".join(parts)


def summary_table(rows: list[dict[str, Any]], title: str) -> tuple[Table, list[str]]:
    """The console table (fits 80 columns: ids and numbers never wrap) and the notes under it."""
    several = len({row.get("scenario") for row in rows}) > 1
    fidelity = any(_fidelity(r) for r in rows)
    table = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True
    )
    table.add_column("impl" + (" / scenario" if several else ""), no_wrap=True)
    table.add_column("acq/s", justify="right", no_wrap=True)  # with the fidelity mark on the same line
    for name in ("acq p50", "acq p99"):
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("verdict", min_width=12)
    notes: list[str] = []
    for row in rows:
        label = str(row.get("impl", ""))
        if row.get("trial"):
            label += f" #{int(row['trial']) + 1}"
        if several:
            label += f"\n  {row.get('scenario', '')}"
        safety = _safety(row)
        reason = str(row.get("verdict_reason") or "")
        if reason and reason != "nan":
            notes.append(f"({len(notes) + 1}) {row.get('case', label)}: {reason}")
            safety += f" ({len(notes)})"
        mark = "†" if _is_true(row.get("generator_bound")) else "?" if _fidelity(row).endswith("?") else ""
        cells = [label, _number(row.get("throughput_acq_s")) + mark]
        cells += [_latency(row.get("acquire_p50_us")), _latency(row.get("acquire_p99_us"))]
        style = (
            "red" if safety.startswith("INVALID") else "yellow" if safety.startswith("lock unsafe") else None
        )
        table.add_row(*cells, safety, style=style)
    if fidelity:
        notes.append(
            "†: generator-bound, the load generator was the bottleneck (acq/s a lower bound, latencies an upper "
            "bound); ?: no loop-lag or solo figures, so whether it was is not known"
        )
    return table, notes


def _summary(folder: RunFolder, console: Console) -> None:
    if not folder.rows:
        return
    table, notes = summary_table(folder.rows, f"lockbench run {folder.run_id}")
    console.print(table)
    for note in notes:
        console.print(note, highlight=False, markup=False)


def _write_trial_summaries(folder: RunFolder, console: Console) -> None:
    """Merged histograms and per-trial figures per impl x workload (hist/<group>.merged.json)."""
    if not folder.rows:
        return
    try:
        write_merged_histograms(folder.path)
    except (OSError, ValueError) as exc:  # the per-trial files are all there; only the merge is lost
        console.print(f"lockbench: could not merge trial histograms: {exc}")
