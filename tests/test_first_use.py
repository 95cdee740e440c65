"""First use: scripts/bootstrap.sh says what it is doing while it builds .venv."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tests.helpers import PROJECT

# A stand-in interpreter: passes the version check, "creates" the venv and "installs" instantly,
# so the test sees bootstrap.sh's messages without a minute of pip.
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "venv" ]; then
  mkdir -p "$3/bin" && cp "$0" "$3/bin/python" && chmod +x "$3/bin/python"
  # the entry point an install writes: bootstrap.sh checks it names this checkout's .venv
  printf '#!%s/bin/python\n' "$(cd "$3" && pwd)" > "$3/bin/bench"
fi
exit 0
"""


def test_bootstrap_says_what_happens_on_first_use(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(PROJECT / "scripts" / "bootstrap.sh", tmp_path / "scripts" / "bootstrap.sh")
    shutil.copy(PROJECT / "pyproject.toml", tmp_path / "pyproject.toml")
    fake = tmp_path / "fake-python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    first = subprocess.run(["bash", "scripts/bootstrap.sh"], cwd=tmp_path, capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake)}, timeout=60)  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert "first use" in first.stderr and "about a minute" in first.stderr, first.stderr
    assert "ready" in first.stderr.splitlines()[-1]
    again = subprocess.run(["bash", "scripts/bootstrap.sh"], cwd=tmp_path, capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "PYTHON": str(fake)}, timeout=60)  # fmt: skip
    assert again.returncode == 0 and again.stderr == "", again.stderr  # quiet once installed


def test_scripts_bench_history_installs_the_history_extra(tmp_path: Path) -> None:
    """The README lists `bench history` among the commands: scripts/bench sets up what it needs."""
    from tests.test_run_timing import _copy_scripts, _plan

    root = _copy_scripts(tmp_path)
    assert "extras=history spec=-e .[history] state=install" in _plan(root, "scripts/bench", "history")
    assert "extras=base spec=-e . " in _plan(root, "scripts/bench", "run")
    stamp = root / ".venv" / ".lockbench-installed"
    for have, history_state in (("base", "install"), ("history", "up-to-date"), ("test", "up-to-date")):
        stamp.write_text(f"{have}\n")
        assert f"state={history_state}" in _plan(root, "scripts/bench", "history"), have
        assert "state=up-to-date" in _plan(root, "scripts/bench", "list"), have
