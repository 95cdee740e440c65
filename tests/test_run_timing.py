"""Where a run's time goes (issue 25): run.json ``timing``, the console's last line, warm = cold, set-up extras.

Real servers (``bench run`` starts them), never a mock; no assertion on how long anything
takes, only that every phase is there and the parts fit inside the wall time.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from bench.run.case import SOLO_ACQUISITIONS
from bench.run.timing import CASE_PHASES, RUN_PHASES
from tests.helpers import PROJECT, bench
from workloads.harness.recording import decode_histogram

SHORT = ["--duration", "3", "--users", "8", "--cs", "1ms"]
#: one lock that holds and one that does not: the verdicts differ, so comparing them means something
IMPLS = ["--impl", "redis.set-nx-px-lua", "--impl", "test.no-mutex"]
#: rounding in run.json (milliseconds per phase) may make the parts overshoot by this much
SLACK_S = 0.05
LAST_LINE = re.compile(
    r"^lockbench: wall time (?:(\d+)m )?([\d.]+)s for ([\d.]+)s of load: overhead share \(wall / load\) ([\d.]+);"
)


def _run(
    tmp_path: Path, name: str, env: dict[str, str] | None = None
) -> tuple[Path, subprocess.CompletedProcess]:
    results = tmp_path / name
    r = bench("run", *IMPLS, *SHORT, "--results-dir", str(results), env=env)
    # test.no-mutex is found unsafe, so the run fails (exit 1) naming it; its timing is still written
    assert r.returncode == 1 and "found the lock unsafe (verdict invalid): test.no-mutex" in r.stderr, (
        r.stderr
    )
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    return run, r


@pytest.fixture(scope="module")
def warm_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    """One warm run of IMPLS, which both tests below read: the timing test and the warm = cold test.

    Why one: the two asked for the same run (same locks, options, launcher), each its own,
    a full run of CPU for nothing on a 2-core runner. Each test reads its own copy.
    """
    return _run(tmp_path_factory.mktemp("warm-run"), "warm")


def _own_copy(run: Path, tmp_path: Path) -> Path:
    """The shared run's folder copied into the test's own folder: what the test reads is its own."""
    return Path(shutil.copytree(run, tmp_path / run.parent.name / run.name))


@pytest.mark.slow
@pytest.mark.server
def test_run_json_timing_and_the_last_line(
    warm_run: tuple[Path, subprocess.CompletedProcess], tmp_path: Path
) -> None:
    shared, r = warm_run
    assert r.stdout.strip() == str(shared / "report.html")  # stdout stays the report's path
    run = _own_copy(shared, tmp_path)
    meta = json.loads((run / "run.json").read_text())
    timing = meta["timing"]
    assert timing["launcher"] == "warm"
    for phase in RUN_PHASES:
        assert timing[f"{phase}_s"] >= 0, phase
    wall, load = timing["wall_s"], timing["load_s"]
    assert load > 0
    parts = sum(timing[f"{p}_s"] for p in RUN_PHASES)
    assert parts <= wall + SLACK_S
    assert abs(parts + timing["other_s"] - wall) <= SLACK_S
    assert timing["overhead_share"] == pytest.approx(wall / load, abs=0.01)
    assert timing["overhead_s"] == pytest.approx(wall - load, abs=0.01)
    # every case and every solo calibration, each split into its phases that add up to its wall time
    solos = [c for c, t in timing["cases"].items() if t["solo"]]
    assert sorted(solos) == sorted(f"{c}__solo" for c in meta["cases"])
    assert set(timing["cases"]) == set(meta["cases"]) | set(solos)
    for case, t in timing["cases"].items():
        assert sum(t[f"{p}_s"] for p in CASE_PHASES) == pytest.approx(t["wall_s"], abs=0.001), case
        assert t["load_s"] > 0, case
    contended = [timing["cases"][c] for c in meta["cases"]]
    assert sum(t["load_s"] for t in contended) == pytest.approx(load, abs=0.01)
    assert timing["calibration_s"] == pytest.approx(
        sum(timing["cases"][c]["wall_s"] for c in solos), abs=0.01
    )
    # the console's (stderr's) last line is the time
    match = LAST_LINE.match(r.stderr.strip().splitlines()[-1])
    assert match, r.stderr.strip().splitlines()[-1]
    said_wall = 60 * int(match[1] or 0) + float(match[2])
    assert said_wall == pytest.approx(wall, abs=0.1)
    assert float(match[3]) == pytest.approx(load, abs=0.05)
    assert float(match[4]) == pytest.approx(timing["overhead_share"], abs=0.01)


def _histogram_counts(run: Path, case: str) -> dict[str, int]:
    """Each histogram's count of a case, checked against the case's history (counts differ run to run)."""
    hist = json.loads((run / "hist" / f"{case}.json").read_text())
    counts = {name: decode_histogram(text).get_total_count() for name, text in hist["histograms"].items()}
    history = pd.read_parquet(run / "history" / f"{case}.parquet")
    assert counts["acquire_ok"] == ((history["op"] == "acquire") & (history["type"] == "ok")).sum(), case
    assert counts["acquire_ok"] > 0 and counts["hold"] > 0, (run, case, counts)
    return counts


@pytest.mark.slow
@pytest.mark.server
def test_warm_run_gives_what_a_cold_run_gives(
    warm_run: tuple[Path, subprocess.CompletedProcess], tmp_path: Path
) -> None:
    warm = _own_copy(warm_run[0], tmp_path)
    cold, _ = _run(tmp_path, "cold", env={"LOCKBENCH_WARM": "0"})
    metas = {
        name: json.loads((run / "run.json").read_text()) for name, run in (("warm", warm), ("cold", cold))
    }
    assert metas["warm"]["timing"]["launcher"] == "warm"
    assert metas["cold"]["timing"]["launcher"] == "cold"
    assert metas["warm"]["cases"] == metas["cold"]["cases"]
    rows = {
        name: pd.read_csv(run / "cases.csv").set_index("case")
        for name, run in (("warm", warm), ("cold", cold))
    }
    assert rows["warm"]["verdict"].to_dict() == rows["cold"]["verdict"].to_dict()
    assert rows["warm"].loc["test.no-mutex__flash-sale", "verdict"] == "invalid"
    assert list(rows["warm"].columns) == list(rows["cold"].columns)
    for case in metas["warm"]["cases"]:
        assert set(_histogram_counts(warm, case)) == set(_histogram_counts(cold, case)), case
    # the solo calibration measured through the warm launcher as through a cold start
    for name in ("warm", "cold"):
        solo = metas[name]["calibration"]["solo"]
        assert set(solo) == {"redis.set-nx-px-lua", "test.no-mutex"}, name
        assert all(entry["hold_p50_us"] and entry["acquisitions"] > 0 for entry in solo.values()), solo
        # and it ended on its acquisitions (checked every 0.1 s), not after its whole window:
        # one client of a 1 ms section gets about three times as many in 3 s on a quiet machine
        assert all(entry["acquisitions"] < 1.5 * SOLO_ACQUISITIONS for entry in solo.values()), solo


def test_a_bad_lockbench_warm_is_one_line_exit_2(tmp_path: Path) -> None:
    r = bench(
        "run",
        "--impl",
        "redis.set-nx-px-lua",
        "--results-dir",
        str(tmp_path),
        env={"LOCKBENCH_WARM": "maybe"},
    )
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "LOCKBENCH_WARM" in r.stderr, r.stderr
    assert not any(tmp_path.iterdir())


# A stand-in for .venv's programs: bench and pytest "run" and say so, nothing is installed.
FAKE_PROGRAM = '#!/bin/sh\necho "$(basename "$0") ran: $*"\n'


def _copy_scripts(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    for name in ("bootstrap.sh", "bench", "test"):
        shutil.copy(PROJECT / "scripts" / name, tmp_path / "scripts" / name)
    shutil.copy(PROJECT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    for name in ("bench", "python"):
        (tmp_path / ".venv" / "bin" / name).write_text(FAKE_PROGRAM)
        (tmp_path / ".venv" / "bin" / name).chmod(0o755)
    # an installed bench script runs this checkout's .venv python (bootstrap.sh checks it)
    bench_script = tmp_path / ".venv" / "bin" / "bench"
    bench_script.write_text(f"#!{tmp_path}/.venv/bin/python\n" + FAKE_PROGRAM.split("\n", 1)[1])
    return tmp_path


def _plan(cwd: Path, *argv: str) -> str:
    env = {"PATH": os.environ["PATH"], "LOCKBENCH_BOOTSTRAP_DRY_RUN": "1"}
    r = subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    (line,) = [ln for ln in r.stderr.splitlines() if "bootstrap plan" in ln]
    return line


def test_scripts_bench_sets_up_the_base_and_scripts_test_the_test_extras(tmp_path: Path) -> None:
    root = _copy_scripts(tmp_path)
    assert "extras=base spec=-e . " in _plan(root, "scripts/bench", "list")
    assert "extras=test spec=-e .[test] " in _plan(root, "scripts/test", "--quick")
    # the stamp says what is installed: the test extras include the base, not the other way round
    stamp = root / ".venv" / ".lockbench-installed"
    stamp.write_text("base\n")
    assert "state=up-to-date" in _plan(root, "scripts/bench", "list")
    assert "state=install" in _plan(root, "scripts/test", "--quick")
    stamp.write_text("test\n")
    assert "state=up-to-date" in _plan(root, "scripts/bench", "list")
    assert "state=up-to-date" in _plan(root, "scripts/test", "--quick")
    # a .venv whose bench script belongs to another checkout (moved, or reinstalled from a worktree)
    bench_script = root / ".venv" / "bin" / "bench"
    ours = bench_script.read_text()
    bench_script.write_text(FAKE_PROGRAM)  # runs, but with another interpreter than this .venv's
    assert "state=install" in _plan(root, "scripts/bench", "list")
    bench_script.write_text(ours)
    os.utime(root / "pyproject.toml", (stamp.stat().st_mtime + 10,) * 2)  # dependencies changed
    assert "state=install" in _plan(root, "scripts/bench", "list")
    bad = subprocess.run(
        ["scripts/bootstrap.sh", "everything"], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "usage" in bad.stderr
