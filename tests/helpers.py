"""Running the real ``bench`` command from tests."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.bench_forkserver import MARK_ENV, ForkedBench, ForkServer, forks

PROJECT = Path(__file__).resolve().parent.parent
#: Marks handed out by :func:`bench` in this test process, so checks look only at our own processes.
MARKS: list[str] = []
#: Pids of the bench processes :func:`bench` started: a server some of them started works in
#: ``/tmp/lockbench-run-<pid>-*`` (bench.cli.scratch), which is how it is found even where the
#: process rewrote its environment (redis-server does, for its process title).
PIDS: list[int] = []
#: Refuse to start or install a server: tests of what bench says before it would start one
NO_SERVERS = {"LOCKBENCH_FORBID_SERVERS": "1", "LOCKBENCH_NO_INSTALL": "1"}
#: this process's fork server for :func:`bench` (started on the first call, ended with the process)
FORK_SERVER = ForkServer()


def _ours(entry: Path, wanted: set[bytes], pids: list[int]) -> bool:
    with contextlib.suppress(OSError):
        if set((entry / "environ").read_bytes().split(b"\0")) & wanted:
            return True
    if pids:
        with contextlib.suppress(OSError):
            cwd = os.readlink(entry / "cwd")
            return any(f"lockbench-run-{pid}-" in cwd for pid in pids)
    return False


def marked_processes(marks: list[str] | None = None) -> list[tuple[int, str, str, str]]:
    """(pid, state, ppid, cmdline) of live processes whose environment carries one of ``marks``.

    A test asserts only about processes it started: another bench run on the same machine
    (a user's, or a second test session) carries no mark of ours and is never looked at.
    """
    wanted = {f"{MARK_ENV}={m}".encode() for m in (MARKS if marks is None else marks)}
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or not _ours(entry, wanted, PIDS if marks is None else []):
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        state, ppid = stat.rsplit(")", 1)[1].split()[:2]
        found.append((int(entry.name), state, ppid, cmd))
    return found


#: A file to which every :func:`bench` call appends one JSON line: the test, its arguments, wall
#: seconds and the CPU-seconds of the process tree it reaped (docs/architecture.md, "The test suite's time").
RECORD_CALLS_ENV = "LOCKBENCH_RECORD_BENCH_CALLS"


def _children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _record_call(args: tuple[str, ...], wall_s: float, cpu_s: float, code: int) -> None:
    line = {"test": os.environ.get("PYTEST_CURRENT_TEST", ""), "args": list(args), "wall_s": round(wall_s, 3),
            "cpu_s": round(cpu_s, 3), "exit": code}  # fmt: skip
    with open(os.environ[RECORD_CALLS_ENV], "a") as out:
        out.write(json.dumps(line) + "\n")


def bench(
    *args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m bench ARGS`` and capture its output (no server is left behind by it).

    Every process it starts carries a fresh :data:`MARK_ENV` value (see :func:`marked_processes`).
    The call is forked from this process's :mod:`tests.bench_forkserver`, which has the
    third-party imports done (``LOCKBENCH_TEST_FORKSERVER=0``: a fresh interpreter each time).
    """
    started, cpu_before = time.monotonic(), _children_cpu_s()
    proc = bench_popen(*args, cwd=cwd, env={**(env or {}), MARK_ENV: uuid.uuid4().hex})
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise
    # a forked child's CPU comes from the server's waiter; a fresh one's is ours to read
    cpu_s = proc.cpu_s if isinstance(proc, ForkedBench) else _children_cpu_s() - cpu_before
    if os.environ.get(RECORD_CALLS_ENV):
        _record_call(args, time.monotonic() - started, cpu_s, proc.returncode)
    return subprocess.CompletedProcess([sys.executable, "-m", "bench", *args], proc.returncode, out, err)


def bench_popen(
    *args: str,
    cwd: Path | None = None,
    env: dict | None = None,
    stdout: Any = subprocess.PIPE,
    stderr: Any = subprocess.PIPE,
    start_new_session: bool = False,
) -> Any:
    """Start ``python -m bench ARGS`` in the background: a ``subprocess.Popen`` or its forked equal.

    As :func:`bench`, but the test holds the process while it runs (signals, kills, lines as
    they come): :class:`tests.bench_forkserver.ForkedBench` has the part of Popen tests use
    (``pid``, text ``stdout``/``stderr`` where piped, ``poll``, ``wait``, ``communicate``,
    ``send_signal``, ``kill``). Every process it starts carries the call's mark, ``env``'s
    :data:`MARK_ENV` if it has one, else a fresh one (both in :data:`MARKS`).
    """
    full_env = {**os.environ, **(env or {})}
    full_env.setdefault(MARK_ENV, uuid.uuid4().hex)
    MARKS.append(full_env[MARK_ENV])
    if forks(full_env, "bench") and FORK_SERVER.serves(full_env):
        proc: Any = FORK_SERVER.popen(
            list(args), cwd or PROJECT, full_env, stdout, stderr, start_new_session=start_new_session
        )
    else:
        proc = subprocess.Popen(
            [sys.executable, "-m", "bench", *args], cwd=cwd or PROJECT, env=full_env, stdout=stdout,
            stderr=stderr, text=True, start_new_session=start_new_session,
        )  # fmt: skip
    PIDS.append(proc.pid)
    return proc


def wait_until_catching(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 60) -> None:
    """Return once ``proc`` catches ``sig`` (its handler installed: ``SigCgt`` in /proc/<pid>/status).

    Before that the interpreter is still starting and the signal's default action applies, to
    bench as to any program; a test of bench's own handling starts its clock here, not at the
    spawn (on a runner at load 8, Python took over 0.2 s to reach bench's first line).
    """
    bit = 1 << (int(sig) - 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
                if line.startswith("SigCgt:") and int(line.split()[1], 16) & bit:
                    return
        time.sleep(0.005)
    raise AssertionError(f"pid {proc.pid} never caught signal {int(sig)} (exit {proc.poll()})")


def refused(r: subprocess.CompletedProcess, *needles: str) -> str:
    """The one line of a refusal (exit 2, ``bench: error: ...``), checked to hold every needle."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("bench: error:"), r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def run_exit_code(run_dir: Path) -> int:
    """The exit code ``bench run`` owes a finished run: 1 when any case is invalid or unknown, else 0.

    Jepsen's rule: a test whose checker found the system invalid fails, and so does one that
    could not decide; only a run of valid cases passes.
    """
    import pandas as pd

    verdicts = pd.read_csv(run_dir / "cases.csv")["verdict"]
    return 1 if verdicts.isin(["invalid", "unknown"]).any() else 0


@contextlib.contextmanager
def lock_and_resource_redis(tmp_path: Path, name: str) -> Iterator[tuple[Any, Any]]:
    """Two real redis-servers this test owns: one as the lock server, one as the resource; stopped after."""
    from infra.redis_server import RedisServer

    lock = RedisServer(tmp_path / "lock", name=f"redis-{name}-lock").start()
    try:
        resource = RedisServer(tmp_path / "resource", name=f"redis-{name}-resource").start()
    except BaseException:
        lock.stop()
        raise
    try:
        yield lock, resource
    finally:
        lock.stop()
        resource.stop()


@dataclass
class InProcessResult:
    """What ``bench`` said when it ran inside the test process: exit code and both streams."""

    code: int
    out: str
    err: str


def bench_in_process(*args: object, env: dict[str, str] | None = None) -> InProcessResult:
    """``bench ARGS`` in this process (bench.cli.app.main; signal handlers and ``env`` restored after).

    Why: a subprocess per call costs a second of imports; the real command in a subprocess is
    exercised by the tests that call :func:`bench`.
    """
    import io
    import signal
    from contextlib import redirect_stderr, redirect_stdout

    from bench.cli.app import main

    out, err = io.StringIO(), io.StringIO()
    saved = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main([str(a) for a in args])
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 0
    finally:
        signal.signal(signal.SIGTERM, saved[0])
        signal.signal(signal.SIGINT, saved[1])
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return InProcessResult(code, out.getvalue(), err.getvalue())


def add_case_files(run: Path, *, hists: bool = True, history: bool = True, merged: bool = True) -> Path:
    """Give a folder written by a test the files bench writes beside every row (resultsio checks them).

    A case's ``hist/<case>.json`` and ``history/<case>.parquet`` and, per impl x workload,
    ``hist/<group>.merged.json``: empty but well-formed where the test wrote none, so a test
    that builds its table by hand reads as a whole folder, and one that leaves a file out on
    purpose (``hists=False``, ``history=False``, ``merged=False``) reads as damaged.
    """
    import json

    import pandas as pd

    from resultsio import trial_group

    try:
        cases = [str(c) for c in pd.read_csv(run / "cases.csv")["case"].dropna()]
    except (pd.errors.EmptyDataError, KeyError):  # a run that finished no case: no file to add
        return run
    (run / "hist").mkdir(exist_ok=True)
    for case in cases if hists else []:
        hist = run / "hist" / f"{case}.json"
        if not hist.exists():
            hist.write_text(json.dumps({"unit": "us", "histograms": {}}))
    if history:
        (run / "history").mkdir(exist_ok=True)
        empty = pd.DataFrame(
            {
                "client": pd.Series([], dtype="string"), "seq": pd.Series([], dtype="int64"),
                "op": pd.Series([], dtype="string"), "type": pd.Series([], dtype="string"),
                "lock": pd.Series([], dtype="string"), "t_ns": pd.Series([], dtype="int64"),
                "token": pd.Series([], dtype="Int64"), "value": pd.Series([], dtype="Int64"),
                "error": pd.Series([], dtype="string"),
            }
        )  # fmt: skip
        for case in cases:
            file = run / "history" / f"{case}.parquet"
            if not file.exists():
                empty.to_parquet(file, index=False)
    if merged:
        groups: dict[str, list[str]] = {}
        for case in cases:
            groups.setdefault(trial_group(case), []).append(case)
        for group, members in groups.items():
            file = run / "hist" / f"{group}.merged.json"
            if not file.exists():
                payload = {"unit": "us", "group": group, "cases": members, "histograms": {}, "trials": []}
                file.write_text(json.dumps(payload))
    return run


#: The project's root: module probes run from it.
ROOT = Path(__file__).resolve().parent.parent


def python_json(*args: str) -> Any:
    """Run ``python args`` (``-m module ...`` or ``-c script ...``) in a fresh interpreter from the
    project root and read its last line of output as JSON.

    Why: probes that must not share this process's state (gevent patched or not, fresh imports)
    print their findings as one JSON line; a failure shows the end of their stderr.
    """
    done = subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def locust(argv: list[str], log: Path, timeout: float = 120, nice: int | None = None) -> int:
    """Run a case's Locust (``argv``: ``python -m locust ...``) as ``bench run`` does by default; its exit code.

    Through the product's warm launcher (bench/run/warm.py), with the warm process forked
    from this process's warm server (:meth:`tests.bench_forkserver.ForkServer.warm_locust`):
    the same case fork and Locust ``main()``, without a fresh interpreter's 1.5 CPU-s of
    imports. Locust's stdout and stderr both go to ``log``. Tests of the cold launcher
    itself call ``bench.run.locust.run_locust``.
    """
    with FORK_SERVER.warm_locust(nice) as warm:
        return warm.run(argv, log, timeout)


def two_worker_locust(locustfile: Path, out: Path, case: str, options: list[str]) -> list[str]:
    """Locust's command line for a headless case on two forked workers (``--processes 2``), as bench
    runs one: ``options`` gives the users, run time, lock and resource, and the workload's flags."""
    from bench.run.locust import forked_workers_argv

    return [
        sys.executable, "-m", "locust", "-f", str(locustfile), "--headless", "--stop-timeout", "10",
        "--exit-code-on-error", "0", "--only-summary", *options,
        "--lockbench-out", str(out), "--lockbench-case", case, "--lockbench-no-summary",
        *forked_workers_argv(2),
    ]  # fmt: skip
