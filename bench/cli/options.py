"""Every option and argument of ``bench``, declared once: its type, default, help, variable and metavar.

A command names the options it takes (:func:`takes`); the typer signature is built here
from these declarations, so adding an option touches this file, the request that carries
it (bench/run/request.py, bench/matrix/request.py) and the code that uses it, nothing else.
Every option has a ``LOCKBENCH_*`` variable and may be set in ``[tool.lockbench]``
(precedence: flag > variable > pyproject > default). Where a value came from is
:func:`sources`; every check (bench/validate.py) names it.

This module imports nothing heavy (typer, and the light name registries): a refusal is
decided before pandas, Locust or a database driver is imported.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from bench import validate
from bench.errors import UserError

REPEATS = "repeatable; in the environment: space-separated"
#: a declaration's default meaning "required" (no default)
REQUIRED: Any = inspect.Parameter.empty

F = TypeVar("F", bound=Callable[..., Any])


def env(name: str) -> str:
    """The environment variable of an option: ``--retry-interval`` is ``LOCKBENCH_RETRY_INTERVAL``."""
    return f"LOCKBENCH_{name.upper()}"


def folder_path(value: Any) -> Path:
    """A folder option's value; an empty one is refused (``Path('')`` would be the working directory)."""
    if not str(value).strip():
        raise typer.BadParameter("must name a folder, not an empty path (e.g. results)")
    return Path(value)


def file_path(value: Any) -> Path:
    """A file option's value (``--out``); an empty one is refused (``Path('')`` is the working directory)."""
    if not str(value).strip():
        raise typer.BadParameter("must name a file, not an empty path (e.g. report.html)")
    return Path(value)


@dataclass(frozen=True)
class Spec:
    """One option (or argument) as declared: what the user reads in --help and what the code receives."""

    name: str
    type: Any
    default: Any
    help: str
    metavar: str | None = None
    decls: tuple[str, ...] = ()
    parser: Callable[[Any], Any] | None = None
    argument: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    #: the variable's name when it is not the option's (``--json`` is LOCKBENCH_JSON)
    envvar: str | None = None

    def annotation(self) -> Any:
        if self.argument:
            info = typer.Argument(help=self.help, metavar=self.metavar, **self.extra)
        else:
            text = validate.help_for(self.name, self.help) if self.name in validate.RANGES else self.help
            info = typer.Option(
                *self.decls,
                help=text,
                envvar=env(self.envvar or self.name),
                metavar=self.metavar,
                parser=self.parser,
            )
        return Annotated[self.type, info]


def _backends() -> str:
    from lockimpls.registry import backends

    return ", ".join(backends())


def _workloads() -> str:
    from workloads.harness.catalog import WORKLOADS

    return ", ".join(WORKLOADS)


def _suites() -> str:
    from bench.gate.suites import SUITES

    return ", ".join(SUITES)


def _retry_interval() -> float:
    from lockimpls.base import DEFAULT_RETRY_INTERVAL

    return DEFAULT_RETRY_INTERVAL


_SERVERS = "use this {} instead of starting one"


def _declarations() -> dict[str, Spec]:
    """Every option and argument, keyed by name (``command.name`` where one command means another thing)."""
    s = Spec
    specs = [
        # what to run
        s("backend", list[str], [], f"backend(s) whose impls to run: {_backends()} or all ({REPEATS})", "NAME"),
        s("impl", list[str], [], f"impl id (see `bench list`) or package.module:Class ({REPEATS})", "ID"),
        s("workload", list[str], ["flash-sale"],
          f"workload: {_workloads()} (repeatable: one run, every workload)", "NAME"),
        s("suite", str | None, None, f"a named option set: {_suites()}; flags you give still win", "NAME"),
        s("scenario", list[str], [],
          f"only these scenarios (default: every one that applies; see bench list) ({REPEATS})", "NAME"),
        # load
        s("duration", float, 8.0, "seconds of load per case", "SECONDS"),
        s("users", int, 50, "simulated clients", "N"),
        s("spawn_rate", float | None, None, "clients started per second (default: all in 1 s)", "RATE"),
        s("processes", str, "auto",
          "Locust worker processes: N, or auto = one per core when users > 1 (1 = one local process)", "N|auto"),
        s("trials", int, 1, "repeat every case this many times, interleaved", "N"),
        # the workloads' own knobs
        s("items", int, 1, "flash-sale: items, one lock each", "N"),
        s("skew", float, 1.0, "flash-sale: Zipf exponent of item popularity (0 = uniform)", "X"),
        s("stock", int, 100_000, "flash-sale: initial stock per item", "N"),
        s("max_qty", int, 3, "flash-sale: a buyer wants 1..max-qty units", "N"),
        s("shared_keys", int, 0, "lock-pairs: 0 = each user its own lock; N = users share N locks", "N"),
        s("cs", str, "1ms",
          "critical-section time: 1ms, exp:1ms, uniform:0.5ms:2ms, pareto:1ms:1.5 (shape > 0), "
          "lognormal:1ms:0.5 (median, sigma); units us, ms, s; each time at most 1 h", "SPEC"),
        s("pause", float, 2.0, "lease-expiry: seconds a holder pauses", "SECONDS"),
        s("pause_every", int, 20, "lease-expiry: pause at every n-th critical section", "N"),
        s("pause_kind", str, "task", "lease-expiry: task (holder only) or world (whole process)", "KIND"),
        s("read_ratio", float, 0.9, "read-mostly: fraction of operations that read", "F"),
        s("depth", int, 3, "reentrant: nested acquires inside the critical section", "N"),
        s("crash_after", int, 20, "crash: worker 0 dies at its n-th critical section", "N"),
        s("stuck_bound", float, 5.0,
          "crash: seconds without a grant after which a lock counts as stuck (when not given: 3x the "
          "lock's own timeout, its lease, session timeout or connection, at least 3 s)", "SECONDS"),
        # the lock's own settings
        s("ttl", float, 10.0, "lease (TTL) in seconds for locks that have one", "SECONDS"),
        s("retry_interval", float, _retry_interval(), "seconds between attempts of polling locks", "SECONDS"),
        s("acquire_timeout", float, 5.0, "seconds an acquire may wait before it fails", "SECONDS"),
        s("fencing", str, "off",
          "off | observe (tokens; the resource counts stale writes) | enforce (it refuses them) | both", "MODE"),
        s("lock_params", str | None, None,
          "JSON object of impl-specific options, e.g. '{\"delay_s\": 0.001}'", "JSON"),
        # faults
        s("fault", str | None, None,
          "server fault KIND[@held|@<s>s]: restart, failover, kill-member, kill-leader, or a network "
          "partition (servers and clients on test hosts, needs root): partition-node, partition-leader, "
          "partition-majority, partition-client", "FAULT"),
        s("clock_skew", float, 0.0, "seconds added to the clock of skewed clients", "SECONDS"),
        s("skewed_clients", float, 0.0, "fraction of clients whose clock is skewed", "F"),
        s("strikes", int, 1,
          "how often a server fault strikes in one case: strike, heal, let the service grant again, strike",
          "N"),
        s("evidence", str, "standard",
          "what a survived fault needs to be shown as survived: quick (k>=3 strikes, n>=300 grants after "
          "them: bounds a per-strike failure below 1 in 1 and a per-grant race below 1%), standard (k>=10, "
          "n>=1000: below 30% and 0.3%), thorough (k>=30, n>=3000: below 10% and 0.1%); rule of three, 95%. "
          "bench matrix --backend all, standard, on 2 cores at --lanes auto (2026-12-05, measured): 35 min, or "
          "11 min a shard as --shard I/4 on four runners; thorough about three times that (estimated)", "LEVEL"),
        # servers the user already runs (nothing is started for them)
        s("redis_url", list[str], [],
          "use this Redis for locks instead of starting one; repeat it for algorithms that need several "
          f"servers (RedLock takes 5) ({REPEATS})", "URL"),
        s("pg_dsn", str | None, None, _SERVERS.format("PostgreSQL (postgresql://...)"), "DSN"),
        s("zk_hosts", str | None, None, "use this ZooKeeper ensemble (host:port,host:port)", "HOSTS"),
        s("etcd_url", list[str], [], _SERVERS.format("etcd (http://host:port)") + f" ({REPEATS})", "URL"),
        s("memcached_url", str | None, None, "use this memcached (memcached://host:port)", "URL"),
        s("resource_url", str | None, None, "Redis for the protected resource (never a lock server)", "URL"),
        # several hosts
        s("master_bind", str | None, None,
          "act as master for `bench worker`s on other hosts: listen on HOST[:PORT] (5557)", "HOST[:PORT]"),
        s("expect_workers", int, 0,
          "with --master-bind: Locust worker processes to wait for before each case", "N"),
        s("test_hosts", int, 0,
          "N worker hosts in network namespaces on this machine (+ master, lock and resource hosts)", "N"),
        # the open model
        s("arrivals", str | None, None,
          "open model: buyers arrive by constant:R, poisson:R or spike:PEAK@RAMP[:DECAY]", "SPEC"),
        s("patience", float, 2.0, "open model: seconds a buyer waits for the lock after arriving", "S"),
        s("max_in_flight", int, 50, "open model: buyers inside at once (all processes); more are rejected", "N"),
        # results
        s("results_dir", Path, Path("results"), "where run folders go (checked writable first)", "DIR",
          parser=folder_path),
        s("report", bool, True, "render report.html at the end"),
        s("slo_us", float | None, None, "draw an SLO line on the report's latency charts (microseconds)", "US"),
        s("recalibrate", bool, False,
          "measure every lock alone again instead of reusing a calibration kept by an earlier run of this "
          "commit (~/.cache/lockbench/calibrations; a dirty checkout never reuses one)"),
        # bench matrix
        s("parallel", int | None, None,
          "lanes (cases sharing no server) run side by side (default: --lanes auto)", "N"),
        s("lanes", str, "auto", "lanes side by side: auto (the cores idle over a second, 0.6 of a core a lane, at most 4) or N; heavy units never meet",
          "auto|N"),
        s("shard", str | None, None,
          "run only slice I of N (whole lanes, the same slice on every machine); join with bench merge", "I/N"),
        s("warm", bool, True, "start each case's Locust from a warm, pre-imported process (--no-warm: cold)"),
        s("matrix.strikes", int | None, None,
          "strikes per cell (default: the evidence level's k); more than a case holds run as trials", "N"),
        # bench explore / replay
        s("seed", int, 0, "the seed of the schedules drawn (same seed, same schedules)", "N"),
        s("budget", str, "5m", "time to search, all impls together: 5m, 90s, 1h (a failure found is then confirmed: up to a few runs more)", "DURATION"),
        s("faults", str, "", "event kinds to draw, comma-separated (default: every kind that reaches the lock)",
          "KINDS"),
        s("shrink_runs", int | None, None,
          "runs spent shrinking a failure at most, then it is confirmed (default: the budget decides)", "N"),
        s("explore.fencing", bool, False, "the holders write with fencing tokens (enforced)"),
        s("plan", bool, False, "print the schedules the search would try, in order, and run nothing"),
        s("runs", int, 1, "how many times to run it", "N"),
        # bench calibrate
        s("calibrate.workload", str, "flash-sale", "workload whose steps the solo client runs", "NAME"),
        # bench report / history
        s("out", Path | None, None,
          "output HTML file (default: <run>/report.html; comparing runs: "
          "<results>/comparisons/<a>__vs__<b>/report.html, never inside a run folder)", "FILE",
          parser=file_path),
        s("history.out", Path | None, None,
          "output HTML file (default: <root>/history/index.html, never in a run folder)", "FILE",
          parser=file_path),
        s("check", bool, False, "exit 1 if a series' newest change point is a regression beyond its rule",
          decls=("--check",)),
        s("history.rule", list[str], [],
          f"METRIC:THRESHOLD as for bench gate (default: its defaults) ({REPEATS})", "RULE"),
        s("min_runs", int, 20, "runs a series needs before --check judges it", "N"),
        s("max_pvalue", float, 0.001, "a change point needs a t-test p-value below this", "P"),
        s("min_magnitude", float, 0.05, "a change point needs a relative step above this", "FRACTION"),
        # bench gate / baseline
        s("rule", list[str], [],
          "METRIC:THRESHOLD, e.g. acquire.p99:+10% (repeatable; default: throughput:-10% "
          f"acquire.p99:+20% violations:0; violations:0 always applies) ({REPEATS})", "RULE"),
        s("json_out", bool, False, "print JSON instead of the Markdown table", decls=("--json",), envvar="json"),
        s("alpha", float, 0.05, "significance level, Holm-corrected over all comparisons", "P"),
        s("allow_other_machine", bool, False,
          "compare even when the machine classes differ (timings may not compare)"),
        s("allow_param_diff", list[str], [],
          "compare although this run parameter differs, e.g. processes (without it, runs with "
          f"different parameters are not comparable: exit 2) ({REPEATS})", "NAME"),
        s("name", str, "ci", "baseline name: results/baselines/<name>", "NAME"),
        s("baseline.results_dir", Path, Path("results"), "where run folders are", "DIR", parser=folder_path),
        s("baselines_dir", Path, Path("results/baselines"), "where baselines go", "DIR", parser=folder_path),
        s("force", bool, False, "replace a baseline that git tracks (a committed one): say so on purpose"),
        # bench worker / infra
        s("master", str, REQUIRED, "HOST[:PORT] of the `bench run --master-bind` to serve", "HOST[:PORT]"),
        s("worker.processes", int, 1, "Locust worker processes on this host", "N"),
        s("worker.name", str | None, None, "this host's name in results (default: the hostname)", "NAME"),
        s("nodes", int, 1, "1, or 3: a ZooKeeper ensemble or etcd cluster on loopback", "N"),
        # arguments
        s("arg.shards", list[Path], REQUIRED, "every shard's results folder, each once", "DIR...", argument=True),
        s("arg.a", Path, REQUIRED, "a bench matrix results folder", "A", argument=True),
        s("arg.b", Path, REQUIRED, "another bench matrix folder of the same commit and selection", "B",
          argument=True),
        s("arg.file", Path, REQUIRED, "a schedule.json (or the explore folder holding it)", "FILE",
          argument=True),
        s("arg.runs", list[Path], REQUIRED, "run folder(s); the first is the baseline", "RUN...", argument=True),
        s("arg.baseline", Path, REQUIRED, "baseline run or results/baselines/<name> folder", "BASELINE",
          argument=True),
        s("arg.candidate", Path, REQUIRED, "candidate run folder", "CANDIDATE", argument=True),
        s("arg.run", Path | None, None, "run folder (default: the newest finished run)", "[RUN]", argument=True),
        s("arg.roots", list[Path] | None, None, "results directories or run folders (default: results)",
          "ROOT", argument=True),
        s("arg.kinds", list[str], REQUIRED, "server kinds, e.g. redis", "KIND...", argument=True),
    ]  # fmt: skip
    return {spec.name: replace(spec, name=spec.name.rpartition(".")[2]) for spec in specs}


#: key -> declaration (``matrix.strikes`` is the matrix's --strikes, ``arg.runs`` an argument)
OPTIONS: dict[str, Spec] = _declarations()

SERVER_OPTIONS = ("redis_url", "pg_dsn", "zk_hosts", "etcd_url", "memcached_url")
#: the options of each command that takes a long list of them (the others list theirs at the command)
RUN = (
    "backend", "impl", "workload", "duration", "users", "spawn_rate", "processes", "trials", "items", "skew",
    "stock", "max_qty", "shared_keys", "cs", "ttl", "retry_interval", "acquire_timeout", "fencing", "fault",
    "clock_skew", "skewed_clients", "pause", "pause_every", "pause_kind", "read_ratio", "depth", "crash_after",
    "stuck_bound", *SERVER_OPTIONS, "resource_url", "results_dir", "report", "suite", "lock_params", "slo_us",
    "master_bind", "expect_workers", "arrivals", "patience", "max_in_flight", "strikes", "evidence",
    "test_hosts", "recalibrate",
)  # fmt: skip
MATRIX = (
    "backend", "impl", "scenario", "parallel", "lanes", "shard", "warm", *SERVER_OPTIONS, "resource_url",
    "results_dir", "report", "evidence", "matrix.strikes",
)  # fmt: skip


def takes(*keys: str, **defaults: Any) -> Callable[[F], F]:
    """Give a ``def cmd(ctx, **given)`` command the typer signature of the options ``keys``.

    ``defaults`` overrides a declaration's default for this command (``bench calibrate``
    runs 3 s, ``bench run`` 8 s). Typer reads ``__signature__``, so --help, the variables
    and the pyproject keys all come from :data:`OPTIONS`.
    """

    def wrap(func: F) -> F:
        kw = inspect.Parameter.KEYWORD_ONLY
        params = [inspect.Parameter("ctx", kw, annotation=typer.Context)]
        for key in keys:
            spec = OPTIONS[key]
            default = defaults.get(spec.name, spec.default)
            params.append(inspect.Parameter(spec.name, kw, annotation=spec.annotation(), default=default))
        func.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        return func

    return wrap


def user_urls(values: dict[str, Any]) -> dict[str, list[str]]:
    """The servers a user gave, per backend, in the form the runners take."""
    zk = values.get("zk_hosts")
    return {
        "redis": list(values.get("redis_url") or []),
        "postgres": [values["pg_dsn"]] if values.get("pg_dsn") else [],
        "zookeeper": [f"zookeeper://{zk}"] if zk else [],
        "etcd": list(values.get("etcd_url") or []),
        "memcached": [values["memcached_url"]] if values.get("memcached_url") else [],
    }


def _command_path(ctx: typer.Context) -> tuple[str, ...]:
    names = []
    while ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return tuple(reversed(names))


def source(ctx: typer.Context, name: str) -> str:
    """Where an option's value came from, for error messages ("" = the command line or the default).

    ``LOCKBENCH_TTL``, or ``[tool.lockbench] ttl in /path/pyproject.toml``.
    """
    from bench.cli import config, moved_flags

    src = ctx.get_parameter_source(name)
    if src is None:
        return ""
    if src.name == "ENVIRONMENT":
        return "" if name in moved_flags() else env(name)  # a flag bench moved out of argv is a flag
    if src.name == "DEFAULT_MAP":
        return config.origin(_command_path(ctx), name)
    return ""


def sources(ctx: typer.Context) -> dict[str, str]:
    """Every option's source (see :func:`source`)."""
    return {n: source(ctx, n) for n in ctx.params}


def given(ctx: typer.Context, name: str) -> bool:
    """True when the user set the option (command line or environment), not a default."""
    src = ctx.get_parameter_source(name)
    return src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")


def explicit(ctx: typer.Context) -> set[str]:
    """The options the user set anywhere (flag, variable or pyproject): a workload's defaults yield to them."""
    return {
        n for n in ctx.params if (src := ctx.get_parameter_source(n)) is not None and src.name != "DEFAULT"
    }


def catalogs() -> dict[str, validate.Catalog]:
    """The names each option accepts, lightest first: a refusal reads no heavier catalog than it needs."""
    from lockimpls import registry

    def names(module: str, attr: str) -> Callable[[], list[str]]:
        def read() -> list[str]:
            import importlib

            return list(getattr(importlib.import_module(module), attr))

        return read

    c = validate.Catalog
    return {
        "backend": c(lambda: [*registry.backends(), "all"]),
        "impl": c(lambda: registry.known_ids(include_test=True), skip=lambda v: ":" in v),
        "workload": c(names("workloads.harness.catalog", "WORKLOADS")),
        "suite": c(names("bench.gate.suites", "SUITES")),
        "fencing": c(lambda: validate.FENCING_CHOICES),
        "pause_kind": c(lambda: validate.PAUSE_KINDS),
        "evidence": c(names("bench.measure.levels", "LEVELS")),
        # the heavy ones last: they import the nemesis
        "fault": c(names("bench.nemesis.faults", "KINDS"), name_of=lambda v: v.strip().partition("@")[0]),
        "scenario": c(names("bench.nemesis.scenarios", "SCENARIOS")),
    }


def check_options(ctx: typer.Context, write_dirs: tuple[str, ...] = ()) -> dict[str, str]:
    """Validate every option of a command (bench/validate.py); returns where each value came from.

    Every command calls it first, before any server or process starts and before anything
    heavy is imported. Each error names the option, the range and the value's source.
    """
    found = sources(ctx)
    refuse_empty(ctx, found)
    validate.check_options(ctx.params, found, catalogs())
    if ctx.params.get("shard") is not None:
        from bench.matrix.shards import parse_shard

        try:
            parse_shard(ctx.params["shard"])
        except UserError as exc:
            raise UserError(f"{exc}{validate.from_text(found.get('shard', ''))}") from None
    for name in write_dirs:
        if ctx.params.get(name) is not None:
            validate.check_results_dir(ctx.params[name], found.get(name, ""))
    return found


def refuse_empty(ctx: typer.Context, found: dict[str, str]) -> None:
    """An empty value is refused like any other bad one: ``--fault ''`` must not start a fault-free run.

    Click ignores an environment variable set to "" (``LOCKBENCH_DURATION=``), so that is checked
    here too: set but empty is a mistake, not "use the default".
    """
    import os

    from bench.cli import moved_flags

    for param in ctx.command.params:
        name = param.name or ""
        envvar = param.envvar if isinstance(param.envvar, str) else None
        src = ctx.get_parameter_source(name)
        set_empty = bool(envvar) and envvar in os.environ and not os.environ[envvar].strip()
        if set_empty and (src is None or src.name != "COMMANDLINE") and name not in moved_flags():
            raise UserError(f"{envvar} is set but empty: give it a value, or unset it (unset {envvar})")
        if src is None or src.name == "DEFAULT":
            continue
        value = ctx.params.get(name)
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            raise UserError(
                f"{validate.flag(name)} is empty{validate.from_text(found.get(name, ''))}: give it a value "
                "(see --help), or leave the option out"
            )
