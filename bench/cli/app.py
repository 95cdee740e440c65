"""The ``bench`` command: run benchmarks, render reports, manage local servers.

Results paths go to stdout, everything else (progress, logs) to stderr. A user's
mistake is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from bench.cli import config
from bench.cli import options as o
from bench.errors import Interrupted, UserError, on_interrupt_signal, quiet_swallowed_interrupts
from bench.gate.suites import SUITES
from lockimpls.base import DEFAULT_RETRY_INTERVAL
from workloads.harness.catalog import WORKLOADS

try:  # typer >= 0.20 vendors click; older ones use the click package
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc

# typer prints an argument's Python type (``RUN... <list[Path]>``) in --help, with no switch to
# turn it off; the metavars here already say what to give.
typer.core.TyperArgument.display_type_rich = lambda self, ctx: None  # type: ignore[method-assign]

console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="lockbench: which distributed lock should I use, what does it cost, and is it safe? "
    "Every option can also be set with a LOCKBENCH_<OPTION> environment variable "
    "(e.g. LOCKBENCH_TTL=0.5) or in [tool.lockbench] of pyproject.toml.",
)
infra_app = typer.Typer(no_args_is_help=True, help="Keep local servers up between runs (optional).")
app.add_typer(infra_app, name="infra", short_help="Keep local servers up between runs (optional).")
baseline_app = typer.Typer(no_args_is_help=True, help="Committed baselines for bench gate.")
app.add_typer(baseline_app, name="baseline", short_help="Committed baselines for bench gate.")


_env = o.env
_opt = o.opt
BACKENDS = o.BACKENDS
_WORKLOAD_NAMES = ", ".join(WORKLOADS)
_SUITE_NAMES = ", ".join(SUITES)
_REPEATS = o.REPEATS


@app.command(short_help="Run lock impls against real servers; print the report's path.")
def run(
    ctx: typer.Context,
    backend: o.Backend = [],  # noqa: B006
    impl: o.Impl = [],  # noqa: B006
    workload: Annotated[
        list[str],
        _opt(
            "workload", f"workload: {_WORKLOAD_NAMES} (repeatable: one run, every workload)", metavar="NAME"
        ),
    ] = ["flash-sale"],  # noqa: B006
    duration: o.Duration = 8.0,
    users: Annotated[int, _opt("users", "simulated clients", metavar="N")] = 50,
    spawn_rate: Annotated[
        float | None, _opt("spawn_rate", "clients started per second (default: all in 1 s)", metavar="RATE")
    ] = None,
    processes: o.Processes = "auto",
    trials: Annotated[int, _opt("trials", "repeat every case this many times, interleaved", metavar="N")] = 1,
    items: Annotated[int, _opt("items", "flash-sale: items, one lock each", metavar="N")] = 1,
    skew: Annotated[
        float, _opt("skew", "flash-sale: Zipf exponent of item popularity (0 = uniform)", metavar="X")
    ] = 1.0,
    stock: Annotated[int, _opt("stock", "flash-sale: initial stock per item", metavar="N")] = 100_000,
    max_qty: Annotated[int, _opt("max_qty", "flash-sale: a buyer wants 1..max-qty units", metavar="N")] = 3,
    shared_keys: Annotated[
        int,
        _opt("shared_keys", "lock-pairs: 0 = each user its own lock; N = users share N locks", metavar="N"),
    ] = 0,
    cs: o.Cs = "1ms",
    ttl: o.Ttl = 10.0,
    retry_interval: o.RetryInterval = DEFAULT_RETRY_INTERVAL,
    acquire_timeout: Annotated[
        float, _opt("acquire_timeout", "seconds an acquire may wait before it fails", metavar="SECONDS")
    ] = 5.0,
    fencing: Annotated[
        str,
        _opt(
            "fencing",
            "off | observe (tokens; the resource counts stale writes) | enforce (it refuses them) | both",
            metavar="MODE",
        ),
    ] = "off",
    fault: Annotated[
        str | None,
        _opt(
            "fault",
            "server fault KIND[@held|@<s>s]: restart, failover, kill-member, kill-leader, or a network "
            "partition (servers and clients on test hosts, needs root): partition-node, partition-leader, "
            "partition-majority, partition-client",
            metavar="FAULT",
        ),
    ] = None,
    clock_skew: Annotated[
        float, _opt("clock_skew", "seconds added to the clock of skewed clients", metavar="SECONDS")
    ] = 0.0,
    skewed_clients: Annotated[
        float, _opt("skewed_clients", "fraction of clients whose clock is skewed", metavar="F")
    ] = 0.0,
    pause: Annotated[float, _opt("pause", "lease-expiry: seconds a holder pauses", metavar="SECONDS")] = 2.0,
    pause_every: Annotated[
        int, _opt("pause_every", "lease-expiry: pause at every n-th critical section", metavar="N")
    ] = 20,
    pause_kind: Annotated[
        str, _opt("pause_kind", "lease-expiry: task (holder only) or world (whole process)", metavar="KIND")
    ] = "task",
    read_ratio: Annotated[
        float, _opt("read_ratio", "read-mostly: fraction of operations that read", metavar="F")
    ] = 0.9,
    depth: Annotated[
        int, _opt("depth", "reentrant: nested acquires inside the critical section", metavar="N")
    ] = 3,
    crash_after: Annotated[
        int, _opt("crash_after", "crash: worker 0 dies at its n-th critical section", metavar="N")
    ] = 20,
    stuck_bound: Annotated[
        float,
        _opt(
            "stuck_bound",
            "crash: seconds without a grant after which a lock counts as stuck (when not given: 3x the "
            "lock's own timeout, its lease, session timeout or connection, at least 3 s)",
            metavar="SECONDS",
        ),
    ] = 5.0,
    redis_url: o.RedisUrl = [],  # noqa: B006
    pg_dsn: o.PgDsn = None,
    zk_hosts: o.ZkHosts = None,
    etcd_url: o.EtcdUrl = [],  # noqa: B006
    memcached_url: o.MemcachedUrl = None,
    resource_url: o.ResourceUrl = None,
    results_dir: o.ResultsDir = Path("results"),
    report: o.Report = True,
    suite: Annotated[
        str | None,
        _opt("suite", f"a named option set: {_SUITE_NAMES}; flags you give still win", metavar="NAME"),
    ] = None,
    lock_params: o.LockParams = None,
    slo_us: Annotated[
        float | None,
        _opt("slo_us", "draw an SLO line on the report's latency charts (microseconds)", metavar="US"),
    ] = None,
    master_bind: Annotated[
        str | None,
        _opt(
            "master_bind",
            "act as master for `bench worker`s on other hosts: listen on HOST[:PORT] (5557)",
            metavar="HOST[:PORT]",
        ),
    ] = None,
    expect_workers: Annotated[
        int,
        _opt(
            "expect_workers",
            "with --master-bind: Locust worker processes to wait for before each case",
            metavar="N",
        ),
    ] = 0,
    arrivals: Annotated[
        str | None,
        _opt(
            "arrivals",
            "open model: buyers arrive by constant:R, poisson:R or spike:PEAK@RAMP[:DECAY]",
            metavar="SPEC",
        ),
    ] = None,
    patience: Annotated[
        float, _opt("patience", "open model: seconds a buyer waits for the lock after arriving", metavar="S")
    ] = 2.0,
    max_in_flight: Annotated[
        int,
        _opt(
            "max_in_flight",
            "open model: buyers inside at once (all processes); more are rejected",
            metavar="N",
        ),
    ] = 50,
    strikes: o.Strikes = 1,
    evidence: o.Evidence = "standard",
    test_hosts: Annotated[
        int,
        _opt(
            "test_hosts",
            "N worker hosts in network namespaces on this machine (+ master, lock and resource hosts)",
            metavar="N",
        ),
    ] = 0,
    recalibrate: Annotated[
        bool,
        _opt(
            "recalibrate",
            "measure every lock alone again instead of reusing a calibration kept by an earlier run of this "
            "commit (~/.cache/lockbench/calibrations; a dirty checkout never reuses one)",
        ),
    ] = False,
) -> None:
    """Run lock impls under a workload against real servers; print the report's path.

    A case whose verdict lacks evidence (acquisition errors dominate, too few acquisitions,
    a server died) is `unknown` with a reason, and the run exits 1 naming it.
    """
    from bench.gate.suites import apply_suite
    from bench.run.command import run_command

    # every option is checked before anything starts, naming where it came from
    sources = check_options(ctx, write_dirs=("results_dir",))
    # a workload's own defaults (long-cs: a 0.5 s lease ...) apply where the user set nothing:
    # on the command line, in the environment or in [tool.lockbench]
    explicit = {
        n for n in ctx.params if (src := ctx.get_parameter_source(n)) is not None and src.name != "DEFAULT"
    }
    if pause_kind not in ("task", "world"):
        raise UserError(
            f"--pause-kind must be task or world, got {pause_kind!r}{_from(sources, 'pause_kind')}"
        )
    if suite:
        given = {n for n in ctx.params if _given(ctx, n)}
        v = apply_suite(suite, ctx.params, given)
        impl, workload, duration, users, trials, cs = (
            v["impl"], v["workload"], v["duration"], v["users"], v["trials"], v["cs"]
        )  # fmt: skip
        explicit |= {k for k in v if v[k] != ctx.params.get(k)}  # the suite's values count as given
        workload = [workload] if isinstance(workload, str) else workload
    params = _checked_lock_params(backend, impl, lock_params, sources)
    _mark_dead_runs(results_dir)
    code = run_command(
        backends=backend, impls=impl, workloads=workload, duration=duration, users=users,
        spawn_rate=spawn_rate, processes=processes, trials=trials,
        workload_options={
            "items": items, "skew": skew, "stock": stock, "max_qty": max_qty, "cs": cs, "shared_keys": shared_keys,
            "pause": pause, "pause_every": pause_every, "pause_kind": pause_kind, "crash_after": crash_after,
            "stuck_bound": stuck_bound, "read_ratio": read_ratio, "depth": depth,
        },
        ttl=ttl, retry_interval=retry_interval, acquire_timeout=acquire_timeout, fencing=fencing,
        user_urls=o.user_urls(redis_url, pg_dsn, zk_hosts, etcd_url, memcached_url),
        resource_url=resource_url, results_dir=results_dir, render=report, argv=sys.argv, console=console,
        lock_params=params, suite=suite, slo_us=slo_us, fault=fault, clock_skew=clock_skew,
        skewed_clients=skewed_clients, explicit=explicit,
        master_bind=master_bind, expect_workers=expect_workers, test_hosts=test_hosts,
        arrivals=arrivals, patience=patience, max_in_flight=max_in_flight,
        strikes=strikes, evidence=evidence, recalibrate=recalibrate,
    )  # fmt: skip
    raise typer.Exit(code)


@app.command("matrix", short_help="Every impl under every safety scenario: one folder, one report.")
def matrix_cmd(
    ctx: typer.Context,
    backend: o.Backend = [],  # noqa: B006
    impl: o.Impl = [],  # noqa: B006
    scenario: Annotated[
        list[str],
        _opt(
            "scenario",
            f"only these scenarios (default: every one that applies; see bench list) ({_REPEATS})",
            metavar="NAME",
        ),
    ] = [],  # noqa: B006
    parallel: Annotated[
        int | None,
        _opt(
            "parallel",
            "lanes (cases sharing no server) run side by side (default: --lanes auto)",
            metavar="N",
        ),
    ] = None,
    lanes: Annotated[
        str,
        _opt(
            "lanes",
            "lanes side by side: auto (the cores spare now, one a lane, at most 4) or N",
            metavar="auto|N",
        ),
    ] = "auto",
    shard: Annotated[
        str | None,
        _opt(
            "shard",
            "run only slice I of N (whole lanes, the same slice on every machine); join with bench merge",
            metavar="I/N",
        ),
    ] = None,
    warm: Annotated[
        bool, _opt("warm", "start each case's Locust from a warm, pre-imported process (--no-warm: cold)")
    ] = True,
    redis_url: o.RedisUrl = [],  # noqa: B006
    pg_dsn: o.PgDsn = None,
    zk_hosts: o.ZkHosts = None,
    etcd_url: o.EtcdUrl = [],  # noqa: B006
    memcached_url: o.MemcachedUrl = None,
    resource_url: o.ResourceUrl = None,
    results_dir: o.ResultsDir = Path("results"),
    report: o.Report = True,
    evidence: o.Evidence = "standard",
    strikes: Annotated[
        int | None,
        _opt(
            "strikes",
            "strikes per cell (default: the evidence level's k); more than a case holds run as trials",
            metavar="N",
        ),
    ] = None,
) -> None:
    """Every impl under every safety scenario (faults fenced and unfenced), one folder, one report."""
    from bench.matrix.command import matrix_command

    check_options(ctx, write_dirs=("results_dir",))
    _mark_dead_runs(results_dir)
    from bench.matrix.shards import parse_shard

    if lanes != "auto" and not lanes.isdigit():
        raise UserError(f"bad --lanes {lanes!r}; give auto or a number of lanes, e.g. --lanes 2")
    code = matrix_command(
        backends=backend, impls=impl, scenarios=scenario, warm=warm,
        parallel=parallel if parallel is not None else (None if lanes == "auto" else int(lanes)),
        shard=parse_shard(shard),
        user_urls=o.user_urls(redis_url, pg_dsn, zk_hosts, etcd_url, memcached_url),
        resource_url=resource_url, results_dir=results_dir, render=report, argv=sys.argv, console=console,
        evidence=evidence, strikes=strikes,
    )  # fmt: skip
    raise typer.Exit(code)


def _lock_params(text: str | None, source: str = "") -> dict:
    from bench import validate

    return validate.parse_lock_params(text, source)


def _checked_lock_params(
    backend: list[str], impl: list[str], text: str | None, sources: dict[str, str]
) -> dict:
    """``--lock-params`` checked against what the impls of the command declare (before anything starts)."""
    from bench import validate
    from bench.run.command import plan_impls

    params = _lock_params(text, sources.get("lock_params", ""))
    if params:
        planned = plan_impls(backend, impl)
        validate.check_lock_params(
            [(i, cls) for i, _, cls in planned], params, sources.get("lock_params", "")
        )
    return params


def _mark_dead_runs(results_dir: Path) -> None:
    """run.json tells the truth: folders left ``running`` by a bench that died become ``interrupted``."""
    from bench.results.folder import mark_dead_runs

    for folder in mark_dead_runs(results_dir):
        console.print(f"lockbench: {folder} was left running by a bench that is gone: marked interrupted")


check_options = o.check_options
_from = o.from_text
_given = o.given


@app.command("merge", short_help="Join the shards of one matrix (bench matrix --shard I/N) into one folder.")
def merge_cmd(
    shards: Annotated[
        list[Path], typer.Argument(help="every shard's results folder, each once", metavar="DIR...")
    ],
    results_dir: o.ResultsDir = Path("results"),
    report: o.Report = True,
) -> None:
    """Join the shard folders of one matrix into one matrix folder, one grid and one report.

    Refuses (exit 2, one line) shards of different commits, options or evidence levels, a shard
    missing or given twice, an unfinished or damaged shard. Exits 1 like bench matrix when a cell
    is undecided or contradicts the catalog.
    """
    from bench.matrix.merge import merge_command

    raise typer.Exit(merge_command(list(shards), results_dir, console, render=report))


@app.command("matrix-compare", short_help="Two matrices of one commit: the cells whose class differs.")
def matrix_compare_cmd(
    a: Annotated[Path, typer.Argument(help="a bench matrix results folder", metavar="A")],
    b: Annotated[
        Path, typer.Argument(help="another bench matrix folder of the same commit and selection", metavar="B")
    ],
) -> None:
    """Did the matrix give the same answer twice? Lists every impl x scenario cell whose class
    (survived, thin, failed, stuck, unknown, not tested ...: the report's own cells) differs
    between A and B, with each side's class and reason.

    Exit 0 when every cell is the same, 1 when any differs; 2 (one line) when a folder is not
    a matrix, or the two differ in commit or selection (impls, scenarios, evidence, strikes,
    shard), which it names. A command of its own rather than a flag of bench matrix: it starts
    no server and takes none of bench matrix's options, like bench merge and bench report.
    """
    from bench.matrix.compare import compare_command

    raise typer.Exit(compare_command(a, b, console))


@app.command(
    "explore", short_help="Random combined fault schedules from a seed; a failure shrunk and written."
)
def explore_cmd(
    ctx: typer.Context,
    backend: o.Backend = [],  # noqa: B006
    impl: o.Impl = [],  # noqa: B006
    seed: Annotated[
        int, _opt("seed", "the seed of the schedules drawn (same seed, same schedules)", metavar="N")
    ] = 0,
    budget: Annotated[
        str, _opt("budget", "time to explore, all impls together: 5m, 90s, 1h", metavar="DURATION")
    ] = "5m",
    faults: Annotated[
        str,
        _opt(
            "faults",
            "event kinds to draw, comma-separated (default: every kind that reaches the lock)",
            metavar="KINDS",
        ),
    ] = "",
    fencing: Annotated[bool, _opt("fencing", "the holders write with fencing tokens (enforced)")] = False,
    plan: Annotated[
        bool, _opt("plan", "print the schedules the search would try, in order, and run nothing")
    ] = False,
    redis_url: o.RedisUrl = [],  # noqa: B006
    pg_dsn: o.PgDsn = None,
    zk_hosts: o.ZkHosts = None,
    etcd_url: o.EtcdUrl = [],  # noqa: B006
    memcached_url: o.MemcachedUrl = None,
    results_dir: o.ResultsDir = Path("results"),
    report: o.Report = True,
) -> None:
    """Search for a short combination of faults that breaks a lock; shrink it; write it for bench replay.

    Exit 0: nothing found within the budget; 1: found (the schedule and its replay command printed).
    """
    from bench.explore.command import explore_command

    check_options(ctx, write_dirs=() if plan else ("results_dir",))
    if not plan:
        _mark_dead_runs(results_dir)
    code = explore_command(
        impls=impl, backends=backend, seed=seed, budget=budget, plan=plan, fencing=fencing,
        faults=[f.strip() for f in faults.split(",") if f.strip()], results_dir=results_dir,
        user_urls=o.user_urls(redis_url, pg_dsn, zk_hosts, etcd_url, memcached_url), argv=sys.argv,
        console=console, render=report,
    )  # fmt: skip
    raise typer.Exit(code)


@app.command("replay", short_help="Run a schedule written by bench explore; exit 1 when it fails again.")
def replay_cmd(
    ctx: typer.Context,
    file: Annotated[
        Path, typer.Argument(help="a schedule.json (or the explore folder holding it)", metavar="FILE")
    ],
    runs: Annotated[int, _opt("runs", "how many times to run it", metavar="N")] = 1,
    redis_url: o.RedisUrl = [],  # noqa: B006
    pg_dsn: o.PgDsn = None,
    zk_hosts: o.ZkHosts = None,
    etcd_url: o.EtcdUrl = [],  # noqa: B006
    memcached_url: o.MemcachedUrl = None,
    results_dir: o.ResultsDir = Path("results"),
    report: Annotated[bool, _opt("report", "render report.html at the end")] = False,
) -> None:
    """Run exactly the schedule in FILE on fresh servers; exit 1 when the failure reproduces, 0 when not."""
    from bench.explore.command import replay_command

    check_options(ctx, write_dirs=("results_dir",))
    _mark_dead_runs(results_dir)
    code = replay_command(
        file=file, runs=runs, results_dir=results_dir, argv=sys.argv, console=console, render=report,
        user_urls=o.user_urls(redis_url, pg_dsn, zk_hosts, etcd_url, memcached_url),
    )  # fmt: skip
    raise typer.Exit(code)


@app.command("calibrate", short_help="Print backend floors and each impl's solo hold.")
def calibrate_cmd(
    ctx: typer.Context,
    backend: o.Backend = [],  # noqa: B006
    impl: o.Impl = [],  # noqa: B006
    workload: Annotated[
        str, typer.Option(envvar=_env("workload"), help="workload whose steps the solo client runs")
    ] = "flash-sale",
    duration: o.Duration = 3.0,
    cs: o.Cs = "1ms",
    ttl: o.Ttl = 10.0,
    retry_interval: o.RetryInterval = DEFAULT_RETRY_INTERVAL,
    lock_params: o.LockParams = None,
) -> None:
    """Print each backend's floor (one round trip) and each impl's solo hold; keeps no results."""
    from rich.console import Console as RichConsole

    from bench.run.calibrate import calibrate_command
    from bench.run.case import RunSettings
    from workloads.harness.distributions import SpecError, parse_distribution

    sources = check_options(ctx)
    try:
        parse_distribution(cs)
    except SpecError as exc:
        raise UserError(f"--cs: {exc}") from None
    params = _checked_lock_params(backend, impl, lock_params, sources)
    settings = RunSettings(
        users=1, spawn_rate=1.0, duration=duration, processes=1, ttl=ttl, retry_interval=retry_interval,
        lock_params=params,
        workload_options={"items": 1, "skew": 1.0, "stock": 100_000, "max_qty": 3, "cs": cs, "shared_keys": 0,
                          "read_ratio": 0.9, "depth": 3},
    )  # fmt: skip
    code = calibrate_command(
        backends=backend, impls=impl, workload=workload, settings=settings, console=console,
        out=RichConsole(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 140),
    )  # fmt: skip
    raise typer.Exit(code)


@app.command("report", short_help="Render report.html from results folders (no server).")
def report_cmd(
    ctx: typer.Context,
    runs: Annotated[
        list[Path], typer.Argument(help="run folder(s); the first is the baseline", metavar="RUN...")
    ],
    out: Annotated[
        Path | None,
        _opt(
            "out",
            "output HTML file (default: <run>/report.html; comparing runs: "
            "<results>/comparisons/<a>__vs__<b>/report.html, never inside a run folder)",
            metavar="FILE",
            parser=o.file_path,
        ),
    ] = None,
    slo_us: Annotated[
        float | None, _opt("slo_us", "draw an SLO line on the latency spectrum (microseconds)", metavar="US")
    ] = None,
) -> None:
    """Render report.html from results folders alone (no server is contacted)."""
    from bench.results.folder import mark_if_dead
    from bench.results.matrices import sources_for_run
    from dashboards import ReportInputError, ReportWriteError, render_report
    from dashboards.load import load_run
    from dashboards.report import comparison_path

    check_options(ctx)
    for run in runs:
        if mark_if_dead(run):  # run.json tells the truth before the report reads it
            console.print(f"lockbench: {run} was left running by a bench that is gone: marked interrupted")
    if out is not None:
        _refuse_folder_as_out(out)
        _refuse_other_run_folder(out, list(runs))
    if out is None and any((Path(r) / "baseline.json").is_file() for r in runs):
        # never write into a (committed) baseline folder: reports of baselines go beside the comparisons
        out = _baseline_report_path(list(runs), comparison_path)
    try:
        damaged = [d for r in runs for d in load_run(Path(r)).damaged]
        sources = sources_for_run(Path(runs[-1])) if len(runs) == 1 else []
        path = render_report(list(runs), out=out, slo_us=slo_us, safety_sources=sources)
    except ReportInputError as exc:
        raise UserError(str(exc)) from None
    except ReportWriteError as exc:  # a full disk: name the file and the way back
        if exc.errno == errno.ENOSPC:
            raise UserError(f"{exc.strerror}; free some space, then run this bench report again") from None
        raise UserError(f"{exc.strerror}; give --out a file in a folder you can write") from None
    if damaged:
        more = f" (+{len(damaged) - 2} more)" if len(damaged) > 2 else ""
        console.print(
            f"lockbench: report written with a DAMAGED DATA banner: {'; '.join(damaged[:2])}{more}",
            markup=False, highlight=False, soft_wrap=True,
        )  # fmt: skip
    print(path)


def _refuse_folder_as_out(out: Path) -> None:
    """--out names the HTML file to write: a folder there (``--out .``) is one line, not a failed write."""
    if Path(out).is_dir():
        raise UserError(
            f"--out {out} is a folder; give the HTML file to write, e.g. --out {Path(out) / 'report.html'}"
        )


def _refuse_other_run_folder(out: Path, runs: list[Path]) -> None:
    """--out must not write into a run folder other than the one run being rendered (bench history refuses too)."""
    own = {Path(r).resolve() for r in runs} if len(runs) == 1 else set()
    for folder in Path(out).resolve().parents:
        if (folder / "run.json").is_file() and folder not in own:
            raise UserError(
                f"--out {out} is inside the run folder {folder}: a run's folder holds only its own report; "
                "write it elsewhere (default: results/comparisons/...)"
            )


def _baseline_report_path(runs: list[Path], comparison_path) -> Path:
    """``results/comparisons/<baseline>/report.html`` (or ``<a>__vs__<b>``): the results root of a baseline.

    A baseline lives in ``<results>/baselines/<name>``; its report goes to
    ``<results>/comparisons/baseline-<name>/``, a comparison to ``<results>/comparisons/<a>__vs__<b>/``.
    """
    last = Path(runs[-1]).resolve()
    is_baseline = (last / "baseline.json").is_file()
    results = last.parent.parent if is_baseline and last.parent.name == "baselines" else last.parent
    if len(runs) == 1:
        name = f"baseline-{last.name}" if is_baseline else last.name
        out = results / "comparisons" / name / "report.html"
    else:
        out = results / "comparisons" / comparison_path(runs).parent.name / "report.html"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"cannot create {out.parent} ({exc.strerror}); give the report's path with --out"
        ) from None
    return out


@app.command("gate", short_help="Compare two runs: exit 0 pass, 1 regression, 2 undecided.")
def gate_cmd(
    ctx: typer.Context,
    baseline: Annotated[
        Path, typer.Argument(help="baseline run or results/baselines/<name> folder", metavar="BASELINE")
    ],
    candidate: Annotated[Path, typer.Argument(help="candidate run folder", metavar="CANDIDATE")],
    rule: Annotated[
        list[str],
        _opt(
            "rule",
            "METRIC:THRESHOLD, e.g. acquire.p99:+10% (repeatable; default: throughput:-10% "
            f"acquire.p99:+20% violations:0; violations:0 always applies) ({_REPEATS})",
            metavar="RULE",
        ),
    ] = [],  # noqa: B006
    json_out: Annotated[bool, _opt("json", "print JSON instead of the Markdown table", "--json")] = False,
    alpha: Annotated[
        float, _opt("alpha", "significance level, Holm-corrected over all comparisons", metavar="P")
    ] = 0.05,
    allow_other_machine: Annotated[
        bool,
        _opt("allow_other_machine", "compare even when the machine classes differ (timings may not compare)"),
    ] = False,
    allow_param_diff: Annotated[
        list[str],
        _opt(
            "allow_param_diff",
            "compare although this run parameter differs, e.g. processes (without it, runs with "
            f"different parameters are not comparable: exit 2) ({_REPEATS})",
            metavar="NAME",
        ),
    ] = [],  # noqa: B006
) -> None:
    """Exit 0 pass, 1 regression, 2 unusable input, not comparable or not enough data to decide."""
    from bench.gate.compare import append_step_summary, run_gate, to_json, to_markdown

    check_options(ctx)
    _check_param_names(allow_param_diff, baseline, candidate)
    try:
        result = run_gate(
            baseline, candidate, rule, alpha=alpha, allow_other_machine=allow_other_machine,
            allow_param_diff=allow_param_diff,
        )  # fmt: skip
    except UserError as exc:
        if not str(exc).startswith("not comparable"):
            raise
        raise UserError(f"{exc}; a comparable candidate: {_comparable_command(baseline)}") from None
    markdown = to_markdown(result)
    print(to_json(result) if json_out else markdown, end="" if not json_out else "\n")
    append_step_summary(markdown)
    if result.exit_code == 2:
        print(
            "bench gate: NOT ENOUGH DATA to decide (exit 2): see the verdicts above; this is not a pass",
            file=sys.stderr,
        )
    elif result.exit_code == 1:
        print("bench gate: REGRESSION (exit 1)", file=sys.stderr)
    raise typer.Exit(result.exit_code)


def _run_params(folder: Path) -> dict | None:
    import json

    try:
        meta = json.loads((Path(folder) / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None  # the gate itself says what is wrong with the folder
    params = meta.get("params") if isinstance(meta, dict) else None
    return params if isinstance(params, dict) else None


def _check_param_names(names: list[str], baseline: Path, candidate: Path) -> None:
    """--allow-param-diff must name a parameter either run recorded: a typo must not pass silently."""
    from bench import validate

    if not names:
        return
    sides = [p for p in (_run_params(baseline), _run_params(candidate)) if p is not None]
    if not sides:
        return
    known = sorted({k for p in sides for k in p})
    for name in names:
        if name not in known:
            hint = validate.did_you_mean(name, known, "run.json params")
            hint = hint if "did you mean" in hint else f"; they record: {', '.join(known)}"
            raise UserError(f"--allow-param-diff {name!r} is not a parameter of these runs{hint}")


def _comparable_command(baseline: Path) -> str:
    """The `bench run` that makes a candidate with the baseline's parameters (its suite, else its command)."""
    params = _run_params(baseline) or {}
    suite = params.get("suite")
    if isinstance(suite, str) and suite:
        return f"`bench run --suite {suite}`, then `bench gate {baseline} results/<its run-id>`"
    return f"the baseline's own command (run.json 'command' of {baseline}), then `bench gate {baseline} <its folder>`"


@baseline_app.command("update", short_help="Copy a run's summary into a committable baseline.")
def baseline_update(
    ctx: typer.Context,
    run: Annotated[
        Path | None, typer.Argument(help="run folder (default: the newest finished run)", metavar="[RUN]")
    ] = None,
    name: Annotated[str, _opt("name", "baseline name: results/baselines/<name>", metavar="NAME")] = "ci",
    results_dir: Annotated[Path, _opt("results_dir", "where run folders are", metavar="DIR")] = Path(
        "results"
    ),
    baselines_dir: Annotated[
        Path, _opt("baselines_dir", "where baselines go", metavar="DIR", parser=o.folder_path)
    ] = Path("results/baselines"),
    force: Annotated[
        bool, _opt("force", "replace a baseline that git tracks (a committed one): say so on purpose")
    ] = False,
) -> None:
    """Copy a run's summary (run.json, cases.csv, histograms) into a committable baseline folder."""
    import json

    from bench.gate.baseline import folder_size, update_baseline

    check_options(ctx)
    dest = update_baseline(run, name, baselines_dir, results_dir, force=force)
    source = json.loads((dest / "baseline.json").read_text())["source_run"]
    console.print(f"lockbench: baseline {name!r} from run {source}: {folder_size(dest):,} bytes")
    print(dest)


@app.command("worker", short_help="Serve a remote `bench run --master-bind` as Locust workers.")
def worker_cmd(
    ctx: typer.Context,
    master: Annotated[
        str, _opt("master", "HOST[:PORT] of the `bench run --master-bind` to serve", metavar="HOST[:PORT]")
    ],
    processes: o.WorkerProcesses = 1,
    name: Annotated[
        str | None, _opt("name", "this host's name in results (default: the hostname)", metavar="NAME")
    ] = None,
) -> None:
    """Run Locust workers here for a `bench run` acting as master on another host, case after case."""
    from bench.run.worker import run_worker

    check_options(ctx)
    raise typer.Exit(run_worker(master, processes=processes, name=name, say=console.print))


@app.command("list", short_help="List backends, impl ids, workloads and suites.")
def list_cmd() -> None:
    """List backends, impl ids, workloads and suites."""
    from lockimpls.registry import backends, ids_for_backend
    from workloads.harness.catalog import WORKLOADS

    for b in backends():
        print(f"{b}: {' '.join(ids_for_backend(b))}")
    print(f"workloads: {' '.join(WORKLOADS)}")
    print(f"suites: {' '.join(SUITES)}")
    from bench.nemesis.scenarios import SCENARIOS

    print(f"matrix scenarios: {' '.join(SCENARIOS)}")
    from lockimpls.registry import CANARIES

    print(f"canaries (built to fail: the matrix's positive controls, never ranked): {' '.join(CANARIES)}")


@app.command("history", short_help="Trends over every run with change points; --check for CI.")
def history_cmd(
    ctx: typer.Context,
    roots: Annotated[
        list[Path] | None,
        typer.Argument(help="results directories or run folders (default: results)", metavar="ROOT"),
    ] = None,
    out: Annotated[
        Path | None,
        _opt(
            "out",
            "output HTML file (default: <root>/history/index.html, never in a run folder)",
            metavar="FILE",
            parser=o.file_path,
        ),
    ] = None,
    check: Annotated[
        bool,
        _opt("check", "exit 1 if a series' newest change point is a regression beyond its rule", "--check"),
    ] = False,
    rule: Annotated[
        list[str],
        _opt(
            "rule", f"METRIC:THRESHOLD as for bench gate (default: its defaults) ({_REPEATS})", metavar="RULE"
        ),
    ] = [],  # noqa: B006
    min_runs: Annotated[
        int, _opt("min_runs", "runs a series needs before --check judges it", metavar="N")
    ] = 20,
    max_pvalue: Annotated[
        float, _opt("max_pvalue", "a change point needs a t-test p-value below this", metavar="P")
    ] = 0.001,
    min_magnitude: Annotated[
        float, _opt("min_magnitude", "a change point needs a relative step above this", metavar="FRACTION")
    ] = 0.05,
) -> None:
    """Read every run folder, draw each series over commits with its change points (E-divisive)."""
    from bench.history.command import history_command

    check_options(ctx)
    if out is not None:
        _refuse_folder_as_out(out)
    raise typer.Exit(
        history_command(
            list(roots or [Path("results")]),
            out=out,
            check=check,
            rules=rule,
            min_runs=min_runs,
            max_pvalue=max_pvalue,
            min_magnitude=min_magnitude,
        )  # fmt: skip
    )


@infra_app.command("up", short_help="Start servers that stay up until `bench infra down`.")
def infra_up(
    ctx: typer.Context,
    kinds: Annotated[list[str], typer.Argument(help="server kinds, e.g. redis", metavar="KIND...")],
    nodes: Annotated[
        int, _opt("nodes", "1, or 3: a ZooKeeper ensemble or etcd cluster on loopback", metavar="N")
    ] = 1,
) -> None:
    """Start servers that stay up until `bench infra down`; `bench run` reuses single servers."""
    from bench.cli.infra_cmd import up

    check_options(ctx)
    up(kinds, console, nodes)


@infra_app.command("status", short_help="Show servers started by `bench infra up`.")
def infra_status() -> None:
    """Show servers started by `bench infra up`."""
    from bench.cli.infra_cmd import status

    status()


@infra_app.command("down", short_help="Stop every server started by `bench infra up`.")
def infra_down() -> None:
    """Stop every server started by `bench infra up`."""
    from bench.cli.infra_cmd import down

    down(console)


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def _usage_message(exc: click_exc.UsageError) -> str:
    """Click's message, naming where the bad value came from the way every other error does.

    Click names the option's environment variable whenever the option has one, even for a
    value typed on the command line; the source is ``(from LOCKBENCH_X)`` for a variable,
    ``(from [tool.lockbench] ...)`` for pyproject.toml and nothing for a flag.
    """
    import re

    message = re.sub(r" \(env var: '[A-Z0-9_]+'\)", "", _one_line(exc.format_message()))
    param = getattr(exc, "param", None)
    ctx = exc.ctx
    if param is not None and ctx is not None and param.name:
        source = ctx.get_parameter_source(param.name)
        if source is not None and source.name == "DEFAULT_MAP":
            message += f" (from [tool.lockbench] in pyproject.toml: fix or remove {param.name.replace('_', '-')} there)"
        elif source is not None and source.name == "ENVIRONMENT" and isinstance(param.envvar, str):
            message += f" (from {param.envvar})"
    return message


def main(argv: list[str] | None = None) -> None:
    """Entry point: map every user error to one line and exit 2; Ctrl-C to one line and exit 130."""
    from bench.cli import scratch
    from infra.errors import InfraError
    from lockimpls.base import LockConfigError

    # SIGTERM behaves like Ctrl-C so that servers and partial results are cleaned up.
    signal.signal(signal.SIGTERM, on_interrupt_signal)
    signal.signal(signal.SIGINT, on_interrupt_signal)
    sys.unraisablehook = quiet_swallowed_interrupts
    from bench.errors import INTERRUPT
    from lockimpls import registry

    registry.SIGNALLED = INTERRUPT.is_set  # a lock module raising KeyboardInterrupt is an error, not a Ctrl-C
    # every temporary file of this process in one folder, which the next bench removes after kill -9
    leave_scratch = scratch.enter()
    try:
        # read [tool.lockbench] now, from the directory the command runs in, checked against every command
        defaults = config.default_map(typer.main.get_command(app))
        code = app(args=argv, standalone_mode=False, default_map=defaults)
        if code == 130:  # typer turned a KeyboardInterrupt into a silent Exit(130)
            print("bench: interrupted", file=sys.stderr)
    except click_exc.NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx else "", file=sys.stderr)
        code = 2
    except click_exc.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "bench"
        print(f"bench: error: {_usage_message(exc)} (see '{command} --help')", file=sys.stderr)
        code = 2
    except (UserError, InfraError, LockConfigError) as exc:
        print(f"bench: error: {_one_line(str(exc))}", file=sys.stderr)
        code = 2
    except Interrupted as exc:
        print(f"bench: {_one_line(str(exc))}", file=sys.stderr)
        code = 130
    except (KeyboardInterrupt, typer.Abort):
        print("bench: interrupted", file=sys.stderr)
        code = 130
    except OSError as exc:
        print(f"bench: error: {_one_line(str(exc))}", file=sys.stderr)
        code = 2
    finally:
        leave_scratch()
    sys.exit(code if isinstance(code, int) else 0)
