"""A group's cases start their load together, after the slowest is set up (issue 39, the generator).

Cases of a matrix group were launched together and each began its load as soon as it was
ready, so the first ran their buyers through the others' start-up. Here two real Locust
cases run side by side through the group's launcher, the second launched 2 s late (a slow
fork on a busy machine): with the gate, the first case's test starts only once the second is
set up; a lone case (no group) never waits for a gate.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

from bench.run.group import StartGate, _launch_side_by_side
from infra.redis_server import RedisServer
from tests.helpers import locust
from workloads.harness.start_gate import READY_FILE

ROOT = Path(__file__).resolve().parent.parent

#: How late the second case is launched (seconds): far above any start-up jitter.
LATE_S = 2.0


def _argv(redis_url: str, resource_url: str, out: Path, namespace: str) -> list[str]:
    return [
        sys.executable, "-m", "locust", "-f", str(ROOT / "workloads" / "flash_sale.py"), "--headless",
        "--users", "3", "--spawn-rate", "3", "--run-time", "2s", "--stop-timeout", "10",
        "--exit-code-on-error", "0", "--only-summary", "--loglevel", "WARNING",
        "--lock-impl", "redis.set-nx-px-lua", "--lock-url", redis_url, "--resource-url", resource_url,
        "--cs", "1ms", "--lock-namespace", namespace,
        "--lockbench-out", str(out), "--lockbench-case", out.name, "--lockbench-no-summary",
    ]  # fmt: skip


def _t_start_s(out: Path) -> float:
    """When the case's test started (its load window's start), on the monotonic clock, seconds."""
    return json.loads((out / "recording.json").read_text())["t_start_ns"] / 1e9


def test_a_group_starts_its_load_only_when_its_slowest_case_is_set_up(
    redis_url: str, resource_server: RedisServer, tmp_path: Path
) -> None:
    outs = [tmp_path / "fast", tmp_path / "slow"]
    for out in outs:
        out.mkdir()
    resources = [resource_server.url.rsplit("/", 1)[0] + f"/{i + 1}" for i in range(2)]
    argvs = [_argv(redis_url, resources[i], out, f"g{i}:") for i, out in enumerate(outs)]
    launched: dict[str, float] = {}

    def launch(argv: list[str], log: Path, timeout: float) -> int:
        if log.parent.name == "slow":
            time.sleep(LATE_S)
        launched[log.parent.name] = time.monotonic()
        return locust(argv, log, timeout)

    cases = [_FakeCase(60.0), _FakeCase(60.0)]
    _, codes, _ = _launch_side_by_side(cases, [launch, launch], argvs, outs, None)  # type: ignore[arg-type]
    assert codes == [0, 0], [(o / "locust.log").read_text()[-1500:] for o in outs]
    slow_ready = float((outs[1] / READY_FILE).read_text())
    fast_start = _t_start_s(outs[0])
    # without the gate the fast case started its test about LATE_S before the slow one was even launched
    assert fast_start >= slow_ready, (fast_start, slow_ready)
    assert fast_start >= launched["slow"]
    assert (outs[0] / READY_FILE).exists()


def test_a_gate_opens_for_a_case_whose_locust_ended_without_getting_ready(tmp_path: Path) -> None:
    """A case that failed to start waits at no gate, and holds no other case at it."""
    outs = [tmp_path / "a", tmp_path / "b"]
    for out in outs:
        out.mkdir()
    gate = StartGate(outs)
    (outs[0] / READY_FILE).write_text(str(time.monotonic()))
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    waiting = threading.Thread(target=time.sleep, args=(30,), daemon=True)
    waiting.start()
    assert not gate.ready([waiting, waiting])  # b is neither ready nor over
    assert gate.ready([waiting, ended])  # b ended: nothing to wait for
    gate.open_when_ready([waiting, ended])
    assert gate.path.exists()


def test_a_lone_case_waits_at_no_gate(redis_url: str, resource_server: RedisServer, tmp_path: Path) -> None:
    out = tmp_path / "lone"
    out.mkdir()
    _, codes, _ = _launch_side_by_side(
        [_FakeCase(60.0)],  # type: ignore[list-item]
        [locust],
        [_argv(redis_url, resource_server.url, out, "lone:")],
        [out],
        None,
    )
    assert codes == [0]
    assert not (out / READY_FILE).exists()


class _FakeSettings:
    def __init__(self, duration: float) -> None:
        self.duration = duration


class _FakeCase:
    """What the launcher reads of a case: its duration (the launch's timeout)."""

    def __init__(self, duration: float) -> None:
        self.settings = _FakeSettings(duration)
