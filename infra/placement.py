"""Where a server process runs: the address it listens on and the command prefix that starts it there.

On loopback (the default) a server listens on 127.0.0.1 and starts as is. On a test host
(:mod:`infra.testhosts`) it listens on the host's address and starts through
``ip netns exec <host>``; the server classes need nothing else to know.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

LOOPBACK_HOST = "127.0.0.1"


@dataclass(frozen=True)
class Placement:
    """A server's address and launcher prefix (why: one value threads both through every class)."""

    host: str = LOOPBACK_HOST
    launcher: tuple[str, ...] = ()

    def argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` as started at this placement."""
        return [*self.launcher, *argv]

    @property
    def on_loopback(self) -> bool:
        return self.host == LOOPBACK_HOST and not self.launcher


#: name of a server process (``zookeeper-ensemble-2``) -> where it runs
Placer = Callable[[str], Placement]

LOOPBACK = Placement()


def on_loopback(_name: str) -> Placement:
    """The default placer: every process on 127.0.0.1, started as is."""
    return LOOPBACK
