"""Escaping, number formatting and verdict colours shared by every section of the page."""

from __future__ import annotations

import html

#: Checker counters whose nonzero value means the lock was unsafe in this case.
VIOLATIONS = ("overlapping_holds", "locks_lost", "witness_violations", "oversold_units", "lost_updates")
#: Counters that are not violations by themselves but deserve a look when nonzero.
WARNINGS = ("acquire_info", "releases_not_owned")
VERDICT_CLASS = {"valid": "good", "invalid": "bad", "unknown": "unknown"}


def e(value: object) -> str:
    """HTML-escape anything (quotes too: values also land in attributes)."""
    return html.escape(str(value), quote=True)


def wrap(name: str) -> str:
    """An escaped column name that may break after its underscores, so wide headers do not widen tables."""
    return e(name).replace("_", "_<wbr>")


def fmt(value: float | None, kind: str = "num") -> str:
    """Human formatting of a metric; 'n/a' for a missing value."""
    if value is None:
        return "n/a"
    if kind == "pct":
        return f"{value * 100:.1f}%"
    if kind == "ratio":
        return f"{value:.3f}"
    if kind == "rate":
        return f"{value:,.1f}"
    if kind == "us":
        return duration_us(value)
    if float(value).is_integer():
        return f"{int(value):,}"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def cell(value: float | None, kind: str = "num", cls: str = "", col: str = "") -> str:
    """A right-aligned numeric table cell, grey 'n/a' when missing."""
    classes = " ".join(c for c in ("num", cls, "na" if value is None else "") if c)
    data = f' data-col="{e(col)}"' if col else ""
    return f'<td class="{classes}"{data}>{fmt(value, kind)}</td>'


def verdict_class(verdict: str | None) -> str:
    return VERDICT_CLASS.get((verdict or "unknown").strip().lower(), "unknown")


#: How resultsio marks a row that rests on damaged data (``Results.marked``): verdict unknown, this reason.
DAMAGED = "damaged: "
#: What a cell says for such a row: never "inconclusive" alone, never survived.
UNKNOWN_DAMAGED = "unknown (damaged)"


def verdict_word(verdict: str | None, reason: str | None) -> str:
    """The verdict as a cell shows it: ``unknown (damaged)`` where the row rests on damaged data."""
    word = verdict or "unknown"
    if word.strip().lower() == "unknown" and (reason or "").startswith(DAMAGED):
        return UNKNOWN_DAMAGED
    return word


def duration_us(value: float) -> str:
    """A duration given in microseconds, in the unit that keeps it short: '459 µs', '1.44 ms', '2.29 s'."""
    size = abs(value)
    if size < 1_000:
        return f"{value:.3g} µs"
    if size < 1_000_000:
        return f"{value / 1_000:.3g} ms"
    seconds = value / 1_000_000
    return f"{seconds:,.0f} s" if abs(seconds) >= 1_000 else f"{seconds:.3g} s"


def rule_of_three(n: float) -> str:
    """What n clean acquisitions rule out: none seen in n bounds the rate below 3/n at 95% confidence."""
    if n < 3:
        return "too few acquisitions to bound a rare race"
    return f"a race rarer than 1 in {n / 3:,.0f} could go unseen (rule of three, 95%)"
