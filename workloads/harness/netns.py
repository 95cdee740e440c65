"""A forked Locust worker moves to a test host of its own (a partition case's client host).

Why here and not in bench: a partition case's workers must each sit on their own client
host, so that one cut can take the holder's host alone. Starting each worker as a fresh
process inside its namespace costs seconds of imports per worker; instead Locust forks its
workers from a warm master (``--processes``) and each worker enters its host before any
user opens a connection. The worker's link to its master was opened before the move and
stays where bench's control host is, on no side of any cut.

Each worker claims the first free host by creating ``netns.<i>`` in the case's output folder
(``O_EXCL``: two workers never take the same one) and writes its pid there, which is how
bench maps a holder's client id (``<pid>-u<n>``) to the host to cut.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

#: where ``ip netns`` keeps its named namespaces
NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000
#: the file a worker claims a host with: ``netns.<index>``, holding "<pid> <namespace>"
CLAIM_PREFIX = "netns."


class NetnsError(OSError):
    """The worker could not enter its host; the case cannot put its clients where it must."""


def enter_own_host(names: list[str], out: Path) -> str:
    """Claim one of ``names`` (the first free), enter that namespace; return its name."""
    for i, name in enumerate(names):
        try:
            fd = os.open(out / f"{CLAIM_PREFIX}{i}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        try:
            _setns(NETNS_DIR / name)
            os.write(fd, f"{os.getpid()} {name}\n".encode())
        finally:
            os.close(fd)
        return name
    raise NetnsError(f"no free client host among {len(names)} for worker {os.getpid()}")


def clear_claims(out: Path) -> None:
    """Forget the claims an earlier attempt of the case left in ``out`` (its workers are gone).

    Why: a case run again in the same folder (the matrix re-runs a failure a stall could
    explain) found every host claimed by the first attempt's dead workers, so its own workers
    entered none and no buyer started (shard 3/4, 2026-12-05: PostgreSQL's partition-client
    control, and with it three cells, undecided). Bench calls this before every launch.
    """
    for path in out.glob(f"{CLAIM_PREFIX}*"):
        path.unlink(missing_ok=True)


def claims(out: Path) -> dict[int, str]:
    """Worker pid -> namespace name, from the claims written so far in ``out``."""
    found: dict[int, str] = {}
    for path in out.glob(f"{CLAIM_PREFIX}*"):
        try:
            pid, name = path.read_text().split()
        except (OSError, ValueError):
            continue  # claimed, not yet written
        found[int(pid)] = name
    return found


def _setns(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if ctypes.CDLL("libc.so.6", use_errno=True).setns(fd, _CLONE_NEWNET) != 0:
            raise NetnsError(f"setns({path}) failed: {os.strerror(ctypes.get_errno())}")
    finally:
        os.close(fd)
