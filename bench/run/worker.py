"""``bench worker``: Locust workers on this host for a ``bench run`` acting as master elsewhere.

A run is one Locust master per case, so a worker group lives case after case: it starts
``locust --worker -f -`` (the locustfile and every option come from the master; nothing
is shared on disk), lets it run the case, and starts it again for the next master until
a master says the run is over (its workers exit with ``RUN_DONE_EXIT``). Each group works
in its own scratch directory, which is also where Locust puts the locustfile it receives.
Each case's Locust is forked from one warm process (bench/run/warm.py), started with the
worker, as a local run's cases are; a cold ``python -m locust`` is the fallback when the warm
process cannot start.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from bench.errors import UserError
from bench.run.warm import WarmLocust, WarmLocustError
from workloads.harness.worker_env import DEFAULT_MASTER_PORT, HOST_ENV, RUN_DONE_EXIT

#: Seconds between a finished case and asking for the next master: the finished one
#: lingers about half a second after telling its workers to quit, and a worker that
#: reached it instead of the next one would wait for nothing.
RECONNECT_PAUSE_S = 2.0


def parse_host_port(text: str, flag: str, default_port: int = DEFAULT_MASTER_PORT) -> tuple[str, int]:
    """``HOST[:PORT]`` -> (host, port); a bad value is a one-line user error naming ``flag``.

    The host must be a host name or an IP address: Locust hangs on ``256.1.1.1`` and raises a
    ZMQError traceback on ``http://h``, after the worker has started.
    """
    import ipaddress
    import re

    if "://" in text or "/" in text:
        raise UserError(
            f"{flag} takes HOST[:PORT] without a scheme or path (e.g. 10.0.0.10:5557), got {text!r}"
        )
    bracketed = text.strip().startswith("[")
    host, sep, port_text = text.strip().rpartition(":")
    if not sep:
        host, port_text = text.strip(), str(default_port)
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        port = -1
    if not host or not 0 < port < 65536:
        raise UserError(f"{flag} must be HOST[:PORT] with a port 1..65535, got {text!r}")
    try:
        ipaddress.ip_address(host)
        return host, port
    except ValueError:
        pass
    label = r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)"
    numeric = re.fullmatch(r"[0-9.]+", host) is not None  # 256.1.1.1: an IPv4 address out of range
    if bracketed or numeric or not re.fullmatch(rf"{label}(\.{label})*\.?", host):
        raise UserError(
            f"{flag} must be HOST[:PORT] with a host name or IP address (e.g. 10.0.0.10:5557), got {text!r}"
        )
    return host, port


def worker_argv(host: str, port: int, processes: int) -> list[str]:
    """The Locust command line of one worker group (``--processes`` forks it locally)."""
    argv = [
        sys.executable, "-m", "locust", "--worker", "-f", "-",
        "--master-host", host, "--master-port", str(port), "--loglevel", "WARNING",
        "--exit-code-on-error", "0",  # failed acquires are data, not errors of the worker
    ]  # fmt: skip
    if processes > 1:
        argv += ["--processes", str(processes)]
    return argv


def run_worker(
    master: str,
    processes: int = 1,
    name: str | None = None,
    say: Callable[[str], None] = print,
) -> int:
    """Serve a run's cases until its master says it is over; returns the exit code.

    0: the run finished; 1: Locust failed (its last lines were printed). A Locust killed
    by a signal (the crash workload kills its own process) is started again for the next
    case.
    """
    if processes < 1:
        raise UserError(f"--processes must be at least 1, got {processes}")
    host, port = parse_host_port(master, "--master")
    workdir = Path(tempfile.mkdtemp(prefix="lockbench-worker-"))
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(workdir)}
    if name:
        env[HOST_ENV] = name
    argv = worker_argv(host, port, processes)
    cases = 0
    say(f"lockbench worker: {processes} process(es) serving the master at {host}:{port}")
    # each case's Locust is forked from one warm process (bench/run/warm.py), as a local run's
    # are: a cold start imported for about two seconds while the master waited for this worker
    warm: WarmLocust | None = WarmLocust(env=env, cwd=workdir)
    warm.spawn()  # its imports overlap the wait for the master's first case
    try:
        while True:
            log_path = workdir / "locust.log"
            code = None
            if warm is not None:
                try:
                    code = warm.run(argv, log_path, timeout=math.inf)
                except WarmLocustError as exc:
                    say(f"lockbench worker: the warm Locust process failed ({exc}); starting Locust cold")
                    warm.close()
                    warm = None
            if code is None:
                from bench.run.locust import run_locust  # pandas and the run's modules: only when needed

                code = run_locust(argv, log_path, math.inf, env=env, cwd=workdir)
            cases += 1
            if code == RUN_DONE_EXIT:
                say(f"lockbench worker: the run is over after {cases} case(s)")
                return 0
            if code < 0:
                # killed by a signal: the crash workload kills its own worker on purpose
                say(f"lockbench worker: Locust was killed by signal {-code}; serving the next case")
            elif code != 0:
                tail = [ln for ln in log_path.read_text(errors="replace").splitlines() if ln.strip()][-3:]
                say(f"lockbench worker: Locust exited with code {code}: {' | '.join(tail)}")
                return 1
            time.sleep(RECONNECT_PAUSE_S)
    finally:
        if warm is not None:
            warm.close()
        shutil.rmtree(workdir, ignore_errors=True)
