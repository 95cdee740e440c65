"""The ``bench`` command: run benchmarks, render reports, manage local servers.

Results paths go to stdout, everything else (progress, logs) to stderr. A user's
mistake is one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

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
        float, _opt("stuck_bound", "crash: seconds after which a lock counts as stuck", metavar="SECONDS")
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
    test_hosts: Annotated[
        int,
        _opt(
            "test_hosts",
            "N worker hosts in network namespaces on this machine (+ master, lock and resource hosts)",
            metavar="N",
        ),
    ] = 0,
) -> None:
    """Run lock impls under a workload against real servers; print the report's path.

    A case whose verdict lacks evidence (acquisition errors dominate, too few acquisitions,
    a server died) is `unknown` with a reason, and the run exits 1 naming it.
    """
    from bench.gate.suites import apply_suite
    from bench.run.command import run_command

    # every number and URL is checked before anything starts, naming where it came from
    sources = check_options(ctx)
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
        lock_params=_lock_params(lock_params), suite=suite, slo_us=slo_us, fault=fault, clock_skew=clock_skew,
        skewed_clients=skewed_clients, explicit=explicit,
        master_bind=master_bind, expect_workers=expect_workers, test_hosts=test_hosts,
        arrivals=arrivals, patience=patience, max_in_flight=max_in_flight,
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
        int, _opt("parallel", "lanes (cases sharing no server) run side by side", metavar="N")
    ] = 4,
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
) -> None:
    """Every impl under every safety scenario (faults fenced and unfenced), one folder, one report."""
    from bench.matrix.command import matrix_command

    check_options(ctx)
    code = matrix_command(
        backends=backend, impls=impl, scenarios=scenario, parallel=parallel, warm=warm,
        user_urls=o.user_urls(redis_url, pg_dsn, zk_hosts, etcd_url, memcached_url),
        resource_url=resource_url, results_dir=results_dir, render=report, argv=sys.argv, console=console,
    )  # fmt: skip
    raise typer.Exit(code)


def _lock_params(text: str | None) -> dict:
    import json

    if not text:
        return {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UserError(
            f"--lock-params is not valid JSON ({exc.args[0]}); e.g. '{{\"delay_s\": 0.001}}'"
        ) from None
    if not isinstance(value, dict):
        raise UserError("--lock-params must be a JSON object, e.g. '{\"delay_s\": 0.001}'")
    return value


check_options = o.check_options
_from = o.from_text
_given = o.given


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
    from bench.run.runner import RunSettings
    from workloads.harness.distributions import SpecError, parse_distribution

    check_options(ctx)
    if duration < 1:
        raise UserError(f"--duration must be at least 1, got {duration:g}")
    try:
        parse_distribution(cs)
    except SpecError as exc:
        raise UserError(f"--cs: {exc}") from None
    settings = RunSettings(
        users=1, spawn_rate=1.0, duration=duration, processes=1, ttl=ttl, retry_interval=retry_interval,
        lock_params=_lock_params(lock_params),
        workload_options={"items": 1, "skew": 1.0, "stock": 100_000, "max_qty": 3, "cs": cs, "shared_keys": 0,
                          "read_ratio": 0.9, "depth": 3},
    )  # fmt: skip
    code = calibrate_command(
        backends=backend, impls=impl, workload=workload, settings=settings, console=console,
        out=RichConsole(width=None if sys.stdout.isatty() else 140),
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
        ),
    ] = None,
    slo_us: Annotated[
        float | None, _opt("slo_us", "draw an SLO line on the latency spectrum (microseconds)", metavar="US")
    ] = None,
) -> None:
    """Render report.html from results folders alone (no server is contacted)."""
    from dashboards import ReportInputError, render_report

    check_options(ctx)

    try:
        path = render_report(list(runs), out=out, slo_us=slo_us)
    except ReportInputError as exc:
        raise UserError(str(exc)) from None
    print(path)


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
) -> None:
    """Exit 0 pass, 1 regression, 2 unusable input or not enough data to decide."""
    from bench.gate.compare import append_step_summary, run_gate, to_json, to_markdown

    check_options(ctx)

    result = run_gate(baseline, candidate, rule, alpha=alpha, allow_other_machine=allow_other_machine)
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


@baseline_app.command("update", short_help="Copy a run's summary into a committable baseline.")
def baseline_update(
    run: Annotated[
        Path | None, typer.Argument(help="run folder (default: the newest finished run)", metavar="[RUN]")
    ] = None,
    name: Annotated[str, _opt("name", "baseline name: results/baselines/<name>", metavar="NAME")] = "ci",
    results_dir: Annotated[Path, _opt("results_dir", "where run folders are", metavar="DIR")] = Path(
        "results"
    ),
    baselines_dir: Annotated[Path, _opt("baselines_dir", "where baselines go", metavar="DIR")] = Path(
        "results/baselines"
    ),
) -> None:
    """Copy a run's summary (run.json, cases.csv, histograms) into a committable baseline folder."""
    import json

    from bench.gate.baseline import folder_size, update_baseline

    dest = update_baseline(run, name, baselines_dir, results_dir)
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


@infra_app.command("up", short_help="Start servers that stay up until `bench infra down`.")
def infra_up(
    kinds: Annotated[list[str], typer.Argument(help="server kinds, e.g. redis", metavar="KIND...")],
    nodes: Annotated[
        int, _opt("nodes", "1, or 3: a ZooKeeper ensemble or etcd cluster on loopback", metavar="N")
    ] = 1,
) -> None:
    """Start servers that stay up until `bench infra down`; `bench run` reuses single servers."""
    from bench.cli.infra_cmd import up

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
    """Click's message, naming [tool.lockbench] when the bad value came from pyproject.toml."""
    message = _one_line(exc.format_message())
    param = getattr(exc, "param", None)
    ctx = exc.ctx
    if param is not None and ctx is not None and param.name:
        source = ctx.get_parameter_source(param.name)
        if source is not None and source.name == "DEFAULT_MAP":
            # click names the option's environment variable even when the value came from the table
            message = message.replace(f" (env var: '{_env(param.name)}')", "")
            message += f" (from [tool.lockbench] in pyproject.toml: fix or remove {param.name.replace('_', '-')} there)"
    return message


def main(argv: list[str] | None = None) -> None:
    """Entry point: map every user error to one line and exit 2; Ctrl-C to one line and exit 130."""
    from infra.errors import InfraError
    from lockimpls.base import LockConfigError

    # SIGTERM behaves like Ctrl-C so that servers and partial results are cleaned up.
    signal.signal(signal.SIGTERM, on_interrupt_signal)
    signal.signal(signal.SIGINT, on_interrupt_signal)
    sys.unraisablehook = quiet_swallowed_interrupts
    try:
        # read [tool.lockbench] now, from the directory the command runs in
        code = app(args=argv, standalone_mode=False, default_map=config.default_map())
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
    sys.exit(code if isinstance(code, int) else 0)
