"""Locust's ``Runner.stop`` without reading source files: what a case's stop costs the machine.

``Runner.stop`` names its caller in a DEBUG log line (the harness logs at INFO), and finds it
with ``inspect.stack()``, which reads the source of every frame on the stack and, on its first
call in a process, walks every loaded module (``inspect.getmodule``): 1,350 of them in a case's
Locust process, pandas and pyarrow among them. That was 0.08 CPU-s a stop (0.011 on a second
call), measured after the warm process's imports (2026-12-06); every Locust process of a case
stops once, and a full standard matrix runs about 600 of them beside each other, so does the test
suite. A py-spy profile of a matrix's restart group showed Locust's stop as a tenth of a
case's CPU after its imports.

:func:`install` gives ``locust.runners`` an ``inspect`` whose ``stack`` and ``getframeinfo``
name the caller from the frame alone (file, line, function), and that is the real module for
anything else. The log line still says where ``stop`` was called from.
"""

from __future__ import annotations

import inspect
import sys
from types import FrameType
from typing import Any

from locust import runners


def _stack(context: int = 1) -> list[tuple[FrameType]]:
    """The caller's frame and its caller's, as the first item of ``inspect.stack()``'s entries."""
    return [(sys._getframe(1),), (sys._getframe(2),)]


def _frame_info(frame: FrameType, context: int = 1) -> inspect.Traceback:
    """File, line and function of ``frame``, from the frame itself: no source read."""
    return inspect.Traceback(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, None, None)


class _CallerOnly:
    """``inspect`` for ``locust.runners``: its two stack calls cheap, every other name the real one."""

    stack = staticmethod(_stack)
    getframeinfo = staticmethod(_frame_info)

    def __getattr__(self, name: str) -> Any:
        return getattr(inspect, name)


def install() -> None:
    """Give ``locust.runners`` the cheap ``inspect`` (once; a Locust that stopped using it is left alone)."""
    if getattr(runners, "inspect", None) is inspect:
        runners.inspect = _CallerOnly()  # type: ignore[assignment]
