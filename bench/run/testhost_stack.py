"""``bench run --test-hosts N``: the whole run spread over network-namespace hosts of this machine.

One host runs the Locust master (and this process's own connections: reset, server
statistics, faults), N hosts run one ``bench worker`` each, and the partitions layer's
:class:`infra.stack.Stack` gives every server its own host (lock servers, then the
resource). Clients therefore cross a real network interface to another host's address,
and their clocks are aligned exactly as for workers on other machines.

Everything is torn down on every exit: the context manager on a normal end, an error or
Ctrl-C; ``TestHostNet``'s reaper and the children's PDEATHSIG when this process is killed.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

from infra.stack import Stack
from infra.testhosts import TestHost, TestHostNet
from workloads.harness.worker_env import DEFAULT_MASTER_PORT


class TestHostStack:
    """A Stack on test hosts plus a master host and N worker hosts running ``bench worker``.

    Why one object: the namespaces must exist before the servers, this thread must stand
    in the master's namespace while anything talks to them, and all of it must go away in
    the reverse order whatever happens, like the Stack it wraps.
    """

    __test__ = False

    def __init__(self, n_workers: int, **stack_args: Any) -> None:
        self.n_workers = n_workers
        self.stack_args = stack_args
        self.net: TestHostNet | None = None
        self.master: TestHost | None = None
        self.worker_hosts: list[TestHost] = []
        self.port = DEFAULT_MASTER_PORT
        self.stack: Stack | None = None
        self._exits = contextlib.ExitStack()
        self._logs = Path(tempfile.mkdtemp(prefix="lockbench-workers-"))
        self._workers: list[Any] = []

    @property
    def master_bind(self) -> tuple[str, int]:
        assert self.master is not None
        return self.master.addr, self.port

    def __enter__(self) -> Stack:
        try:
            self.net = self._exits.enter_context(TestHostNet(0))
            self.master = self.net.add_host("master")
            self.worker_hosts = [self.net.add_host(f"worker-{i + 1}") for i in range(self.n_workers)]
            self._exits.enter_context(self.net.enter(self.master))
            self.stack = self._exits.enter_context(Stack(hosts=self.net, **self.stack_args))
            self._start_workers()
        except BaseException:
            self.close()
            raise
        return self.stack

    def _start_workers(self) -> None:
        assert self.net is not None
        host, port = self.master_bind
        for i, worker in enumerate(self.worker_hosts):
            name = self.net.roles.get(worker.name) or f"worker-{i + 1}"
            argv = [sys.executable, "-m", "bench", "worker", "--master", f"{host}:{port}", "--name", name]
            log = open(self._logs / f"{name}.log", "wb")  # noqa: SIM115 - closed in close()
            self._exits.callback(log.close)
            self._workers.append(self.net.popen(worker, argv, stdout=log, stderr=log, stdin=None))

    def roles(self) -> dict[str, str]:
        """Address -> what runs there, for run.json."""
        if self.net is None:
            return {}
        return {h.addr: self.net.roles.get(h.name, "") for h in self.net.hosts}

    def close(self) -> None:
        for proc in self._workers:
            if proc.poll() is None:
                proc.terminate()
        for proc in self._workers:
            with contextlib.suppress(Exception):
                proc.wait(5)
        self._workers.clear()
        self._exits.close()  # the Stack, back to our own namespace, then the namespaces
        shutil.rmtree(self._logs, ignore_errors=True)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
