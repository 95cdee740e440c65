"""A child server process that cannot outlive the command that started it."""

from __future__ import annotations

import atexit
import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from infra.errors import InfraError

_live: set[ServerProcess] = set()
_PR_SET_PDEATHSIG = 1
#: Set (to any text) to make starting a server an error: ``scripts/test --quick`` sets it, so a
#: test that claims to start no server, or a ``bench`` command such a test runs, cannot start one.
FORBID_ENV = "LOCKBENCH_FORBID_SERVERS"
#: TEST ONLY (tests/test_matrix_failures.py): ``<server name>:<count>[,...]`` makes the first <count>
#: starts of that server in this process fail (a shell that writes a line to the server's log and
#: exits 1 runs instead of the server), so a test can show what a failed start costs;
#: ``<server name>:<n>-<m>`` makes starts n to m fail (a restart's start, tests/test_postgres_infra.py).
FAIL_START_ENV = "LOCKBENCH_TEST_FAIL_START"
#: TEST ONLY: ``<server name>:<seconds>[,...]``: the first start of that server in this process is
#: SIGKILLed that long after it became ready, so a test can show what a server death costs.
KILL_AFTER_ENV = "LOCKBENCH_TEST_KILL_AFTER"
_hook_counts: dict[tuple[str, str], int] = {}
_hook_lock = threading.Lock()
#: Called with every server process this process starts from now on (restarts of a fault
#: included), once it has a pid: a matrix raises servers to its Locust sessions' priority with it.
_spawn_hook: Callable[[ServerProcess], object] | None = None


@contextlib.contextmanager
def on_every_start(hook: Callable[[ServerProcess], object]) -> Any:
    """Call ``hook(server)`` for every server started (or started again) inside the ``with`` block."""
    global _spawn_hook
    before, _spawn_hook = _spawn_hook, hook
    try:
        yield
    finally:
        _spawn_hook = before


def _test_hook(env: str, name: str) -> tuple[float, float, int] | None:
    """TEST ONLY: (from, to, the how-many-th start of ``name`` this is) as given in ``env``, or None.

    ``<name>:<to>`` is (1, to); ``<name>:<from>-<to>`` is (from, to).
    """
    text = os.environ.get(env, "")
    if not text:
        return None
    for item in text.split(","):
        who, _, value = item.strip().rpartition(":")
        if who != name:
            continue
        low, _, high = value.partition("-")
        try:
            first, last = (float(low), float(high)) if high else (1.0, float(low))
        except ValueError:
            return None
        with _hook_lock:
            nth = _hook_counts.get((env, name), 0) + 1
            _hook_counts[(env, name)] = nth
        return first, last, nth
    return None


def die_with_parent() -> None:
    """preexec_fn: the kernel SIGKILLs this child when the process that started it dies.

    atexit and ``finally`` cover every exit of Python but SIGKILL; this covers that one,
    so even ``kill -9`` of bench leaves no server behind.
    """
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


_spawn_jobs: queue.SimpleQueue[tuple[Callable[[], Any], int | None, Future]] = queue.SimpleQueue()
_spawner_started = threading.Lock()
_spawner: list[threading.Thread] = []
_CLONE_NEWNET = 0x40000000


def _thread_netns() -> int | None:
    """An fd of the calling thread's network namespace (None where /proc cannot say)."""
    try:
        return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


def _same_file(fd_a: int, fd_b: int) -> bool:
    a, b = os.fstat(fd_a), os.fstat(fd_b)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _join_netns(fd: int | None) -> None:
    """Move the spawner into the caller's network namespace (``fd``), unless it is there already."""
    if fd is None:
        return
    own = _thread_netns()
    try:
        if own is not None and _same_file(own, fd):
            return  # the common case, and the only one without root: nothing to do
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise InfraError(f"cannot start a server in the caller's network namespace: {os.strerror(err)}")
    finally:
        if own is not None:
            os.close(own)


def _serve_spawns() -> None:
    while True:
        job, netns, done = _spawn_jobs.get()
        try:
            _join_netns(netns)
            done.set_result(job())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            done.set_exception(exc)


def _from_spawner(job: Callable[[], subprocess.Popen]) -> subprocess.Popen:
    """Run ``job`` (a fork) in one daemon thread that lives until the process exits.

    A child's parent-death signal fires when its forking thread ends; this thread ends only
    with the process (after the atexit stop of every server), so the children of any thread
    die with bench, SIGKILL included, and never with the thread that asked for them.

    A child is forked into its forking thread's network namespace, and a thread starts in
    its creator's. The spawner used to stay wherever it was created: when a matrix's partition
    lane (a thread inside its ``control`` test host) started the first server, every later
    loopback server was born inside that test host, where 127.0.0.1 is not the lanes' loopback
    ("redis-lock did not become ready within 10s" right after a partition lane), and was killed
    with the test host's namespaces. So the spawner enters the caller's namespace for each fork.
    """
    with _spawner_started:
        if not _spawner:
            _spawner.append(threading.Thread(target=_serve_spawns, name="lockbench-spawner", daemon=True))
            _spawner[0].start()
    done: Future = Future()
    netns = _thread_netns()
    try:
        _spawn_jobs.put((job, netns, done))
        return done.result()
    finally:
        if netns is not None:
            os.close(netns)


def _stop_all_at_exit() -> None:
    for proc in list(_live):
        proc.stop()


atexit.register(_stop_all_at_exit)


def _in_main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


class ServerProcess:
    """A server started in its own process group, with its output in a log file.

    Why its own class: every backend needs the same start / wait-until-ready / stop
    dance, and stopping must also happen on Ctrl-C, on an exception and at interpreter
    exit, so no server outlives the command (a leaked server is a bug).
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        log_path: Path,
        *,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        user: str | None = None,
        realtime: bool = False,
    ) -> None:
        self.name = name
        #: whether every thread of this server blocks between requests, so that it may run in the
        #: real-time class beside a matrix's generators (workloads/harness/priority.py): Redis,
        #: memcached and PostgreSQL do; etcd's Go runtime spins its idle threads and ZooKeeper's JVM
        #: compiles and collects for seconds, and in that class either held both cores from every
        #: process of the normal class (the harness among them) until a shard stopped.
        self.realtime = realtime
        self.argv = list(argv)
        self.log_path = log_path
        self.cwd = cwd
        self.env = env
        self.user = user
        self.popen: subprocess.Popen | None = None

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen else None

    def start(self, ready: Callable[[], bool], timeout: float = 30.0, detached: bool = False) -> None:
        """Start and poll ``ready`` until it returns True; raise InfraError otherwise."""
        if os.environ.get(FORBID_ENV):
            raise InfraError(f"{self.name}: starting servers is forbidden here ({FORBID_ENV} is set)")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - the child owns it after Popen
        argv = self.argv
        fail = _test_hook(FAIL_START_ENV, self.name)
        if fail is not None and fail[0] <= fail[2] <= fail[1]:  # TEST ONLY: this start fails, as asked
            said = f"lockbench test hook ({FAIL_START_ENV}): start {fail[2]} of {self.name} fails"
            argv = ["/bin/sh", "-c", f"echo '{said}'; exit 1"]

        def spawn() -> subprocess.Popen:
            return subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.cwd,
                env=self.env,
                user=self.user,
                start_new_session=True,
                preexec_fn=None if detached else die_with_parent,
            )

        try:
            # PDEATHSIG follows the *thread* that forks: a server started from a matrix lane or
            # restarted from a fault thread would die with that thread (or, unasked, outlive a
            # kill -9 of bench), so it is forked by a thread that lives as long as the process
            self.popen = spawn() if detached or _in_main_thread() else _from_spawner(spawn)
        except OSError as exc:
            raise InfraError(f"cannot start {self.name}: {exc}") from exc
        finally:
            log.close()
        if _spawn_hook is not None:
            _spawn_hook(self)
        if not detached:
            _live.add(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise InfraError(f"{self.name} exited at start (code {self.popen.returncode}): {tail}")
            try:
                if ready():
                    self._kill_later_if_asked()
                    return
            except Exception:  # noqa: BLE001 - not ready yet, whatever the client says
                pass
            time.sleep(0.02)
        self.stop()
        raise InfraError(f"{self.name} did not become ready within {timeout:.0f}s; see {self.log_path}")

    def _kill_later_if_asked(self) -> None:
        """TEST ONLY (:data:`KILL_AFTER_ENV`): SIGKILL the first start of this server a while after it is ready."""
        asked = _test_hook(KILL_AFTER_ENV, self.name)
        if asked is None or asked[2] > 1:
            return
        popen = self.popen

        def kill() -> None:
            if popen is not None and popen.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(popen.pid, signal.SIGKILL)

        timer = threading.Timer(asked[1], kill)
        timer.daemon = True
        timer.start()

    def log_tail(self, lines: int = 3) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send a signal to the whole process group (faults use SIGKILL / SIGSTOP / SIGCONT)."""
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, sig)

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the process group, then SIGKILL after ``grace`` seconds."""
        _live.discard(self)
        if self.popen is None or self.popen.poll() is not None:
            return
        self.kill(signal.SIGCONT)  # a paused server cannot handle SIGTERM
        self.kill(signal.SIGTERM)
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            self.kill(signal.SIGKILL)
            self.popen.wait(5)


def stop_pid(pid: int, grace: float = 5.0) -> bool:
    """Stop a detached server by pid (its process group); True when it was running."""
    try:
        os.killpg(pid, signal.SIGCONT)
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    return True
