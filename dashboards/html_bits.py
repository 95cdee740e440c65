"""Escaping, number formatting and verdict colours shared by every section of the page."""

from __future__ import annotations

import html

#: Checker counters whose nonzero value means the lock was unsafe in this case.
VIOLATIONS = ("overlapping_holds", "witness_violations", "oversold_units", "lost_updates")
#: Counters that are not violations by themselves but deserve a look when nonzero.
WARNINGS = ("acquire_info", "releases_not_owned")
VERDICT_CLASS = {"valid": "good", "invalid": "bad", "unknown": "unknown"}


def e(value: object) -> str:
    """HTML-escape anything (quotes too: values also land in attributes)."""
    return html.escape(str(value), quote=True)


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
