"""A Locust stop reads no source file (workloads/harness/cheap_stop.py)."""

from __future__ import annotations

import inspect

import pytest
from locust import User, constant, runners, task
from locust.env import Environment

from workloads.harness import cheap_stop


class _Idle(User):
    wait_time = constant(1)

    @task
    def nothing(self) -> None:
        pass


def _stop_a_runner() -> None:
    Environment(user_classes=[_Idle]).create_local_runner().stop()


def _who_called_me() -> inspect.Traceback:
    """Runner.stop's own words, for its caller."""
    return runners.inspect.getframeinfo(runners.inspect.stack()[1][0])


def test_a_runner_stop_reads_no_source_and_still_names_its_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[object] = []
    monkeypatch.setattr(inspect, "getmodule", lambda obj, *_: reads.append(obj))
    monkeypatch.setattr(runners, "inspect", inspect)  # Locust's own first: its stop looks for source
    _stop_a_runner()
    assert reads, "the real inspect.stack no longer walks the modules: cheap_stop may have no reason left"
    reads.clear()
    cheap_stop.install()
    _stop_a_runner()
    assert reads == []
    caller = _who_called_me()
    assert caller.filename == __file__
    assert caller.function == "test_a_runner_stop_reads_no_source_and_still_names_its_caller"
    assert runners.inspect.isclass(_Idle)  # every other name is the real module's
