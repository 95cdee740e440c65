"""The ``bench`` command line: the typer app, its shared options, the pyproject table, ``bench infra``.

``bench.cli:main`` is the console entry point (pyproject.toml). It takes Ctrl-C and SIGTERM
before it imports anything heavy: importing the app (typer, pandas, pyarrow) takes about a
second, and a signal in that second must end in one line, not a traceback or a silent -15.
"""

from __future__ import annotations

import signal
import sys
from typing import Any


def main(argv: list[str] | None = None) -> None:
    """Entry point: signals first, then the app (bench/cli/app.py ``main``)."""
    from bench.errors import on_interrupt_signal

    signal.signal(signal.SIGTERM, on_interrupt_signal)
    signal.signal(signal.SIGINT, on_interrupt_signal)
    try:
        from bench.cli.app import main as app_main

        app_main(argv)  # handles every interrupt once its own imports are done
    except KeyboardInterrupt:  # before that: the app was still being imported
        print("bench: interrupted while starting; nothing was written", file=sys.stderr)
        sys.exit(130)


def __getattr__(name: str) -> Any:
    if name == "app":  # the typer app, imported on first use only
        from bench.cli.app import app

        return app
    raise AttributeError(name)


__all__ = ["app", "main"]
