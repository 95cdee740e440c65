"""Issue 24 without servers: dead runs marked, dead scratch removed, corrupt reports, lock params, full disk.

The tests that need real servers and real kills are in tests/test_reliability_runs.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from bench.cli import scratch
from bench.results.folder import RunFolder
from bench.results.proc import process_start
from tests.test_gate import MACHINE, cli, noisy, write_run


def _dead_pid() -> int:
    """A pid that surely belonged to a process that is gone now."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# item 2: run.json tells the truth after a kill ------------------------------------------------


@pytest.mark.parametrize(
    ("writer", "marked"),
    [
        ("dead", True),  # bench was killed: the folder is interrupted
        ("reused", True),  # its pid now belongs to another process (start time differs)
        ("alive", False),  # a run in progress is left alone
        ("unrecorded", False),  # a folder from before pids were recorded: nobody can tell
    ],
)
def test_a_later_report_marks_a_dead_run_interrupted(tmp_path: Path, writer: str, marked: bool) -> None:
    run = write_run(tmp_path, "r", {"redis.x": {"throughput_acq_s": noisy(1000)}})
    meta = json.loads((run / "run.json").read_text())
    meta["status"] = "running"
    if writer == "dead":
        meta["pid"], meta["pid_start"] = _dead_pid(), 1
    elif writer == "reused":
        meta["pid"], meta["pid_start"] = os.getpid(), (process_start(os.getpid()) or 0) - 1
    elif writer == "alive":
        meta["pid"], meta["pid_start"] = os.getpid(), process_start(os.getpid())
    (run / "run.json").write_text(json.dumps(meta))
    r = cli("report", run)
    assert r.returncode == 0, r.stderr
    status = json.loads((run / "run.json").read_text())["status"]
    assert status == ("interrupted" if marked else "running")
    assert ("marked interrupted" in r.stderr) is marked
    html = (run / "report.html").read_text()
    assert ("a later bench found it gone" in html) is marked
    # and the gate refuses it either way: not a finished run
    assert cli("gate", run, run).returncode == 2


def test_bench_run_marks_dead_runs_in_its_results_dir_before_starting(tmp_path: Path) -> None:
    results = tmp_path / "results"
    run = write_run(results, "old", {"redis.x": {"throughput_acq_s": noisy(1000)}})
    meta = {**json.loads((run / "run.json").read_text()), "status": "running", "pid": _dead_pid()}
    (run / "run.json").write_text(json.dumps(meta))
    # a server nobody answers at stops the run after the folder check, before any server starts
    # (a bad option value is refused earlier still, before the results folder is read)
    r = cli("run", "--impl", "redis.set-nx-px-lua", "--results-dir", results, "--redis-url", "redis://127.0.0.1:1/0",
            env={"LOCKBENCH_FORBID_SERVERS": "1"})  # fmt: skip
    assert r.returncode == 2
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"


@pytest.mark.parametrize(
    ("owner", "removed"),
    [("dead", True), ("alive", False), ("name-only-dead", True), ("name-only-alive", False)],
)
def test_scratch_folders_of_dead_bench_processes_are_removed(
    tmp_path: Path, owner: str, removed: bool
) -> None:
    pid = os.getpid() if "alive" in owner else _dead_pid()
    folder = tmp_path / f"{scratch.PREFIX}{pid}-abcd1234"
    (folder / "lockbench-cases-x").mkdir(parents=True)
    (folder / "lockbench-cases-x" / "history.parquet").write_bytes(b"x" * 1000)
    if not owner.startswith("name-only"):
        (folder / scratch.OWNER_FILE).write_text(f"{pid} {process_start(pid) or 1}\n")
    other = tmp_path / "lockbench-infra-0"  # not a scratch folder: never touched
    other.mkdir()
    gone = scratch.remove_dead(tmp_path)
    assert (not folder.exists()) is removed
    assert (folder in gone) is removed
    assert other.exists()


def test_every_bench_command_works_in_its_own_scratch_folder_and_removes_it(tmp_path: Path) -> None:
    import tempfile

    before = set(Path(tempfile.gettempdir()).glob(f"{scratch.PREFIX}{os.getpid()}-*"))
    leave = scratch.enter()
    try:
        root = Path(tempfile.gettempdir())
        assert root.name.startswith(f"{scratch.PREFIX}{os.getpid()}-")
        assert os.environ["TMPDIR"] == str(root)
        assert (root / scratch.OWNER_FILE).read_text().split()[0] == str(os.getpid())
        assert os.environ[scratch.INFRA_DIR_ENV] != str(root)  # bench infra up state outlives the command
    finally:
        leave()
    assert not root.exists()
    assert set(Path(tempfile.gettempdir()).glob(f"{scratch.PREFIX}{os.getpid()}-*")) == before


# item 4: bench report on corrupt data -----------------------------------------------------------


def _run_with_files(tmp_path: Path) -> Path:
    run = write_run(tmp_path, "r", {"redis.x": {"throughput_acq_s": noisy(1000)}})
    frame = pd.read_csv(run / "cases.csv")
    frame["acquisitions"] = 100
    frame.to_csv(run / "cases.csv", index=False)
    (run / "history").mkdir(exist_ok=True)
    for case in frame["case"]:
        (run / "hist" / f"{case}.json").write_text(json.dumps({"unit": "us", "histograms": {}}))
    return run


def _corrupt_reports():
    def meta(key, value):
        def spoil(run: Path) -> None:
            data = json.loads((run / "run.json").read_text())
            data[key] = value
            (run / "run.json").write_text(json.dumps(data))

        return spoil

    def cell(column, value, row=0):
        def spoil(run: Path) -> None:
            frame = pd.read_csv(run / "cases.csv")
            frame[column] = frame[column].astype(object)
            frame.loc[row, column] = value
            frame.to_csv(run / "cases.csv", index=False)

        return spoil

    def duplicate(run: Path) -> None:
        frame = pd.read_csv(run / "cases.csv")
        pd.concat([frame, frame.iloc[:1]]).to_csv(run / "cases.csv", index=False)

    def garbage_history(run: Path) -> None:
        case = pd.read_csv(run / "cases.csv")["case"].iloc[0]
        (run / "history" / f"{case}.parquet").write_bytes(b"not parquet at all")

    def garbage_hist(run: Path) -> None:
        case = pd.read_csv(run / "cases.csv")["case"].iloc[1]
        (run / "hist" / f"{case}.json").write_text("{oops")

    return [
        # issue 34: damaged but readable, so a banner (and every row unknown (damaged)), not a refusal
        ("run.json cases: 5", meta("cases", 5), 0, "run.json is damaged: cases must be a JSON list"),
        ("run.json params a string", meta("params", "x"), 0, "params must be a JSON dict"),
        ("run.json status a number", meta("status", 3), 0, "status must be a JSON str"),
        ("a case twice", duplicate, 0, "case appears more than once"),
        # unusable: exit 2 naming the file
        ("run.json schema 2", meta("schema", 2), 2, "has results schema 2"),
        # partial but usable: a banner, and one line saying so
        ("NaN throughput", cell("throughput_acq_s", float("nan")), 0, "throughput_acq_s is empty (NaN)"),
        ("text throughput", cell("throughput_acq_s", "fast"), 0, "throughput_acq_s is not a number"),
        ("negative acquisitions", cell("acquisitions", -3), 0, "acquisitions is negative"),
        ("infinite latency", cell("acquire_p99_us", float("inf")), 0, "acquire_p99_us is infinite"),
        ("garbage history file", garbage_history, 0, "history/"),
        ("garbage histogram file", garbage_hist, 0, "hist/"),
    ]


@pytest.mark.parametrize(
    ("what", "spoil", "code", "needle"), _corrupt_reports(), ids=[c[0] for c in _corrupt_reports()]
)
def test_report_on_corrupt_data_exits_2_or_shows_a_banner(
    tmp_path: Path, what: str, spoil, code: int, needle: str
) -> None:
    run = _run_with_files(tmp_path)
    clean = cli("report", run)
    assert clean.returncode == 0 and "damage-banner" not in (run / "report.html").read_text()
    (run / "report.html").unlink()
    spoil(run)
    r = cli("report", run)
    assert r.returncode == code, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert needle in lines[0], lines[0]
    if code == 2:
        assert lines[0].startswith("bench: error:") and not (run / "report.html").exists()
    else:
        assert "DAMAGED DATA" in lines[0]
        html = (run / "report.html").read_text()
        assert 'id="damage-banner"' in html and needle.split()[0] in html


# item 3: every lock declares its --lock-params -------------------------------------------------


def test_every_builtin_lock_declares_its_params() -> None:
    from lockimpls import registry

    for impl_id in registry.known_ids(include_test=True):
        cls = registry.resolve(impl_id)
        assert isinstance(cls.params, dict), impl_id


@pytest.mark.parametrize(
    ("impl", "params", "ok"),
    [
        ("zookeeper.ephemeral", {"session_timeout": 5, "session": "per-lock"}, True),
        ("zookeeper.ephemeral", {"session_timeout": "x"}, False),
        ("zookeeper.ephemeral", {"mode": "read"}, False),  # only the read/write locks take a mode
        ("zookeeper.rwlock", {"mode": "read"}, True),
        ("redis.redlock", {"request_timeout": 0.05, "retry_delay": 0}, True),
        ("redis.redlock", {"request_timeout": 0}, False),
        ("postgres.advisory", {"pool_max": 4}, True),
        ("postgres.advisory", {"pool_max": True}, False),  # JSON true is not a number
        ("etcd.lease", {"prefix": "a/b", "pool_size": 8}, True),
        ("file.flock", {"blocking": True}, True),
        ("redis.set-nx-px-lua", {"anything": 1}, False),
        ("test.slowed", {"delay_s": 0.001, "delay_mode": "sleep"}, True),
    ],
)
def test_lock_params_are_checked_against_the_declaration(impl: str, params: dict, ok: bool) -> None:
    from lockimpls import registry
    from lockimpls.base import LockConfigError, check_params

    cls = registry.resolve(impl)
    if ok:
        check_params(impl, cls, params)
    else:
        with pytest.raises(LockConfigError, match=f"--lock-params: {impl}"):
            check_params(impl, cls, params)


def test_a_key_any_impl_of_the_run_takes_is_accepted() -> None:
    """--lock-params go to every impl: a key one of them reads is fine, one none reads is not."""
    from bench import validate
    from bench.errors import UserError
    from lockimpls import registry

    impls = [(i, registry.resolve(i)) for i in ("test.slowed", "redis.set-nx-px-lua")]
    validate.check_lock_params(impls, {"delay_s": 0.003})
    with pytest.raises(UserError, match="no impl of this run takes key 'delay'"):
        validate.check_lock_params(impls, {"delay": 0.003})


# item 4: a full disk ------------------------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A 2 MiB tmpfs: a real file system that fills up (root only; unmounted afterwards)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "tiny"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("fill_at", ["history", "cases"])
def test_a_full_disk_keeps_finished_cases_and_says_how_to_recover(
    tiny_disk: Path, tmp_path: Path, fill_at: str
) -> None:
    from bench.results.folder import ResultsWriteError

    folder = RunFolder(tiny_disk, {"host": {"machine_class": MACHINE}, "params": {}})
    history = tmp_path / "history.parquet"
    history.write_bytes(os.urandom(300_000))  # incompressible: a real share of the disk per case
    kept = 0
    with pytest.raises(ResultsWriteError) as caught:
        for i in range(100):
            row = {
                "case": f"redis.x__flash-sale__t{i}",
                "impl": "redis.x",
                "verdict": "valid",
                "overlapping_holds": 0,
            }
            if fill_at == "cases" and i == 2:
                filler = tiny_disk / "filler"
                with open(filler, "wb") as fh, pytest.raises(OSError):
                    while True:
                        fh.write(b"\0" * 65536)
                        fh.flush()
            folder.add_case(row, {}, history if fill_at == "history" else None, {"final_state": {}})
            kept += 1
    folder.finish("incomplete")  # what the runner does on the way out: must not raise again
    message = str(caught.value)
    assert "the disk is full" in message and f"bench report {folder.path}" in message
    assert f"kept the {kept} finished case(s)" in message
    assert not list(folder.path.rglob("*.tmp")), list(folder.path.rglob("*"))
    meta = json.loads((folder.path / "run.json").read_text())
    assert meta["status"] == "incomplete"
    assert len(meta["cases"]) == kept == len(pd.read_csv(folder.path / "cases.csv"))
