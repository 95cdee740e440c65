"""zookeeper.ephemeral's waiters are ended at a case's stop, through Locust (issue 42 item 3).

Its waiter holds no node and waits on a watch in ``Lock._between_attempts``; under gevent that
wait is kazoo's handler event, not a sleep, so the glue must know the hook's frame there too. The
queue locks (zookeeper.sequential) keep their node while they wait, and are left to finish.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from infra.redis_server import RedisServer
from infra.zookeeper_server import ZooKeeperServer
from tests.helpers import locust
from tests.test_locust_stop import _argv, _assert_every_row_kept_and_only_waits_stopped
from workloads.harness.recording import STOPPED


@pytest.fixture(scope="module")
def zk(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk-stop")).start()
    try:
        yield server
    finally:
        server.stop()


def _run(impl: str, zk: ZooKeeperServer, resource_server: RedisServer, out: Path) -> Path:
    out.mkdir()
    log = out / "locust.log"
    code = locust(_argv(zk.url, resource_server.url, out, impl), log)
    assert code == 0, log.read_text()[-2000:]
    return log


def test_ephemeral_waiters_are_stopped_and_no_row_is_lost(
    zk: ZooKeeperServer, resource_server: RedisServer, tmp_path: Path
) -> None:
    out = tmp_path / "case"
    log = _run("zookeeper.ephemeral", zk, resource_server, out)
    _assert_every_row_kept_and_only_waits_stopped(out, log)


def test_sequential_waiters_keep_their_place_and_finish(
    zk: ZooKeeperServer, resource_server: RedisServer, tmp_path: Path
) -> None:
    """A waiter whose node stands in the queue is never ended: none is recorded stopped."""
    out = tmp_path / "case"
    _run("zookeeper.sequential", zk, resource_server, out)
    history = pd.read_parquet(out / "history.parquet")
    assert (history["op"] == "acquire").sum() > 100
    assert not history["error"].fillna("").str.startswith(STOPPED).any()
