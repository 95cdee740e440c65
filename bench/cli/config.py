"""Defaults from ``[tool.lockbench]`` in the current directory's pyproject.toml.

Precedence is CLI flag > ``LOCKBENCH_*`` environment variable > this table > built-in
default; typer applies the first two, this module feeds the third as click's default_map.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any


def project_table(start: Path | None = None) -> dict[str, Any]:
    path = (start or Path.cwd()) / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    table = data.get("tool", {}).get("lockbench", {})
    return table if isinstance(table, dict) else {}


def default_map() -> dict[str, Any]:
    """{'run': {'users': 20, ...}} from keys like ``users = 20`` or ``[tool.lockbench.run]``."""
    table = project_table()
    run = {k.replace("-", "_"): v for k, v in table.items() if not isinstance(v, dict)}
    out: dict[str, Any] = {
        name: {k.replace("-", "_"): v for k, v in sub.items()}
        for name, sub in table.items()
        if isinstance(sub, dict)
    }
    out.setdefault("run", {}).update(run)
    return out
