"""Bytecode once (issue 42): with PYTHONDONTWRITEBYTECODE=1 a start of bench or of Locust compiles nothing.

These machines and many container images set PYTHONDONTWRITEBYTECODE=1: Python then reads
existing .pyc files but never writes them, so unless scripts/bootstrap.sh compiled them
every ``bench`` start and every Locust process compiled its imports from source (``bench
--help``: 461 compiles of .venv and project files before this). The tests count calls of
the source loader's compile step, never seconds.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import PROJECT

#: Runs a module or ``bench`` as ``python -m`` would, counting every source file compiled on
#: the way (SourceLoader.source_to_code is called only when no valid .pyc was found), and
#: prints the compiled paths as JSON on the real stdout.
COUNTER = r"""
import contextlib, importlib._bootstrap_external as ext, io, json, runpy, sys
compiled = []
original = ext.SourceLoader.source_to_code
def counting(self, data, path, *args, **kwargs):
    compiled.append(str(path))
    return original(self, data, path, *args, **kwargs)
ext.SourceLoader.source_to_code = counting
target, argv = sys.argv[1], sys.argv[2:]
sys.argv = [target, *argv]
with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
    with contextlib.suppress(SystemExit):
        if target == "bench":
            from bench.cli import main
            main()
        else:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
sys.__stdout__.write(json.dumps(compiled))
"""
PYTHON = PROJECT / ".venv" / "bin" / "python"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _compiled(*args: str) -> list[str]:
    """Paths of .venv and project files compiled while ``args`` ran under PYTHONDONTWRITEBYTECODE=1."""
    python = PYTHON if PYTHON.exists() else Path(sys.executable)
    r = subprocess.run(
        [str(python), "-c", COUNTER, *args],
        cwd=PROJECT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    ours = (str(PROJECT), sys.prefix)
    return [p for p in json.loads(r.stdout) if p.startswith(ours)]


def _bootstrap(cwd: Path) -> None:
    r = subprocess.run(["bash", "scripts/bootstrap.sh"], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr


def test_after_bootstrap_bench_and_locust_start_without_compiling() -> None:
    _bootstrap(PROJECT)  # up to date: it only compiles what is stale (an edit since the last run)
    assert _compiled("bench", "--help") == []
    assert _compiled("bench", "list") == []
    # a Locust process: locust itself (gevent, flask ...) and a locustfile from workloads/
    assert _compiled("locust", "-f", str(PROJECT / "workloads" / "flash_sale.py"), "--help") == []


def _pyc_matches(source: Path) -> bool:
    """The .pyc beside ``source`` exists and records the source's current mtime and size."""
    import importlib.util

    pyc = Path(importlib.util.cache_from_source(str(source)))
    if not pyc.is_file():
        return False
    head = pyc.read_bytes()[:16]
    stat = source.stat()
    mtime, size = int.from_bytes(head[8:12], "little"), int.from_bytes(head[12:16], "little")
    return mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF


def test_a_missing_or_stale_compile_of_the_projects_packages_redoes_itself(tmp_path: Path) -> None:
    """bootstrap.sh in a scratch checkout (an up-to-date .venv of its own): every run compiles the packages.

    The scratch .venv is a light one of its own (this one's interpreter, stamps and a ``bench``
    script pointing at it), never a link to this checkout's: a bootstrap that found it out of
    date would reinstall lockbench into the shared .venv from the scratch folder, and every
    later ``bench`` outside this checkout would import nothing.
    """
    (tmp_path / "scripts").mkdir()
    shutil.copy(PROJECT / "scripts" / "bootstrap.sh", tmp_path / "scripts" / "bootstrap.sh")
    shutil.copy(PROJECT / "pyproject.toml", tmp_path / "pyproject.toml")
    os.utime(tmp_path / "pyproject.toml", (0, 0))  # older than the install stamp: nothing to reinstall
    venv = tmp_path / ".venv"
    (venv / "bin").mkdir(parents=True)
    shutil.copy2(PROJECT / ".venv" / "pyvenv.cfg", venv / "pyvenv.cfg")
    (venv / "bin" / "python").symlink_to((PROJECT / ".venv" / "bin" / "python").resolve())
    for stamp in (".lockbench-installed", ".lockbench-bytecode"):
        shutil.copy2(PROJECT / ".venv" / stamp, venv / stamp)
    (venv / "bin" / "bench").write_text(f"#!{venv}/bin/python\n")
    (venv / "bin" / "bench").chmod(0o755)
    before = (PROJECT / ".venv" / "bin" / "bench").read_text()
    sources = []
    for package in ("bench", "lockimpls", "workloads", "infra", "dashboards", "resultsio"):
        (tmp_path / package / "sub").mkdir(parents=True)
        for name in ("__init__.py", "sub/__init__.py", "sub/mod.py"):
            (tmp_path / package / name).write_text(f"VALUE = {package!r}\n")
            sources.append(tmp_path / package / name)
    _bootstrap(tmp_path)
    assert all(_pyc_matches(s) for s in sources)  # missing: compiled

    edited = tmp_path / "workloads" / "sub" / "mod.py"
    edited.write_text("VALUE = 'edited, and longer than before'\n")
    os.utime(edited, (1_700_000_000, 1_700_000_000))
    shutil.rmtree(tmp_path / "dashboards" / "__pycache__")
    assert not _pyc_matches(edited)
    _bootstrap(tmp_path)
    assert all(_pyc_matches(s) for s in sources)  # stale and missing: compiled again
    assert (PROJECT / ".venv" / "bin" / "bench").read_text() == before  # the shared .venv untouched


def test_pycache_stays_out_of_git() -> None:
    r = subprocess.run(
        ["git", "-C", str(PROJECT), "check-ignore", "-q", "bench/__pycache__/app.cpython-311.pyc"],
        capture_output=True,
        check=False,
    )
    assert r.returncode == 0, "__pycache__ must be in .gitignore"
