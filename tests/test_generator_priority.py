"""A matrix case's Locust runs above the harness: its session's autogroup and its own nice are
raised, it goes real-time where the kernel lets it, through the warm fork and the cold start alike,
and the lanes fit the machine that gives."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.matrix.machine import GENERATOR_NICE, REALTIME_LANE_CPU, auto_lanes, generator_priority
from bench.run.locust import run_locust
from tests.helpers import locust
from workloads.harness.priority import (
    REALTIME_ENV,
    can_raise,
    can_run_realtime,
    raise_priority,
    raise_realtime,
)

needs_root = pytest.mark.skipif(not can_raise(), reason="raising a nice value needs root (CI runs as root)")

#: A locustfile that writes where its own process stands in the CPU queue, then lets Locust end.
_LOCUSTFILE = """
import os, sys
from locust import User, task
with open(os.environ["PRIORITY_OUT"], "w") as f:
    f.write(f"{os.getpriority(os.PRIO_PROCESS, 0)}\\n{os.sched_getscheduler(0)}\\n{open('/proc/self/autogroup').read()}")
class Idle(User):
    @task
    def nothing(self):
        pass
"""


def _autogroup_nice(pid: int) -> int:
    return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])


def _locust_argv(tmp_path: Path) -> list[str]:
    f = tmp_path / "prio_locustfile.py"
    f.write_text(_LOCUSTFILE)
    return [sys.executable, "-m", "locust", "-f", str(f), "--headless", "-u", "1", "-r", "1", "-t", "1s"]


@needs_root
def test_a_session_and_its_process_are_raised(tmp_path: Path) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert _autogroup_nice(child.pid) == 0 and os.getpriority(os.PRIO_PROCESS, child.pid) == 0
        assert raise_priority(child.pid, -3)
        assert _autogroup_nice(child.pid) == -3
        assert os.getpriority(os.PRIO_PROCESS, child.pid) == -3
    finally:
        child.kill()
        child.wait()
    assert not raise_priority(child.pid, -3)  # gone: nothing took


@needs_root
@pytest.mark.parametrize("warm", [True, False])
def test_a_case_launched_with_a_nice_value_runs_at_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, warm: bool
) -> None:
    out = tmp_path / "priority.txt"
    monkeypatch.setenv("PRIORITY_OUT", str(out))
    argv = _locust_argv(tmp_path)
    for nice in (None, -2):
        log = tmp_path / f"locust-{nice}.log"
        # the warm launcher (its warm process forked: tests.helpers.locust) or the cold one
        code = locust(argv, log, nice=nice) if warm else run_locust(argv, log, timeout=120, nice=nice)
        assert code == 0, log.read_text()[-2000:]
        own, policy, group = out.read_text().splitlines()[:3]
        assert int(own) == (nice or 0)
        assert group.endswith(f"nice {nice or 0}")
        # a raised case runs real-time where the kernel lets it; an unraised one never does
        realtime = nice is not None and can_run_realtime()
        assert int(policy) == (os.SCHED_FIFO if realtime else os.SCHED_OTHER)


def test_the_matrix_raises_its_generators_only_where_it_may() -> None:
    priority = generator_priority()
    assert (priority.nice == GENERATOR_NICE) == can_raise()
    assert ("nice -5" in priority.why) == can_raise()
    assert priority.realtime == (can_raise() and can_run_realtime())
    assert ("SCHED_FIFO" in priority.why) == priority.realtime


def test_real_time_generators_fit_four_lanes_on_a_quiet_two_core_machine() -> None:
    assert auto_lanes(cores=2, busy=0.0)[0] == 3
    for busy in (0.0, 0.01, 0.2):  # the bench process planning reads as a little busy
        assert auto_lanes(cores=2, busy=busy, lane_cpu=REALTIME_LANE_CPU)[0] == 4
    assert auto_lanes(cores=2, busy=1.0, lane_cpu=REALTIME_LANE_CPU)[0] == 2


def test_the_realtime_knob_keeps_raised_processes_in_the_normal_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(REALTIME_ENV, "0")
    assert not can_run_realtime()
    assert not generator_priority().realtime
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert not raise_realtime(child.pid)
        assert os.sched_getscheduler(child.pid) == os.SCHED_OTHER
    finally:
        child.kill()
        child.wait()


needs_realtime = pytest.mark.skipif(
    not can_run_realtime(), reason="SCHED_FIFO needs root and a kernel that gives it (CI runs as root)"
)

#: A child with three threads that each note their own scheduling class once its stdin closes.
_THREADS = """
import os, sys, threading
go, ready, seen = threading.Event(), threading.Barrier(4), []
def report():
    ready.wait()
    go.wait()
    seen.append(os.sched_getscheduler(0))
threads = [threading.Thread(target=report) for _ in range(3)]
for t in threads: t.start()
ready.wait()
print("ready", flush=True)
sys.stdin.read()
go.set()
for t in threads: t.join()
print(*seen, flush=True)
"""


@needs_realtime
def test_raising_a_process_real_time_takes_every_thread_it_has(tmp_path: Path) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", _THREADS], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert len(os.listdir(f"/proc/{child.pid}/task")) == 4
        assert raise_realtime(child.pid)
        out, _ = child.communicate("", timeout=30)
    finally:
        child.kill()
        child.wait()
    assert [int(line) for line in out.split()] == [os.SCHED_FIFO] * 3
    assert not raise_realtime(child.pid)  # gone: nothing took
    assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the probe (can_run_realtime) left this process alone


@needs_root
@pytest.mark.server  # starts redis-servers itself: not for --quick
def test_servers_started_inside_a_matrix_hook_run_at_its_nice_value_restarts_too(server_dir: Path) -> None:
    """A matrix raises its servers with its Locust sessions (bench/matrix/command.py): in K (shard
    4/4, 2026-12-06) etcd answered keepalives in up to 0.54 s behind sessions raised above it."""
    from infra.process import on_every_start
    from infra.redis_server import RedisServer

    outside = RedisServer(server_dir, name="prio-outside").start()
    with on_every_start(lambda server: raise_priority(server.pid, -3)):
        inside = RedisServer(server_dir, name="prio-inside").start()
        try:
            assert _autogroup_nice(inside.process.pid) == -3
            assert os.getpriority(os.PRIO_PROCESS, inside.process.pid) == -3
            inside.restart()  # a fault's restart starts a new process: raised as well
            assert _autogroup_nice(inside.process.pid) == -3
        finally:
            inside.stop()
    try:
        assert _autogroup_nice(outside.process.pid) == 0
        after = RedisServer(server_dir, name="prio-after").start()  # the hook ended with its block
        assert _autogroup_nice(after.process.pid) == 0
        after.stop()
    finally:
        outside.stop()


def test_a_shared_process_weighs_as_the_cases_it_carries() -> None:
    """One process of n cases gets about n times one case's CPU weight: with autogroup each session
    is one entity in the queue, and n sessions weighed n times one."""
    from workloads.harness.priority import _WEIGHTS, shared_nice

    def weight(nice: int) -> int:
        return _WEIGHTS[nice + 20]

    assert shared_nice(GENERATOR_NICE, 1) == GENERATOR_NICE
    for n in (2, 3, 5, 8, 12):
        got = shared_nice(GENERATOR_NICE, n)
        assert got < GENERATOR_NICE
        assert 0.8 < weight(got) / (n * weight(GENERATOR_NICE)) < 1.25  # within one step of n times
    assert shared_nice(GENERATOR_NICE, 1000) == -20  # no nicer than the kernel allows
    assert shared_nice(0, 5) == -7


def test_the_group_weight_knob_leaves_a_shared_process_at_one_cases_nice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from workloads.harness.priority import GROUP_WEIGHT_ENV, shared_nice

    monkeypatch.setenv(GROUP_WEIGHT_ENV, "0")
    assert shared_nice(GENERATOR_NICE, 5) == GENERATOR_NICE


@needs_realtime
@pytest.mark.server  # starts a redis-server itself: not for --quick
def test_a_real_time_matrix_raises_the_servers_whose_threads_block_and_leaves_the_rest(
    server_dir: Path,
) -> None:
    """Redis, memcached and PostgreSQL go real-time beside the cases' Locust; a server that may not
    (etcd's Go runtime, ZooKeeper's JVM: they held both cores in that class) stays at the nice value."""
    from bench.matrix.command import _raise_server
    from bench.matrix.machine import GeneratorPriority
    from infra.process import ServerProcess, on_every_start
    from infra.redis_server import RedisServer

    priority = GeneratorPriority(-3, True, "test")
    other = ServerProcess("prio-other", ["sleep", "60"], server_dir / "other.log")
    with on_every_start(lambda server: _raise_server(server, priority)):
        redis = RedisServer(server_dir, name="prio-rt").start()
        other.start(ready=lambda: True)
        try:
            assert os.sched_getscheduler(redis.process.pid) == os.SCHED_FIFO
            assert all(
                os.sched_getscheduler(int(t)) == os.SCHED_FIFO
                for t in os.listdir(f"/proc/{redis.process.pid}/task")
            )
            assert os.sched_getscheduler(other.pid) == os.SCHED_OTHER
            assert os.getpriority(os.PRIO_PROCESS, other.pid) == -3
            redis.restart()  # a fault's restart is a new process: real-time as well
            assert os.sched_getscheduler(redis.process.pid) == os.SCHED_FIFO
        finally:
            redis.stop()
            other.stop()
