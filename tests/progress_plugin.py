"""A sense of time for scripts/test: one line per finished test module, with an ETA.

pytest-xdist shows dots only, so a 7-minute suite and a stuck one look alike. This plugin
(loaded with ``-p tests.progress_plugin``) prints, on the controlling process, a line when the
last test of a module reports: how many modules and tests are done, the time so far, and an
estimate of the time left from the tests' own pace (tests done / elapsed). ``--durations=15``
in scripts/test names the slowest tests at the end.

With ``LOCKBENCH_RECORD_DURATIONS=FILE`` it also writes, per test module, its longest test, its
total (seconds, setup + call + teardown) and the CPU seconds its tests used (``cpu_s``: the
worker's own and its reaped children's, so a bench subprocess, its Locust processes and a server
a test started and stopped count; session servers do not) as JSON: tests/durations.json is made
this way, and conftest.py hands out the modules with the most seconds first from it (with
``LOCKBENCH_RECORD_TEST_CPU=FILE`` beside it, the same per test id). On a
2-core machine the suite is CPU-bound, so ``cpu_s`` names what to cut; seconds name what to start
first.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest


def _cpu_s() -> float:
    """CPU seconds of this process and every child it reaped so far (user + system)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class PhaseCpu:
    """On each worker: the CPU seconds of each test phase, carried to the controller in its report.

    Why a class: the count starts where the previous phase's report was made.
    """

    def __init__(self) -> None:
        self.last = _cpu_s()

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.last = _cpu_s()  # collection is no test's

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        outcome = yield
        now = _cpu_s()
        outcome.get_result().user_properties.append(("cpu_s", now - self.last))
        self.last = now


def _module(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class ModuleProgress:
    """Counts finished tests per module against the collected ones and prints a line per module done.

    Why a class: the totals come from collection (on the controller under xdist, from the
    workers' collections) and the counts from the reports, at different hooks.
    """

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.total: Counter[str] = Counter()
        self.done: Counter[str] = Counter()
        self.finished_modules: set[str] = set()
        self.collected = False
        self.started = time.monotonic()
        self.seconds: defaultdict[str, float] = defaultdict(float)  # per test id, every phase
        self.cpu: defaultdict[str, float] = defaultdict(float)

    def _set_totals(self, nodeids: list[str]) -> None:
        if self.collected:  # every xdist worker collects the same ids
            return
        self.total = Counter(_module(n) for n in nodeids)
        self.collected = True
        self.started = time.monotonic()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if session.items:
            self._set_totals([i.nodeid for i in session.items])

    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self._set_totals(list(ids))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        out = os.environ.get("LOCKBENCH_RECORD_DURATIONS")
        if not out or not self.seconds:
            return
        modules: dict[str, dict[str, float]] = {}
        for nodeid, seconds in self.seconds.items():
            entry = modules.setdefault(
                Path(_module(nodeid)).name, {"max_s": 0.0, "total_s": 0.0, "cpu_s": 0.0}
            )
            entry["max_s"] = round(max(entry["max_s"], seconds), 1)
            entry["total_s"] = round(entry["total_s"] + seconds, 1)
            entry["cpu_s"] = round(entry["cpu_s"] + self.cpu[nodeid], 1)
        ordered = dict(sorted(modules.items(), key=lambda kv: -kv[1]["total_s"]))
        Path(out).write_text(json.dumps(ordered, indent=1) + "\n")
        per_test = os.environ.get("LOCKBENCH_RECORD_TEST_CPU")
        if per_test:  # what to cut, test by test: {test id: [seconds, CPU seconds]}, most CPU first
            tests = {n: [round(s, 2), round(self.cpu[n], 2)] for n, s in self.seconds.items()}
            Path(per_test).write_text(
                json.dumps(dict(sorted(tests.items(), key=lambda kv: -kv[1][1])), indent=0)
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        self.cpu[report.nodeid] += sum(v for k, v in report.user_properties if k == "cpu_s")
        if report.when != "teardown" or not self.collected:
            return
        module = _module(report.nodeid)
        self.done[module] += 1
        if self.done[module] < self.total.get(module, 0) or module in self.finished_modules:
            return
        self.finished_modules.add(module)
        done_tests, all_tests = sum(self.done.values()), sum(self.total.values())
        elapsed = time.monotonic() - self.started
        left = elapsed / done_tests * (all_tests - done_tests) if done_tests else 0.0
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"[{len(self.finished_modules)}/{len(self.total)} modules, {done_tests}/{all_tests} tests] "
                f"{module} done; {_clock(elapsed)} so far, about {_clock(left)} left"
            )


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("LOCKBENCH_RECORD_DURATIONS"):
        config.pluginmanager.register(PhaseCpu(), "lockbench-phase-cpu")
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist), not a worker
        config.pluginmanager.register(ModuleProgress(config), "lockbench-module-progress")
