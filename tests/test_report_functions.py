"""dashboards/ keeps no function over about 100 lines (issue 40), each part named for what it draws or decides."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_no_function_in_dashboards_is_over_100_lines() -> None:
    long = []
    for path in sorted((ROOT / "dashboards").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > 100:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert long == []
