"""Shared fixtures: real servers started by infra on 127.0.0.1, stopped after the session."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.redis_server import RedisServer

#: This test session's own `bench infra up` state: a bench run started by a test must never reuse
#: servers a user (or another test session) keeps up with `bench infra up` (tests own what they check).
os.environ["LOCKBENCH_INFRA_DIR"] = tempfile.mkdtemp(prefix="lockbench-test-infra-")
atexit.register(shutil.rmtree, os.environ["LOCKBENCH_INFRA_DIR"], True)
# every test measures its own calibrations: one kept by an earlier test (same commit) would change
# what a run's timing and calibration say; tests/test_calibration_cache.py names its own folder
os.environ["LOCKBENCH_CALIBRATIONS_DIR"] = "off"
# ZooKeeper servers in tests live seconds and are never measured: a JVM that stops at the first
# compiler and collects serially starts them on less CPU (infra/zookeeper_server.py JVM_EXTRA_ENV)
os.environ.setdefault("LOCKBENCH_ZK_JVM_EXTRA", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

ARTIFACTS = Path(
    os.environ.get("LOCKBENCH_TEST_ARTIFACTS", Path(__file__).resolve().parent.parent / "test-artifacts")
)


@pytest.fixture(scope="session")
def server_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("servers")


@pytest.fixture(scope="session")
def redis_server(server_dir: Path) -> Iterator[RedisServer]:
    """A real redis-server for lock state, shared by the session's tests."""
    server = RedisServer(server_dir, name="redis-lock").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def resource_server(server_dir: Path) -> Iterator[RedisServer]:
    """A second real redis-server holding the protected resource (never the lock server)."""
    server = RedisServer(server_dir, name="redis-resource").start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> Iterator[str]:
    """The lock server's URL, flushed before each test so tests do not see each other's keys."""
    import redis

    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    client.close()
    yield redis_server.url


@pytest.fixture(scope="session")
def postgres_server(server_dir: Path) -> Iterator[object]:
    """A real PostgreSQL cluster (initdb in a temp dir) for the session's PostgreSQL tests."""
    from infra.postgres_server import PostgresServer

    server = PostgresServer(server_dir, name="postgres-lock").start()
    yield server
    server.stop()


# ---- which tests start servers: the `server` mark, and `scripts/test --quick` -------------------

#: Fixtures that start a real server (or a namespace host, or Chromium). A test that uses one is
#: marked ``server``; ``scripts/test --quick`` runs the others with starting servers forbidden
#: (infra.process.FORBID_ENV), so a test that starts one without this mark fails there, loudly.
SERVER_FIXTURES = {
    "redis_server", "resource_server", "redis_url", "postgres_server", "pg_url", "etcd_server",
    "memcached_server", "zk_server", "zk", "paused_server", "masters", "own_masters", "group", "net",
    "_netns", "browser", "raw", "make",
}  # fmt: skip


#: Per test module, its longest test and its total in seconds, from a whole run of the suite
#: (LOCKBENCH_RECORD_DURATIONS, tests/progress_plugin.py). scripts/test hands whole modules to its
#: pytest workers in collection order (``--dist loadscope --no-loadscope-reorder``), so the modules
#: with the most seconds go first: each idle worker takes the largest module left, which keeps
#: the run's tail short (longest-processing-time-first), and a module's fixtures start once. A
#: module not in the file goes last.
DURATIONS = Path(__file__).with_name("durations.json")


def _largest_first() -> dict[str, float]:
    try:
        return {name: float(entry["total_s"]) for name, entry in json.loads(DURATIONS.read_text()).items()}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("slow") or SERVER_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.server)
    largest = _largest_first()
    items.sort(key=lambda item: -largest.get(item.path.name, 0.0))  # stable: modules stay whole
