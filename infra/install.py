"""Find a server binary, installing its OS package when that is possible (root + apt-get)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from infra.errors import InfraError

_apt_updated = False


def _apt_install(package: str) -> bool:
    global _apt_updated
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    print(f"lockbench: installing OS package {package} (apt-get)", file=sys.stderr)
    if not _apt_updated:
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True, check=False)
        _apt_updated = True
    r = subprocess.run(["apt-get", "install", "-y", "-qq", package], env=env, capture_output=True, text=True)
    return r.returncode == 0


def find_binary(name: str, package: str, extra_dirs: tuple[str, ...] = ()) -> str:
    """Path of ``name``; installs ``package`` with apt-get when missing and allowed.

    Installing is allowed when running as root with apt-get present and
    LOCKBENCH_NO_INSTALL unset. Otherwise the error says how to install it.
    """
    path = shutil.which(name) or next(
        (os.path.join(d, name) for d in extra_dirs if os.access(os.path.join(d, name), os.X_OK)), None
    )
    if path:
        return path
    can_install = os.geteuid() == 0 and shutil.which("apt-get") and not os.environ.get("LOCKBENCH_NO_INSTALL")
    if can_install and _apt_install(package):
        path = shutil.which(name) or next(
            (os.path.join(d, name) for d in extra_dirs if os.access(os.path.join(d, name), os.X_OK)), None
        )
        if path:
            return path
    raise InfraError(
        f"{name} not found and could not be installed; install it with: sudo apt-get install {package}"
    )
