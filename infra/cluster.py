"""Several members of one server kind on loopback, forming one cluster that faults can hit.

ZooKeeper ensembles and etcd clusters start, wait, lose their leader or a follower and
heal the same way; only how a member says it is ready and who leads differ, which
subclasses supply (:meth:`member_ready`, :meth:`leader`).
"""

from __future__ import annotations

import time
from typing import Any

from infra.errors import InfraError
from infra.process import ServerProcess


class LoopbackCluster:
    """Members that only serve once a quorum is up: all start before any is waited for.

    Why a base class: the start / wait / kill-leader / kill-member / heal sequence is the
    fault machinery's contract with every cluster, and it must behave the same for each.
    """

    label = "cluster"  # "etcd cluster", "ZooKeeper ensemble": used in messages

    def __init__(self, name: str, nodes: list[Any]) -> None:
        self.name = name
        self.nodes = nodes

    # what subclasses answer ---------------------------------------------------------------
    def member_ready(self, node: Any) -> bool:
        raise NotImplementedError

    def leader(self) -> Any | None:
        raise NotImplementedError

    def after_start(self) -> None:
        """Hook run once every member is ready (e.g. warm a JVM up)."""

    # shared mechanics -------------------------------------------------------------------
    @property
    def process(self) -> ServerProcess:
        """The first member's process (callers that track one pid; see ``processes``)."""
        return self.nodes[0].process

    @property
    def processes(self) -> list[ServerProcess]:
        return [n.process for n in self.nodes]

    def start(self, detached: bool = False, timeout: float = 60.0) -> LoopbackCluster:
        """Start every member, wait until all are ready, then run :meth:`after_start`."""
        try:
            for node in self.nodes:
                node.start(detached=detached, wait=False)
            self.wait_ready(timeout)
            self.after_start()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self, timeout: float = 60.0, nodes: list[Any] | None = None) -> None:
        """Wait until the given members (default: all) are ready; InfraError otherwise."""
        pending = list(nodes or self.nodes)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for node in list(pending):
                if not node.process.alive():
                    raise InfraError(f"{node.name} exited at start: {node.process.log_tail()}")
                if self.member_ready(node):
                    pending.remove(node)
            if pending:
                time.sleep(0.05)
        if pending:
            raise InfraError(
                f"{self.label} {self.name} not ready within {timeout:.0f}s; see {pending[0].process.log_path}"
            )

    def kill_leader(self) -> str:
        """SIGKILL the current leader (the others elect a new one); a line saying what was done."""
        leader = self.leader()
        if leader is None:
            raise InfraError(f"{self.label} {self.name} has no leader to kill")
        leader.kill()
        return (
            f"killed (SIGKILL) {self.label} leader {leader.name}; {len(self.nodes) - 1} members keep quorum"
        )

    def kill_member(self) -> str:
        """SIGKILL one live member that is not the leader (no election follows).

        The first member is preferred: clients are given the members in order and an etcd
        client talks to the first, so killing it hits the member the holder's grant came
        through (issue 30: a kill of a member nobody talks to could break nothing).
        """
        leader = self.leader()
        order = [self.nodes[0], *reversed(self.nodes[1:])]
        victim = next((n for n in order if n is not leader and n.process.alive()), None)
        if victim is None:
            raise InfraError(f"{self.label} {self.name} has no follower to kill")
        victim.kill()
        return f"killed (SIGKILL) {self.label} follower {victim.name}"

    def heal(self, timeout: float = 60.0) -> None:
        """Start again every member that is down (with its data) and wait until all are ready."""
        down = [n for n in self.nodes if not n.process.alive()]
        for node in down:
            node.start(wait=False)
        self.wait_ready(timeout, down or None)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def version(self) -> str:
        return self.nodes[0].version()
