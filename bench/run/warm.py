"""Launch Locust for a case through a warm process (``workloads/harness/warm_locust.py``).

Why: a cold ``python -m locust`` imports for about two seconds before its first user
starts, a large share of a matrix case that ends seconds after its event. The warm
process has imported everything once and forks a child per case; the child runs the same
``locust`` argv, so what is measured does not change. bench never imports Locust itself:
the warm process is a subprocess, spoken to over pipes.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from bench.errors import raise_if_interrupted
from infra.process import die_with_parent

#: How long the warm process may take to import everything before it is given up on.
READY_TIMEOUT_S = 120.0


class WarmLocustError(Exception):
    """The warm process died or stopped answering; the caller may fall back to a cold start."""


class WarmLocust:
    """One warm Locust process, for one thread of cases at a time (a matrix lane, a ``bench run``).

    Why a context manager: the warm process must end with the lane, whatever ends it.
    """

    def __init__(
        self, nice: int | None = None, env: dict[str, str] | None = None, cwd: Path | None = None
    ) -> None:
        #: the nice value each case's session is raised to (workloads/harness/priority.py); None: left
        self.nice = nice
        #: the warm process's environment and directory, which each case's fork inherits (None: ours)
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._ready = False

    def spawn(self) -> None:
        """Start the warm process's imports without waiting for them (idempotent).

        Why apart from :meth:`wait_ready`: ``bench run`` spawns it before its servers start,
        so the imports overlap the server start-up, and waits for it before the floors are
        measured, so no import competes for the CPU with anything measured.
        """
        if self.proc is not None and self.proc.poll() is None:
            return
        env = {**(self.env or os.environ), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "workloads.harness.warm_locust"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0,
            start_new_session=True, preexec_fn=die_with_parent, cwd=self.cwd,
        )  # fmt: skip
        self._buffer = b""
        self._ready = False

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> None:
        """Block until the spawned process has imported everything; WarmLocustError if it cannot."""
        if self._ready:
            return
        try:
            ready = self._read(timeout).get("ready") is True
        except (TimeoutError, ValueError):
            ready = False
        if not ready:
            self.close()
            raise WarmLocustError("the warm Locust process did not start")
        self._ready = True

    def _start(self) -> subprocess.Popen[bytes]:
        self.spawn()
        self.wait_ready()
        assert self.proc is not None
        return self.proc

    def _read(self, timeout: float) -> dict[str, Any]:
        proc = self.proc
        if proc is None or proc.stdout is None:
            raise WarmLocustError("no warm Locust process")
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                if not sel.select(max(0.0, deadline - time.monotonic())):
                    raise TimeoutError("the warm Locust process did not answer in time")
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    raise WarmLocustError("the warm Locust process ended")
                self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def run(
        self, argv: list[str], log_path: Path, timeout: float, poll: Callable[[], None] | None = None
    ) -> int:
        """Run ``python -m locust`` argv (``argv[3:]`` are Locust's arguments); return its exit code.

        ``poll`` is called about once a second while the case runs (``bench run``'s live
        progress), as the cold launcher does; a swallowed Ctrl-C is noticed at the same pace.
        """
        return self._run({"argv": argv[3:], "log": str(log_path)}, timeout, poll)

    def run_group(self, argvs: list[list[str]], log_path: Path, timeout: float, nice: int | None) -> int:
        """Run several cases' Locust argvs in one process (``workloads/harness/group_locust.py``) at ``nice``.

        Returns when the last case has ended, with the worst exit code; each case says its own
        end in its folder as it comes (``group_locust.EXIT_FILE``).
        """
        request = {"group": [argv[3:] for argv in argvs], "log": str(log_path), "nice": nice}
        return self._run(request, timeout, None)

    def _run(self, request: dict[str, Any], timeout: float, poll: Callable[[], None] | None) -> int:
        alive = self.proc is not None and self.proc.poll() is None
        proc = self.proc if alive and self._ready else self._start()
        assert proc is not None and proc.stdin is not None
        try:
            request = {"nice": self.nice, **request}  # a group's own nice (run_group) wins
            proc.stdin.write((json.dumps(request) + "\n").encode())
        except (BrokenPipeError, OSError) as exc:
            raise WarmLocustError(f"the warm Locust process is gone: {exc}") from None
        pid = int(self._read(30)["pid"])
        deadline = time.monotonic() + timeout
        try:
            code = self._wait_exit(deadline, poll)
            # Locust's own workers share the case's process group: none may outlive their master
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            return code
        except BaseException:
            # Ctrl-C, timeout or a broken pipe: stop the case's Locust (and its workers) for good
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(pid, sig)
                    self._read(10 if sig == signal.SIGTERM else 5)
                    break
                except ProcessLookupError:
                    break
                except (TimeoutError, WarmLocustError, ValueError):
                    continue
            raise

    def _wait_exit(self, deadline: float, poll: Callable[[], None] | None) -> int:
        """The case's exit code, read in slices of a second so ``poll`` and Ctrl-C get their turn."""
        while True:
            left = deadline - time.monotonic()
            try:
                return int(self._read(max(0.1, min(1.0, left)))["exit"])
            except TimeoutError:
                raise_if_interrupted()
                if left <= 1.0:
                    raise
                if poll is not None:
                    poll()

    def close(self) -> None:
        self._ready = False
        proc, self.proc = self.proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait(5)

    def __enter__(self) -> WarmLocust:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
