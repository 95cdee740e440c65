"""Free TCP ports on 127.0.0.1, reserved so that no two lockbench processes get the same one.

A port the kernel hands out for ``bind(("127.0.0.1", 0))`` lies in the ephemeral range, the
same range it draws from for every outgoing connection. Between the moment we close the probe
socket and the moment a server binds, any client socket on the machine may take that port as
its local end (CI saw a Sentinel fail with "Address already in use" this way, with five test
workers connecting to their servers). So ports come from a pool *below* the ephemeral range,
which the kernel never gives to outgoing connections, and each is reserved with an advisory
lock on a file under the temporary folder. The lock belongs to the process that asked for the
port and ends with it, so a killed process leaves no stale reservation behind; a server keeps
its port across a restart because its owner keeps the reservation.

Each reservation is one open descriptor of the asking process until it exits (or
:func:`release_port`): 407 ports over two full test suites, a 3-shard matrix and two RedLock
matrices (2026-12-05), a few dozen a test worker, far below any descriptor limit.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

#: Ports the pool may hold, at most; taken just below the kernel's ephemeral range.
POOL_SIZE = 12000
#: Ports below this are left alone (well-known and registered services).
LOWEST = 1024
#: Where the reservations are kept; shared by every user of the machine.
RESERVATIONS = Path(tempfile.gettempdir()) / "lockbench-ports"

_held: dict[int, int] = {}  # port -> file descriptor whose lock reserves it


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range for outgoing connections' local ports (Linux's default if unreadable)."""
    try:
        low, high = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except (OSError, ValueError):
        return 32768, 60999
    return low, high


def pool() -> range:
    """The ports reserved servers get: below the ephemeral range, or above it if it starts low."""
    low, high = ephemeral_range()
    if low - LOWEST >= 1000:
        return range(max(LOWEST, low - POOL_SIZE), low)
    return range(high + 1, 65536)


def reserve(port: int) -> bool:
    """Reserve one port for this process; False when another process holds it (or we may not)."""
    if port in _held:
        return True
    if not RESERVATIONS.is_dir():
        try:
            RESERVATIONS.mkdir(exist_ok=True)
        except OSError:
            # no folder for reservations (a read-only or odd temporary folder): the pool below the
            # ephemeral range still keeps outgoing connections off the port; only the lock is lost
            return True
        with contextlib.suppress(OSError):
            RESERVATIONS.chmod(0o1777)  # every user of the machine reserves here
    path = RESERVATIONS / f"{port}.lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError:
        return False  # another user's reservation we may not open: taken
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise
    _held[port] = fd
    return True


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nobody listens on, reserved for this process until it exits.

    Outside the ephemeral range, so no outgoing connection can take it before the server binds,
    and locked against every other lockbench process on the machine.
    """
    ports = pool()
    for _ in range(200):
        port = random.choice(ports)
        if port in _held:
            continue
        if not reserve(port):
            continue
        if _bindable(port):
            return port
        release_port(port)
    raise OSError(
        f"no free port in {ports.start}-{ports.stop - 1} after 200 tries (reservations in {RESERVATIONS})"
    )


def release_port(port: int) -> None:
    """Give a reserved port back before the process ends (safe to call for any port)."""
    fd = _held.pop(port, None)
    if fd is not None:
        os.close(fd)


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    """True when something accepts TCP connections at host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
