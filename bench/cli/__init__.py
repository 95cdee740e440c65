"""The ``bench`` command line: the typer app, its shared options, the pyproject table, ``bench infra``.

``bench.cli:main`` is the console entry point (pyproject.toml). It takes Ctrl-C and SIGTERM
before it imports anything heavy: importing the app (typer, rich) takes a moment, and a
signal in it must end in one line, not a traceback or a silent -15.

A server URL with a password on the command line would show in ``ps`` (``/proc/<pid>/cmdline``
is readable by every user) for the whole run; bench moves it into its ``LOCKBENCH_*``
variable (``/proc/<pid>/environ`` is private) and starts itself again, same pid, before it
does anything else (:func:`hide_secrets`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sys
from typing import Any, NoReturn

#: the options whose values may carry a password
SECRET_OPTIONS = ("redis_url", "pg_dsn", "zk_hosts", "etcd_url", "memcached_url", "resource_url")
#: set by :func:`hide_secrets` for the process it starts: the options moved from flags into variables
MOVED_ENV = "LOCKBENCH_MOVED_FLAGS"
#: and the command line as typed, with the passwords redacted (run.json ``command``)
ARGV_ENV = "LOCKBENCH_TYPED_ARGV"
_PASSWORD = re.compile(r"://[^/@\s]*:[^/@\s]+@|password=", re.IGNORECASE)


def _secret_flags(args: list[str]) -> tuple[list[str], dict[str, list[str]]]:
    """``args`` without the secret-carrying server options, and those options' values by option name."""
    flags = {"--" + n.replace("_", "-"): n for n in SECRET_OPTIONS}
    kept: list[str] = []
    moved: dict[str, list[str]] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            kept += args[i:]
            break
        name, eq, value = arg.partition("=")
        if name in flags and (eq or i + 1 < len(args)):
            if not eq:
                i += 1
                value = args[i]
            moved.setdefault(flags[name], []).append(value)
        else:
            kept.append(arg)
        i += 1
    return kept, moved


def hide_secrets(argv: list[str]) -> None:
    """Start bench again with every server option moved into its variable when one carries a password.

    The flag still wins over a variable the user had set (its value replaces it), and errors
    still name the flag (:data:`MOVED_ENV`). Returns only when nothing needs hiding.
    """
    args = argv[1:]
    kept, moved = _secret_flags(args)
    if not any(_PASSWORD.search(v) for values in moved.values() for v in values):
        return
    from bench.results.redact import redact_text

    env = dict(os.environ)
    for name, values in moved.items():
        env["LOCKBENCH_" + name.upper()] = " ".join(values)
    env[MOVED_ENV] = ",".join(moved)
    env[ARGV_ENV] = json.dumps([redact_text(a) for a in argv])
    os.execve(sys.executable, [sys.executable, "-m", "bench", *kept], env)


def typed_argv() -> list[str]:
    """The command line as the user typed it (passwords redacted when bench moved them): run.json's ``command``."""
    typed = os.environ.get(ARGV_ENV)
    return json.loads(typed) if typed else list(sys.argv)


def moved_flags() -> set[str]:
    """The options :func:`hide_secrets` moved from the command line into variables: their source is the flag."""
    return {n for n in os.environ.get(MOVED_ENV, "").split(",") if n}


def main(argv: list[str] | None = None) -> None:
    """Entry point: secrets out of argv, signals, then the app (bench/cli/app.py ``main``)."""
    from bench.errors import on_interrupt_signal

    if argv is None:
        hide_secrets(sys.argv)
    try:
        # inside the try: a signal caught between these two lines raises here (a test sent one
        # as soon as SIGTERM was caught, and got a traceback from inside signal.signal)
        signal.signal(signal.SIGTERM, on_interrupt_signal)
        signal.signal(signal.SIGINT, on_interrupt_signal)
        from bench.cli.app import main as app_main

        app_main(argv)  # handles every interrupt once its own imports are done
    except KeyboardInterrupt:  # before that: the app was still being imported
        print("bench: interrupted while starting; nothing was written", file=sys.stderr)
        exit_interrupted()
    except SystemExit as exc:
        if exc.code == 130:
            exit_interrupted()
        raise
    except Exception:
        # a signal inside a C extension's import surfaces as another error (numpy under pandas:
        # "ImportError: Unable to import required dependency numpy"): it is still the interrupt
        from bench.errors import INTERRUPT

        if not INTERRUPT.is_set():
            raise
        print("bench: interrupted while starting; nothing was written", file=sys.stderr)
        exit_interrupted()


def exit_interrupted() -> NoReturn:
    """Exit 130 after an interrupt bench has handled, past Python's own exit by SIGINT.

    A KeyboardInterrupt raised inside code the interpreter runs through ``PyRun_*`` (a C
    extension's import does) sets its "unhandled KeyboardInterrupt" flag even when bench
    catches it; at exit Python then kills itself with SIGINT (status -2) instead of returning
    130: 4 of 30 signals sent 0.1-0.8 s into a ``bench run``, none of 40 with this exit. The
    exit handlers run and the streams are flushed first, as a normal exit would.
    """
    import atexit

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(130)


def __getattr__(name: str) -> Any:
    if name == "app":  # the typer app, imported on first use only
        from bench.cli.app import app

        return app
    raise AttributeError(name)


__all__ = ["app", "main"]
