"""A user's own lock, loaded as ``module:Class`` or through the ``lockbench.locks`` entry points.

The example of the README (examples/my_lock.py) is run for real: it passes the lock
contract and runs flash-sale through ``bench run``; a bad path or an incomplete class
is one line naming what is missing, exit 2.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from lockimpls.base import Lock, LockOptions
from tests import lock_contract as contract
from tests.helpers import PROJECT, bench

EXAMPLE = PROJECT / "examples" / "my_lock.py"
SHORT = ["--duration", "2", "--users", "6", "--cs", "1ms", "--no-report"]


def _load_example() -> type[Lock]:
    spec = importlib.util.spec_from_file_location("lockbench_example_my_lock", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.MyLock


def _one_clear_line(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("bench: error:")]
    assert len(errors) == 1 and lines[-1] == errors[0], r.stderr  # progress lines may precede it
    assert "Traceback" not in r.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


def _only_run(results: Path) -> Path:
    runs = [p for p in results.iterdir() if p.is_dir()]
    assert len(runs) == 1, runs
    return runs[0]


def test_example_is_under_30_lines_and_keeps_the_contract(redis_url: str) -> None:
    assert len(EXAMPLE.read_text().splitlines()) < 30
    cls = _load_example()
    assert cls.backend == "redis" and cls.id == "redis.my-lock"

    def make(name: str, **overrides: object) -> Lock:
        return cls(name, [redis_url], LockOptions(**overrides))

    contract.check_all(make)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("spec", "cwd"),
    [("examples.my_lock:MyLock", PROJECT), ("my_lock:MyLock", PROJECT / "examples")],
    ids=["from-project-root", "from-examples-dir"],
)
def test_user_impl_runs_flash_sale_through_bench(spec: str, cwd: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    r = bench("run", "--impl", spec, *SHORT, "--results-dir", str(results), cwd=cwd)
    assert r.returncode == 0, r.stderr[-3000:]
    row = pd.read_csv(_only_run(results) / "cases.csv").iloc[0]
    assert row["impl"] == spec
    assert row["verdict"] == "valid"
    assert row["acquisitions"] > 0 and row["purchases"] > 0
    assert row["overlapping_holds"] == 0 and row["lost_updates"] == 0


BAD_LOCKS = textwrap.dedent(
    """
    from lockimpls.base import Capabilities, Lock


    class NoCapabilities(Lock):
        id = "user.no-capabilities"

        def _release(self, lease):
            return True


    class NoId(Lock):
        capabilities = Capabilities(ttl=False, fencing=False)

        def _release(self, lease):
            return True


    class NoRelease(Lock):
        id = "user.no-release"
        capabilities = Capabilities(ttl=False, fencing=False)


    class NotALock:
        pass


    NOT_A_CLASS = 3
    """
)


@pytest.mark.parametrize(
    ("spec", "needles"),
    [
        ("bad_locks:NoCapabilities", ["bad_locks:NoCapabilities", "missing capabilities"]),
        ("bad_locks:NoId", ["missing id"]),
        ("bad_locks:NoRelease", ["missing _release"]),
        ("bad_locks:NotALock", ["is not a subclass of lockimpls.base.Lock", "examples/my_lock.py"]),
        ("bad_locks:NOT_A_CLASS", ["bad_locks:NOT_A_CLASS is not a class"]),
        ("bad_locks:Missing", ["module 'bad_locks' has no attribute 'Missing'"]),
        ("bad_locks:", ["is not of the form package.module:Class"]),
        ("no_such_user_module:MyLock", ["cannot import module 'no_such_user_module'"]),
    ],
)
def test_bad_user_impl_is_one_line_exit_2(spec: str, needles: list[str], tmp_path: Path) -> None:
    (tmp_path / "bad_locks.py").write_text(BAD_LOCKS)
    r = bench("run", "--impl", spec, "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    _one_clear_line(r, *needles)
    assert not (tmp_path / "results").exists(), "no results folder for a run that never started"


def test_user_module_that_fails_to_import_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "broken_user.py").write_text("raise RuntimeError('boom at import')\n")
    r = bench("run", "--impl", "broken_user:MyLock", "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    _one_clear_line(r, "broken_user", "boom at import")


def test_console_script_finds_the_users_module(tmp_path: Path) -> None:
    (tmp_path / "mine.py").write_text("from lockimpls.broken import NoMutex as Mine\n")
    script = Path(sys.executable).parent / "bench"
    argv = [
        str(script),
        "run",
        "--impl",
        "mine:Mine",
        "--workload",
        "reentrant",
        "--results-dir",
        str(tmp_path),
    ]
    r = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    # mine:Mine was found and judged: it does not declare reentrancy, so nothing can run
    _one_clear_line(r, "no impl of those can run workload reentrant")


def _entry_point_dist(site: Path) -> dict[str, str]:
    """A minimal installed distribution declaring one ``lockbench.locks`` entry point, on PYTHONPATH."""
    dist = site / "lockbench_user_demo-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: lockbench-user-demo\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[lockbench.locks]\nredis.user-demo = my_lock:MyLock\n")
    path = os.pathsep.join([str(site), str(PROJECT / "examples"), os.environ.get("PYTHONPATH", "")])
    return {"PYTHONPATH": path.rstrip(os.pathsep)}


def test_entry_point_group_adds_an_impl(tmp_path: Path) -> None:
    env = _entry_point_dist(tmp_path / "site")
    r = bench("list", env=env)
    assert r.returncode == 0, r.stderr
    redis_line = next(ln for ln in r.stdout.splitlines() if ln.startswith("redis:"))
    assert "redis.user-demo" in redis_line.split()
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "from lockimpls.registry import resolve; c = resolve('redis.user-demo'); print(c.__name__, c.backend)",
        ],
        cwd=PROJECT,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **env},
    )
    assert probe.returncode == 0, probe.stderr
    assert probe.stdout.split() == ["MyLock", "redis"]
    assert "redis.user-demo" not in bench("list").stdout, "only the installed distribution adds it"
