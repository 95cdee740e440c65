"""What every server lockbench starts shares: one :class:`ServerProcess`, stopped, killed and restarted alike."""

from __future__ import annotations

from typing import Any

from infra.process import ServerProcess


class ManagedServer:
    """A server lockbench starts and owns, wrapped around one :class:`ServerProcess`.

    Why a base: every server (Redis, memcached, PostgreSQL, ZooKeeper, etcd) is stopped,
    killed as in a crash and restarted on the same port the same way; each used to write
    those lines again. A subclass sets ``kind``, ``name``, ``host`` and ``process`` and
    defines :meth:`start` and :meth:`version`; it overrides what differs (PostgreSQL's
    restart kills its backends too; ZooKeeper's skips its warm-up).
    """

    kind: str = ""
    name: str
    host: str
    process: ServerProcess

    def start(self, detached: bool = False) -> Any:
        """Start the server and return once it answers (``self``)."""
        raise NotImplementedError

    def version(self) -> str:
        """The server's version, for run.json."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after the grace)."""
        self.process.stop()

    def kill(self) -> None:
        """SIGKILL the server (a crash) and reap it; :meth:`start` brings it back."""
        self.process.kill()
        if self.process.popen is not None:
            self.process.popen.wait(5)

    def restart(self) -> None:
        """Kill (SIGKILL) and start again on the same port: what survives is the server's own durability."""
        self.kill()
        self.start()
