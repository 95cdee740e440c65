"""A fork server for the tests' ``bench`` calls: the heavy imports once per pytest process.

Why: a ``python -m bench`` process spends about a CPU-second importing pandas, pyarrow,
numpy, redis, pydantic, typer and rich before its first line of work, and the suite makes
some 180 such calls (docs/architecture.md, "The test suite's time"). This server imports
those third-party packages once, then forks a child per call that runs the very command
``python -m bench ARGS`` would (``runpy`` on ``bench/__main__.py``) with the call's
arguments, environment, working directory and output pipes. bench's own modules are not
preloaded: they may read the environment when imported, and each call brings its own.

Each call forks twice: a waiter, which forks the bench child, reports its pid, waits for it
and reports its exit status and the CPU of its reaped process tree; the server itself only
accepts and forks, so it never runs a thread (forking a threaded process is unsafe) and
calls never wait for each other.

Each bench child also gets its warm Locust processes (bench/run/warm.py) from the second
server, tests/warm_locust_forkserver.py, which has warm_locust's imports done (1.5 CPU-s a
``bench run``).

What differs from a fresh process, and why it does not matter to what the tests check:
- ``/proc/<pid>/environ`` shows the environment a process was exec'd with, which a fork
  inherits; each fork writes its call's mark over the servers' placeholder
  (:func:`show_mark`), so :func:`tests.helpers.marked_processes` finds the bench child, its
  warm process and every Locust it forks. Processes bench execs get the call's environment.
- The preloaded third-party modules saw the server's environment. A call whose ``PYTHON*``
  variables differ from the server's (``PYTHONPATH``: they act at interpreter start) runs
  in a fresh process (:meth:`ForkServer.serves`).
- The bench child's ``/proc/<pid>/cmdline`` is the server's; the CPU :func:`tests.helpers.bench`
  records is the bench child's tree without its warm process (not its child here).
- Tests of what only a fresh interpreter shows (bytecode at start, signals while importing,
  the console script, the password kept out of the command line) start their own process.
``LOCKBENCH_TEST_FORKSERVER=0`` turns both servers off, ``=bench`` the warm one only.

Run as ``python -m tests.bench_forkserver SOCKET``; it exits when its stdin closes.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

PROJECT = Path(__file__).resolve().parent.parent
#: what every ``bench`` process imports before it works (``-X importtime`` of a ``bench run``)
PRELOAD = (
    "pandas", "numpy", "pyarrow", "pyarrow.parquet", "redis", "hdrh.histogram", "pydantic", "typer", "click",
    "rich.console", "rich.table", "rich.progress", "yaml", "dateutil.parser", "asyncio",
)  # fmt: skip
#: ``0`` makes :func:`tests.helpers.bench` start a fresh ``python -m bench`` for every call;
#: ``bench`` forks bench but lets it start its warm Locust as the product does
ENABLE_ENV = "LOCKBENCH_TEST_FORKSERVER"


def forks(env: dict[str, str], server: str) -> bool:
    """Whether :data:`ENABLE_ENV` in ``env`` lets ``server`` (``"bench"`` or ``"warm"``) fork a call."""
    value = env.get(ENABLE_ENV, "1")
    return value != "0" if server == "bench" else value not in ("0", "bench")


_HEADER = struct.Struct("!I")
#: The variable that marks every process a test's ``bench`` started (children inherit it); the
#: servers start with :data:`MARK_PLACEHOLDER` in it, which each fork overwrites (:func:`show_mark`)
MARK_ENV = "LOCKBENCH_TEST_MARK"
MARK_PLACEHOLDER = "0" * 32


def show_mark(mark: str) -> None:
    """Write ``mark`` over this process's start-up :data:`MARK_ENV` placeholder, where /proc shows it.

    Why: ``/proc/<pid>/environ`` shows the environment block a process was exec'd with, and a
    fork inherits its parent's; :func:`tests.helpers.marked_processes` finds what a test started
    by that mark. The servers start with :data:`MARK_PLACEHOLDER` (the length of a mark), and each
    forked child rewrites those bytes in its own memory (as redis-server rewrites its argv for
    its title); its forks inherit the mark. Needs a mark as long as the placeholder.
    """
    import ctypes

    key = f"{MARK_ENV}=".encode()
    # with a NUL in front, the entry's NUL-led index here is its start in the block itself
    at = (b"\0" + Path("/proc/self/environ").read_bytes()).find(
        b"\0" + key + MARK_PLACEHOLDER.encode() + b"\0"
    )
    if at < 0 or len(mark) != len(MARK_PLACEHOLDER):
        return
    env_start = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[47])
    ctypes.memmove(env_start + at + len(key), mark.encode(), len(mark))


def server_env() -> dict[str, str]:
    """The environment a server starts with: this one, with the mark's placeholder."""
    return {**os.environ, MARK_ENV: MARK_PLACEHOLDER}


def recv_request(conn: socket.socket, nfds: int) -> tuple[dict[str, Any], list[int]]:
    """One request: a length header with ``nfds`` descriptors, then that many bytes of JSON."""
    header, fds, _, _ = socket.recv_fds(conn, _HEADER.size, nfds)
    if len(header) < _HEADER.size:
        header += _recv_exact(conn, _HEADER.size - len(header))
    return json.loads(_recv_exact(conn, _HEADER.unpack(header)[0])), fds


def send_request(conn: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """Send what :func:`recv_request` reads; the descriptors stay open here."""
    payload = json.dumps(request).encode()
    socket.send_fds(conn, [_HEADER.pack(len(payload))], fds)
    conn.sendall(payload)


def become(request: dict[str, Any], fds: list[int], closing: list[int]) -> None:
    """In a fresh fork: descriptors onto 0, 1, 2..., the request's directory, environment and mark."""
    for fd in closing:
        with contextlib.suppress(OSError):
            os.close(fd)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    show_mark(request["env"].get(MARK_ENV, ""))


def _preload() -> None:
    import importlib

    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def _recv_exact(conn: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            raise EOFError("the caller went away")
        data += chunk
    return data


def send_message(conn: socket.socket, message: dict[str, Any]) -> None:
    """One JSON line back to the caller (its pid, then for a bench call its end)."""
    conn.sendall((json.dumps(message) + "\n").encode())


def _bench_child(request: dict[str, Any], fds: list[int], closing: list[int]) -> NoReturn:
    """Become ``python -m bench ARGS`` in the call's directory and environment; never returns."""
    code = 1
    try:
        become(request, fds, closing)
        if request.get("session"):
            os.setsid()  # as Popen's start_new_session: a group of its own, for killpg
        for sig in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if request.get("warm"):
            _warm_from(request["warm"])
        sys.argv = [str(PROJECT / "bench" / "__main__.py"), *request["argv"]]
        code = _run_bench()
    finally:
        os._exit(code)


def _run_bench() -> int:
    """Run bench's ``__main__`` and end the way the interpreter would: threads joined, exit handlers, streams flushed."""
    import atexit
    import runpy
    import traceback

    code = 0
    try:
        runpy.run_module("bench", run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # noqa: BLE001 - printed as the interpreter would print it
        traceback.print_exc()
        code = 1
    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined]  # what interpreter exit does first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


def _waiter(conn: socket.socket, listener: socket.socket) -> NoReturn:
    """Read one call, fork its bench child, report its pid, then its exit status and CPU."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the server ignores it; this one waits
        request, fds = recv_request(conn, 3)
        pid = os.fork()
        if pid == 0:
            _bench_child(request, fds, [conn.fileno(), listener.fileno()])
        for fd in fds:
            os.close(fd)
        send_message(conn, {"pid": pid})
        _, status, usage = os.wait4(pid, 0)
        send_message(
            conn, {"exit": os.waitstatus_to_exitcode(status), "cpu_s": usage.ru_utime + usage.ru_stime}
        )
    finally:
        os._exit(0)


def listen(path: str, make: Callable[..., Any] = socket.socket) -> Any:
    """The server's Unix socket at ``path`` (made by ``make``); "ready" on stdout tells the client it may connect."""
    listener = make(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    print("ready", flush=True)
    return listener


def accept_until_stdin_closes(
    listener: Any,
    handle: Callable[[Any], None],
    wait_readable: Callable[..., Any] = select.select,
    between: Callable[[], None] | None = None,
) -> None:
    """``handle`` each connection until stdin closes (the pytest process that started the server ended).

    ``wait_readable`` and the listener's type are the caller's: the warm server must use
    the unpatched ``select`` and ``_socket`` (tests/warm_locust_forkserver.py). ``between``
    runs at least once a second.
    """
    stdin = sys.stdin.fileno()
    while True:
        if between is not None:
            between()
        readable = wait_readable([listener, stdin], [], [], 1.0)[0]
        if stdin in readable and not os.read(stdin, 4096):
            return
        if listener not in readable:
            continue
        conn = type(listener)(fileno=listener._accept()[0])
        try:
            handle(conn)
        except (OSError, EOFError, ValueError):
            # the caller went away mid-request (a test's SIGINT or kill of its bench): its call
            # ends there, the server serves the next (a dead warm server failed every later
            # bench of its pytest process with "Connection refused")
            continue
        finally:
            conn.close()


def serve(path: str) -> None:
    """The bench server: preload, then a waiter forked per call."""
    _preload()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # waiters are reaped by the kernel
    listener = listen(path)

    def handle(conn: socket.socket) -> None:
        if os.fork() == 0:
            _waiter(conn, listener)

    accept_until_stdin_closes(listener, handle)


def _warm_from(path: str) -> None:
    """Make this bench child's warm Locust processes forks of the warm server at ``path``.

    bench.run.warm.WarmLocust.spawn starts ``python -m workloads.harness.warm_locust``, whose
    imports cost 1.5 CPU-s; tests/warm_locust_forkserver.py has them done and forks the same
    ``serve()`` loop, spoken to over the same two pipes.
    """
    from bench.run import warm

    warm.WarmLocust.spawn = forked_spawn(path)  # type: ignore[method-assign]


def forked_spawn(path: str) -> Callable[[Any], None]:
    """A ``WarmLocust.spawn`` that asks the warm server at ``path`` for the warm process."""

    def spawn(self: Any) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        env = {**(self.env or os.environ), "PYTHONUNBUFFERED": "1"}
        cwd = str(self.cwd or os.getcwd())
        self.proc = ForkedProcess.start(path, {"env": env, "cwd": cwd, "parent": os.getpid()})
        self._buffer = b""
        self._ready = False

    return spawn


class ForkedProcess:
    """A warm process forked by tests/warm_locust_forkserver.py, with the part of ``Popen`` WarmLocust uses.

    Why not a Popen: the process is the warm server's child, not ours, so its end is watched
    through a pidfd (readable once it has exited) and its exit status is not ours to read.
    """

    def __init__(self, pid: int, stdin: int, stdout: int) -> None:
        self.pid = pid
        self.stdin = os.fdopen(stdin, "wb", buffering=0)
        self.stdout = os.fdopen(stdout, "rb", buffering=0)
        self.returncode: int | None = None
        self._pidfd = os.pidfd_open(pid)

    @classmethod
    def start(cls, path: str, request: dict[str, Any]) -> ForkedProcess:
        """Ask the warm server at ``path`` for a warm process with ``request``'s env, cwd and parent."""
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        null = os.open(os.devnull, os.O_WRONLY)  # the product's warm process has stderr on /dev/null
        # a child starts in its parent thread's network namespace: bench spawns a partition
        # case's warm process from inside a test host (infra/testhosts.py); this thread waits
        # for the warm process's "ready", so the path stays valid until the fork has entered it
        netns = f"/proc/{os.getpid()}/task/{threading.get_native_id()}/ns/net"
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            try:
                send_request(conn, {**request, "netns": netns}, [in_r, out_w, null])
            finally:
                for fd in (in_r, out_w, null):
                    os.close(fd)
            pid = int(json.loads(conn.makefile("rb").readline())["pid"])
        return cls(pid, in_w, out_r)

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = 0  # ended; its status belongs to the server
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not select.select([self._pidfd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired("warm_locust_forkserver", timeout or 0)
        self.returncode = 0
        return 0

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


class ForkedBench:
    """A bench child forked by the bench server, with the part of ``subprocess.Popen`` the tests use.

    Why not a Popen: the child is the server's waiter's, not ours; its pid comes first and its
    exit status and CPU (``cpu_s``, its reaped tree) come last on the call's connection.
    ``stdout`` and ``stderr`` are text files where a pipe was asked for, else None.
    """

    def __init__(self, args: list[str], conn: socket.socket, out: int | None, err: int | None) -> None:
        self.args = args
        self._conn = conn
        self._buffer = b""
        self.returncode: int | None = None
        self.cpu_s = 0.0
        self._fds = [fd for fd in (out, err) if fd is not None]
        self.stdout = None if out is None else os.fdopen(out, "r", closefd=False)
        self.stderr = None if err is None else os.fdopen(err, "r", closefd=False)
        self.pid = int(self._line(None)["pid"])

    def _line(self, timeout: float | None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self._conn], [], [], left)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            chunk = self._conn.recv(4096)
            if not chunk:
                raise EOFError("the bench server's waiter went away")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def poll(self) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            ended = self._line(timeout)
            self.returncode, self.cpu_s = int(ended["exit"]), float(ended["cpu_s"])
            self._conn.close()
        return self.returncode

    def communicate(self, timeout: float | None = None) -> tuple[str | None, str | None]:
        """Everything on the pipes until they close, then the exit; ``TimeoutExpired`` past ``timeout``."""
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        try:
            texts = iter(_drain(self._fds, deadline))
        except subprocess.TimeoutExpired:
            raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
        said = (
            next(texts) if self.stdout is not None else None,
            next(texts) if self.stderr is not None else None,
        )
        self.close()
        self.wait(max(0.0, deadline - time.monotonic()) if timeout is not None else None)
        return said

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def close(self) -> None:
        for stream in (self.stdout, self.stderr):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._fds = []

    def __enter__(self) -> ForkedBench:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self.returncode is None:
            self.wait()


class _Server:
    """One server process (``python -m MODULE SOCKET``), started with the mark's placeholder."""

    def __init__(self, module: str, folder: str) -> None:
        self.path = os.path.join(folder, module.rsplit(".", 1)[1] + ".sock")
        log = os.path.join(folder, module.rsplit(".", 1)[1] + ".log")
        with open(log, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, self.path], cwd=PROJECT, env=server_env(),
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
            )  # fmt: skip
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != b"ready":
            self.stop()
            raise RuntimeError(f"{module} did not start: {Path(log).read_text(errors='replace')[-2000:]}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


class ForkServer:
    """The client side: starts both servers on first use (per pytest process) and runs calls through them."""

    def __init__(self) -> None:
        self.bench: _Server | None = None
        self.warm: _Server | None = None
        self.started_env: dict[str, str] = {}
        self._lock = threading.Lock()
        self._registered = False

    def serves(self, env: dict[str, str]) -> bool:
        """Whether a call with ``env`` can be forked: the interpreter's own ``PYTHON*`` settings act at start only."""
        base = self.started_env or dict(os.environ)
        return all(env.get(k) == base.get(k) for k in {*env, *base} if k.startswith("PYTHON"))

    def _ensure(self) -> tuple[_Server, _Server]:
        with self._lock:
            if self.bench is None or not self.bench.alive() or self.warm is None or not self.warm.alive():
                if not self._registered:
                    atexit.register(self.stop)
                    self._registered = True
                self.stop()
                folder = tempfile.mkdtemp(prefix="lockbench-forkserver-")
                self.started_env = dict(os.environ)
                self.bench = _Server("tests.bench_forkserver", folder)
                self.warm = _Server("tests.warm_locust_forkserver", folder)
            return self.bench, self.warm

    def popen(
        self,
        argv: list[str],
        cwd: Path,
        env: dict[str, str],
        stdout: Any = subprocess.PIPE,
        stderr: Any = subprocess.PIPE,
        start_new_session: bool = False,
    ) -> ForkedBench:
        """Start ``bench ARGV`` forked from the server; the parts of ``subprocess.Popen`` tests use.

        ``stdout`` and ``stderr`` as Popen takes them (PIPE, DEVNULL, STDOUT for stderr, a file
        or descriptor, None for ours); pipes are text, as ``Popen(text=True)`` gives them.
        """
        bench, warm = self._ensure()
        request = {
            "argv": argv,
            "cwd": str(cwd),
            "env": env,
            "warm": warm.path if forks(env, "warm") else None,
            "session": start_new_session,
        }
        ours: list[int] = []  # the read ends of our pipes
        theirs: list[int] = []  # what the child gets on 0, 1, 2 (closed here once sent)

        def target(how: Any, fallback: int) -> int:
            if how == subprocess.PIPE:
                r, w = os.pipe()
                ours.append(r)
                return w
            if how == subprocess.DEVNULL:
                return os.open(os.devnull, os.O_WRONLY)
            if how == subprocess.STDOUT:
                return os.dup(theirs[1])
            return os.dup(fallback if how is None else how if isinstance(how, int) else how.fileno())

        theirs.append(os.open(os.devnull, os.O_RDONLY))
        theirs.append(target(stdout, 1))
        theirs.append(target(stderr, 2))
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(bench.path)
            send_request(conn, request, theirs)
        except BaseException:
            conn.close()
            for fd in ours:
                os.close(fd)
            raise
        finally:
            for fd in theirs:
                os.close(fd)
        pipes = iter(ours)
        out = next(pipes) if stdout == subprocess.PIPE else None
        err = next(pipes) if stderr == subprocess.PIPE else None
        return ForkedBench(["bench", *argv], conn, out, err)

    def warm_locust(self, nice: int | None = None) -> Any:
        """A ``bench.run.warm.WarmLocust`` in this process whose warm process is forked from the warm server.

        For tests that run a case's Locust themselves: the product's own warm launcher (the
        same request, case fork and Locust ``main()``), without 1.5 CPU-s of imports a case.
        ``LOCKBENCH_TEST_FORKSERVER=0`` or ``=bench`` gives the product's own spawn.
        """
        from bench.run.warm import WarmLocust

        warm = WarmLocust(nice)
        if forks(dict(os.environ), "warm") and self.serves(dict(os.environ)):
            warm.spawn = types.MethodType(forked_spawn(self._ensure()[1].path), warm)  # type: ignore[method-assign]
        return warm

    def stop(self) -> None:
        servers, self.bench, self.warm = (self.bench, self.warm), None, None
        for server in servers:
            if server is not None:
                server.stop()


def _drain(fds: list[int], deadline: float) -> list[str]:
    """Everything written to the pipes until each one closes; ``TimeoutExpired`` at ``deadline``."""
    chunks: dict[int, list[bytes]] = {fd: [] for fd in fds}
    with selectors.DefaultSelector() as sel:
        for fd in fds:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired("bench", 0)
            for key, _ in sel.select(left):
                data = os.read(key.fd, 65536)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
    # as ``Popen(text=True)`` reads them: universal newlines
    return [b"".join(chunks[fd]).decode().replace("\r\n", "\n").replace("\r", "\n") for fd in fds]


if __name__ == "__main__":
    serve(sys.argv[1])
