"""Refusals about the servers a user gives, and secrets, against real servers and the real ``bench``.

Issue 43: a wrong Redis password and a degenerate RedLock are refused before anything starts;
a password given on the command line is not in the running bench's /proc/<pid>/cmdline; an
interrupted matrix names its folder and the command that finishes its report.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.redis_server import RedisServer
from tests.helpers import MARK_ENV, NO_SERVERS, PROJECT, bench, marked_processes, refused

pytestmark = (
    pytest.mark.server
)  # starts servers itself (bench in a subprocess, or infra directly): not for --quick

PASSWORD = "s3cret-h1"


@pytest.fixture(scope="module")
def guarded_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server that needs a password (requirepass)."""
    import redis

    server = RedisServer(tmp_path_factory.mktemp("guarded"), name="guarded").start()
    client = redis.Redis.from_url(server.url)
    client.config_set("requirepass", PASSWORD)  # from now on every client must log in
    client.close()
    yield server
    server.stop()


def test_a_wrong_redis_password_is_refused_before_anything_starts(
    guarded_redis: RedisServer, tmp_path: Path
) -> None:
    url = f"redis://:wrong-one@127.0.0.1:{guarded_redis.port}/0"
    r = bench("run", "--impl", "redis.set-nx-px", "--redis-url", url, "--results-dir", str(tmp_path / "r"),
              env=NO_SERVERS)  # fmt: skip
    line = refused(r, "--redis-url", "refused the login")
    assert "wrong-one" not in line
    assert not (tmp_path / "r").exists()
    none = bench("run", "--impl", "redis.set-nx-px", "--results-dir", str(tmp_path / "r"), env={
        **NO_SERVERS, "LOCKBENCH_REDIS_URL": f"redis://127.0.0.1:{guarded_redis.port}/0"})  # fmt: skip
    refused(none, "--redis-url", "password")


def test_a_redlock_on_one_server_five_times_isrefused(guarded_redis: RedisServer, tmp_path: Path) -> None:
    url = f"redis://127.0.0.1:{guarded_redis.port}/0"
    args = [a for i in range(5) for a in ("--redis-url", url.replace("/0", f"/{i}"))]
    r = bench("run", "--impl", "redis.redlock", *args, "--results-dir", str(tmp_path / "r"), env=NO_SERVERS)
    refused(r, "redis.redlock needs 5 independent servers", "1 distinct")
    r = bench(
        "matrix", "--impl", "redis.redlock", *args, "--results-dir", str(tmp_path / "r"), env=NO_SERVERS
    )
    refused(r, "redis.redlock needs 5 independent servers")
    assert not (tmp_path / "r").exists()


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        content = path.read_text(errors="replace") if path.exists() else ""
        if text in content:
            return content
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never came: {path.read_text(errors='replace') if path.exists() else ''}")


def _start(args: list[str], tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    err = tmp_path / "stderr.txt"
    env = {**os.environ, MARK_ENV: "h1-refusals", "LOCKBENCH_NO_INSTALL": "1"}
    with err.open("w") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench", *args], cwd=PROJECT, stdout=subprocess.PIPE, stderr=fh, env=env
        )
    return proc, err


def test_a_password_given_as_a_flag_is_not_in_the_running_bench_cmdline(
    guarded_redis: RedisServer, tmp_path: Path
) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{guarded_redis.port}/0"
    proc, err = _start(["run", "--impl", "redis.set-nx-px", "--redis-url", url, "--duration", "3", "--users", "2",
                        "--no-report", "--results-dir", str(tmp_path / "r")], tmp_path)  # fmt: skip
    try:
        _wait_for(err, "starting servers", proc)
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert "bench" in cmdline and "run" in cmdline  # the same process, after bench started itself again
        assert PASSWORD not in cmdline and "--redis-url" not in cmdline, cmdline
        everyone = marked_processes(["h1-refusals"])  # bench, its servers and Locust processes
        assert everyone and not [c for *_, c in everyone if PASSWORD in c], everyone
    finally:
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=120)
    assert PASSWORD not in err.read_text()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_matrix_names_its_folder(tmp_path: Path, sig: int) -> None:
    proc, err = _start(["matrix", "--impl", "redis.set-nx-px", "--evidence", "quick", "--lanes", "1", "--no-warm",
                        "--results-dir", str(tmp_path / "r")], tmp_path)  # fmt: skip
    try:
        _wait_for(err, "results in", proc)
        time.sleep(1.0)
        proc.send_signal(sig)
        proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    folders = list((tmp_path / "r").iterdir())
    assert len(folders) == 1
    last = [ln for ln in err.read_text().splitlines() if ln.strip()][-1]
    assert proc.returncode == 130, err.read_text()
    assert str(folders[0]) in last and "bench report" in last, last
    assert '"status": "incomplete"' in (folders[0] / "run.json").read_text().replace('":"', '": "')
