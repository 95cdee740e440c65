"""Bad input, run in-process through bench.cli.app.main: exit 2, one line, no traceback, nothing started.

Every numeric option of every command (run, matrix, calibrate, worker, report, gate,
baseline update, infra up) is tried with NaN, infinity and a value on each side of its
documented range (bench/validate.py RANGES), plus per command: URLs with wrong schemes or
no host, bad specs, unknown names (with "did you mean"), lock params an impl does not
take, unusable folders, bad values from LOCKBENCH_* variables and from pyproject.toml.
A spy on subprocess.Popen proves no server (nor Locust) was started, and the results
folder stays empty. ``test_bad_inputs_cover_every_command`` counts them per command.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from bench import validate
from bench.cli.app import app, main

RUN = ["run", "--impl", "redis.set-nx-px-lua"]

#: how each command is called with otherwise good arguments (a bad option is then added)
BASE: dict[str, list[str]] = {
    "run": RUN,
    "matrix": ["matrix", "--impl", "redis.set-nx-px-lua"],
    "calibrate": ["calibrate", "--impl", "redis.set-nx-px-lua"],
    "worker": ["worker", "--master", "127.0.0.1:1"],
    "report": ["report", "somewhere"],
    "gate": ["gate", "a", "b"],
    "baseline update": ["baseline", "update", "nowhere"],
    "infra up": ["infra", "up", "redis"],
    "history": ["history", "nowhere"],  # another engineer's command: its numbers, by the same table
}


def _command(path: str):
    command = typer.main.get_command(app)
    for part in path.split():
        command = command.commands[part]
    return command


def _number_cases() -> list[tuple[list[str], str]]:
    """NaN, inf, below and above the range of every numeric option of every command."""
    out = []
    for path, base in BASE.items():
        options = {p.name for p in _command(path).params}
        for name, r in validate.RANGES.items():
            if name not in options:
                continue
            flag = validate.flag(name)
            below = r.low if r.open_low else r.low - (1 if r.integer else 0.5)
            bad = ["nan", "inf", f"{below:g}", f"{r.high * 10 + 1:g}"]
            if r.integer:
                bad = [f"{below:g}", f"{int(r.high) * 10 + 1}"]  # NaN is not an int: click refuses it
            out += [([*base, flag, value], flag) for value in bad]
    return out


M, C, W = BASE["matrix"], BASE["calibrate"], BASE["worker"]
X = ["explore", "--impl", "redis.set-nx-px-lua"]
#: the commands that used to skip validation or fail late (issue 24), and every other command's own
COMMAND_CASES: list[tuple[list[str], str]] = [
    # bench run: upper bounds, the open model, URLs, lock params, names
    ([*RUN, "--arrivals", "constant:1e999"], "at most 100,000"),
    ([*RUN, "--arrivals", "poisson:1e999"], "at most 100,000"),
    ([*RUN, "--arrivals", "spike:1e12@1ms"], "at most 100,000"),
    ([*RUN, "--arrivals", "spike:50@7200s"], "longer than 3600"),
    ([*RUN, "--arrivals", "trickle:5"], "--arrivals"),
    ([*RUN, "--test-hosts", "1000"], "--test-hosts"),
    ([*RUN, "--expect-workers", "100000"], "--expect-workers"),
    ([*RUN, "--redis-url", "redis://host:6379/abc"], "database after the port must be a number"),
    ([*RUN, "--redis-url", "rediss://host:6379/-1"], "database after the port must be a number"),
    ([*RUN, "--lock-params", '{"nonexistent_key": 1}'], "no impl of this run takes key 'nonexistent_key'"),
    (
        ["run", "--impl", "zookeeper.ephemeral", "--lock-params", '{"session_timeout": "x"}'],
        "zookeeper.ephemeral session_timeout must be a number above 0 to 600",
    ),
    (
        ["run", "--backend", "zookeeper", "--lock-params", '{"session": "per-process"}'],
        "one of 'shared', 'per-lock'",
    ),
    (["run", "--impl", "redis.reentrant", "--lock-params", '{"lease": -1}'], "redis.reentrant lease"),
    (["run", "--impl", "redis.redlock", "--lock-params", '{"request_timeout": 1e999}'], "request_timeout"),
    (
        ["run", "--impl", "postgres.advisory", "--lock-params", '{"pool_max": 1.5}'],
        "a whole number from 1 to 1000",
    ),
    (["run", "--impl", "file.flock", "--lock-params", '{"blocking": "yes"}'], "true or false"),
    (["run", "--impl", "etcd.lease", "--lock-params", '{"pool_size": 0}'], "pool_size"),
    (["run", "--impl", "memcached.add", "--lock-params", '{"max_idle": -1}'], "max_idle"),
    (["run", "--impl", "zookeeper.rwlock", "--lock-params", '{"mode": "exclusive"}'], "mode must be one of"),
    ([*RUN, "--lock-params", "[1]"], "must be a JSON object"),
    (["run", "--impl", "redis.setnx"], "did you mean redis.setnx-del"),
    ([*RUN, "--workload", "flash-sal"], "did you mean flash-sale?"),
    (["run", "--backend", "redis", "--impl", "redis.set-nx-px-lu"], "did you mean redis.set-nx-px-lua"),
    ([*RUN, "--results-dir", ""], "--results-dir"),
    ([*RUN, "--duration", "abc"], "Invalid value for '--duration'"),
    # bench matrix
    ([*M, "--parallel", "100000"], "--parallel"),
    ([*M, "--redis-url", "http://x"], "scheme 'http'"),
    ([*M, "--resource-url", "nope"], "--resource-url"),
    ([*M, "--pg-dsn", "mysql://u@h/db"], "--pg-dsn"),
    ([*M, "--scenario", "lease-expiri"], "did you mean lease-expiry-task or lease-expiry-world"),
    ([*M, "--scenario", "zzz"], "unknown scenario 'zzz'"),
    (["matrix", "--impl", "redis.setnx-dell"], "did you mean redis.setnx-del"),
    (["matrix", "--backend", "mongo"], "unknown backend 'mongo'"),
    ([*M, "--results-dir", ""], "--results-dir"),
    ([*M, "--results-dir", "/proc/lockbench-results"], "--results-dir"),
    ([*M, "--parallel", "abc"], "--parallel"),
    # bench explore and bench replay (issue 41)
    ([*X, "--budget", "5x"], "bad --budget '5x'"),
    ([*X, "--budget", "0"], "bad --budget '0'"),
    ([*X, "--faults", "bogus"], "unknown kind 'bogus'"),
    ([*X, "--faults", "kill-leader"], "none of them reaches redis.set-nx-px-lua"),
    ([*X, "--seed", "abc"], "--seed"),
    ([*X, "--redis-url", "http://x"], "scheme 'http'"),
    (["explore", "--impl", "nope.lock"], "unknown impl 'nope.lock'"),
    (["explore", "--backend", "mongo"], "unknown backend 'mongo'"),
    (["explore"], "name the lock to explore"),
    (["replay", "no-such-schedule.json"], "cannot read no-such-schedule.json"),
    (["replay", "--runs", "0", "no-such-schedule.json"], "--runs must be at least 1"),
    (["replay", "--runs", "abc", "no-such-schedule.json"], "--runs"),
    (["replay", "--results-dir", "", "no-such-schedule.json"], "--results-dir"),
    (["replay", "--pg-dsn", "mysql://u@h/db", "no-such-schedule.json"], "--pg-dsn"),
    # bench calibrate
    ([*C, "--duration", "nan"], "--duration"),
    ([*C, "--duration", "1e309"], "--duration"),
    ([*C, "--ttl", "-1"], "--ttl"),
    ([*C, "--retry-interval", "inf"], "--retry-interval"),
    ([*C, "--cs", "5000s"], "--cs"),
    ([*C, "--lock-params", '{"lease": 1}'], "no impl of this run takes key 'lease'"),
    ([*C, "--lock-params", "{oops"], "--lock-params is not valid JSON"),
    ([*C, "--workload", "long-cs"], "--workload"),
    (["calibrate", "--impl", "nope.lock"], "unknown impl 'nope.lock'"),
    (["calibrate", "--backend", "all", "--lock-params", '{"pool_max": 0}'], "pool_max"),
    # bench worker
    ([*W, "--processes", "33"], "--processes"),
    (["worker", "--master", "host:notaport"], "--master must be HOST[:PORT]"),
    (["worker", "--master", "host:99999"], "--master must be HOST[:PORT]"),
    (["worker", "--master", ""], "--master is empty"),
    ([*W, "--processes", "many"], "--processes"),
    # bench report
    (["report", "--slo-us", "inf", "somewhere"], "--slo-us"),
    (["report", "no-such-folder"], "results folder not found"),
    (["report", "--slo-us", "abc", "somewhere"], "--slo-us"),
    # bench gate
    (["gate", "no-such-a", "no-such-b"], "results folder not found"),
    (["gate", "--rule", "p99:+10%", "a", "b"], "unknown metric 'p99'"),
    (["gate", "--rule", "violations:3", "a", "b"], "violations:0"),
    (["gate", "--alpha", "inf", "a", "b"], "--alpha"),
    # bench baseline update
    (["baseline", "update", "nowhere", "--name", ""], "--name is empty"),
    (["baseline", "update", "nowhere", "--name", "a/b"], "plain folder name"),
    (["baseline", "update", "nowhere", "--name", ".hidden"], "plain folder name"),
    (["baseline", "update", "nowhere"], "results folder not found"),
    (["baseline", "update", "--results-dir", "empty-nowhere"], "no results folder"),
    (["baseline", "update", "nowhere", "--baselines-dir", ""], "--baselines-dir"),
    # bench infra up
    (["infra", "up", "mongodb"], "unknown server kind 'mongodb'"),
    (["infra", "up", "redis", "--nodes", "2"], "--nodes must be 1 or 3"),
    (["infra", "up", "redis", "--nodes", "3"], "--nodes 3 works for zookeeper and etcd"),
    (["infra", "up", "redis", "--nodes", "x"], "--nodes"),
    # bench merge (issue 31's command): folders, its options
    (["merge", "/nonexistent/a", "/nonexistent/b"], "results folder not found"),
    (["merge", "/nonexistent/a", "/nonexistent/a"], "given twice"),
    (["merge"], "Missing argument"),
    (["merge", "--results-dir", "", "x"], "must name a folder"),
    (["merge", "--frobnicate", "x"], "No such option"),
    (["merge", "env:LOCKBENCH_REPORT=maybe", "x"], "--report"),
]


OTHER_CASES: list[tuple[list[str], str]] = [
    ([*RUN, "--duration", "1e12"], "--duration"),
    ([*RUN, "--duration", "-inf"], "--duration"),
    ([*RUN, "--processes", "1000"], "--processes"),
    ([*RUN, "--spawn-rate", "0"], "--spawn-rate"),
    ([*RUN, "--skewed-clients", "2"], "--skewed-clients"),
    ([*RUN, "--skew", "-1"], "--skew"),
    ([*RUN, "--cs", "pareto:1ms:0"], "pareto shape"),
    ([*RUN, "--cs", "pareto:1ms:nan"], "pareto shape"),
    ([*RUN, "--cs", "lognormal:1ms:nan"], "lognormal sigma"),
    ([*RUN, "--cs", "uniform:5ms:1ms"], "--cs"),
    ([*RUN, "--cs", "5000s"], "--cs"),
    ([*RUN, "--cs", "nanms"], "--cs"),
    ([*RUN, "--redis-url", "notaurl"], "no scheme"),
    ([*RUN, "--redis-url", "ftp://x"], "scheme 'ftp'"),
    ([*RUN, "--redis-url", "redis://127.0.0.1:notaport/0"], "--redis-url"),
    ([*RUN, "--redis-url", "redis://127.0.0.1:99999/0"], "--redis-url"),
    ([*RUN, "--redis-url", "redis://"], "no host"),
    ([*RUN, "--redis-url", "redis+sentinel://127.0.0.1:26379"], "service"),
    ([*RUN, "--redis-url", "redis://127.0.0.1:6379/0", "--redis-url", "http://x"], "scheme 'http'"),
    (["run", "--impl", "memcached.add", "--memcached-url", "garbage"], "--memcached-url"),
    (["run", "--impl", "memcached.add", "--memcached-url", "redis://127.0.0.1:1"], "scheme 'redis'"),
    (["run", "--impl", "etcd.lease", "--etcd-url", "ftp://x"], "--etcd-url"),
    (["run", "--impl", "etcd.lease", "--etcd-url", "http://a:1,,b:2"], "no host"),
    (["run", "--impl", "zookeeper.ephemeral", "--zk-hosts", "h:port"], "--zk-hosts"),
    (["run", "--impl", "zookeeper.ephemeral", "--zk-hosts", "http://h:2181"], "scheme 'http'"),
    (["run", "--impl", "postgres.advisory", "--pg-dsn", "mysql://u:secret@h/db"], "--pg-dsn"),
    (["run", "--impl", "postgres.advisory", "--pg-dsn", "postgresql://h:0x/db"], "--pg-dsn"),
    ([*RUN, "--resource-url", "memcached://127.0.0.1:11211"], "--resource-url"),
    ([*RUN, "--resource-url", "localhost:6379"], "--resource-url"),
    ([*RUN, "--pause-kind", "nap"], "--pause-kind"),
    ([*RUN, "--fencing", "always"], "--fencing"),
    ([*RUN, "--lock-params", "{nope"], "--lock-params"),
    ([*RUN, "--fault", "meteor"], "meteor"),
    ([*RUN, "--suite", "nightly"], "nightly"),
    (["report", "--slo-us", "nan", "somewhere"], "--slo-us"),
    (["report", "--slo-us", "0", "somewhere"], "--slo-us"),
    (["report", "--slo-us", "-5", "somewhere"], "--slo-us"),
    (["gate", "--alpha", "nan", "a", "b"], "--alpha"),
    (["gate", "--alpha", "0", "a", "b"], "--alpha"),
    (["gate", "--alpha", "1.5", "a", "b"], "--alpha"),
]

ENV_CASES: list[tuple[list[str], str]] = [
    ([*RUN, f"env:LOCKBENCH_{name.upper()}=nan"], f"LOCKBENCH_{name.upper()}")
    for name in ("ttl", "duration", "retry_interval", "acquire_timeout", "clock_skew", "skew", "pause")
] + [
    ([*RUN, "env:LOCKBENCH_REDIS_URL=notaurl"], "LOCKBENCH_REDIS_URL"),
    ([*RUN, "env:LOCKBENCH_USERS=0"], "LOCKBENCH_USERS"),
    # every source is named the same way: (from LOCKBENCH_X), also for the specs and a type error
    ([*RUN, "env:LOCKBENCH_CS=nanms"], "(from LOCKBENCH_CS)"),
    ([*RUN, "env:LOCKBENCH_ARRIVALS=constant:0"], "(from LOCKBENCH_ARRIVALS)"),
    ([*RUN, "env:LOCKBENCH_LOCK_PARAMS=[1]"], "(from LOCKBENCH_LOCK_PARAMS)"),
    ([*RUN, 'env:LOCKBENCH_LOCK_PARAMS={"x": 1}'], "(from LOCKBENCH_LOCK_PARAMS)"),
    ([*RUN, "env:LOCKBENCH_DURATION=abc"], "(from LOCKBENCH_DURATION)"),
    ([*RUN, "env:LOCKBENCH_RESULTS_DIR=/proc/lockbench-results"], "--results-dir"),
    ([*M, "env:LOCKBENCH_PARALLEL=0"], "(from LOCKBENCH_PARALLEL)"),
    ([*C, "env:LOCKBENCH_TTL=nan"], "(from LOCKBENCH_TTL)"),
    ([*W, "env:LOCKBENCH_PROCESSES=33"], "(from LOCKBENCH_PROCESSES)"),
    (["report", "somewhere", "env:LOCKBENCH_SLO_US=-1"], "(from LOCKBENCH_SLO_US)"),
    (["gate", "a", "b", "env:LOCKBENCH_ALPHA=1"], "(from LOCKBENCH_ALPHA)"),
    (["infra", "up", "redis", "env:LOCKBENCH_NODES=5"], "--nodes"),
]

#: [tool.lockbench] in the working directory's pyproject.toml: (file text, command, needle)
PYPROJECT_CASES: list[tuple[str, list[str], str]] = [
    ("[tool.lockbench]\nusers = true\n", RUN, "users = true must be a whole number"),
    ('[tool.lockbench]\nusers = "many"\n', RUN, "users = 'many' must be a whole number"),
    ("[tool.lockbench]\nnonexistent = 1\n", RUN, "has a key 'nonexistent'"),
    ("[tool.lockbench]\nuser = 5\n", RUN, "did you mean users"),
    ("[tool.lockbench]\nlock_params = {a = 1}\n", RUN, "lock_params = {'a': 1} must be a string"),
    ("[tool.lockbench]\nttl = nan\n", RUN, "(from [tool.lockbench] ttl in "),
    ("[tool.lockbench]\nbackend = 3\n", RUN, "backend = 3 must be a string or a list of them"),
    ("[tool.lockbench\nusers = 3\n", RUN, "not valid TOML"),
    ("[tool.lockbench.matrx]\nparallel = 2\n", M, "did you mean [tool.lockbench.matrix]"),
    ('[tool.lockbench.matrix]\nparallel = "2"\n', M, "parallel = '2' must be a whole number"),
    ("[tool.lockbench.matrix]\nparallel = 99\n", M, "--parallel"),
    ("[tool.lockbench.calibrate]\nttl = -1\n", C, "(from [tool.lockbench.calibrate] ttl in "),
    ("[tool.lockbench.gate]\nalpha = 2\n", ["gate", "a", "b"], "(from [tool.lockbench.gate] alpha in "),
    (
        "[tool.lockbench.baseline.update]\nforce = 1\n",
        ["baseline", "update", "x"],
        "force = 1 must be true or false",
    ),
    ("[tool.lockbench.infra.up]\nnode = 3\n", ["infra", "up", "redis"], "did you mean nodes"),
    ("[tool]\nlockbench = 5\n", RUN, "must be a table"),
    ("tool = 5\n", RUN, "tool must be a table"),  # Locust read it and failed after servers started
]

ALL_CASES = _number_cases() + OTHER_CASES + COMMAND_CASES + ENV_CASES


def test_there_are_at_least_60_bad_inputs() -> None:
    assert len(ALL_CASES) >= 60, len(ALL_CASES)


def _command_of(argv: list[str]) -> str:
    return " ".join(argv[:2]) if argv[0] in ("baseline", "infra") else argv[0]


def test_bad_inputs_cover_every_command() -> None:
    """Every command with options gets its own bad inputs; the counts are the issue's closing note."""
    counts: dict[str, int] = {}
    for argv, _ in ALL_CASES:
        counts[_command_of(argv)] = counts.get(_command_of(argv), 0) + 1
    for _, argv, _ in PYPROJECT_CASES:
        counts[_command_of(argv)] = counts.get(_command_of(argv), 0) + 1
    print("bad inputs per command:", counts)
    for path, command in _all_commands(typer.main.get_command(app)):
        if getattr(command, "commands", None) or not any(
            p.param_type_name == "option" for p in command.params
        ):
            continue  # groups, and commands without options (list, infra status/down)
        assert counts.get(" ".join(path), 0) >= 5, (path, counts)


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A clean cwd (no pyproject.toml), no LOCKBENCH_* variables, and a spy on every subprocess."""
    import os

    for key in list(os.environ):
        if key.startswith("LOCKBENCH_") and key != "LOCKBENCH_FORBID_SERVERS":
            monkeypatch.delenv(key)
    monkeypatch.setenv("LOCKBENCH_FORBID_SERVERS", "1")  # a bad input that slipped through fails loudly
    monkeypatch.chdir(tmp_path)
    started: list = []
    real_init = subprocess.Popen.__init__

    def spy(self, args, *a, **kw):  # records, then really starts: a bad input must never get here
        started.append(args)
        real_init(self, args, *a, **kw)

    monkeypatch.setattr(subprocess.Popen, "__init__", spy)
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)  # main() replaces it
    yield {"tmp": tmp_path, "started": started, "monkeypatch": monkeypatch}
    for sig, handler in old.items():
        signal.signal(sig, handler)


def _main(args: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(args)
    out, err = capsys.readouterr()
    return int(exc.value.code), out, err


def assert_refused(code: int, out: str, err: str, needle: str) -> None:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("bench: error:"), err
    assert needle in lines[0], (needle, lines[0])
    assert "Traceback" not in err + out


@pytest.mark.parametrize(("args", "needle"), ALL_CASES, ids=[" ".join(a[1:])[:60] for a, _ in ALL_CASES])
def test_bad_input_exit_2_one_line_nothing_started(
    args: list[str], needle: str, isolated: dict, capsys: pytest.CaptureFixture
) -> None:
    results = isolated["tmp"] / "results"
    argv = []
    for a in args:
        if a.startswith("env:"):
            key, _, value = a[4:].partition("=")
            isolated["monkeypatch"].setenv(key, value)
        else:
            argv.append(a)
    given = "--results-dir" in argv or any(a.startswith("env:LOCKBENCH_RESULTS_DIR") for a in args)
    if argv[0] in ("run", "matrix") and not given:
        argv += ["--results-dir", str(results)]
    code, out, err = _main(argv, capsys)
    assert_refused(code, out, err, needle)
    assert not results.exists() or not any(results.iterdir()), "a results folder was written"
    assert isolated["started"] == [], f"a process was started: {isolated['started']}"


def test_passwords_in_bad_urls_are_not_echoed(isolated: dict, capsys: pytest.CaptureFixture) -> None:
    code, out, err = _main([*RUN, "--redis-url", "ftp://admin:hunter2@x/0"], capsys)
    assert_refused(code, out, err, "scheme 'ftp'")
    assert "hunter2" not in err


def test_pyproject_value_is_named_as_such(isolated: dict, capsys: pytest.CaptureFixture) -> None:
    """A bad [tool.lockbench] value is blamed on pyproject.toml, not on an environment variable."""
    (isolated["tmp"] / "pyproject.toml").write_text('[tool.lockbench]\nusers = "many"\n')
    code, out, err = _main([*RUN], capsys)
    assert_refused(code, out, err, "[tool.lockbench]")
    assert "env var" not in err
    (isolated["tmp"] / "pyproject.toml").write_text("[tool.lockbench]\nttl = nan\n")
    code, out, err = _main([*RUN], capsys)
    assert_refused(code, out, err, "(from [tool.lockbench] ttl in ")
    assert isolated["started"] == []


def test_gate_against_a_file_says_it_is_a_file(isolated: dict, capsys: pytest.CaptureFixture) -> None:
    f = isolated["tmp"] / "run.json"
    f.write_text("{}")
    code, out, err = _main(["gate", str(f), str(f)], capsys)
    assert_refused(code, out, err, "is a file, not a results folder")
    assert "not found" not in err


def _all_commands(command, path=()):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _all_commands(sub, (*path, name))


def test_every_option_has_its_lockbench_variable() -> None:
    """Introspects the click commands: every option of every command reads LOCKBENCH_<NAME>."""
    checked = 0
    for path, command in _all_commands(typer.main.get_command(app)):
        for param in command.params:
            if param.param_type_name == "option" and param.name != "help":
                flag = max(param.opts, key=len).lstrip("-")  # --json sets json_out: named for the flag
                assert param.envvar == f"LOCKBENCH_{flag.upper().replace('-', '_')}", (path, param.name)
                checked += 1
    assert checked > 40


@pytest.mark.parametrize(
    "name",
    sorted(set(validate.RANGES) & {p.name for p in typer.main.get_command(app).commands["run"].params}),
)
def test_every_numeric_run_option_is_read_from_its_variable(
    name: str, isolated: dict, capsys: pytest.CaptureFixture
) -> None:
    isolated["monkeypatch"].setenv(f"LOCKBENCH_{name.upper()}", "-1e300")
    code, out, err = _main([*RUN, "--results-dir", str(isolated["tmp"] / "r")], capsys)
    assert_refused(code, out, err, f"LOCKBENCH_{name.upper()}")


@pytest.mark.parametrize(
    "argv",
    [
        ["matrix", "--parallel", "100000"],
        ["matrix", "--redis-url", "http://x"],
        ["calibrate", "--duration", "nan"],
        ["calibrate", "--duration", "1e309"],
        ["calibrate", "--ttl", "-1"],
        ["worker", "--master", "127.0.0.1:1", "--processes", "33"],
    ],
)
def test_matrix_calibrate_and_worker_check_options_before_starting(
    argv: list[str], isolated: dict, capsys: pytest.CaptureFixture
) -> None:
    """The commands that used to skip validation refuse bad values in one line, exit 2, nothing started."""
    code, out, err = _main(
        [*argv, "--results-dir", str(isolated["tmp"] / "r")] if argv[0] == "matrix" else argv, capsys
    )
    assert_refused(code, out, err, "--" + argv[-2].lstrip("-"))


def test_help_texts(capsys: pytest.CaptureFixture) -> None:
    from bench.cli.app import BACKENDS
    from bench.gate.suites import SUITES
    from workloads.harness.catalog import WORKLOADS

    def help_of(*args: str) -> str:
        with pytest.raises(SystemExit):
            main([*args, "--help"])
        return capsys.readouterr().out

    top = help_of()
    summaries = [ln for ln in top.split("Commands:")[1].splitlines() if ln.strip()]
    assert len(summaries) >= 6 and not any(ln.rstrip().endswith("...") for ln in summaries), top
    text = " ".join(help_of("run").split())
    for word in [*WORKLOADS, *SUITES, *BACKENDS, "lognormal", "RedLock takes 5", "[1..86400 s]"]:
        assert word in text, word
    for command in (("run",), ("report",), ("gate",), ("baseline", "update"), ("infra", "up")):
        h = help_of(*command)
        for python_type in ("<list[", "<int>", "<float>", "<str>", "<path>", "<bool>"):
            assert python_type not in h.lower(), (command, python_type)


@pytest.mark.parametrize(
    ("text", "argv", "needle"), PYPROJECT_CASES, ids=[c[2][:40] for c in PYPROJECT_CASES]
)
def test_bad_pyproject_is_one_line_naming_file_and_key(
    text: str, argv: list[str], needle: str, isolated: dict, capsys: pytest.CaptureFixture
) -> None:
    """An unknown key, a wrong type or a malformed file: exit 2 naming pyproject.toml (or the table)."""
    (isolated["tmp"] / "pyproject.toml").write_text(text)
    args = (
        [*argv, "--results-dir", str(isolated["tmp"] / "r")] if argv[0] in ("run", "matrix") else list(argv)
    )
    code, out, err = _main(args, capsys)
    assert_refused(code, out, err, needle)
    assert "pyproject.toml" in err
    assert isolated["started"] == []


def test_a_good_pyproject_with_command_tables_is_accepted(
    isolated: dict, capsys: pytest.CaptureFixture
) -> None:
    (isolated["tmp"] / "pyproject.toml").write_text(
        '[tool.lockbench]\nusers = 3\nbackend = ["redis"]\nduration = 2\n'
        '[tool.lockbench.matrix]\nparallel = 2\n[tool.lockbench.baseline.update]\nname = "x"\n'
    )
    code, out, err = _main(["list"], capsys)
    assert code == 0 and "redis:" in out, err


def test_a_flag_type_error_does_not_blame_a_variable(isolated: dict, capsys: pytest.CaptureFixture) -> None:
    """Click names LOCKBENCH_DURATION even for a flag; bench names the source only when it is one."""
    code, out, err = _main([*RUN, "--duration", "abc"], capsys)
    assert_refused(code, out, err, "--duration")
    assert "LOCKBENCH_DURATION" not in err and "env var" not in err


def test_results_dir_that_cannot_be_written_is_refused_before_servers(
    isolated: dict, capsys: pytest.CaptureFixture
) -> None:
    blocker = isolated["tmp"] / "a-file"
    blocker.write_text("x")
    code, out, err = _main([*RUN, "--results-dir", str(blocker / "results")], capsys)
    assert_refused(code, out, err, "is a file, not a folder")
    assert isolated["started"] == []
