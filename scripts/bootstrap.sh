#!/usr/bin/env bash
# Make .venv with lockbench and its Python dependencies (idempotent, quick when up to date).
# Installs python3-venv with apt-get when the machine lacks it (Debian/Ubuntu, as root).
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "lockbench needs Python >= 3.11 (found: $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi

apt_install() {
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
  else
    echo "missing OS packages: $*; install them with: sudo apt-get install $*" >&2
    exit 2
  fi
}

if [ ! -x .venv/bin/python ]; then
  echo "lockbench: first use: creating .venv (a Python environment inside this checkout); once only" >&2
  "$PY" -m venv .venv 2>/dev/null || { rm -rf .venv; apt_install python3-venv; "$PY" -m venv .venv; }
fi
stamp=.venv/.lockbench-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "lockbench: installing Python dependencies into .venv (Locust, redis-py, psycopg, kazoo, pandas," \
    "plotly ...): about a minute the first time, quiet while pip works; later runs skip this" >&2
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install -q -e '.[test]' 2>&1 | grep -v '^WARNING: Location' >&2 || true
  .venv/bin/python -c 'import bench.cli.app, locust, redis, hdrh, plotly' || { echo "lockbench: pip install failed" >&2; exit 2; }
  touch "$stamp"
  echo "lockbench: .venv ready" >&2
fi
