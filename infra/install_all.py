"""Install every server the test suite needs (``python -m infra.install_all``), once, up front.

Doing it before pytest starts keeps slow apt-get work out of test timeouts and gives one
clear failure when a package cannot be had.
"""

from __future__ import annotations

import sys

from infra import catalog
from infra.errors import InfraError
from infra.install import find_binary

#: (binary, OS package, extra dirs to search) for every server kind in infra.catalog.
BINARIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "redis": ("redis-server", "redis-server", ()),
}


def main() -> int:
    for kind, spec in catalog.SERVERS.items():
        if spec is None or kind not in BINARIES:
            continue
        binary, package, extra = BINARIES[kind]
        try:
            find_binary(binary, package, extra)
        except InfraError as exc:
            print(f"lockbench: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
