"""infra for ZooKeeper: a real server (and a 3-node ensemble) on loopback, its counters, its errors."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from infra import catalog, install_all, server_stats
from infra import zookeeper_server as zks
from infra.errors import InfraError
from infra.ports import free_port
from infra.state import pid_alive
from infra.zookeeper_server import ZooKeeperEnsemble, ZooKeeperServer, four_letter
from tests.helpers import bench


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zk-infra")).start()
    yield server
    server.stop()


def connect(hosts: str) -> KazooClient:
    client = KazooClient(hosts=hosts, timeout=10)
    client.start(timeout=20)
    return client


def test_server_answers_four_letter_words_on_loopback(zk_server: ZooKeeperServer) -> None:
    assert zk_server.url == f"zookeeper://127.0.0.1:{zk_server.port}"
    assert four_letter("127.0.0.1", zk_server.port, "ruok") == "imok"
    assert zk_server.mode() == "standalone"
    counters = zk_server.mntr()
    assert isinstance(counters["zk_packets_received"], int)
    assert counters["zk_server_state"] == "standalone"
    conf = four_letter("127.0.0.1", zk_server.port, "conf")
    assert f"dataDir={zk_server.data_dir}" in conf
    assert "minSessionTimeout=1000" in conf
    # words outside the whitelist are refused
    assert "not in the whitelist" in four_letter("127.0.0.1", zk_server.port, "dump")
    assert zk_server.version().startswith("3.")


def test_logging_backend_makes_warnings_visible(zk_server: ZooKeeperServer) -> None:
    log = zk_server.process.log_path.read_text()
    assert "StaticLoggerBinder" not in log, "slf4j fell back to NOP: errors would be invisible"
    assert " WARN org.apache.zookeeper" in log


def test_stats_snapshot_counts_requests(zk_server: ZooKeeperServer) -> None:
    before = server_stats.snapshot("zookeeper", [zk_server.url])
    assert set(before) == {"packets_received"}
    client = connect(zk_server.hosts)
    try:
        for _ in range(20):
            client.exists("/nothing-here")
    finally:
        client.stop()
        client.close()
    delta = server_stats.delta(before, server_stats.snapshot("zookeeper", [zk_server.url]))
    assert 20 <= delta["packets_received"] < 40


def test_catalog_and_install_know_zookeeper() -> None:
    assert catalog.server_class("zookeeper") is ZooKeeperServer
    binary, package, extra = install_all.BINARIES["zookeeper"]
    assert package == "zookeeper" and binary == "zkServer.sh" and extra
    assert zks.parse_url_hosts("zookeeper://a:1,b:2/chroot") == [("a", 1), ("b", 2)]
    assert zks.parse_url_hosts("zookeeper://a") == [("a", 2181)]


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LOCKBENCH_NO_INSTALL", "1")
    monkeypatch.delenv("ZOOKEEPER_HOME", raising=False)
    monkeypatch.setattr(zks, "DEBIAN_JARS", tmp_path)
    monkeypatch.setattr(zks, "DEBIAN_SCRIPTS", str(tmp_path))
    with pytest.raises(InfraError, match="apt-get install zookeeper"):
        zks.classpath()
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(InfraError, match="apt-get install default-jre-headless"):
        zks.java_binary()
    monkeypatch.setenv("ZOOKEEPER_HOME", str(tmp_path))
    with pytest.raises(InfraError, match="no jars"):
        zks.classpath()


@pytest.mark.server
def test_infra_up_status_down(tmp_path: Path) -> None:
    env = {"LOCKBENCH_INFRA_DIR": str(tmp_path / "infra")}
    r = bench("infra", "up", "zookeeper", env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    kind, url = r.stdout.split()[:2]
    assert kind == "zookeeper" and url.startswith("zookeeper://127.0.0.1:")
    port = int(url.rsplit(":", 1)[1])
    try:
        assert four_letter("127.0.0.1", port, "ruok") == "imok"
        assert "zookeeper\tup" in bench("infra", "status", env=env).stdout
    finally:
        r = bench("infra", "down", env=env)
    assert r.returncode == 0
    with pytest.raises(OSError):
        four_letter("127.0.0.1", port, "ruok")


def test_unreachable_zk_hosts_is_one_line_and_exit_2(tmp_path: Path) -> None:
    port = free_port()
    r = bench("run", "--backend", "zookeeper", "--zk-hosts", f"127.0.0.1:{port}", "--duration", "1",
              "--results-dir", str(tmp_path))  # fmt: skip
    assert r.returncode == 2
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("bench: error")]
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0]
    assert "Traceback" not in r.stderr


@pytest.mark.server
def test_ensemble_elects_a_leader_replicates_and_survives_losing_it(tmp_path: Path) -> None:
    ensemble = ZooKeeperEnsemble(tmp_path).start()
    pids = [p.pid for p in ensemble.processes]
    try:
        modes = sorted(n.mode() or "" for n in ensemble.nodes)
        assert modes == ["follower", "follower", "leader"]
        assert ensemble.url.count(",") == 2 and ensemble.url.startswith("zookeeper://127.0.0.1:")
        first, last = connect(ensemble.nodes[0].hosts), connect(ensemble.nodes[2].hosts)
        try:
            first.create("/replicated", b"v1")
            last.sync("/replicated")
            assert last.get("/replicated")[0] == b"v1"
        finally:
            for c in (first, last):
                c.stop()
                c.close()
        leader = ensemble.leader()
        assert leader is not None
        assert "leader" in ensemble.kill_leader() and not leader.process.alive()
        rest = [n for n in ensemble.nodes if n is not leader]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sorted(n.mode() or "" for n in rest) != ["follower", "leader"]:
            time.sleep(0.1)
        assert sorted(n.mode() or "" for n in rest) == ["follower", "leader"]
        client = connect(ensemble.hosts)
        try:
            assert client.get("/replicated")[0] == b"v1"
        finally:
            client.stop()
            client.close()
        ensemble.heal()
        assert sorted(n.mode() or "" for n in ensemble.nodes) == ["follower", "follower", "leader"]
    finally:
        ensemble.stop()
    assert not any(pid_alive(p) for p in pids)
