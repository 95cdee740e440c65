"""A warm Locust: imports Locust and the clients once, then forks one child per case.

``python -m locust`` spends about two seconds of CPU importing Locust, gevent, pandas,
pyarrow and the database clients before the first user starts; a matrix of hundreds of
short cases would spend most of its time there. This process imports them once and
forks a child for each case; the child runs Locust's own ``main()`` with the very argv
``python -m locust`` would get, in its own session, with its output in the case's log.

Protocol (one JSON object per line): bench writes ``{"argv": [...], "log": path, "nice": n}``
(``nice`` null: left as it is; else the child's session is raised to it, and the child goes
real-time where the kernel lets it, priority.py), or
``{"group": [argv, ...], ...}`` for several cases in one child (``group_locust.py``); this
process answers ``{"pid": n}`` once the child exists and ``{"pid": n, "exit": code}`` when
it has ended. It exits when its stdin closes. Run by bench as ``python -m workloads.harness.warm_locust``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from typing import Any, NoReturn

# Locust first: it monkey-patches the standard library before anything else imports it.
import locust  # noqa: F401
import locust.main  # noqa: F401

from workloads.harness.priority import raise_generator

#: Modules every case imports anyway; importing them here is what makes a child start fast.
PRELOAD = (
    "pandas", "pyarrow.parquet", "numpy", "redis", "hdrh.histogram", "workloads.harness.locust_glue",
    "workloads.harness.resource", "workloads.checks.core", "workloads.harness.distributions", "lockimpls.registry",
)  # fmt: skip


#: How long a case's process may still send its queued messages as it ends (ms): Locust's own
#: wait for a worker's last stats is 0.5 s (``MasterRunner.quit``)
LINGER_MS = 500


def _preload() -> None:
    import importlib

    from lockimpls.registry import BUILTIN

    for name in (*PRELOAD, *(spec.partition(":")[0] for spec in BUILTIN.values())):
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing client only hurts its own impls, in the child
            continue


def _die_with_parent(parent: int) -> None:
    """This process (or a case's child) is SIGKILLed when its parent dies, even by ``kill -9``.

    The warm process gets it from bench (``preexec_fn``), each case's Locust from the warm
    process here, and Locust's own workers from ``locust_glue``: a chain with no orphan.
    A child whose parent died before the call leaves at once.
    """
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os._exit(1)


def _child(
    argv: list[str], log: str, parent: int, nice: int | None = None, group: list[list[str]] | None = None
) -> NoReturn:
    """Become ``python -m locust <argv>`` with output to ``log``, its session at ``nice``; never returns.

    With ``group``, the process runs those cases side by side instead (``group_locust.run``).
    """
    code = 1
    try:
        os.setsid()
        _die_with_parent(parent)
        if nice is not None:
            raise_generator(0, nice)  # before Locust forks its workers: they inherit it
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        sys.argv = ["locust", *argv]
        try:
            if group is not None:
                from workloads.harness import group_locust

                code = group_locust.run(group)
            else:
                locust.main.main()
                code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        _end_as_an_interpreter_would()
    except BaseException:  # noqa: BLE001 - the case's log says what went wrong
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    os._exit(code)


def _end_as_an_interpreter_would() -> None:
    """Send what Locust's sockets still hold, as ``python -m locust``'s teardown gives time to.

    Locust's messages leave through ZeroMQ's I/O thread, and this fork ends with ``os._exit``
    the moment ``main()`` returns: a worker then took its final stats and its goodbye with it,
    and the master, waiting for that goodbye, ended without it (tests/test_prompt_runner.py
    failed 7 times in 12 with warm-forked cases; a fresh interpreter's teardown had given the
    thread the time). Each open context is now closed with a linger bounded like Locust's own
    wait for those messages, so what was sent arrives: 0 failures in 12.
    The exit handlers are still not run: Locust's one there (``kill_workers``) would only
    sleep 0.1 s, since its non-blocking wait does not wait, and bench ends the case's
    process group itself.
    """
    import gc

    import zmq

    gc.unfreeze()  # Locust's master freezes what it has before forking workers: gc then lists none of it
    for obj in gc.get_objects():  # about 0.02 s: 120,000 objects in a case's process
        if isinstance(obj, zmq.Context) and not obj.closed:
            with contextlib.suppress(Exception):
                obj.destroy(linger=LINGER_MS)


def _answer(message: dict[str, Any]) -> None:
    sys.__stdout__.write(json.dumps(message) + "\n")
    sys.__stdout__.flush()


def serve() -> None:
    """Fork a Locust child per request line on stdin, one at a time, until stdin closes."""
    _preload()
    _answer({"ready": True})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:
            _child(request.get("argv", []), request["log"], parent, request.get("nice"), request.get("group"))
        _answer({"pid": pid})
        _, status = os.waitpid(pid, 0)
        _answer({"pid": pid, "exit": os.waitstatus_to_exitcode(status)})


if __name__ == "__main__":
    serve()
