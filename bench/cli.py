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

from bench import config
from bench.errors import UserError
from lockimpls.base import DEFAULT_RETRY_INTERVAL

try:  # typer >= 0.20 vendors click; older ones use the click package
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover
    from click import exceptions as click_exc

console = Console(stderr=True, width=None if sys.stderr.isatty() else 120)
app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    help="lockbench: which distributed lock should I use, what does it cost, and is it safe?",
    context_settings={"default_map": config.default_map()},
)
infra_app = typer.Typer(no_args_is_help=True, help="Keep local servers up between runs (optional).")
app.add_typer(infra_app, name="infra")
baseline_app = typer.Typer(no_args_is_help=True, help="Committed baselines for bench gate.")
app.add_typer(baseline_app, name="baseline")


def _env(name: str) -> str:
    return f"LOCKBENCH_{name.upper()}"


@app.command()
def run(
    ctx: typer.Context,
    backend: Annotated[
        list[str], typer.Option(help="backend(s) whose impls to run, or 'all'", envvar=_env("backend"))
    ] = [],  # noqa: B006
    impl: Annotated[list[str], typer.Option(help="impl id(s) or package.module:Class (repeatable)")] = [],  # noqa: B006
    workload: Annotated[
        list[str],
        typer.Option(help="workload name (repeatable: one run, every workload)", envvar=_env("workload")),
    ] = ["flash-sale"],  # noqa: B006
    duration: Annotated[float, typer.Option(help="seconds of load per case", envvar=_env("duration"))] = 8.0,
    users: Annotated[int, typer.Option(help="simulated clients", envvar=_env("users"))] = 50,
    spawn_rate: Annotated[
        float | None, typer.Option(help="clients started per second (default: all in 1 s)")
    ] = None,
    processes: Annotated[int, typer.Option(help="Locust worker processes (1 = one local process)")] = 1,
    trials: Annotated[int, typer.Option(help="repeat every case this many times, interleaved")] = 1,
    items: Annotated[int, typer.Option(help="flash-sale: items, one lock each")] = 1,
    skew: Annotated[float, typer.Option(help="flash-sale: Zipf exponent of item popularity")] = 1.0,
    stock: Annotated[int, typer.Option(help="flash-sale: initial stock per item")] = 100_000,
    max_qty: Annotated[int, typer.Option(help="flash-sale: a buyer wants 1..max-qty units")] = 3,
    shared_keys: Annotated[
        int, typer.Option(help="lock-pairs: 0 = each user its own lock; N = users share N locks")
    ] = 0,
    cs: Annotated[
        str, typer.Option(help="critical-section time: 1ms, exp:1ms, uniform:0.5ms:2ms, pareto:1ms:1.5")
    ] = "1ms",
    ttl: Annotated[float, typer.Option(help="lease (TTL) in seconds for locks that have one")] = 10.0,
    retry_interval: Annotated[
        float, typer.Option(help="seconds between attempts of polling locks")
    ] = DEFAULT_RETRY_INTERVAL,
    acquire_timeout: Annotated[float, typer.Option(help="seconds an acquire may wait before it fails")] = 5.0,
    fencing: Annotated[
        str,
        typer.Option(
            help="off | observe (tokens; the resource counts stale writes) | enforce (it refuses them) | both"
        ),
    ] = "off",
    fault: Annotated[
        str | None,
        typer.Option(help="server fault KIND[@held|@<s>s]: restart, failover, kill-member, kill-leader"),
    ] = None,
    clock_skew: Annotated[float, typer.Option(help="seconds added to the clock of skewed clients")] = 0.0,
    skewed_clients: Annotated[float, typer.Option(help="fraction of clients whose clock is skewed")] = 0.0,
    pause: Annotated[float, typer.Option(help="lease-expiry: seconds a holder pauses")] = 2.0,
    pause_every: Annotated[int, typer.Option(help="lease-expiry: pause at every n-th critical section")] = 20,
    pause_kind: Annotated[
        str, typer.Option(help="lease-expiry: task (holder only) or world (whole process)")
    ] = "task",
    read_ratio: Annotated[float, typer.Option(help="read-mostly: fraction of operations that read")] = 0.9,
    depth: Annotated[int, typer.Option(help="reentrant: nested acquires inside the critical section")] = 3,
    crash_after: Annotated[int, typer.Option(help="crash: worker 0 dies at its n-th critical section")] = 20,
    stuck_bound: Annotated[
        float, typer.Option(help="crash: seconds after which a lock counts as stuck")
    ] = 5.0,
    redis_url: Annotated[
        list[str],
        typer.Option(help="use this Redis for locks instead of starting one", envvar=_env("redis_url")),
    ] = [],  # noqa: B006
    pg_dsn: Annotated[
        str | None,
        typer.Option(
            help="use this PostgreSQL (postgresql://...) instead of starting one", envvar=_env("pg_dsn")
        ),
    ] = None,
    zk_hosts: Annotated[
        str | None,
        typer.Option(help="use this ZooKeeper ensemble (host:port,host:port)", envvar=_env("zk_hosts")),
    ] = None,
    etcd_url: Annotated[
        list[str],
        typer.Option(
            help="use this etcd (http://host:port) instead of starting one", envvar=_env("etcd_url")
        ),
    ] = [],  # noqa: B006
    memcached_url: Annotated[
        str | None,
        typer.Option(help="use this memcached (memcached://host:port)", envvar=_env("memcached_url")),
    ] = None,
    resource_url: Annotated[
        str | None,
        typer.Option(
            help="Redis for the protected resource (never a lock server)", envvar=_env("resource_url")
        ),
    ] = None,
    results_dir: Annotated[
        Path, typer.Option(help="where run folders go", envvar=_env("results_dir"))
    ] = Path("results"),
    report: Annotated[bool, typer.Option(help="render report.html at the end")] = True,
    suite: Annotated[
        str | None, typer.Option(help="a named option set (e.g. ci); flags you give still win")
    ] = None,
    lock_params: Annotated[
        str | None, typer.Option(help="JSON object of impl-specific options, e.g. '{\"delay_s\": 0.001}'")
    ] = None,
    slo_us: Annotated[
        float | None, typer.Option(help="draw an SLO line on the report's latency charts (microseconds)")
    ] = None,
    arrivals: Annotated[
        str | None,
        typer.Option(help="open model: buyers arrive by constant:R, poisson:R or spike:PEAK@RAMP[:DECAY]"),
    ] = None,
    patience: Annotated[
        float, typer.Option(help="open model: seconds a buyer waits for the lock after arriving")
    ] = 2.0,
    max_in_flight: Annotated[
        int, typer.Option(help="open model: buyers inside at once (all processes); more are rejected")
    ] = 50,
) -> None:
    """Run lock impls under a workload against real servers; print the report's path."""
    from bench.commands import run_command
    from bench.suites import apply_suite

    # a workload's own defaults (long-cs: a 0.5 s lease ...) apply where the user set nothing:
    # on the command line, in the environment or in [tool.lockbench]
    explicit = {
        n for n in ctx.params if (src := ctx.get_parameter_source(n)) is not None and src.name != "DEFAULT"
    }
    if pause_kind not in ("task", "world"):
        raise UserError(f"--pause-kind must be task or world, got {pause_kind!r}")
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
        user_urls={
            "redis": redis_url,
            "postgres": [pg_dsn] if pg_dsn else [],
            "zookeeper": [f"zookeeper://{zk_hosts}"] if zk_hosts else [],
            "etcd": etcd_url,
            "memcached": [memcached_url] if memcached_url else [],
        }, resource_url=resource_url, results_dir=results_dir,
        render=report, argv=sys.argv, console=console,
        lock_params=_lock_params(lock_params), suite=suite, slo_us=slo_us, fault=fault, clock_skew=clock_skew,
        skewed_clients=skewed_clients, explicit=explicit,
        arrivals=arrivals, patience=patience, max_in_flight=max_in_flight,
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


def _given(ctx: typer.Context, name: str) -> bool:
    """True when the user set the option (command line or environment), not a default."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


@app.command("report")
def report_cmd(
    runs: Annotated[list[Path], typer.Argument(help="run folder(s); the first is the baseline")],
    out: Annotated[
        Path | None, typer.Option(help="output HTML file (default: <last run>/report.html)")
    ] = None,
    slo_us: Annotated[
        float | None, typer.Option(help="draw an SLO line on the latency spectrum (microseconds)")
    ] = None,
) -> None:
    """Render report.html from results folders alone (no server is contacted)."""
    from dashboards import ReportInputError, render_report

    try:
        path = render_report(list(runs), out=out, slo_us=slo_us)
    except ReportInputError as exc:
        raise UserError(str(exc)) from None
    print(path)


@app.command("gate")
def gate_cmd(
    baseline: Annotated[Path, typer.Argument(help="baseline run or results/baselines/<name> folder")],
    candidate: Annotated[Path, typer.Argument(help="candidate run folder")],
    rule: Annotated[
        list[str],
        typer.Option(
            help="METRIC:THRESHOLD, e.g. acquire.p99:+10% (repeatable; default: throughput:-10% "
            "acquire.p99:+20% violations:0; violations:0 always applies)"
        ),
    ] = [],  # noqa: B006
    json_out: Annotated[
        bool, typer.Option("--json", help="print JSON instead of the Markdown table")
    ] = False,
    alpha: Annotated[
        float, typer.Option(help="significance level, Holm-corrected over all comparisons")
    ] = 0.05,
    allow_other_machine: Annotated[
        bool, typer.Option(help="compare even when the machine classes differ (timings may not compare)")
    ] = False,
) -> None:
    """Exit 0 pass, 1 regression, 2 unusable input or not enough data to decide."""
    from bench.gate import append_step_summary, run_gate, to_json, to_markdown

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


@baseline_app.command("update")
def baseline_update(
    run: Annotated[Path | None, typer.Argument(help="run folder (default: the newest finished run)")] = None,
    name: Annotated[str, typer.Option(help="baseline name: results/baselines/<name>")] = "ci",
    results_dir: Annotated[
        Path, typer.Option(help="where run folders are", envvar=_env("results_dir"))
    ] = Path("results"),
    baselines_dir: Annotated[Path, typer.Option(help="where baselines go")] = Path("results/baselines"),
) -> None:
    """Copy a run's summary (run.json, cases.csv, histograms) into a committable baseline folder."""
    import json

    from bench.baseline import folder_size, update_baseline

    dest = update_baseline(run, name, baselines_dir, results_dir)
    source = json.loads((dest / "baseline.json").read_text())["source_run"]
    console.print(f"lockbench: baseline {name!r} from run {source}: {folder_size(dest):,} bytes")
    print(dest)


@app.command("list")
def list_cmd() -> None:
    """List backends, impl ids and workloads."""
    from lockimpls.registry import backends, ids_for_backend
    from workloads.catalog import WORKLOADS

    for b in backends():
        print(f"{b}: {' '.join(ids_for_backend(b))}")
    print(f"workloads: {' '.join(WORKLOADS)}")


@infra_app.command("up")
def infra_up(
    kinds: Annotated[list[str], typer.Argument(help="server kinds, e.g. redis")],
    nodes: Annotated[int, typer.Option(help="3: a ZooKeeper ensemble or etcd cluster on loopback")] = 1,
) -> None:
    """Start servers that stay up until `bench infra down`; `bench run` reuses single servers."""
    from bench.infra_cmd import up

    up(kinds, console, nodes)


@infra_app.command("status")
def infra_status() -> None:
    """Show servers started by `bench infra up`."""
    from bench.infra_cmd import status

    status()


@infra_app.command("down")
def infra_down() -> None:
    """Stop every server started by `bench infra up`."""
    from bench.infra_cmd import down

    down(console)


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def main(argv: list[str] | None = None) -> None:
    """Entry point: map every user error to one line and exit 2; Ctrl-C to exit 130."""
    from infra.errors import InfraError
    from lockimpls.base import LockConfigError

    # SIGTERM behaves like Ctrl-C so that servers and partial results are cleaned up.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        code = app(args=argv, standalone_mode=False)
    except click_exc.NoArgsIsHelpError as exc:
        print(exc.ctx.get_help() if exc.ctx else "", file=sys.stderr)
        code = 2
    except click_exc.UsageError as exc:
        command = exc.ctx.command_path if exc.ctx else "bench"
        print(f"bench: error: {_one_line(exc.format_message())} (see '{command} --help')", file=sys.stderr)
        code = 2
    except (UserError, InfraError, LockConfigError) as exc:
        print(f"bench: error: {_one_line(str(exc))}", file=sys.stderr)
        code = 2
    except (KeyboardInterrupt, typer.Abort):
        print("bench: interrupted", file=sys.stderr)
        code = 130
    except OSError as exc:
        print(f"bench: error: {_one_line(str(exc))}", file=sys.stderr)
        code = 2
    sys.exit(code if isinstance(code, int) else 0)
