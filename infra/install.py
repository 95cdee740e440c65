"""Find a server binary, installing its OS package when that is possible (root + apt-get).

Several lanes of ``bench matrix`` (threads) and several bench processes may need the same
missing package at once; parallel ``apt-get install`` calls race on dpkg's lock and all but
one fail. So an install happens under one machine-wide lock (``lockbench-install.lock`` in the
temporary directory, flock) and a thread lock, the binary is looked for again once the lock
is held (another lane may have installed it meanwhile: it is then installed once), and
apt-get itself waits for a dpkg lock held by anything else (``DPkg::Lock::Timeout``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator

from infra.errors import InfraError

_apt_updated = False
_thread_lock = threading.Lock()
#: seconds apt-get waits for dpkg's lock held by another program (unattended-upgrades, a user)
DPKG_LOCK_TIMEOUT_S = 300


@contextlib.contextmanager
def install_lock() -> Iterator[None]:
    """Held by one installer at a time on this machine (threads of this process and other processes)."""
    path = os.path.join(tempfile.gettempdir(), "lockbench-install.lock")
    with _thread_lock, open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _apt_install(package: str) -> bool:
    global _apt_updated
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", f"DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_S}"]
    print(f"lockbench: installing OS package {package} (apt-get)", file=sys.stderr)
    if not _apt_updated:
        subprocess.run(["apt-get", *wait, "update", "-qq"], env=env, capture_output=True, check=False)
        _apt_updated = True
    r = subprocess.run(
        ["apt-get", *wait, "install", "-y", "-qq", package], env=env, capture_output=True, text=True
    )
    return r.returncode == 0


def _find(name: str, extra_dirs: tuple[str, ...]) -> str | None:
    return shutil.which(name) or next(
        (os.path.join(d, name) for d in extra_dirs if os.access(os.path.join(d, name), os.X_OK)), None
    )


def find_binary(name: str, package: str, extra_dirs: tuple[str, ...] = ()) -> str:
    """Path of ``name``; installs ``package`` with apt-get when missing and allowed.

    Installing is allowed when running as root with apt-get present and
    LOCKBENCH_NO_INSTALL unset. Otherwise the error says how to install it.
    """
    path = _find(name, extra_dirs)
    if path:
        return path
    can_install = os.geteuid() == 0 and shutil.which("apt-get") and not os.environ.get("LOCKBENCH_NO_INSTALL")
    if can_install:
        with install_lock():
            path = _find(name, extra_dirs)  # another lane or process installed it while this one waited
            if path or (_apt_install(package) and (path := _find(name, extra_dirs))):
                return path
    raise InfraError(
        f"{name} not found and could not be installed; install it with: sudo apt-get install {package}"
    )
