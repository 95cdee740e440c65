"""The ``bench`` command line: the typer app, its shared options, the pyproject table, ``bench infra``.

``bench.cli:main`` is the console entry point (pyproject.toml).
"""

from bench.cli.app import app, main

__all__ = ["app", "main"]
