"""Install every server the test suite needs (``python -m infra.install_all``), once, up front.

Doing it before pytest starts keeps slow apt-get work out of test timeouts and gives one
clear failure when a package cannot be had.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable

from infra import catalog
from infra.errors import InfraError
from infra.install import find_binary

#: (binary, OS package, extra dirs to search) for every server kind in infra.catalog.
BINARIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "redis": ("redis-server", "redis-server", ()),
    "etcd": ("etcd", "etcd-server", ()),
    "memcached": ("memcached", "memcached", ()),
    # zookeeper: its jars go to /usr/share/java, and the package brings Java with it
    "zookeeper": ("zkServer.sh", "zookeeper", ("/usr/share/zookeeper/bin",)),
}


def _postgres() -> None:
    from infra.postgres_server import _find_server_binaries

    _find_server_binaries()  # its binaries live in a versioned directory found after install


#: Kinds whose binaries are found by their own module (paths known only after install).
FINDERS: dict[str, Callable[[], object]] = {"postgres": _postgres}


def ensure(kinds: Iterable[str]) -> None:
    """Find every server binary ``kinds`` need, installing each missing package once (InfraError if it cannot).

    ``bench matrix`` calls it before its lanes start: lanes side by side would each find the same
    package missing at once (infra/install.py serialises them all the same; this makes the wait
    happen before any case, and a package that cannot be had stop the matrix before it starts).
    """
    for kind in dict.fromkeys(kinds):
        if kind in FINDERS:
            FINDERS[kind]()
        elif kind in BINARIES:
            binary, package, extra = BINARIES[kind]
            find_binary(binary, package, extra)


def main() -> int:
    for kind, spec in catalog.SERVERS.items():
        if spec is None or (kind not in BINARIES and kind not in FINDERS):
            continue
        try:
            if kind in FINDERS:
                FINDERS[kind]()
            else:
                binary, package, extra = BINARIES[kind]
                find_binary(binary, package, extra)
        except InfraError as exc:
            print(f"lockbench: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
