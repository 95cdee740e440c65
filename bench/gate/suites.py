"""Named sets of ``bench run`` options, so CI and people run the very same thing: ``--suite ci``.

A suite sets options the user did not give: a flag on the command line or a
``LOCKBENCH_*`` variable still wins, the suite wins over ``[tool.lockbench]`` defaults and
built-in defaults (the user asked for the suite by name, the table applies to everything).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.errors import UserError

#: The ``bench run`` options a suite may set (bench/cli/app.py applies exactly these).
SUITE_KEYS = frozenset({"impl", "workload", "duration", "users", "trials", "cs"})


@dataclass(frozen=True)
class Suite:
    """A named option set for ``bench run`` and why it looks the way it does."""

    name: str
    summary: str
    options: dict[str, Any] = field(default_factory=dict)


SUITES: dict[str, Suite] = {
    "ci": Suite(
        name="ci",
        summary=(
            "the CI regression suite: two Redis locks, 5 interleaved trials of 3 s each (about a minute). "
            "5 trials per side is the fewest for which the gate's Mann-Whitney test, Holm-corrected over "
            "its comparisons, can reach p <= 0.05 at all (3 trials: p >= 0.05 before correction)."
        ),
        options={
            "impl": ["redis.set-nx-px-lua", "redis.set-nx-px"],
            "workload": "flash-sale",
            "duration": 3.0,
            "users": 10,
            "trials": 5,
            "cs": "1ms",
        },
    ),
}


def get_suite(name: str) -> Suite:
    """The suite called ``name``; UserError naming the valid ones otherwise."""
    try:
        return SUITES[name]
    except KeyError:
        raise UserError(f"unknown suite {name!r}; valid: {', '.join(SUITES)}") from None


def apply_suite(name: str, values: dict[str, Any], user_given: set[str]) -> dict[str, Any]:
    """``values`` with the suite's options filled in wherever the user did not set the option."""
    suite = get_suite(name)
    unknown = set(suite.options) - SUITE_KEYS
    if unknown:
        raise UserError(f"suite {name!r} sets options bench cannot apply: {', '.join(sorted(unknown))}")
    out = dict(values)
    for key, value in suite.options.items():
        if key not in user_given:
            out[key] = list(value) if isinstance(value, list) else value
    return out
