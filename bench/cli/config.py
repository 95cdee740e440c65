"""Defaults from ``[tool.lockbench]`` in the current directory's pyproject.toml, checked.

Precedence is CLI flag > ``LOCKBENCH_*`` environment variable > this table > built-in
default; typer applies the first two, this module feeds the third as click's default_map.

Keys at the top of the table are ``bench run`` options (``users = 20``); a sub-table names
a command (``[tool.lockbench.matrix]``, ``[tool.lockbench.baseline.update]``). Every key is
checked against the command's options before anything runs: an unknown key, a value of
the wrong type (``users = true``) or a file that is not valid TOML is one line, exit 2,
naming the file and the key. (Before, an unknown key was ignored, ``users = true`` ran
with one user and a malformed file was skipped here, then broke Locust.)
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from bench.errors import UserError

TABLE = "[tool.lockbench]"

#: (command path, option) -> "[tool.lockbench] ttl in /path/pyproject.toml": where each default came from
ORIGINS: dict[tuple[tuple[str, ...], str], str] = {}


def origin(command: tuple[str, ...], name: str) -> str:
    """The pyproject key (with its table and file) that set option ``name`` of ``command``."""
    return ORIGINS.get((command, name), f"{TABLE} in pyproject.toml")


def _pyproject(start: Path | None = None) -> Path:
    return (start or Path.cwd()) / "pyproject.toml"


def project_table(start: Path | None = None) -> dict[str, Any]:
    """The ``[tool.lockbench]`` table ({} when there is none); UserError for a malformed file."""
    path = _pyproject(start)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror}); bench reads {TABLE} from it") from None
    except UnicodeDecodeError as exc:
        raise UserError(
            f"{path}: not UTF-8 text (byte {exc.start}); TOML files are UTF-8: save it as UTF-8 "
            "(bench and Locust read it)"
        ) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{path}: not valid TOML ({exc}); fix it (Locust reads this file too)") from None
    except RecursionError:
        raise UserError(
            f"{path}: nested too deeply to read (arrays or tables inside each other); fix it "
            "(Locust reads this file too)"
        ) from None
    tool = data.get("tool", {})
    if not isinstance(
        tool, dict
    ):  # Locust reads [tool.locust] from it and fails deep inside its config reader
        raise UserError(
            f"{path}: tool must be a table ([tool.<name>] sections), got tool = {tool!r}; fix or remove it"
        )
    table = tool.get("lockbench", {})
    if not isinstance(table, dict):
        raise UserError(f"{path}: tool.lockbench must be a table ({TABLE}), got {type(table).__name__}")
    return table


def _kind(param: Any) -> tuple[str, tuple[type, ...]]:
    """(words for the error, accepted TOML types) of a typer option, from its annotation."""
    import typing

    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", str)
    if typing.get_origin(annotation) is list:
        annotation = (typing.get_args(annotation) or (str,))[0]
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    annotation = args[0] if args else annotation
    if param.is_flag or annotation is bool:
        return "true or false", (bool,)
    if annotation is int:
        return "a whole number", (int,)
    if annotation is float:
        return "a number", (int, float)
    return "a string", (str,)


def _check_value(path: Path, where: str, key: str, value: Any, param: Any) -> None:
    words, types = _kind(param)
    values = value if isinstance(value, list) and param.multiple else [value]
    if isinstance(value, list) and not param.multiple:
        values = [object()]  # a list where one value belongs
    for item in values:
        ok = isinstance(item, types) and not (isinstance(item, bool) and bool not in types)
        if not ok:
            plural = f"{words} or a list of them" if param.multiple else words
            shown = str(value).lower() if isinstance(value, bool) else repr(value)
            raise UserError(
                f"{path}: {where} {key} = {shown} must be {plural} "
                f"(like --{key.replace('_', '-')}); fix or remove it there"
            )


def _check_table(
    path: Path, where: str, table: dict[str, Any], command: Any, names: tuple[str, ...] = ("run",)
) -> dict[str, Any]:
    """The default_map of ``command`` from ``table``; UserError naming file and key when a key is wrong."""
    import difflib

    subcommands = getattr(command, "commands", None) or {}
    options = {p.name: p for p in command.params if p.param_type_name == "option" and p.name != "help"}
    out: dict[str, Any] = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        if isinstance(value, dict) and raw_key in subcommands:
            inner = f"{where[:-1]}.{raw_key}]"
            out[raw_key] = _check_table(path, inner, value, subcommands[raw_key], (*names, raw_key))
            continue
        param = options.get(key)
        if param is None:
            names = [n.replace("_", "-") for n in options] + list(subcommands)
            close = difflib.get_close_matches(raw_key.replace("_", "-"), names, n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else ""
            what = "a table" if isinstance(value, dict) else "a key"
            raise UserError(
                f"{path}: {where} has {what} {raw_key!r} that bench {command.name or ''} does not take{hint} "
                "(keys are the long options, e.g. users = 20; --lock-params is a JSON string); fix or remove it"
            )
        if param.multiple and isinstance(value, str):
            value = value.split()  # workload = "flash-sale" is one value, like LOCKBENCH_WORKLOAD=flash-sale
        _check_value(path, where, raw_key, value, param)
        out[key] = value
        ORIGINS[(names, key)] = f"{where} {raw_key} in {path}"
    return out


def default_map(root: Any | None = None, start: Path | None = None) -> dict[str, Any]:
    """{'run': {'users': 20, ...}} from keys like ``users = 20`` or ``[tool.lockbench.run]``, checked.

    ``root`` is the click command of the whole ``bench`` app; without it nothing is checked.
    """
    table = project_table(start)
    if not table:
        return {}
    path = _pyproject(start)
    top = {k: v for k, v in table.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    if root is None:
        out = {name: {k.replace("-", "_"): v for k, v in sub.items()} for name, sub in tables.items()}
        out.setdefault("run", {}).update({k.replace("-", "_"): v for k, v in top.items()})
        return out
    commands = root.commands
    out: dict[str, Any] = {}
    run_options = {q.name: q for q in commands["run"].params}
    for name, sub in tables.items():
        if name not in commands and name.replace("-", "_") in run_options:
            _check_value(path, TABLE, name, sub, run_options[name.replace("-", "_")])  # a table for a value
        if name not in commands:
            import difflib

            close = difflib.get_close_matches(name, list(commands), n=1, cutoff=0.6)
            hint = f"; did you mean [tool.lockbench.{close[0]}]?" if close else ""
            raise UserError(
                f"{path}: {TABLE} has a table {name!r}, but bench has no command {name}{hint}; fix or remove it"
            )
        out[name] = _check_table(path, f"[tool.lockbench.{name}]", sub, commands[name], (name,))
    run = _check_table(path, TABLE, top, commands["run"]) if top else {}
    out.setdefault("run", {}).update(run)
    return out
