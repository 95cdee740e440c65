"""Launch Locust for a case through a warm process (``workloads/harness/warm_locust.py``).

Why: a cold ``python -m locust`` imports for about two seconds before its first user
starts, a large share of a matrix case that ends seconds after its event. The warm
process has imported everything once and forks a child per case; the child runs the same
``locust`` argv, so what is measured does not change. bench never imports Locust itself:
the warm process is a subprocess, spoken to over pipes.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from infra.process import die_with_parent

#: How long the warm process may take to import everything before it is given up on.
READY_TIMEOUT_S = 120.0


class WarmLocustError(Exception):
    """The warm process died or stopped answering; the caller may fall back to a cold start."""


class WarmLocust:
    """One warm Locust process, for one thread of cases at a time (a matrix lane).

    Why a context manager: the warm process must end with the lane, whatever ends it.
    """

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""

    def _start(self) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "workloads.harness.warm_locust"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, bufsize=0,
            start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        self.proc = proc
        self._buffer = b""
        if self._read(READY_TIMEOUT_S).get("ready") is not True:
            self.close()
            raise WarmLocustError("the warm Locust process did not start")
        return proc

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

    def run(self, argv: list[str], log_path: Path, timeout: float) -> int:
        """Run ``python -m locust`` argv (``argv[3:]`` are Locust's arguments); return its exit code."""
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        assert proc.stdin is not None
        proc.stdin.write((json.dumps({"argv": argv[3:], "log": str(log_path)}) + "\n").encode())
        pid = int(self._read(30)["pid"])
        deadline = time.monotonic() + timeout
        try:
            return int(self._read(max(0.1, deadline - time.monotonic()))["exit"])
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

    def close(self) -> None:
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
