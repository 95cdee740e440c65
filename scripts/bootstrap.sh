#!/usr/bin/env bash
# Make .venv with lockbench and its Python dependencies (idempotent, quick when up to date).
#
#   scripts/bootstrap.sh        what `bench` needs (pip install -e .): scripts/bench, the README's first command
#   scripts/bootstrap.sh test   plus pytest, ruff and the history extras (-e '.[test]'): scripts/test
#
# Why two: the first run should not wait for the test and history extras (DuckDB, Otava, scipy).
# uv makes the environment when it can be had (on PATH, or installed from PyPI as a wheel: into
# ~/.local with pip --user, else into .venv itself); pip does it otherwise. LOCKBENCH_NO_UV=1
# forces pip; LOCKBENCH_BOOTSTRAP_DRY_RUN=1 prints the plan and changes nothing.
# Bytecode is compiled at install (the dependencies) and on every run (lockbench's own packages, in
# place): with PYTHONDONTWRITEBYTECODE=1 Python only reads .pyc files, so they must exist beforehand.
# Installs python3-venv with apt-get when the machine lacks it (Debian/Ubuntu, as root).
set -euo pipefail
cd "$(dirname "$0")/.."

extras=${1:-base}
case "$extras" in
  base) spec=. ;;
  history) spec='.[history]' ;;  # bench history (scripts/bench history): base plus Apache Otava
  test) spec='.[test]' ;;
  *) echo "usage: scripts/bootstrap.sh [base|history|test] (got: $extras)" >&2; exit 2 ;;
esac

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "lockbench needs Python >= 3.11 (found: $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi

# The stamp holds what was installed (base, history or test); test includes both others. A stamp older than
# pyproject.toml means the dependencies changed. (An empty stamp is an older bootstrap's: test.)
stamp=.venv/.lockbench-installed
up_to_date() {
  [ -x .venv/bin/python ] && [ -f "$stamp" ] && [ ! pyproject.toml -nt "$stamp" ] || return 1
  # a .venv moved or copied from another checkout (or shared with a git worktree that reinstalled)
  # still points its editable install and its `bench` script at the other place: install again
  [ "$(head -c 200 .venv/bin/bench 2>/dev/null | head -n 1)" = "#!$PWD/.venv/bin/python" ] || return 1
  local have
  have=$(cat "$stamp")
  [ "$extras" = base ] || [ "${have:-test}" = test ] || [ "$have" = "$extras" ]
}

if [ -n "${LOCKBENCH_BOOTSTRAP_DRY_RUN:-}" ]; then
  tool=pip
  if [ -z "${LOCKBENCH_NO_UV:-}" ]; then tool="uv (when it can be had), else pip"; fi
  state=install; if up_to_date; then state=up-to-date; fi
  echo "lockbench: bootstrap plan: extras=$extras spec=-e $spec state=$state tool=$tool" >&2
  exit 0
fi
# Bytecode once (issue 42): where PYTHONDONTWRITEBYTECODE=1 is set (these machines, many container
# images) Python reads existing .pyc files but never writes them, so without this every start of bench
# and of every Locust process compiled its imports from source (bench --help: 461 compiles).
bytecode_stamp=.venv/.lockbench-bytecode
compile_bytecode() {
  # the dependencies: once per install (uv --compile-bytecode or pip compiled what they installed; this
  # also covers a .venv made before this step), redone whenever the install stamp is newer
  if [ ! -f "$bytecode_stamp" ] || [ "$stamp" -nt "$bytecode_stamp" ]; then
    local site
    site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2>/dev/null || true)
    if [ -n "$site" ] && [ -d "$site" ]; then
      .venv/bin/python -m compileall -qq -j 0 "$site" >/dev/null 2>&1 || true  # a file for another Python: skipped
    fi
    touch "$bytecode_stamp"
  fi
  # lockbench's own packages are installed editable, so they are compiled in place, on every run:
  # compileall skips up-to-date files (0.06 s for all 155) and recompiles the edited ones
  .venv/bin/python -m compileall -qq bench lockimpls workloads infra dashboards resultsio >/dev/null 2>&1 || true
}
if up_to_date; then compile_bytecode; exit 0; fi
# a .venv that had the test extras keeps them current (scripts/bench after scripts/test)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = test ]; then extras=test; spec='.[test]'; fi
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = history ] && [ "$extras" = base ]; then extras=history; spec='.[history]'; fi

apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    echo "missing OS packages: $*; install them with: sudo apt-get install $*" >&2
    exit 2
  fi
}

# uv: on PATH, in ~/.local/bin (pip --user) or in .venv (installed there by pip)
find_uv() {
  local c
  for c in "$(command -v uv 2>/dev/null || true)" "${HOME:-/nonexistent}/.local/bin/uv" .venv/bin/uv; do
    if [ -n "$c" ] && [ -x "$c" ] && "$c" --version >/dev/null 2>&1; then echo "$c"; return 0; fi
  done
  return 1
}
uv=
if [ -z "${LOCKBENCH_NO_UV:-}" ]; then
  # a wheel from PyPI; refused where the system Python is externally managed (PEP 668): see below
  uv=$(find_uv) || {
    echo "lockbench: installing uv (a fast pip, one wheel) with pip --user into ~/.local; its cache goes to" \
      "~/.cache/uv (LOCKBENCH_NO_UV=1: pip only)" >&2
    "$PY" -m pip install -q --user --disable-pip-version-check uv >/dev/null 2>&1 || true; uv=$(find_uv) || uv=; }
fi

if [ ! -x .venv/bin/python ]; then
  echo "lockbench: first use: creating .venv (a Python environment inside this checkout); once only" >&2
  rm -rf .venv
  if [ -n "$uv" ]; then
    "$uv" venv -q --python "$PY" .venv >/dev/null 2>&1 || { rm -rf .venv; uv=; }
  fi
  if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv 2>/dev/null || { rm -rf .venv; apt_install python3-venv; "$PY" -m venv .venv; }
  fi
fi
if [ -z "$uv" ] && [ -z "${LOCKBENCH_NO_UV:-}" ] && .venv/bin/python -m pip --version >/dev/null 2>&1; then
  # no uv yet: the bootstrap venv is .venv itself (one small wheel, then uv installs the rest)
  .venv/bin/python -m pip install -q --disable-pip-version-check uv >/dev/null 2>&1 || true
  uv=$(find_uv) || uv=
fi

what="lockbench's dependencies"; [ "$extras" = test ] && what="lockbench's dependencies with the test extras"
if [ -n "$uv" ]; then
  echo "lockbench: installing $what into .venv with uv (Locust, redis-py, psycopg, kazoo, pandas," \
    "plotly ...): seconds, about a minute with pip; later runs skip this" >&2
  # uv shows a build's output only when it fails, so a quiet set-up has no warning blocks
  "$uv" pip install -q --compile-bytecode --python .venv/bin/python -e "$spec" || { echo "lockbench: uv pip install failed" >&2; exit 2; }
else
  echo "lockbench: installing $what into .venv (Locust, redis-py, psycopg, kazoo, pandas," \
    "plotly ...): about a minute the first time, quiet while pip works; later runs skip this" >&2
  # a .venv made by uv has no pip of its own
  .venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip >/dev/null 2>&1 || true
  # errors only: pip's -q still lets the build backend's warnings through; a failure keeps every
  # line from its first error on, and the import check below names it
  log=$(mktemp)
  code=0
  .venv/bin/python -m pip install -q --disable-pip-version-check -e "$spec" >"$log" 2>&1 || code=$?
  if [ "$code" != 0 ]; then
    if grep -qi error "$log"; then sed -n '/[Ee][Rr][Rr][Oo][Rr]/,$p' "$log" >&2; else tail -n 20 "$log" >&2; fi
    rm -f "$log"
    echo "lockbench: pip install failed" >&2
    exit 2
  fi
  rm -f "$log"
fi
.venv/bin/python -c 'import bench.cli.app, locust, redis, hdrh, plotly' || { echo "lockbench: install failed" >&2; exit 2; }
echo "$extras" >"$stamp"
compile_bytecode
echo "lockbench: .venv ready" >&2
