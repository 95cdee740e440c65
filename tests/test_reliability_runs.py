"""Whole runs that go wrong: a server dies, Ctrl-C lands somewhere, Locust stops mid critical section.

Each test drives the real ``bench`` (or plain ``locust``) as a subprocess against real
servers on 127.0.0.1, and checks what a user would see: the exit code, the one line on
stderr, run.json and cases.csv, and that no process bench started outlives it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pandas as pd
import psutil
import pytest

from infra.redis_server import RedisServer
from tests.helpers import MARK_ENV, PROJECT, bench_popen, locust, marked_processes

IMPL = "redis.set-nx-px-lua"


class BenchRun:
    """``python -m bench ARGS`` in the background (tests.helpers.bench_popen), its stderr read line by line.

    Its processes carry :attr:`mark`: the warm Locust and its cases are forked from the tests'
    warm server, not from bench, so :meth:`descendants` finds them by it as well.
    """

    def __init__(self, *args: str) -> None:
        self.mark = uuid.uuid4().hex
        self.proc = bench_popen(*args, env={MARK_ENV: self.mark})
        self.lines: list[str] = []
        self._new = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stderr:
            with self._new:
                self.lines.append(line.rstrip("\n"))
                self._new.notify_all()

    def wait_for(self, text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        with self._new:
            while not any(text in ln for ln in self.lines):
                left = deadline - time.monotonic()
                assert left > 0 and self.proc.poll() is None, (text, self.lines)
                self._new.wait(min(left, 0.2))

    def descendants(self) -> list[psutil.Process]:
        """Every live process this run started: its children and what carries its mark."""
        try:
            found = {p.pid: p for p in psutil.Process(self.proc.pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            found = {}
        for pid, *_ in marked_processes([self.mark]):
            if pid != self.proc.pid and pid not in found:
                with contextlib.suppress(psutil.NoSuchProcess):
                    found[pid] = psutil.Process(pid)
        return list(found.values())

    def finish(self, timeout: float = 120) -> tuple[int, str, str]:
        out = self.proc.stdout.read()
        code = self.proc.wait(timeout)
        self._reader.join(10)
        return code, out, "\n".join(self.lines)


def _assert_gone(processes: list[psutil.Process]) -> None:
    deadline = time.monotonic() + 15
    alive = processes
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.2)
    assert not alive, f"left behind: {[(p.pid, p.name()) for p in alive]}"


def _last_line(err: str) -> str:
    return [ln for ln in err.splitlines() if ln.strip()][-1]


def _run_folder(results: Path) -> Path:
    folders = [p for p in results.iterdir() if p.is_dir()]
    assert len(folders) == 1, folders
    return folders[0]


def _wait_for_lock_traffic(url: str, commands: int = 300, timeout: float = 60) -> None:
    """Until the lock server has served ``commands`` more acquires than when called.

    Counted from the call, not from the server's start: the solo calibration before the
    case ran on the same server, and a kill timed by its traffic could land before the
    measured case had cleared its lock state (a case with no row, not a case that lost
    its server mid-run).
    """
    import redis

    def served() -> int:
        stats = client.info("commandstats")
        return sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_set", "cmdstat_evalsha"))

    client = redis.Redis.from_url(url)
    start = served()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if served() - start >= commands:
            return
        time.sleep(0.1)
    raise AssertionError("no lock traffic reached the server")


# a server that dies ---------------------------------------------------------------------


@pytest.mark.server
def test_user_supplied_server_killed_mid_run_is_unknown_and_fails_the_run(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "srv", name="users-redis").start()
    try:
        run = BenchRun("run", "--impl", IMPL, "--redis-url", server.url, "--duration", "7", "--users", "5",
                       "--no-report", "--results-dir", str(tmp_path / "results"))  # fmt: skip
        run.wait_for("[2/2]")  # [1/2] is the solo calibration
        _wait_for_lock_traffic(server.url)
        server.process.kill()
        code, out, err = run.finish()
    finally:
        server.stop()
    assert code == 1, err
    assert "Traceback" not in err
    row = pd.read_csv(_run_folder(tmp_path / "results") / "cases.csv").iloc[0]
    assert row["verdict"] == "unknown", row.to_dict()
    assert "no evidence" in row["verdict_reason"] and "server errors" in row["verdict_reason"]
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert any(
        ln.startswith("lockbench: case redis.set-nx-px-lua__flash-sale has no verdict") for ln in lines
    ), err
    assert lines[-1].startswith("lockbench: wall time"), lines[-1]  # the last line: where the time went
    _assert_tries_backed_off(_run_folder(tmp_path / "results") / "history" / f"{row['case']}.parquet")


def _assert_tries_backed_off(path: Path) -> None:
    """Each buyer's failed tries against the dead server came further and further apart.

    A refused connection answers in microseconds: without workloads/harness/backoff.py each
    buyer tried again at once, thousands of times a second, its Locust process a core busy. The
    gaps are read from the history's own times, so a slow machine only makes them longer.
    """
    from workloads.harness.backoff import CAP_S, FIRST_S

    history = pd.read_parquet(path)
    acquires = history[history["op"] == "acquire"]
    invokes = acquires[acquires["type"] == "invoke"].set_index(["client", "seq"])["t_ns"]
    last_ok = acquires[acquires["type"] == "ok"].groupby("client")["t_ns"].max()
    # an error names its exception ("ConnectionError: ..."); a timeout's does not, and the
    # harness's own endings (stopped, unfinished, interrupted) are no tries the server failed
    errors = acquires["error"].fillna("")
    failed = acquires[
        acquires["type"].isin(["fail", "info"])
        & errors.str.match(r"^[A-Za-z]+: ")
        & ~errors.str.startswith(("stopped", "unfinished", "interrupted"))
    ]
    after = failed[failed["t_ns"] > failed["client"].map(last_ok).fillna(0)]  # since the server died
    assert len(after) >= 5, "the dead server failed no try"
    for client, tries in after.groupby("client"):
        started = sorted(int(invokes[(client, int(seq))]) for seq in tries["seq"])
        gaps = [b - a for a, b in zip(started, started[1:], strict=False)]
        # the n-th wait is FIRST_S * 2**n, at most CAP_S; an invoke follows its wait
        due = [min(CAP_S, FIRST_S * 2 ** min(n, 20)) * 1e9 for n in range(len(gaps))]
        assert all(g >= d * 0.99 for g, d in zip(gaps, due, strict=True)), (client, gaps[:10])


@pytest.mark.server
def test_server_bench_started_that_died_makes_the_case_unknown(tmp_path: Path) -> None:
    run = BenchRun("run", "--impl", IMPL, "--duration", "6", "--users", "5", "--no-report",
                   "--results-dir", str(tmp_path / "results"))  # fmt: skip
    run.wait_for("[2/2]")  # [1/2] is the solo calibration
    servers = [p for p in run.descendants() if p.name() == "redis-server"]
    assert len(servers) == 2, servers  # the lock server and the resource
    lock_server = next(p for p in servers if "redis-lock" in p.cwd())  # redis-server chdirs to its --dir
    port = next(c.laddr.port for c in lock_server.net_connections("tcp") if c.status == psutil.CONN_LISTEN)
    _wait_for_lock_traffic(f"redis://127.0.0.1:{port}/0")
    lock_server.kill()
    code, out, err = run.finish()
    assert code == 1, err
    assert "Traceback" not in err
    folder = _run_folder(tmp_path / "results")
    row = pd.read_csv(folder / "cases.csv").iloc[0]
    assert row["verdict"] == "unknown", row.to_dict()
    assert json.loads((folder / "run.json").read_text())["status"] == "incomplete"
    _assert_gone(servers)


# Ctrl-C -------------------------------------------------------------------------------------


@pytest.mark.server
def test_interrupt_before_the_first_case(tmp_path: Path) -> None:
    run = BenchRun(
        "run", "--impl", IMPL, "--duration", "5", "--users", "5", "--results-dir", str(tmp_path / "r")
    )
    run.wait_for("starting servers")
    started = run.descendants()
    run.proc.send_signal(signal.SIGINT)
    code, out, err = run.finish()
    assert code == 130, err
    assert "Traceback" not in err
    line = _last_line(err)
    assert line.startswith("bench: interrupted"), line
    assert "nothing was written" in line or "finished cases in" in line, line
    _assert_gone(started + run.descendants())


@pytest.mark.server
def test_interrupt_mid_case_keeps_finished_cases(tmp_path: Path) -> None:
    run = BenchRun("run", "--impl", IMPL, "--impl", "redis.setnx-del", "--duration", "3", "--users", "5",
                   "--results-dir", str(tmp_path / "r"))  # fmt: skip
    run.wait_for("[4/4]")  # each impl's solo calibration runs before its case
    time.sleep(2)
    started = run.descendants()
    run.proc.send_signal(signal.SIGINT)
    code, out, err = run.finish()
    folder = _run_folder(tmp_path / "r")
    assert code == 130, err
    assert "Traceback" not in err
    assert _last_line(err) == f"bench: interrupted; finished cases in {folder} (1 of 2 finished)"
    meta = json.loads((folder / "run.json").read_text())
    assert meta["status"] == "incomplete" and len(meta["cases"]) == 1
    assert len(pd.read_csv(folder / "cases.csv")) == 1
    _assert_gone(started)


@pytest.mark.server
def test_interrupt_while_rendering_says_how_to_render(tmp_path: Path) -> None:
    run = BenchRun(
        "run", "--impl", IMPL, "--duration", "3", "--users", "5", "--results-dir", str(tmp_path / "r")
    )
    run.wait_for("lockbench run ")  # the console table: rendering starts right after it
    run.proc.send_signal(signal.SIGINT)
    code, out, err = run.finish()
    folder = _run_folder(tmp_path / "r")
    assert code == 130, err
    assert "Traceback" not in err
    line = _last_line(err)
    assert f"bench report {folder}" in line and line.startswith("bench: interrupted"), line
    meta = json.loads((folder / "run.json").read_text())
    assert meta["report"] == "missing" and not (folder / "report.html").exists()
    assert len(pd.read_csv(folder / "cases.csv")) == 1


# Locust's own stop -------------------------------------------------------------------------


def test_plain_locust_run_time_stop_keeps_a_correct_lock_valid_and_completes_every_op(
    redis_url: str, resource_server: RedisServer, tmp_path: Path
) -> None:
    """40 buyers on 40 items, 50 ms between the stock write and the order: Locust's --run-time stop
    lands inside many operations. A correct lock stays valid (no lost update is invented from a
    sale the stop cut), and every invoke has exactly one completion: ok, fail, or info where the
    stop cut it (issue 21).
    """
    locustfile = str(PROJECT / "tests" / "slow_ledger_locustfile.py")
    log = tmp_path / "locust.log"
    locust(
        [sys.executable, "-m", "locust", "-f", locustfile, "--headless", "-u", "40", "-r", "40",
         "-t", "3s", "--only-summary", "--items", "40", "--skew", "0", "--cs", "0ms", "--lock-impl", IMPL,
         "--lock-url", redis_url, "--resource-url", resource_server.url, "--lockbench-out", str(tmp_path)],
        log,
    )  # fmt: skip
    verdict = next(ln for ln in log.read_text().splitlines() if "verdict:" in ln)
    assert "verdict: valid" in verdict, verdict
    assert "lost_updates=0" in verdict and "overlapping_holds=0" in verdict
    history = pd.read_parquet(tmp_path / "history.parquet")
    for op in ("acquire", "purchase", "release"):
        rows = history[history["op"] == op]
        invoked = rows[rows["type"] == "invoke"].groupby(["client", "seq"]).size()
        completed = rows[rows["type"] != "invoke"].groupby(["client", "seq"]).size()
        # every invoke has exactly one completion: ok, fail, or info when the stop cut it
        assert len(invoked) > 40 and invoked.index.equals(completed.sort_index().index), op
        assert (completed == 1).all(), op
    progress = json.loads((tmp_path / "progress.json").read_text())  # what bench's live line polls
    assert progress["acquisitions"] > 0


# issue 24: no orphans, run.json after a kill, the resource's death, an interrupted matrix -----


def _marked_run(*args: str) -> tuple[BenchRun, str]:
    """A BenchRun and the mark its processes (and all they start) carry."""
    run = BenchRun(*args)
    return run, run.mark


def _locusts(mark: str) -> list[tuple[int, str, str, str]]:
    from tests.helpers import marked_processes

    return [p for p in marked_processes([mark]) if "locust" in p[3] and p[1] != "Z"]


def _working_in(folders: list[Path]) -> list[int]:
    """Live pids whose working directory lies in one of ``folders`` (deleted or not)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cwd = os.readlink(entry / "cwd")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and any(cwd.startswith(str(f)) for f in folders):
            found.append(int(entry.name))
    return found


@pytest.mark.server
@pytest.mark.parametrize("launch", ["cold", "warm"])
def test_kill_9_of_bench_leaves_no_locust_and_a_later_bench_tells_the_truth(
    tmp_path: Path, launch: str
) -> None:
    """SIGKILL of bench while its Locust master and 2 workers are saturated: none outlives it by 5 s."""
    import tempfile

    from tests.helpers import marked_processes

    results = tmp_path / "r"
    if launch == "cold":
        run, mark = _marked_run("run", "--impl", IMPL, "--duration", "60", "--users", "40", "--processes", "2",
                                "--retry-interval", "0", "--no-report", "--results-dir", str(results))  # fmt: skip
        run.wait_for("[2/2]")  # [1/2] is the solo calibration
        want = 3  # master + 2 workers
    else:
        run, mark = _marked_run("matrix", "--impl", IMPL, "--scenario", "long-cs", "--parallel", "1",
                                "--no-report", "--results-dir", str(results))  # fmt: skip
        run.wait_for("results in")
        want = 2  # the warm process + the case's Locust (its workers, if any, too)
    deadline = time.monotonic() + 90
    while len(_locusts(mark)) < want:
        assert time.monotonic() < deadline and run.proc.poll() is None, (run.lines, _locusts(mark))
        time.sleep(0.2)
    scratch_dirs = list(Path(tempfile.gettempdir()).glob(f"lockbench-run-{run.proc.pid}-*"))
    assert scratch_dirs, "bench made no scratch folder of its own"
    run.proc.kill()
    run.proc.wait(10)
    deadline = time.monotonic() + 5  # the bound: every Locust gone within 5 s of bench's death
    while _locusts(mark) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _locusts(mark), _locusts(mark)
    deadline = time.monotonic() + 15  # servers stop by the same parent-death signal
    while (marked_processes([mark]) or _working_in(scratch_dirs)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not [p for p in marked_processes([mark]) if p[1] != "Z"]
    # redis-server rewrites its environment (no mark to see): it is found by its folder in the
    # scratch, which is where a matrix lane's servers (started off the main thread) work
    assert not _working_in(scratch_dirs)
    folder = _run_folder(results)
    assert json.loads((folder / "run.json").read_text())["status"] == "running"  # nobody could say otherwise
    from tests.helpers import bench

    r = bench("report", str(folder))  # exit 2 when no case finished; the marking comes first either way
    assert "marked interrupted" in r.stderr, r.stderr
    assert json.loads((folder / "run.json").read_text())["status"] == "interrupted"
    assert not any(d.exists() for d in scratch_dirs), "the dead run's scratch folder is still there"


@pytest.mark.server
def test_resource_server_death_is_named(tmp_path: Path) -> None:
    run = BenchRun("run", "--impl", IMPL, "--duration", "8", "--users", "5", "--no-report",
                   "--results-dir", str(tmp_path / "results"))  # fmt: skip
    run.wait_for("[2/2]")
    servers = [p for p in run.descendants() if p.name() == "redis-server"]
    lock_server = next(p for p in servers if "redis-lock" in p.cwd())
    port = next(c.laddr.port for c in lock_server.net_connections("tcp") if c.status == psutil.CONN_LISTEN)
    _wait_for_lock_traffic(f"redis://127.0.0.1:{port}/0")
    resource = next(p for p in servers if p.pid != lock_server.pid)
    resource.kill()
    code, out, err = run.finish()
    assert code == 1, err
    assert "Traceback" not in err
    assert "the resource server (redis redis://127.0.0.1:" in err and "died during" in err, err
    assert "Locust exited with code" not in err, err
    folder = _run_folder(tmp_path / "results")
    assert json.loads((folder / "run.json").read_text())["status"] == "incomplete"
    _assert_gone(servers)


@pytest.mark.server
def test_interrupted_matrix_prints_one_line_with_the_folder_and_renders_nothing(tmp_path: Path) -> None:
    results = tmp_path / "r"
    run = BenchRun("matrix", "--impl", IMPL, "--scenario", "long-cs", "--scenario", "crash", "--parallel", "1",
                   "--results-dir", str(results))  # fmt: skip
    run.wait_for("results in")
    time.sleep(3)  # inside the first case
    started = run.descendants()
    seen = len(run.lines)
    run.proc.send_signal(signal.SIGINT)
    code, out, err = run.finish()
    folder = _run_folder(results)
    after = [ln for ln in run.lines[seen:] if ln.strip()]
    assert code == 130, err
    assert len(after) == 1, after
    assert after[0].startswith(f"bench: interrupted; finished cases in {folder}"), after
    assert f"bench report {folder}" in after[0]
    assert not (folder / "report.html").exists() and out == ""
    assert json.loads((folder / "run.json").read_text())["status"] == "incomplete"
    _assert_gone(started)


@pytest.mark.server
def test_a_full_disk_mid_run_is_one_line_with_the_recovery_command(tmp_path: Path) -> None:
    """Results on a 4 MiB tmpfs that fills up after the first case (root only; unmounted after)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    disk = tmp_path / "tiny"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        run = BenchRun("run", "--impl", IMPL, "--impl", "redis.setnx-del", "--duration", "2", "--users", "5",
                       "--no-report", "--results-dir", str(disk))  # fmt: skip
        run.wait_for("[3/4]")  # the first impl's case is written: fill the disk before the second
        # suppress outermost: closing the file flushes what is left and fails on the full disk too
        with contextlib.suppress(OSError), open(disk / "filler", "wb") as fh:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        code, out, err = run.finish()
        folder = next(p for p in disk.iterdir() if p.is_dir())
        assert code == 2, err
        assert "Traceback" not in err
        line = _last_line(err)
        assert line.startswith("bench: error: could not write") and "the disk is full" in line, line
        assert f"bench report {folder}" in line, line
        assert not [p for p in disk.rglob("*.tmp")], list(disk.rglob("*"))
        meta = json.loads((folder / "run.json").read_text())
        assert meta["status"] == "incomplete"
        assert len(meta["cases"]) == len(pd.read_csv(folder / "cases.csv")) >= 1
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
