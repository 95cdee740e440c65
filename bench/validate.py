"""Every number and URL a user can give, checked before anything starts.

One table (``RANGES``) holds the allowed range of every numeric option; the ``--help``
texts and the README quote it, and every command that takes these options (``run``,
``report``, ``gate``, ``calibrate``, ``matrix`` ...) calls :func:`check_numbers` and
:func:`check_urls` on what it was given. A value outside its range, NaN or infinite is a
:class:`~bench.errors.UserError` (one line, exit 2) that names the option, the range and
where the value came from (the command line, a ``LOCKBENCH_*`` variable or
``[tool.lockbench]`` in pyproject.toml).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.errors import UserError


@dataclass(frozen=True)
class Range:
    """The values a numeric option accepts: finite, ``low`` (inclusive unless ``open_low``) .. ``high``."""

    low: float
    high: float
    unit: str = ""
    open_low: bool = False
    integer: bool = False
    open_high: bool = False

    def contains(self, value: float) -> bool:
        if not math.isfinite(value):
            return False
        above = value > self.low if self.open_low else value >= self.low
        below = value < self.high if self.open_high else value <= self.high
        return above and below


#: option name (as in ``bench run --help``, dashes as underscores) -> its range
RANGES: dict[str, Range] = {
    "duration": Range(1, 86_400, "s"),
    "users": Range(1, 10_000, integer=True),
    "spawn_rate": Range(0, 10_000, "users/s", open_low=True),
    "processes": Range(1, 32, integer=True),
    "trials": Range(1, 1_000, integer=True),
    "items": Range(1, 100_000, integer=True),
    "skew": Range(0, 10),
    "stock": Range(0, 10**15, integer=True),
    "max_qty": Range(1, 1_000_000, integer=True),
    "shared_keys": Range(0, 100_000, integer=True),
    "ttl": Range(0.001, 86_400, "s"),
    "retry_interval": Range(0, 60, "s"),
    "acquire_timeout": Range(0, 3_600, "s"),
    "clock_skew": Range(-86_400, 86_400, "s"),
    "skewed_clients": Range(0, 1),
    "pause": Range(0, 3_600, "s"),
    "pause_every": Range(1, 1_000_000, integer=True),
    "read_ratio": Range(0, 1),
    "depth": Range(1, 100, integer=True),
    "crash_after": Range(1, 1_000_000, integer=True),
    "stuck_bound": Range(0, 3_600, "s", open_low=True),
    "slo_us": Range(0, 3.6e9, "us", open_low=True),
    "alpha": Range(0, 1, open_low=True, open_high=True),
    "parallel": Range(1, 16, integer=True),
    "lanes": Range(1, 16, integer=True),  # or auto
    "patience": Range(0.001, 3_600, "s"),
    "max_in_flight": Range(1, 1_000_000, integer=True),
    "expect_workers": Range(0, 1_024, integer=True),
    "test_hosts": Range(0, 16, integer=True),
    "strikes": Range(1, 1000, integer=True),
    "shrink_runs": Range(0, 1_000_000, integer=True),  # bench explore: 0 keeps the failure as first found
    "min_runs": Range(4, 1_000_000, integer=True),  # bench history --check
    "max_pvalue": Range(0, 0.5, open_low=True),  # bench history: change-point significance
    "min_magnitude": Range(0, 10),  # bench history: smallest relative step drawn (0.05 = 5%)
}

#: URL options -> the schemes each accepts and an example for the error message
URL_SCHEMES: dict[str, tuple[tuple[str, ...], str]] = {
    "redis_url": (("redis", "rediss", "unix", "redis+sentinel"), "redis://127.0.0.1:6379/0"),
    "resource_url": (("redis", "rediss", "unix"), "redis://127.0.0.1:6380/0"),
    "pg_dsn": (("postgresql", "postgres"), "postgresql://user:password@127.0.0.1:5432/postgres"),
    "etcd_url": (("http", "https", "etcd"), "http://127.0.0.1:2379"),
    "memcached_url": (("memcached",), "memcached://127.0.0.1:11211"),
    "zk_hosts": (("zookeeper", "zk"), "127.0.0.1:2181,127.0.0.1:2182"),
}


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _num(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 1e6 and x == int(x) else f"{x:g}"


def range_text(name: str) -> str:
    """The documented range of an option: ``1..86400 s``, ``above 0, at most 10000 users/s``, ``between 0 and 1``."""
    r = RANGES[name]
    unit = f" {r.unit}" if r.unit else ""
    if r.open_low and r.open_high:
        return f"between {_num(r.low)} and {_num(r.high)}{unit} (both excluded)"
    if r.open_low:
        return f"above {_num(r.low)}, at most {_num(r.high)}{unit}"
    if r.open_high:
        return f"at least {_num(r.low)}, below {_num(r.high)}{unit}"
    return f"{_num(r.low)}..{_num(r.high)}{unit}"


def _range_phrase(name: str) -> str:
    r = RANGES[name]
    return range_text(name) if (r.open_low or r.open_high) else f"in {range_text(name)}"


def help_for(name: str, text: str) -> str:
    """A help text that ends with the option's range, so --help and the check never disagree."""
    return f"{text} [{range_text(name)}]"


def from_text(source: str) -> str:
    """`` (from LOCKBENCH_X)`` for an error message, or "" for a flag or a default."""
    return f" (from {source})" if source else ""


_from = from_text


def check_number(name: str, value: Any, source: str = "") -> None:
    """Raise UserError unless ``value`` is a finite number in the range of option ``name``."""
    r = RANGES[name]
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise UserError(
            f"{flag(name)} must be a number {_range_phrase(name)}, got {value!r}{_from(source)}"
        ) from None
    if not r.contains(number) or (r.integer and number != int(number)):
        kind = "a whole number" if r.integer else "a finite number"
        raise UserError(f"{flag(name)} must be {kind} {_range_phrase(name)}, got {value}{_from(source)}")


def check_numbers(values: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> None:
    """Check every value whose name is in ``RANGES``; ``None`` means "not given" and passes."""
    for name, value in values.items():
        if name in ("processes", "lanes") and str(value).strip().lower() == "auto":
            continue  # bench.run.command.resolve_processes turns it into a number
        if name in RANGES and value is not None:
            check_number(name, value, (sources or {}).get(name, ""))


def _url_error(name: str, part: str, why: str, source: str) -> UserError:
    from bench.results.redact import redact_text

    example = URL_SCHEMES[name][1]
    return UserError(f"{flag(name)} {redact_text(part)!r}: {why}; e.g. {example}{_from(source)}")


def _host_port(name: str, part: str, netloc: str, source: str) -> None:
    try:
        probe = urlsplit(f"//{netloc}")
        host, _ = probe.hostname, probe.port
    except ValueError as exc:
        raise _url_error(name, part, f"bad host or port ({exc})", source) from None
    if not host:
        raise _url_error(name, part, "no host", source)


def check_url(name: str, url: str, source: str = "") -> None:
    """Raise UserError unless ``url`` parses, has an accepted scheme for option ``name`` and a host."""
    schemes, _ = URL_SCHEMES[name]
    text = str(url).strip()
    if not text:
        raise _url_error(name, text, "empty", source)
    if name == "pg_dsn" and "://" not in text and "=" in text:
        return  # a libpq key=value DSN: psycopg parses it (bench checks the login before starting)
    if name == "zk_hosts" and "://" not in text:
        text = f"zookeeper://{text}"
    if "://" not in text:
        raise _url_error(
            name, str(url), f"not a URL (no scheme; use {' or '.join(s + '://' for s in schemes)})", source
        )
    scheme, _, rest = text.partition("://")
    if scheme.lower() not in schemes:
        raise _url_error(name, str(url), f"scheme {scheme!r} is not one of {', '.join(schemes)}", source)
    if scheme == "unix":
        if not urlsplit(text).path:
            raise _url_error(name, str(url), "no socket path", source)
        return
    netloc = rest.split("/", 1)[0].split("?", 1)[0]
    creds, at, hosts = netloc.rpartition("@")
    hosts = hosts if at else netloc
    multi = scheme in ("redis+sentinel", "zookeeper", "zk", "http", "https", "etcd")
    parts = [h.strip() for h in hosts.split(",")] if multi else [hosts]
    if any(not p for p in parts):
        raise _url_error(name, str(url), "no host", source)
    for part in parts:
        _host_port(name, str(url), part, source)
    if scheme == "redis+sentinel" and not urlsplit(text).path.strip("/"):
        raise _url_error(name, str(url), "no service name (redis+sentinel://host:port,.../service)", source)
    if scheme in ("redis", "rediss"):
        db = urlsplit(text).path.strip("/")
        if db and not (db.isdigit() and int(db) < 65_536):
            raise _url_error(
                name, str(url), f"the database after the port must be a number, got {db!r}", source
            )


def check_urls(
    values: Mapping[str, str | Iterable[str] | None], sources: Mapping[str, str] | None = None
) -> None:
    """Check every URL option given (a string, a list of strings or None)."""
    for name, value in values.items():
        if name not in URL_SCHEMES or value is None:
            continue
        for url in [value] if isinstance(value, str) else list(value):
            check_url(name, url, (sources or {}).get(name, ""))


def parse_lock_params(text: str | None, source: str = "") -> dict[str, Any]:
    """``--lock-params`` JSON as a dict; UserError naming the option and its source otherwise."""
    import json

    if not text:
        return {}
    example = """e.g. '{"delay_s": 0.001}'"""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise UserError(
            f"--lock-params is not valid JSON ({exc.args[0]}); {example}{_from(source)}"
        ) from None
    except RecursionError:
        raise UserError(
            f"--lock-params is nested too deeply to read; give a flat JSON object, {example}{_from(source)}"
        ) from None
    if not isinstance(value, dict):
        raise UserError(f"--lock-params must be a JSON object, {example}{_from(source)}")
    return value


def check_specs(values: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> None:
    """The options written in a small grammar: ``--cs``, ``--arrivals``, ``--lock-params``."""
    from workloads.harness.arrivals import parse_arrivals
    from workloads.harness.distributions import SpecError, parse_distribution

    sources = sources or {}
    for name, parse in (("cs", parse_distribution), ("arrivals", parse_arrivals)):
        value = values.get(name)
        if value is None:
            continue
        try:
            parse(str(value))
        except SpecError as exc:
            message = str(exc)
            prefix = "" if flag(name) in message else f"{flag(name)}: "
            raise UserError(f"{prefix}{message}{_from(sources.get(name, ''))}") from None
    if values.get("lock_params") is not None:
        parse_lock_params(values["lock_params"], sources.get("lock_params", ""))


def check_all(values: Mapping[str, Any], sources: Mapping[str, str] | None = None) -> None:
    """Numbers, URLs and specs of one command's options (e.g. click's ``ctx.params``), in one call."""
    check_numbers(values, sources)
    check_urls(values, sources)
    check_specs(values, sources)
    if values.get("budget") is not None:
        parse_budget(values["budget"], (sources or {}).get("budget", ""))


def parse_budget(text: str, source: str = "") -> float:
    """``bench explore --budget``: ``5m``, ``90s``, ``1h``, ``300`` -> seconds; UserError otherwise."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", str(text))
    if not m or float(m.group(1)) <= 0:
        raise UserError(f"bad --budget {text!r}; give a duration such as 5m, 90s or 1h{_from(source)}")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def check_lock_params(impls: Iterable[tuple[str, type]], params: Mapping[str, Any], source: str = "") -> None:
    """Every ``--lock-params`` key against the impls of a run (their ``Lock.params`` declarations).

    The params go to every impl of a run, so a key must be taken by at least one of them,
    and every impl that takes it must accept its value. An impl without a declaration (a
    user's own lock) takes anything.
    """
    from lockimpls.base import LockConfigError, check_params

    impls = list(impls)
    if not params or not impls:
        return
    undeclared = [i for i, cls in impls if getattr(cls, "params", None) is None]
    for key, value in params.items():
        takers = [(i, cls) for i, cls in impls if key in (getattr(cls, "params", None) or {})]
        if not takers and not undeclared:
            names = ", ".join(i for i, _ in impls[:3]) + (
                f" and {len(impls) - 3} more" if len(impls) > 3 else ""
            )
            taken = sorted({k for _, cls in impls for k in (cls.params or {})})
            raise UserError(
                f"--lock-params: no impl of this run takes key {key!r} ({names} take: "
                f"{', '.join(taken) or 'no keys'}){_from(source)}"
            )
        for impl_id, cls in takers:
            try:
                check_params(impl_id, cls, {key: value})
            except LockConfigError as exc:
                raise UserError(f"{exc}{_from(source)}") from None


def did_you_mean(word: str, choices: Iterable[str], listing: str) -> str:
    """``; did you mean a, b or c? (LISTING shows them all)``: the three closest (difflib), else ``; see LISTING``."""
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=3, cutoff=0.5)
    if not close:
        return f"; see {listing}"
    shown = close[0] if len(close) == 1 else f"{', '.join(close[:-1])} or {close[-1]}"
    return f"; did you mean {shown}? ({listing} shows them all)"


def check_results_dir(path: Path | str, source: str = "") -> None:
    """The results folder can be written: checked before any server starts, leaving nothing behind.

    An existing folder gets a probe file (created and removed at once); a folder still to
    be made is checked at its nearest existing parent.
    """
    import tempfile

    text = str(path)
    if not text.strip():
        raise UserError(f"--results-dir must name a folder, got an empty path{_from(source)}")
    probe_in = Path(path)
    while not probe_in.exists() and probe_in.parent != probe_in:
        probe_in = probe_in.parent
    if probe_in.exists() and not probe_in.is_dir():
        raise UserError(f"--results-dir {text}: {probe_in} is a file, not a folder{_from(source)}")
    try:
        fd, probe = tempfile.mkstemp(prefix=".lockbench-write-probe-", dir=probe_in)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UserError(
            f"--results-dir {text}: cannot write in {probe_in} ({exc.strerror}); give a writable folder"
            f"{_from(source)}"
        ) from None


#: ``--fencing`` of bench run
FENCING_CHOICES = ("off", "observe", "enforce", "both")
PAUSE_KINDS = ("task", "world")
_FAULT = r"([a-z-]+)(?:@(held|\d+(?:\.\d+)?s))?"


def _one_of(name: str, value: Any, choices: Iterable[str], source: str, listing: str = "") -> None:
    choices = list(choices)
    if value in choices:
        return
    hint = did_you_mean(str(value), choices, listing) if listing else f"; valid: {', '.join(choices)}"
    noun = flag(name)[2:].replace("-", " ")
    raise UserError(f"unknown {noun} {value!r} ({flag(name)}){hint}{_from(source)}")


def _as_list(value: Any) -> list[Any]:
    return [] if value is None else list(value) if isinstance(value, list | tuple) else [value]


#: where a refusal of a name points for the whole list (the rest list the valid names inline)
_LISTINGS = {"impl": "`bench list`", "workload": "`bench list`", "scenario": "`bench list`",
             "fault": "`bench run --help`"}  # fmt: skip


@dataclass(frozen=True)
class Catalog:
    """The names an option accepts, read on demand (``names``), and how to read a value's name.

    Why callables: the CLI hands the catalogs in lightest first, and a refusal is decided
    before the heavy ones (the fault kinds and scenarios import the nemesis) are read.
    """

    names: Callable[[], Iterable[str]]
    #: the part of a value that is the name (``restart@3s`` -> ``restart``)
    name_of: Callable[[str], str] = str
    #: values this catalog does not judge (``package.module:Class`` impls are imported instead)
    skip: Callable[[str], bool] = lambda value: False


def check_names(
    values: Mapping[str, Any], sources: Mapping[str, str], catalogs: Mapping[str, Catalog]
) -> None:
    """Every name a user gave (backend, impl, workload, suite, fault, scenario ...) against its catalog.

    The catalogs come from the caller (the CLI, which may import every room); they are read
    in the order given, so the light ones refuse before a heavy one is imported.
    """
    if values.get("fault") is not None:
        _check_fault_time(values, sources)
    for name, catalog in catalogs.items():
        if name == "fencing" and not isinstance(values.get(name), str):
            continue  # bench explore's --fencing is a switch
        for value in _as_list(values.get(name)):
            if catalog.skip(str(value)):
                continue
            _one_of(
                name,
                catalog.name_of(str(value)),
                catalog.names(),
                sources.get(name, ""),
                _LISTINGS.get(name, ""),
            )


def check_plugin(impl: str, source: str) -> None:
    """``package.module:Class`` imports and is a lock (a plug-in raising anything is one line)."""
    from lockimpls import registry
    from lockimpls.base import LockConfigError

    try:
        registry.resolve(impl)
    except LockConfigError as exc:
        raise UserError(f"--impl {impl}: {exc}{_from(source)}") from None


def _check_fault_time(values: Mapping[str, Any], sources: Mapping[str, str]) -> None:
    """``--fault KIND@Ns`` must strike inside the case: a strike after the case ends never comes."""
    import re

    text = str(values["fault"]).strip()
    m = re.fullmatch(_FAULT, text)
    source = sources.get("fault", "")
    if not m:
        raise UserError(
            f"bad --fault {values['fault']!r}; use KIND[@held|@<seconds>s] (see --help){_from(source)}"
        )
    at, duration = m.group(2), values.get("duration")
    if at and at != "held" and isinstance(duration, int | float) and float(at[:-1]) >= duration:
        raise UserError(
            f"--fault {text} strikes at {at[:-1]} s, after the case ends ({duration:g} s of --duration"
            f"{_from(sources.get('duration', ''))}); give a time below the duration, or {m.group(1)}@held"
            f"{_from(source)}"
        )


def check_options(
    values: Mapping[str, Any], sources: Mapping[str, str], catalogs: Mapping[str, Catalog] | None = None
) -> None:
    """Every option of one command: numbers, URLs, specs, then names; the quick checks first."""
    check_all(values, sources)
    check_names(values, sources, catalogs or {})
    for impl in _as_list(values.get("impl")):
        if ":" in str(impl):
            check_plugin(str(impl), sources.get("impl", ""))


def env_name(option: str) -> str:
    """The variable of an option or flag: ``--redis-url`` and ``redis_url`` are ``LOCKBENCH_REDIS_URL``."""
    return "LOCKBENCH_" + option.lstrip("-").replace("-", "_").upper()
