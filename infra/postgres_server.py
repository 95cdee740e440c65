"""Throwaway PostgreSQL clusters on 127.0.0.1 or a test host: initdb into a temporary directory, one database.

Durability choice, stated once here because it changes what a COMMIT costs:

* ``fsync=off`` (default): the suite kills and pauses *processes* (clients, the server), it
  never crashes the operating system. A killed postgres loses nothing the kernel already
  holds, so flushing to the disk would only add the host disk's flush latency (tens of
  microseconds on NVMe, milliseconds on network disks) to every commit: the figures would
  measure the disk, not the lock. ``PostgresServer(..., fsync=True)`` turns it on.
* ``synchronous_commit=on`` (always): a COMMIT is acknowledged only after its WAL record was
  written to the kernel, so a SIGKILLed server comes back with every lock it acknowledged.
  (``off`` would lose the last acknowledged commits on a server crash: a granted lock row
  could vanish, a different algorithm from the one the seeds describe.)

``settings()`` returns both values (read from the running server) for run.json.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from infra.errors import InfraError
from infra.install import find_binary
from infra.placement import LOOPBACK_HOST
from infra.ports import free_port
from infra.process import ServerProcess
from infra.procfs import is_zombie
from infra.server import ManagedServer

#: Where Debian (and Ubuntu) put the server binaries: not on PATH. Listed up front, newest
#: first, because the directory only exists after the package is installed.
_DEBIAN_BIN_DIRS = tuple(f"/usr/lib/postgresql/{v}/bin" for v in range(20, 9, -1))

#: The superuser initdb creates and the database lockbench uses.
DB_USER = "lockbench"
DB_NAME = "lockbench"

#: The OS account the server runs as when lockbench runs as root (the package creates it).
OS_USER = "postgres"


def _bin_dirs() -> tuple[str, ...]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_version_key, reverse=True)
    return tuple(dict.fromkeys([*found, *_DEBIAN_BIN_DIRS]))


def _version_key(path: str) -> tuple[int, ...]:
    m = re.search(r"/postgresql/([\d.]+)/", path)
    return tuple(int(p) for p in m.group(1).split(".")) if m else (0,)


def _find_server_binaries() -> tuple[str, str]:
    """(initdb, postgres) from the same installation, installing the OS package when missing."""
    initdb = find_binary("initdb", "postgresql", extra_dirs=_bin_dirs())
    real = os.path.realpath(initdb)
    postgres = os.path.join(os.path.dirname(real), "postgres")
    if not os.access(postgres, os.X_OK):
        postgres = find_binary("postgres", "postgresql", extra_dirs=_bin_dirs())
    return real, os.path.realpath(postgres)


def _traversable_by_others(path: Path) -> bool:
    """True when every directory from / down to ``path`` lets other users through (o+x)."""
    path = path.resolve()
    for p in (path, *path.parents):
        try:
            if not os.stat(p).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


class _PostgresProcess(ServerProcess):
    """The postmaster; stopping sends SIGINT first (PostgreSQL's "fast" shutdown).

    Why: SIGTERM is a "smart" shutdown that waits for every client to disconnect, and
    a benchmark's pooled connections would hold it up until the SIGKILL fallback. It also
    deletes the private temp directory of a root run, also when stopped at exit.
    """

    cleanup_dir: Path | None = None

    def stop(self, grace: float = 5.0) -> None:
        if self.popen is not None and self.popen.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.popen.pid, signal.SIGCONT)
                os.kill(self.popen.pid, signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(grace)
        super().stop(grace)
        if self.cleanup_dir is not None and not self.alive():
            shutil.rmtree(self.cleanup_dir, ignore_errors=True)
            self.cleanup_dir = None


class PostgresServer(ManagedServer):
    """One PostgreSQL cluster with its own data directory, port and socket directory.

    Why a private cluster per run: every case must start without leftover lock rows or
    sessions, the durability settings must be the ones run.json reports, and the suite
    must never touch a database it did not create. PostgreSQL refuses to run as root, so
    as root the cluster belongs to the unprivileged OS user ``postgres`` and lives in a
    directory of its own under the system temp dir (``workdir`` may sit below a 0700
    directory the ``postgres`` user cannot enter); the log stays in ``workdir``.
    """

    kind = "postgres"

    def __init__(
        self,
        workdir: Path,
        name: str = "postgres",
        port: int | None = None,
        *,
        fsync: bool = False,
        host: str = LOOPBACK_HOST,
        launcher: Sequence[str] = (),
    ) -> None:
        self.initdb, self.binary = _find_server_binaries()
        self.port = port or free_port()
        self.name = name
        self.host = host
        self.fsync = fsync
        self.password = secrets.token_urlsafe(12)
        self.workdir = Path(workdir)
        self.logdir = self.workdir / f"{name}-{self.port}"
        self.logdir.mkdir(parents=True, exist_ok=True)
        self.run_as: str | None = None
        self._own_tmp: Path | None = None
        self.base = self.logdir
        if os.geteuid() == 0:
            try:
                pwd.getpwnam(OS_USER)
            except KeyError:
                raise InfraError(
                    f"PostgreSQL refuses to run as root and the OS user {OS_USER!r} does not exist; "
                    "install the postgresql package or run lockbench as a normal user"
                ) from None
            self.run_as = OS_USER
            if not _traversable_by_others(self.logdir):
                self._own_tmp = Path(tempfile.mkdtemp(prefix=f"lockbench-{name}-"))
                self.base = self._own_tmp
        self.datadir = self.base / "data"
        self.sockdir = self.base / "sock"
        self._initialised = False
        argv = [
            self.binary,
            "-D", str(self.datadir),
            "-p", str(self.port),
            "-c", f"listen_addresses={host}",
            "-c", f"unix_socket_directories={self.sockdir}",
            "-c", f"fsync={'on' if fsync else 'off'}",
            "-c", "synchronous_commit=on",
            "-c", "max_connections=400",
            "-c", "shared_buffers=128MB",
            "-c", "log_min_error_statement=panic",
            "-c", "log_checkpoints=off",
        ]  # fmt: skip
        if len(str(self.sockdir)) > 90:  # a Unix socket path must fit in 107 bytes: TCP only
            argv[argv.index(f"unix_socket_directories={self.sockdir}")] = "unix_socket_directories="
        user = self.run_as
        setpriv = shutil.which("setpriv")
        if self.run_as and setpriv:
            # setpriv also drops root's groups (Popen's user= keeps gid 0) and execs in place,
            # so the pid ServerProcess signals is still the postmaster's.
            entry = pwd.getpwnam(self.run_as)
            ids = [f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--init-groups"]
            argv = [setpriv, *ids, "--", *argv]
            user = None
        if launcher:
            if user is not None:
                raise InfraError("PostgreSQL on a test host as root needs setpriv; install util-linux")
            argv = [*launcher, *argv]
        self.process = _PostgresProcess(
            name, argv, self.logdir / "server.log", cwd=self.base, user=user, realtime=True
        )
        self.process.cleanup_dir = self._own_tmp

    # ---------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        """DSN of the lockbench database (it carries the password: redact before printing)."""
        return f"postgresql://{DB_USER}:{self.password}@{self.host}:{self.port}/{DB_NAME}"

    def _admin_url(self) -> str:
        return f"postgresql://{DB_USER}:{self.password}@{self.host}:{self.port}/postgres"

    def _chown(self, path: Path) -> None:
        if self.run_as:
            entry = pwd.getpwnam(self.run_as)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _init_cluster(self) -> None:
        if self.run_as:
            print(
                f"lockbench: running as root, so PostgreSQL runs as the OS user {self.run_as!r} in {self.base}",
                file=sys.stderr,
            )
        self.base.mkdir(parents=True, exist_ok=True)
        self._chown(self.base)
        self.sockdir.mkdir(mode=0o700, exist_ok=True)
        self._chown(self.sockdir)
        pwfile = self.base / "pwfile"
        pwfile.write_text(self.password + "\n")
        pwfile.chmod(0o600)
        self._chown(pwfile)
        argv = [
            self.initdb,
            "-D", str(self.datadir),
            "-U", DB_USER,
            f"--pwfile={pwfile}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E", "UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        ]  # fmt: skip
        ids: dict = {}
        if self.run_as:
            entry = pwd.getpwnam(self.run_as)
            ids = {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}
        r = subprocess.run(argv, capture_output=True, text=True, cwd=self.base, check=False, **ids)
        pwfile.unlink(missing_ok=True)
        if r.returncode != 0:
            tail = " | ".join((r.stderr or r.stdout).strip().splitlines()[-3:])
            raise InfraError(f"initdb failed (code {r.returncode}): {tail}")
        if self.host != LOOPBACK_HOST:
            # initdb lets TCP clients in from loopback only; on a test host they come from
            # the other test hosts, on the subnet the server's address belongs to.
            with open(self.datadir / "pg_hba.conf", "a") as hba:
                hba.write("host all all samenet scram-sha-256\n")
        self._initialised = True

    def _ready(self) -> bool:
        import psycopg

        with psycopg.connect(self._admin_url(), connect_timeout=2, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True

    def _create_database(self) -> None:
        import psycopg

        with psycopg.connect(self._admin_url(), connect_timeout=5, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,)).fetchone()
            if not exists:
                conn.execute(f'CREATE DATABASE "{DB_NAME}"')

    def start(self, detached: bool = False) -> PostgresServer:
        """initdb (first time only), start the postmaster, wait for a connection, create the database."""
        if not self._initialised:
            self._init_cluster()
        self.process.cleanup_dir = self._own_tmp
        self.process.start(self._ready, timeout=30, detached=detached)
        try:
            self._create_database()
        except Exception as exc:
            self.stop()
            raise InfraError(f"{self.name}: cannot create database {DB_NAME!r}: {exc}") from exc
        return self

    def stop(self) -> None:
        """Fast shutdown; the data directory is deleted when it is lockbench's own temp dir."""
        self.process.stop()
        if self._own_tmp is not None and not self.process.alive():
            self._initialised = False

    def _server_pids(self) -> list[int]:
        """Every live (not zombie) process of this cluster: the postmaster and each backend, whose
        working directory is the data directory (backends call setsid(): they are in no group of ours)."""
        try:
            datadir = os.path.realpath(self.datadir)
        except OSError:
            return []
        pids = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                if os.readlink(f"/proc/{entry.name}/cwd") != datadir:
                    continue
                if is_zombie(int(entry.name)):
                    continue
            except (OSError, IndexError):
                continue
            pids.append(int(entry.name))
        return pids

    def restart(self) -> None:
        """Kill (SIGKILL) and start again on the same port: committed rows survive, sessions do not.

        The postmaster and every backend die at once, as in a crash of the server's host. Killing
        the postmaster's process group was not that: each backend calls setsid(), so backends
        outlived the postmaster and exited on their own a little later, and a new postmaster that
        came first found the old shared memory in use and exited ("pre-existing shared memory
        block is still in use"; likelier the more connections: a matrix group of 12 cases). The
        new postmaster starts once the last of them is gone, and gets one more try a second later
        if it exits at start all the same; a failed try no longer deletes the data directory
        (it did: the second try then found no directory and the server stayed dead).
        """
        self.process.kill()
        for pid in self._server_pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if self.process.popen is not None:
            self.process.popen.wait(5)
        deadline = time.monotonic() + 10
        while self._server_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        keep, self.process.cleanup_dir = self.process.cleanup_dir, None  # a failed try keeps the data
        try:
            try:
                self.process.start(self._ready, timeout=30)
            except InfraError:
                time.sleep(1.0)
                self.process.start(self._ready, timeout=30)
        finally:
            self.process.cleanup_dir = keep

    def version(self) -> str:
        out = subprocess.run([self.binary, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"(\d+(?:\.\d+)+)", out)
        return m.group(1) if m else out.strip()

    def settings(self) -> dict[str, str]:
        """Durability settings for run.json, read from the running server (configured values otherwise)."""
        configured = {"fsync": "on" if self.fsync else "off", "synchronous_commit": "on"}
        if not self.process.alive():
            return configured
        import psycopg

        try:
            with psycopg.connect(self.url, connect_timeout=5, autocommit=True) as conn:
                return {k: str(conn.execute(f"SHOW {k}").fetchone()[0]) for k in configured}
        except psycopg.Error:
            return configured
