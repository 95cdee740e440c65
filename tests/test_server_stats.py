"""Server statistics are a number only when they can be one: a failed read or a restart gives n/a and why."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from infra import server_stats
from infra.redis_server import RedisServer

pytestmark = pytest.mark.server


@pytest.fixture
def own_redis(tmp_path: Path) -> RedisServer:
    server = RedisServer(tmp_path, name="redis-stats").start()
    try:
        yield server
    finally:
        server.stop()


def _incr(url: str, n: int) -> None:
    client = redis.Redis.from_url(url)
    for _ in range(n):
        client.incr("k")
    client.close()


def test_commands_between_two_snapshots_are_counted(own_redis: RedisServer) -> None:
    before = server_stats.snapshot("redis", [own_redis.url])
    _incr(own_redis.url, 7)
    got = server_stats.delta(before, server_stats.snapshot("redis", [own_redis.url]))
    assert got.error == "" and got["incrby"] == 7  # redis-py sends INCR as INCRBY k 1 and "info" not in got


def test_a_restart_between_snapshots_is_na_with_its_reason(own_redis: RedisServer) -> None:
    _incr(own_redis.url, 50)  # counts the restart would wipe
    before = server_stats.snapshot("redis", [own_redis.url])
    cpu_before = server_stats.cpu_snapshot("redis", [own_redis.url])
    own_redis.restart()
    _incr(own_redis.url, 60)  # more than before: a plain difference would look plausible
    got = server_stats.delta(before, server_stats.snapshot("redis", [own_redis.url]))
    assert dict(got) == {} and "restarted" in got.error
    assert server_stats.cpu_delta(cpu_before, server_stats.cpu_snapshot("redis", [own_redis.url])) is None


def test_a_failed_read_is_na_with_its_reason(own_redis: RedisServer) -> None:
    before = server_stats.snapshot("redis", [own_redis.url])
    own_redis.stop()
    after = server_stats.snapshot("redis", [own_redis.url])
    assert dict(after) == {} and "failed" in after.error
    got = server_stats.delta(before, after)
    assert (
        dict(got) == {}
        and got.error.startswith("reading redis command statistics failed")
        and "after" in got.error
    )
    assert server_stats.cpu_snapshot("redis", [own_redis.url]) is None


def test_counters_that_went_down_are_na() -> None:
    got = server_stats.delta(server_stats.Commands({"incr": 10}), server_stats.Commands({"incr": 4}))
    assert dict(got) == {} and "went down" in got.error
