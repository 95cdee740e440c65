"""Locust's worker takes a spawn message without rebuilding its argument parser once per option.

``WorkerRunner.handle_message`` keeps the master's options that are not Locust defaults with a
dict comprehension that calls ``argument_parser.default_args_dict()`` for every option it tests:
each call builds Locust's whole argument parser and parses nothing with it (argparse's gettext
lookups included), 2-3 ms. A case's spawn message carries about 130 options (Locust's and
lockbench's), so each worker process spent some 0.3 CPU-s there with its loop blocked, at the
moment its users start; a full standard matrix starts about 600 workers, and the test suite
about 150. Found with gevent's blocking monitor (``GEVENT_MAX_BLOCKING_TIME``) on a matrix case.

The defaults do not change within a process, so :func:`install` makes the function answer from
the first call's result; callers only test names against it.
"""

from __future__ import annotations

import functools
from typing import Any

from locust import argument_parser


def install() -> None:
    """Answer ``default_args_dict()`` from its first result, in this process (once)."""
    current: Any = argument_parser.default_args_dict
    if not hasattr(current, "cache_info"):
        argument_parser.default_args_dict = functools.cache(current)
