"""The tests' fork servers (tests/bench_forkserver.py): a forked ``bench`` says what a fresh one says.

Most tests run ``bench`` through :func:`tests.helpers.bench`, which forks it from a server with
the imports done; these tests hold that shortcut to what the tests rely on: the same output
and exit code as ``python -m bench``, the call's mark where ``/proc`` shows it, and no process
outliving a bench child that was killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

from tests.bench_forkserver import ENABLE_ENV, MARK_ENV, MARK_PLACEHOLDER
from tests.helpers import FORK_SERVER, MARKS, NO_SERVERS, PIDS, PROJECT, bench, marked_processes


@pytest.mark.parametrize(
    "args",
    [
        ("run", "--backend", "redis", "--ttl", "-1"),  # a refusal: one line on stderr, exit 2
        ("list",),  # stdout
        ("run", "--impl", "redis.no-such-lock"),  # a suggestion
    ],
)
def test_a_forked_call_says_what_a_fresh_process_says(args: tuple[str, ...], tmp_path: Path) -> None:
    fresh = bench(*args, cwd=tmp_path, env={**NO_SERVERS, ENABLE_ENV: "0"})
    forked = bench(*args, cwd=tmp_path, env=NO_SERVERS)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    assert fresh.stdout or fresh.stderr  # it said something to compare


def test_a_changed_pythonpath_gets_a_fresh_process() -> None:
    assert FORK_SERVER.serves(dict(os.environ))
    assert not FORK_SERVER.serves({**os.environ, "PYTHONPATH": "/elsewhere"})


def test_a_fork_shows_its_mark_in_proc_environ() -> None:
    """show_mark rewrites the placeholder where /proc/<pid>/environ reads it, and a fork of it inherits it."""
    mark = uuid.uuid4().hex
    code = (
        "import os, sys, time; from tests.bench_forkserver import show_mark; show_mark(sys.argv[1]);"
        "pid = os.fork()\nif pid == 0: time.sleep(30)\nprint(pid, flush=True); time.sleep(30)"
    )
    env = {**os.environ, MARK_ENV: MARK_PLACEHOLDER}
    with subprocess.Popen(
        [sys.executable, "-c", code, mark], cwd=PROJECT, env=env, stdout=subprocess.PIPE, text=True
    ) as proc:
        try:
            assert proc.stdout is not None
            child = int(proc.stdout.readline())
            for pid in (proc.pid, child):
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                assert f"{MARK_ENV}={mark}".encode() in environ
            assert {proc.pid, child} <= {pid for pid, *_ in marked_processes([mark])}
        finally:
            os.kill(child, signal.SIGKILL)
            proc.kill()


@pytest.mark.slow
def test_a_killed_bench_child_takes_its_warm_locust_and_servers_with_it(tmp_path: Path) -> None:
    """The warm process is the warm server's child, not bench's: it must still end with bench."""
    mark = uuid.uuid4().hex
    MARKS.append(mark)  # marked_processes() then also finds the servers by their scratch folder
    env = {**os.environ, MARK_ENV: mark}
    args = [
        "run",
        "--impl",
        "redis.set-nx-px-lua",
        "--duration",
        "60",
        "--no-report",
        "--results-dir",
        str(tmp_path),
    ]
    proc = FORK_SERVER.popen(args, PROJECT, env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    PIDS.append(proc.pid)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until the case's Locust runs (a fork of the warm server)
        cmds = [cmd for *_, cmd in marked_processes()]
        if sum("warm_locust_forkserver" in cmd for cmd in cmds) >= 3:  # the warm process, its case, a worker
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"the case's Locust never started: {marked_processes()}")
    assert any("redis-server" in cmd for cmd in cmds), cmds
    proc.kill()
    proc.wait(60)
    deadline = time.monotonic() + 60
    while [p for p in marked_processes() if p[1] != "Z"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [p for p in marked_processes() if p[1] != "Z"] == []


def test_a_caller_gone_mid_request_leaves_the_warm_server_serving(tmp_path: Path) -> None:
    """A bench child killed while its warm process is being forked (a test's Ctrl-C) costs that call only.

    The server's answer then meets a closed socket; it used to die of the broken pipe, and every
    later bench of its pytest process failed with "Connection refused".
    """
    import socket

    from tests.bench_forkserver import ForkedProcess, ForkServer, send_request

    server = ForkServer()
    try:
        warm = server._ensure()[1]
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        netns = f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net"
        request = {"env": dict(os.environ), "cwd": str(tmp_path), "parent": os.getpid(), "netns": netns}
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(warm.path)
            send_request(conn, request, [in_r, out_w, os.open(os.devnull, os.O_WRONLY)])
            conn.shutdown(socket.SHUT_RD)  # gone before the answer: the server's send gets EPIPE
        for fd in (in_r, in_w, out_r, out_w):
            os.close(fd)  # the warm process forked for it reads EOF and ends
        # the next caller is served: a warm process that answers "ready"
        proc = ForkedProcess.start(
            warm.path, {"env": dict(os.environ), "cwd": str(tmp_path), "parent": os.getpid()}
        )
        try:
            assert proc.stdout.readline().strip() == b'{"ready": true}'
        finally:
            proc.stdin.close()
            proc.wait(30)
        assert warm.alive()
    finally:
        server.stop()
