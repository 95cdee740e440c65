"""A user's mistake gets one line naming the fix and exit code 2, never a traceback."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bench.cli.app import main
from infra.ports import free_port
from tests.helpers import bench


def _one_clear_line(r, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("bench: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], r.stderr  # progress lines may precede it
    assert "Traceback" not in r.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["run", "--backend", "oracle"], ["unknown backend 'oracle'", "redis", "all"]),
        (["run", "--impl", "redis.nope"], ["unknown impl 'redis.nope'", "did you mean"]),
        (
            ["run", "--backend", "redis", "--workload", "fire-sale"],
            ["unknown workload 'fire-sale'", "flash-sale"],
        ),
        (["run"], ["--backend", "--impl"]),
        (["run", "--backend", "redis", "--users", "0"], ["--users must be a whole number in 1..10000"]),
        (["run", "--backend", "redis", "--cs", "weird:1"], ["--cs", "exp:1ms"]),
        (["run", "--backend", "redis", "--duration", "abc"], ["--duration", "valid number"]),
        (["run", "--impl", "no_such_module:Lock"], ["cannot import module 'no_such_module'"]),
        (["run", "--impl", "json:JSONDecoder"], ["is not a subclass of lockimpls.base.Lock"]),
        (["run", "--backend", "redis", "--frobnicate"], ["No such option", "--frobnicate"]),
        (["report", "/nonexistent/run"], ["/nonexistent/run"]),
        (["infra", "up", "oracle"], ["unknown server kind 'oracle'", "redis"]),
        (["infra", "up", "redis", "--nodes", "3"], ["--nodes 3 works for zookeeper and etcd"]),
    ],
)
def test_bad_input_is_one_line_exit_2(
    args: list[str], needles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """In this process (bench's own entry point, no interpreter start): the same line, the same code."""
    argv = [*args, "--results-dir", str(tmp_path)] if args[0] == "run" else args
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    _one_clear_line(subprocess.CompletedProcess(argv, int(exc.value.code), out, err), *needles)


def test_unreachable_redis_url_fails_fast_without_password(tmp_path: Path) -> None:
    port = free_port()
    # a hang fails the test through bench()'s timeout; how long it took is not asserted
    r = bench("run", "--backend", "redis", "--redis-url", f"redis://admin:hunter2@127.0.0.1:{port}/0",
              "--results-dir", str(tmp_path), timeout=60)  # fmt: skip
    _one_clear_line(r, "cannot reach", str(port))
    assert "hunter2" not in r.stderr + r.stdout
    assert not any(tmp_path.iterdir()), "no results folder for a run that never started"


def test_redis_server_missing_and_not_installable(tmp_path: Path) -> None:
    """With no redis-server on PATH and installing disallowed, say how to install it."""
    r = bench("run", "--backend", "redis", "--results-dir", str(tmp_path),
              env={"PATH": str(tmp_path), "LOCKBENCH_NO_INSTALL": "1"})  # fmt: skip
    _one_clear_line(r, "redis-server", "apt-get install redis-server")
