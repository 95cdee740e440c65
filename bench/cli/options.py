"""The one option set of ``bench run``, ``matrix``, ``calibrate`` and ``worker``: declared once here.

Every option is an ``Annotated`` alias: its help text (with its allowed range, from
:data:`bench.validate.RANGES`), its ``LOCKBENCH_*`` variable and its metavar. A command
names the aliases it takes and its own default; what a value means, where it may come from
(flag > variable > ``[tool.lockbench]``) and how it is checked (:func:`check_options`,
before anything starts) is the same in every command.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from bench import validate
from lockimpls.registry import backends as _backends
from workloads.harness.catalog import WORKLOADS

REPEATS = "repeatable; in the environment: space-separated"
BACKENDS = _backends()


def env(name: str) -> str:
    """The environment variable of an option: ``--retry-interval`` is ``LOCKBENCH_RETRY_INTERVAL``."""
    return f"LOCKBENCH_{name.upper()}"


def opt(name: str, text: str, *decls: str, metavar: str | None = None, **extra: Any) -> Any:
    """An option with its LOCKBENCH_* variable, a plain metavar and, when it has one, its range."""
    return typer.Option(
        *decls,
        help=validate.help_for(name, text) if name in validate.RANGES else text,
        envvar=env(name),
        metavar=metavar,
        **extra,
    )


def folder_path(value: Any) -> Path:
    """A folder option's value; an empty one is refused (``Path('')`` would be the working directory)."""
    if not str(value).strip():
        raise typer.BadParameter("must name a folder, not an empty path (e.g. results)")
    return Path(value)


def file_path(value: Any) -> Path:
    """A file option's value (``--out``); an empty one is refused (``Path('')`` is the working directory)."""
    if not str(value).strip():
        raise typer.BadParameter("must name a file, not an empty path (e.g. report.html)")
    return Path(value)


# what to run
Backend = Annotated[
    list[str],
    opt(
        "backend", f"backend(s) whose impls to run: {', '.join(BACKENDS)} or all ({REPEATS})", metavar="NAME"
    ),
]
Impl = Annotated[
    list[str], opt("impl", f"impl id (see `bench list`) or package.module:Class ({REPEATS})", metavar="ID")
]
Duration = Annotated[float, opt("duration", "seconds of load per case", metavar="SECONDS")]
Processes = Annotated[
    str,
    opt(
        "processes",
        "Locust worker processes: N, or auto = one per core when users > 1 (1 = one local process)",
        metavar="N|auto",
    ),
]
WorkerProcesses = Annotated[int, opt("processes", "Locust worker processes on this host", metavar="N")]
Cs = Annotated[
    str,
    opt(
        "cs",
        "critical-section time: 1ms, exp:1ms, uniform:0.5ms:2ms, pareto:1ms:1.5 (shape > 0), "
        "lognormal:1ms:0.5 (median, sigma); units us, ms, s; each time at most 1 h",
        metavar="SPEC",
    ),
]

# the lock's own settings
Ttl = Annotated[float, opt("ttl", "lease (TTL) in seconds for locks that have one", metavar="SECONDS")]
RetryInterval = Annotated[
    float, opt("retry_interval", "seconds between attempts of polling locks", metavar="SECONDS")
]
LockParams = Annotated[
    str | None,
    opt("lock_params", "JSON object of impl-specific options, e.g. '{\"delay_s\": 0.001}'", metavar="JSON"),
]

# servers the user already runs (nothing is started for them)
RedisUrl = Annotated[
    list[str],
    opt(
        "redis_url",
        "use this Redis for locks instead of starting one; repeat it for algorithms that need several "
        f"servers (RedLock takes 5) ({REPEATS})",
        metavar="URL",
    ),
]
PgDsn = Annotated[
    str | None, opt("pg_dsn", "use this PostgreSQL (postgresql://...) instead of starting one", metavar="DSN")
]
ZkHosts = Annotated[
    str | None, opt("zk_hosts", "use this ZooKeeper ensemble (host:port,host:port)", metavar="HOSTS")
]
EtcdUrl = Annotated[
    list[str],
    opt("etcd_url", f"use this etcd (http://host:port) instead of starting one ({REPEATS})", metavar="URL"),
]
MemcachedUrl = Annotated[
    str | None, opt("memcached_url", "use this memcached (memcached://host:port)", metavar="URL")
]
ResourceUrl = Annotated[
    str | None, opt("resource_url", "Redis for the protected resource (never a lock server)", metavar="URL")
]

# how much a fault case must see (bench/measure/strikes.py)
Strikes = Annotated[
    int,
    opt(
        "strikes",
        "how often a server fault strikes in one case: strike, heal, let the service grant again, strike",
        metavar="N",
    ),
]
Evidence = Annotated[
    str,
    opt(
        "evidence",
        "what a survived fault needs to be shown as survived: quick (k>=3 strikes, n>=300 grants after "
        "them: bounds a per-strike failure below 1 in 1 and a per-grant race below 1%), standard (k>=10, "
        "n>=1000: below 30% and 0.3%), thorough (k>=30, n>=3000: below 10% and 0.1%); rule of three, 95%. "
        "bench matrix --backend all, standard, on 2 cores at 2 lanes (2026-12-02, measured): 40 min, or 12 min "
        "a shard as --shard I/4 on four runners; thorough about three times that (estimated)",
        metavar="LEVEL",
    ),
]

# where results go
ResultsDir = Annotated[
    Path,
    opt("results_dir", "where run folders go (checked writable first)", metavar="DIR", parser=folder_path),
]
Report = Annotated[bool, opt("report", "render report.html at the end")]


def user_urls(
    redis_url: list[str],
    pg_dsn: str | None,
    zk_hosts: str | None,
    etcd_url: list[str],
    memcached_url: str | None,
) -> dict[str, list[str]]:
    """The servers a user gave, per backend, in the form the runners take."""
    return {
        "redis": list(redis_url),
        "postgres": [pg_dsn] if pg_dsn else [],
        "zookeeper": [f"zookeeper://{zk_hosts}"] if zk_hosts else [],
        "etcd": list(etcd_url),
        "memcached": [memcached_url] if memcached_url else [],
    }


def source(ctx: typer.Context, name: str) -> str:
    """Where an option's value came from, for error messages ("" = the command line or the default)."""
    src = ctx.get_parameter_source(name)
    if src is None:
        return ""
    if src.name == "ENVIRONMENT":
        return env(name)
    if src.name == "DEFAULT_MAP":
        return "[tool.lockbench] in pyproject.toml"
    return ""


def check_options(ctx: typer.Context, write_dirs: tuple[str, ...] = ()) -> dict[str, str]:
    """Validate every option of a command (bench/validate.py); returns where each value came from.

    Every command calls it first, before any server or process starts: numbers against
    their ranges, URLs, the small grammars (``--cs``, ``--arrivals``, ``--lock-params``)
    and, for the folders named in ``write_dirs`` (``results_dir`` of run and matrix), that
    they can be written. Each error names the option, the range and the value's source
    (the command line, a ``LOCKBENCH_*`` variable or ``[tool.lockbench]``).
    """
    sources = {n: source(ctx, n) for n in ctx.params}
    refuse_empty(ctx, sources)
    validate.check_all(ctx.params, sources)
    for name in write_dirs:
        if ctx.params.get(name) is not None:
            validate.check_results_dir(ctx.params[name], sources.get(name, ""))
    warn_password_in_argv(ctx)  # after the checks: a refused value is one line, with no warning above it
    return sources


def refuse_empty(ctx: typer.Context, sources: dict[str, str]) -> None:
    """An empty value is refused like any other bad one: ``--fault ''`` must not start a fault-free run.

    Click ignores an environment variable set to "" (``LOCKBENCH_DURATION=``), so that is checked
    here too: set but empty is a mistake, not "use the default".
    """
    import os

    from bench.errors import UserError

    for param in ctx.command.params:
        name = param.name or ""
        envvar = param.envvar if isinstance(param.envvar, str) else None
        src = ctx.get_parameter_source(name)
        set_empty = bool(envvar) and envvar in os.environ and not os.environ[envvar].strip()
        if set_empty and (src is None or src.name != "COMMANDLINE"):
            raise UserError(f"{envvar} is set but empty: give it a value, or unset it (unset {envvar})")
        if src is None or src.name == "DEFAULT":
            continue
        value = ctx.params.get(name)
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(v, str) and not v.strip() for v in values):
            flag = "--" + name.replace("_", "-")
            raise UserError(
                f"{flag} is empty{from_text(sources, name)}: give it a value (see --help), or leave the option out"
            )


def warn_password_in_argv(ctx: typer.Context) -> None:
    """One line when a server URL on the command line carries a password: ``ps`` shows it all run long.

    The ``LOCKBENCH_*`` variable keeps it out of the process list (other users can read
    /proc/<pid>/cmdline, not /proc/<pid>/environ).
    """
    import re
    import sys

    for name, value in ctx.params.items():
        if not name.endswith(("_url", "_dsn", "_hosts")):
            continue
        src = ctx.get_parameter_source(name)
        if src is None or src.name != "COMMANDLINE":
            continue
        values = value if isinstance(value, list | tuple) else [value]
        if any(isinstance(v, str) and re.search(r"://[^/@\s]*:[^/@\s]+@|password=", v) for v in values):
            flag = "--" + name.replace("_", "-")
            print(
                f"lockbench: warning: the password in {flag} is visible in `ps` for the whole run; "
                f"give the URL in {env(name)} instead",
                file=sys.stderr,
            )


def given(ctx: typer.Context, name: str) -> bool:
    """True when the user set the option (command line or environment), not a default."""
    src = ctx.get_parameter_source(name)
    return src is not None and src.name not in ("DEFAULT", "DEFAULT_MAP")


def from_text(sources: dict[str, str], name: str) -> str:
    """`` (from LOCKBENCH_X)`` for an error message, or "" for a flag or default."""
    return f" (from {sources[name]})" if sources.get(name) else ""


def workload_names() -> str:
    return ", ".join(WORKLOADS)
