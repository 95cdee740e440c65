"""Servers kept up between commands by ``bench infra up``, remembered in a small JSON file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path


def state_dir() -> Path:
    base = os.environ.get("LOCKBENCH_INFRA_DIR") or os.path.join(
        tempfile.gettempdir(), f"lockbench-infra-{os.getuid()}"
    )
    return Path(base)


def state_file() -> Path:
    return state_dir() / "state.json"


def load() -> dict:
    """{"servers": [{"kind", "name", "url", "pid", "dir"}]}; empty when nothing is up."""
    try:
        return json.loads(state_file().read_text())
    except (OSError, ValueError):
        return {"servers": []}


def save(state: dict) -> None:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2))
    os.replace(tmp, path)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
