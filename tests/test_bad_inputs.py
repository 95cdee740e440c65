"""Bad input, run in-process through bench.cli.app.main: exit 2, one line, no traceback, nothing started.

Every numeric option of every command is tried with NaN, infinity and a value on each side
of its documented range (bench/validate.py RANGES), plus URLs with wrong schemes or no host,
bad critical-section specs, bad values from LOCKBENCH_* variables and from pyproject.toml.
A spy on subprocess.Popen proves no server (nor Locust) was started, and the results
folder stays empty.
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


def _number_cases() -> list[tuple[list[str], str]]:
    """NaN, inf, below and above the range of every numeric option of `bench run`."""
    run_options = {p.name for p in typer.main.get_command(app).commands["run"].params}
    out = []
    for name, r in validate.RANGES.items():
        if name not in run_options:
            continue
        flag = validate.flag(name)
        below = r.low if r.open_low else r.low - (1 if r.integer else 0.5)
        bad = ["nan", "inf", f"{below:g}", f"{r.high * 10 + 1:g}"]
        if r.integer:
            bad = [f"{below:g}", f"{int(r.high) * 10 + 1}"]  # NaN is not an int: click refuses it
        out += [([*RUN, flag, value], flag) for value in bad]
    return out


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
]

ALL_CASES = _number_cases() + OTHER_CASES + ENV_CASES


def test_there_are_at_least_60_bad_inputs() -> None:
    assert len(ALL_CASES) >= 60, len(ALL_CASES)


@pytest.fixture
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A clean cwd (no pyproject.toml), no LOCKBENCH_* variables, and a spy on every subprocess."""
    import os

    for key in list(os.environ):
        if key.startswith("LOCKBENCH_"):
            monkeypatch.delenv(key)
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
    if argv[0] == "run":
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
    assert_refused(code, out, err, "(from [tool.lockbench] in pyproject.toml)")
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


@pytest.mark.parametrize("name", sorted(set(validate.RANGES) - {"slo_us", "alpha", "parallel"}))
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
