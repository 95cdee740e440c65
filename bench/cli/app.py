"""The ``bench`` command: run benchmarks, render reports, manage local servers.

Results paths go to stdout, everything else (progress, logs) to stderr. A user's
mistake is one line on stderr and exit code 2, never a traceback.

Every option is declared in bench/cli/options.py; a command here names the options it
takes (``@o.takes``), checks them all (bench/validate.py, naming each value's source), builds
its request and only then imports the code that runs it, so that a refusal imports nothing
heavy.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from bench.cli import config, typed_argv
from bench.cli import options as o
from bench.errors import Interrupted, UserError, on_interrupt_signal, quiet_swallowed_interrupts
from bench.matrix.request import MatrixRequest
from bench.run.request import RunRequest

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

check_options = o.check_options


def __getattr__(name: str) -> Any:
    if name == "BACKENDS":  # the backends with an impl, for tests that list them
        from lockimpls.registry import backends

        return backends()
    raise AttributeError(name)


@app.command(short_help="Run lock impls against real servers; print the report's path.")
@o.takes(*o.RUN)
def run(ctx: typer.Context, **given: Any) -> None:
    """Run lock impls under a workload against real servers; print the report's path.

    A case whose verdict lacks evidence (acquisition errors dominate, too few acquisitions,
    a server died) is `unknown` with a reason, and the run exits 1 naming it.
    """
    request = run_request(ctx)
    from bench.run.command import run_command  # heavy: only once every option passed

    _mark_dead_runs(request.results_dir)
    raise typer.Exit(run_command(request, console))


def run_request(ctx: typer.Context) -> RunRequest:
    """``bench run``'s request: every option checked, a suite applied, --lock-params against the impls."""
    sources = check_options(ctx, write_dirs=("results_dir",))
    values = dict(ctx.params)
    # a workload's own defaults (long-cs: a 0.5 s lease ...) apply where the user set nothing:
    # on the command line, in the environment or in [tool.lockbench]
    explicit = o.explicit(ctx)
    if values.get("suite"):
        from bench.gate.suites import apply_suite

        suited = apply_suite(values["suite"], values, {n for n in ctx.params if o.given(ctx, n)})
        explicit |= {k for k in suited if suited[k] != values.get(k)}  # the suite's values count as given
        if isinstance(suited.get("workload"), str):
            suited["workload"] = [suited["workload"]]
        values = suited
    lock_params = checked_lock_params(values["backend"], values["impl"], values.get("lock_params"), sources)
    return RunRequest.from_options(
        values, lock_params=lock_params, user_urls=o.user_urls(values), argv=tuple(typed_argv()),
        explicit=frozenset(explicit), sources=sources,
    )  # fmt: skip


@app.command("matrix", short_help="Every impl under every safety scenario: one folder, one report.")
@o.takes(*o.MATRIX)
def matrix_cmd(ctx: typer.Context, **given: Any) -> None:
    """Every impl under every safety scenario (faults fenced and unfenced), one folder, one report."""
    sources = check_options(ctx, write_dirs=("results_dir",))
    request = MatrixRequest.from_options(
        ctx.params, user_urls=o.user_urls(ctx.params), argv=tuple(typed_argv()), sources=sources
    )
    from bench.matrix.command import matrix_command  # heavy: only once every option passed

    _mark_dead_runs(request.results_dir)
    raise typer.Exit(matrix_command(request, console))


def checked_lock_params(
    backend: list[str], impl: list[str], text: str | None, sources: dict[str, str]
) -> dict[str, Any]:
    """``--lock-params`` checked against what the impls of the command declare (before anything starts)."""
    from bench import validate
    from bench.run.impls import plan_impls

    params = validate.parse_lock_params(text, sources.get("lock_params", ""))
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


@app.command("merge", short_help="Join the shards of one matrix (bench matrix --shard I/N) into one folder.")
@o.takes("arg.shards", "results_dir", "report")
def merge_cmd(ctx: typer.Context, **given: Any) -> None:
    """Join the shard folders of one matrix into one matrix folder, one grid and one report.

    Refuses (exit 2, one line) shards of different commits, options or evidence levels, a shard
    missing or given twice, an unfinished or damaged shard. Exits 1 like bench matrix when a cell
    is undecided or contradicts the catalog.
    """
    check_options(ctx, write_dirs=("results_dir",))
    from bench.matrix.merge import merge_command

    v = ctx.params
    raise typer.Exit(merge_command(list(v["shards"]), v["results_dir"], console, render=v["report"]))


@app.command("matrix-compare", short_help="Two matrices of one commit: the cells whose class differs.")
@o.takes("arg.a", "arg.b")
def matrix_compare_cmd(ctx: typer.Context, **given: Any) -> None:
    """Did the matrix give the same answer twice? Lists every impl x scenario cell whose class
    (survived, thin, failed, stuck, unknown, not tested ...: the report's own cells) differs
    between A and B, with each side's class and reason.

    Exit 0 when every cell is the same, 1 when any differs; 2 (one line) when a folder is not
    a matrix, or the two differ in commit or selection (impls, scenarios, evidence, strikes,
    shard), which it names. A command of its own rather than a flag of bench matrix: it starts
    no server and takes none of bench matrix's options, like bench merge and bench report.
    """
    from bench.matrix.compare import compare_command

    raise typer.Exit(compare_command(ctx.params["a"], ctx.params["b"], console))


@app.command(
    "explore", short_help="Random combined fault schedules from a seed; a failure shrunk and written."
)
@o.takes(
    "backend", "impl", "seed", "budget", "shrink_runs", "faults", "explore.fencing", "plan", *o.SERVER_OPTIONS,
    "results_dir", "report",
)  # fmt: skip
def explore_cmd(ctx: typer.Context, **given: Any) -> None:
    """Search for a short combination of faults that breaks a lock; shrink it; write it for bench replay.

    Exit 0: nothing found within the budget; 1: found (the schedule and its replay command printed).
    """
    v = ctx.params
    check_options(ctx, write_dirs=() if v["plan"] else ("results_dir",))
    from bench.explore.command import explore_command

    if not v["plan"]:
        _mark_dead_runs(v["results_dir"])
    code = explore_command(
        impls=v["impl"], backends=v["backend"], seed=v["seed"], budget=v["budget"], plan=v["plan"],
        fencing=v["fencing"], faults=[f.strip() for f in v["faults"].split(",") if f.strip()],
        results_dir=v["results_dir"], user_urls=o.user_urls(v), argv=typed_argv(), console=console,
        render=v["report"], shrink_runs=v["shrink_runs"],
    )  # fmt: skip
    raise typer.Exit(code)


@app.command("replay", short_help="Run a schedule written by bench explore; exit 1 when it fails again.")
@o.takes("arg.file", "runs", *o.SERVER_OPTIONS, "results_dir", "report", report=False)
def replay_cmd(ctx: typer.Context, **given: Any) -> None:
    """Run exactly the schedule in FILE on fresh servers; exit 1 when the failure reproduces, 0 when not."""
    v = ctx.params
    check_options(ctx, write_dirs=("results_dir",))
    if v["runs"] < 1:
        raise UserError(f"--runs must be at least 1, got {v['runs']}")
    try:
        Path(v["file"]).read_bytes()
    except OSError as exc:  # before the heavy imports: a refusal takes well under a second
        raise UserError(f"cannot read {v['file']}: {exc.strerror}") from None
    from bench.explore.command import replay_command

    _mark_dead_runs(v["results_dir"])
    code = replay_command(
        file=v["file"], runs=v["runs"], results_dir=v["results_dir"], argv=typed_argv(), console=console,
        render=v["report"], user_urls=o.user_urls(v),
    )  # fmt: skip
    raise typer.Exit(code)


@app.command("calibrate", short_help="Print backend floors and each impl's solo hold.")
@o.takes(
    "backend",
    "impl",
    "calibrate.workload",
    "duration",
    "cs",
    "ttl",
    "retry_interval",
    "lock_params",
    duration=3.0,
)
def calibrate_cmd(ctx: typer.Context, **given: Any) -> None:
    """Print each backend's floor (one round trip) and each impl's solo hold; keeps no results."""
    v = ctx.params
    sources = check_options(ctx)
    params = checked_lock_params(v["backend"], v["impl"], v["lock_params"], sources)
    from rich.console import Console as RichConsole

    from bench.run.calibrate import calibrate_command
    from bench.run.case import RunSettings

    settings = RunSettings(
        users=1, spawn_rate=1.0, duration=v["duration"], processes=1, ttl=v["ttl"],
        retry_interval=v["retry_interval"], lock_params=params,
        workload_options={"items": 1, "skew": 1.0, "stock": 100_000, "max_qty": 3, "cs": v["cs"], "shared_keys": 0,
                          "read_ratio": 0.9, "depth": 3},
    )  # fmt: skip
    code = calibrate_command(
        backends=v["backend"], impls=v["impl"], workload=v["workload"], settings=settings, console=console,
        out=RichConsole(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 140),
    )  # fmt: skip
    raise typer.Exit(code)


@app.command("report", short_help="Render report.html from results folders (no server).")
@o.takes("arg.runs", "out", "slo_us")
def report_cmd(ctx: typer.Context, **given: Any) -> None:
    """Render report.html from results folders alone (no server is contacted)."""
    check_options(ctx)
    runs, out = list(ctx.params["runs"]), ctx.params["out"]
    _refuse_missing([("", run) for run in runs])
    from bench.results.folder import mark_if_dead
    from dashboards.report import comparison_path

    for run in runs:
        if mark_if_dead(run):  # run.json tells the truth before the report reads it
            console.print(f"lockbench: {run} was left running by a bench that is gone: marked interrupted")
    if out is not None:
        _refuse_folder_as_out(out)
        _refuse_other_run_folder(out, runs)
    if out is None and any((Path(r) / "baseline.json").is_file() for r in runs):
        # never write into a (committed) baseline folder: reports of baselines go beside the comparisons
        out = _baseline_report_path(runs, comparison_path)
    _render(runs, out, ctx.params["slo_us"])


def _refuse_missing(folders: list[tuple[str, Path]]) -> None:
    """A results folder that is not there is refused before anything heavy is imported."""
    for which, folder in folders:
        if not Path(folder).exists():
            raise UserError(f"{which}results folder not found: {folder}")


def _render(runs: list[Path], out: Path | None, slo_us: float | None) -> None:
    """Render the report of ``runs``; a damaged input or an unwritable file is one line."""
    from bench.results.matrices import sources_for_run
    from dashboards import ReportInputError, ReportWriteError, render_report
    from dashboards.load import load_run

    try:
        loaded = [load_run(Path(r)) for r in runs]
        damaged = [d for run in loaded for d in run.damaged]
        sources = sources_for_run(Path(runs[-1])) if len(runs) == 1 else []
        path = render_report(runs, out=out, slo_us=slo_us, safety_sources=sources, loaded=loaded)
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


@app.command("gate", short_help="Compare two runs: exit 0 pass, 1 regression, 2 undecided.")
@o.takes(
    "arg.baseline", "arg.candidate", "rule", "json_out", "alpha", "allow_other_machine", "allow_param_diff"
)
def gate_cmd(ctx: typer.Context, **given: Any) -> None:
    """Exit 0 pass, 1 regression, 2 unusable input, not comparable or not enough data to decide."""
    check_options(ctx)
    v = ctx.params
    baseline, candidate = v["baseline"], v["candidate"]
    from bench.gate.rules import parse_rules

    parse_rules(v["rule"])  # a bad rule is the first thing to say, before the folders are looked at
    _refuse_missing([("baseline ", baseline), ("candidate ", candidate)])
    _check_param_names(v["allow_param_diff"], baseline, candidate)
    from bench.gate.compare import append_step_summary, run_gate, to_json, to_markdown

    try:
        result = run_gate(
            baseline, candidate, v["rule"], alpha=v["alpha"], allow_other_machine=v["allow_other_machine"],
            allow_param_diff=v["allow_param_diff"],
        )  # fmt: skip
    except UserError as exc:
        if not str(exc).startswith("not comparable"):
            raise
        raise UserError(f"{exc}; a comparable candidate: {_comparable_command(baseline)}") from None
    markdown = to_markdown(result)
    print(to_json(result) if v["json_out"] else markdown, end="" if not v["json_out"] else "\n")
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
@o.takes("arg.run", "name", "baseline.results_dir", "baselines_dir", "force")
def baseline_update(ctx: typer.Context, **given: Any) -> None:
    """Copy a run's summary (run.json, cases.csv, histograms) into a committable baseline folder."""
    import json

    check_options(ctx)
    v = ctx.params
    from bench.gate.baseline import folder_size, update_baseline

    dest = update_baseline(v["run"], v["name"], v["baselines_dir"], v["results_dir"], force=v["force"])
    source = json.loads((dest / "baseline.json").read_text())["source_run"]
    console.print(f"lockbench: baseline {v['name']!r} from run {source}: {folder_size(dest):,} bytes")
    print(dest)


@app.command("worker", short_help="Serve a remote `bench run --master-bind` as Locust workers.")
@o.takes("master", "worker.processes", "worker.name")
def worker_cmd(ctx: typer.Context, **given: Any) -> None:
    """Run Locust workers here for a `bench run` acting as master on another host, case after case."""
    check_options(ctx)
    v = ctx.params
    from bench.run.worker import run_worker

    raise typer.Exit(run_worker(v["master"], processes=v["processes"], name=v["name"], say=console.print))


@app.command("list", short_help="List backends, impl ids, workloads and suites.")
def list_cmd() -> None:
    """List backends, impl ids, workloads and suites."""
    from bench.gate.suites import SUITES
    from bench.nemesis.scenarios import SCENARIOS
    from lockimpls.registry import CANARIES, backends, ids_for_backend
    from workloads.harness.catalog import WORKLOADS

    for b in backends():
        print(f"{b}: {' '.join(ids_for_backend(b))}")
    print(f"workloads: {' '.join(WORKLOADS)}")
    print(f"suites: {' '.join(SUITES)}")
    print(f"matrix scenarios: {' '.join(SCENARIOS)}")
    print(f"canaries (built to fail: the matrix's positive controls, never ranked): {' '.join(CANARIES)}")


@app.command("history", short_help="Trends over every run with change points; --check for CI.")
@o.takes("arg.roots", "history.out", "check", "history.rule", "min_runs", "max_pvalue", "min_magnitude")
def history_cmd(ctx: typer.Context, **given: Any) -> None:
    """Read every run folder, draw each series over commits with its change points (E-divisive)."""
    check_options(ctx)
    v = ctx.params
    if v["out"] is not None:
        _refuse_folder_as_out(v["out"])
    from bench.history.command import history_command

    raise typer.Exit(
        history_command(
            list(v["roots"] or [Path("results")]),
            out=v["out"],
            check=v["check"],
            rules=v["rule"],
            min_runs=v["min_runs"],
            max_pvalue=v["max_pvalue"],
            min_magnitude=v["min_magnitude"],
        )  # fmt: skip
    )


@infra_app.command("up", short_help="Start servers that stay up until `bench infra down`.")
@o.takes("arg.kinds", "nodes")
def infra_up(ctx: typer.Context, **given: Any) -> None:
    """Start servers that stay up until `bench infra down`; `bench run` reuses single servers."""
    check_options(ctx)
    from bench.cli.infra_cmd import up

    up(ctx.params["kinds"], console, ctx.params["nodes"])


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


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def _usage_message(exc: click_exc.UsageError) -> str:
    """Click's message, naming where the bad value came from the way every other error does.

    Click names the option's environment variable whenever the option has one, even for a
    value typed on the command line; the source is ``(from LOCKBENCH_X)`` for a variable,
    ``(from [tool.lockbench] x in FILE)`` for pyproject.toml and nothing for a flag.
    """
    import re

    message = re.sub(r" \(env var: '[A-Z0-9_]+'\)", "", _one_line(exc.format_message()))
    param = getattr(exc, "param", None)
    ctx = exc.ctx
    if param is not None and ctx is not None and param.name:
        source = o.source(ctx, param.name)
        if source:
            message += f" (from {source})"
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
