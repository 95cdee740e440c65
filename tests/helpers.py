"""Running the real ``bench`` command from tests."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent


def bench(
    *args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``python -m bench ARGS`` and capture its output (no server is left behind by it)."""
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        cwd=cwd or PROJECT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
