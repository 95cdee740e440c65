"""infra starts real servers on loopback and never leaves one behind."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from infra.errors import InfraError
from infra.redis_server import RedisServer
from infra.stack import Stack
from infra.state import pid_alive
from tests.helpers import PROJECT, bench


@pytest.mark.server
def test_redis_server_starts_on_loopback_and_stops(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()
    try:
        client = redis.Redis.from_url(server.url)
        assert client.ping()
        assert client.config_get("bind")["bind"] == "127.0.0.1"
        assert server.url.startswith("redis://127.0.0.1:")
        pid = server.process.pid
    finally:
        server.stop()
    assert not pid_alive(pid)


@pytest.mark.server
def test_stack_stops_servers_on_exception(tmp_path: Path) -> None:
    pids = []
    with pytest.raises(RuntimeError), Stack(["redis"], workdir=tmp_path, reuse_infra_up=False) as stack:
        pids = [s.process.pid for s in stack.servers.values()]
        assert len(pids) == 2  # a lock server and a separate resource server
        assert stack.urls["redis"] != stack.urls["resource"]
        raise RuntimeError("boom")
    assert pids and not any(pid_alive(p) for p in pids)


@pytest.mark.server
def test_resource_may_not_share_the_lock_server(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()
    try:
        with (
            pytest.raises(InfraError, match="resource must not live on a lock server"),
            Stack(["redis"], user_urls={"redis": [server.url]}, resource_url=server.url, workdir=tmp_path),
        ):
            pass
    finally:
        server.stop()


@pytest.mark.server
def test_servers_stop_when_the_command_is_killed_by_sigterm(tmp_path: Path) -> None:
    """A process that started servers and is then terminated leaves none behind."""
    code = (
        "import sys, time; from pathlib import Path; from infra.stack import Stack\n"
        "import signal; signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))\n"
        "s = Stack(['redis'], workdir=Path(sys.argv[1]), reuse_infra_up=False).__enter__()\n"
        "print(' '.join(str(x.process.pid) for x in s.servers.values()), flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path)], cwd=PROJECT, stdout=subprocess.PIPE, text=True
    )
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2 and all(pid_alive(p) for p in pids)
    proc.terminate()
    proc.wait(20)
    for pid in pids:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    assert not any(pid_alive(p) for p in pids)


@pytest.mark.server
def test_infra_up_status_down(tmp_path: Path) -> None:
    env = {"LOCKBENCH_INFRA_DIR": str(tmp_path / "infra")}
    r = bench("infra", "up", "redis", env=env)
    assert r.returncode == 0, r.stderr
    url = r.stdout.split()[1]
    try:
        assert redis.Redis.from_url(url).ping()
        status = bench("infra", "status", env=env)
        assert "redis\tup" in status.stdout
    finally:
        r = bench("infra", "down", env=env)
    assert r.returncode == 0
    assert "no servers up" in bench("infra", "status", env=env).stdout
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
