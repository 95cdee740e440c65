"""What a run records about where it ran: host, git commit, library and server versions."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
from importlib import metadata
from pathlib import Path

LIBRARIES = ("locust", "redis", "hiredis", "hdrhistogram", "pandas", "pyarrow", "plotly", "gevent",
             "psycopg", "kazoo", "pymemcache")  # fmt: skip

PROJECT_DIR = Path(__file__).resolve().parents[2]


def library_versions() -> dict[str, str]:
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit() -> str:
    """HEAD of the lockbench checkout, with '+dirty' when it has uncommitted changes."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PROJECT_DIR, capture_output=True, text=True, timeout=5
        )
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=PROJECT_DIR,
            capture_output=True,
            text=True,
            timeout=5,
        )
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def host_info() -> dict[str, object]:
    """The machine class: the gate refuses baselines from another one."""
    mem_gib = None
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    mem_gib = round(int(line.split()[1]) / 1024 / 1024)
    except OSError:
        pass
    return {
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count(),
        "memory_gib": mem_gib,
        "machine": platform.machine(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "machine_class": f"{platform.machine()}-{os.cpu_count()}cpu-{mem_gib}gib",
    }
