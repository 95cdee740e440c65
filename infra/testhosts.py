"""Test hosts on this machine: network namespaces on one switch, with partitions.

Each test host is a network namespace with one veth into a switch namespace that holds a
bridge. Addresses come from 198.18.0.0/15 (reserved for benchmarking) and exist inside
the namespaces only: nothing is added to the root namespace, so no traffic can leave the
machine. A partition is a pair of per-peer blackhole routes (one on each side), healed by
deleting them; this kernel has no netem and the machine has no iptables.

Every name starts with a per-run prefix ``<family><pid>x<token>`` so that a cleanup finds
exactly its own: ``close()`` (also at exit), a reaper process that tears down when the
owner dies by any signal, even SIGKILL, and ``cleanup_stale()`` for runs whose owner is gone.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import ipaddress
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.errors import InfraError
from infra.placement import Placement, Placer
from infra.process import die_with_parent
from infra.procfs import is_zombie

NETNS_DIR = Path("/run/netns")
NETWORK = ipaddress.ip_network("198.18.0.0/15")
_CLONE_NEWNET = 0x40000000
_CAP_NET_ADMIN = 12
_ROOT = Path(__file__).resolve().parent.parent
_live: set[TestHostNet] = set()


class NetnsUnavailable(InfraError):
    """Network namespaces cannot be made here (not root, no CAP_NET_ADMIN, no iproute2)."""


@dataclass(frozen=True)
class TestHost:
    """One test host: a network namespace with one address, reached only from inside it."""

    __test__ = False  # not a pytest test class despite its name

    name: str
    addr: str

    def argv(self, argv: list[str]) -> list[str]:
        """The command line that runs ``argv`` inside this host's namespace."""
        return ["ip", "netns", "exec", self.name, *argv]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6", use_errno=True)


def _setns(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if _libc().setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise InfraError(f"setns({path}) failed: {os.strerror(err)}")
    finally:
        os.close(fd)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise InfraError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def _ip_batch(ns: str, commands: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run ``commands`` (one ``ip`` command each, without ``ip``) in namespace ``ns`` with one process."""
    proc = subprocess.run(
        ["ip", "-n", ns, "-force", "-batch", "-"], input="\n".join(commands) + "\n",
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if check and proc.returncode != 0:
        raise InfraError(f"ip -n {ns} -batch ({commands[0]} ...) failed: {proc.stderr.strip()}")
    return proc


def check_available() -> None:
    """Raise NetnsUnavailable with the fix unless this process can create namespaces."""
    if not sys.platform.startswith("linux"):
        raise NetnsUnavailable("test hosts need Linux network namespaces; run on Linux")
    if shutil.which("ip") is None:
        raise NetnsUnavailable("test hosts need iproute2 (the `ip` command); install the iproute2 package")
    cap_eff = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                cap_eff = int(line.split()[1], 16)
    if os.geteuid() != 0 and not cap_eff & (1 << _CAP_NET_ADMIN):
        raise NetnsUnavailable("test hosts need root (or CAP_NET_ADMIN and CAP_SYS_ADMIN); run as root")


def _ns_inode(name: str) -> tuple[int, int] | None:
    try:
        st = os.stat(NETNS_DIR / name)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def pids_in(name: str) -> list[int]:
    """Pids of the processes whose network namespace is ``name``."""
    ident = _ns_inode(name)
    if ident is None:
        return []
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry.name}/ns/net")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == ident:
            pids.append(int(entry.name))
    return pids


def _kill_all(pids: list[int], grace: float) -> None:
    for sig in (signal.SIGCONT, signal.SIGTERM):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
    deadline = time.monotonic() + grace
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if _pid_alive(p)]
        time.sleep(0.02)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _pid_alive(pid: int) -> bool:
    from infra.state import pid_alive

    if not pid_alive(pid):
        return False
    # a zombie is dead for our purpose (its namespace reference is gone)
    return not is_zombie(pid)


def remove_namespaces(names: Iterable[str], grace: float = 2.0) -> list[str]:
    """Kill every process inside each namespace, then delete it; returns the names removed."""
    names = list(names)
    for name in names:
        _kill_all(pids_in(name), grace)
    removed = []
    for name in names:
        if _ip("netns", "del", name, check=False).returncode == 0 or not (NETNS_DIR / name).exists():
            removed.append(name)
    return removed


def _namespaces() -> list[str]:
    try:
        return sorted(os.listdir(NETNS_DIR))
    except OSError:
        return []


def cleanup_stale(prefix: str = "lb") -> list[str]:
    """Remove the namespaces (and their processes) of runs whose owning pid is dead."""
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)x[0-9a-f]+-")
    stale = [n for n in _namespaces() if (m := pattern.match(n)) and not _pid_alive(int(m.group(1)))]
    return remove_namespaces(stale, grace=0.5) if stale else []


def _reap_main(run_prefix: str) -> None:
    """Reaper body: wait until the owner's pipe closes, then remove what is left of its run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    while sys.stdin.buffer.read(4096):
        pass
    remove_namespaces([n for n in _namespaces() if n.startswith(run_prefix + "-")], grace=1.0)


class TestHostNet:
    """N test hosts on one switch, created at construction and torn down by ``close()``.

    Why namespaces: clients, servers and partitions then cross a real network interface
    and a real route table, so a cut peer behaves like one on another machine (established
    TCP connections retransmit into the void), without containers or other machines.
    """

    __test__ = False

    def __init__(self, n: int, prefix: str | None = None) -> None:
        if n < 0 or n > 1000:
            raise InfraError(f"test hosts: need 0..1000 hosts, got {n}")
        check_available()
        self.family = prefix or "lb"
        cleanup_stale(self.family)
        self.run_prefix = f"{self.family}{os.getpid()}x{secrets.token_hex(2)}"
        self.switch = f"{self.run_prefix}-sw"
        self.hosts: list[TestHost] = []
        #: host name -> what runs there (for run.json and messages)
        self.roles: dict[str, str] = {}
        self._routes: list[tuple[str, str]] = []
        self._procs: list[subprocess.Popen] = []
        self._closed = False
        self._reaper: subprocess.Popen | None = None
        self._reaper_pipe: int | None = None
        _live.add(self)
        try:
            self._start_reaper()
            self._build(n)
        except BaseException as exc:
            self.close()
            if isinstance(exc, InfraError) and "Operation not permitted" in str(exc):
                raise NetnsUnavailable(f"cannot create network namespaces ({exc}); run as root") from exc
            raise

    # -- construction -----------------------------------------------------------------
    def _start_reaper(self) -> None:
        read_fd, write_fd = os.pipe()
        code = f"import sys; sys.path.insert(0, {str(_ROOT)!r}); from infra.testhosts import _reap_main; _reap_main(sys.argv[1])"
        try:
            self._reaper = subprocess.Popen(
                [sys.executable, "-c", code, self.run_prefix],
                stdin=read_fd,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C at the terminal must not stop the reaper first
            )
        finally:
            os.close(read_fd)
        self._reaper_pipe = write_fd

    def _build(self, n: int) -> None:
        sw = self.switch
        _ip("netns", "add", sw)
        _ip("-n", sw, "link", "add", "br0", "type", "bridge")
        _ip("-n", sw, "link", "set", "br0", "up")
        _ip("-n", sw, "link", "set", "lo", "up")
        for _ in range(n):
            self.add_host()

    def add_host(self, role: str = "") -> TestHost:
        """One more host on the switch (``role`` says what runs there: ``redis-lock``, ``client-1``)."""
        if self._closed:
            raise InfraError("test hosts already closed")
        i = len(self.hosts) + 1
        if i >= NETWORK.num_addresses - 1:
            raise InfraError(f"test hosts: no address left in {NETWORK}")
        host = TestHost(f"{self.run_prefix}-h{i}", str(NETWORK[i]))
        _ip("netns", "add", host.name)
        self.hosts.append(host)
        self.roles[host.name] = role
        sw = self.switch
        # Both ends are created inside namespaces: the root namespace never sees them.
        _ip("-n", sw, "link", "add", f"v{i}", "type", "veth", "peer", "name", "eth0", "netns", host.name)
        _ip("-n", sw, "link", "set", f"v{i}", "master", "br0", "up")
        _ip("-n", host.name, "addr", "add", f"{host.addr}/{NETWORK.prefixlen}", "dev", "eth0")
        _ip("-n", host.name, "link", "set", "eth0", "up")
        _ip("-n", host.name, "link", "set", "lo", "up")
        return host

    def placer(self) -> Placer:
        """A placer for infra's server classes: each server process gets a host of its own."""

        def place(name: str) -> Placement:
            host = self.add_host(name)
            return Placement(host.addr, tuple(host.argv([])))

        return place

    # -- use ----------------------------------------------------------------------------
    def host(self, name_or_addr: str) -> TestHost:
        """The host with this namespace name, address or role."""
        for h in self.hosts:
            if name_or_addr in (h.name, h.addr, self.roles.get(h.name)):
                return h
        raise KeyError(name_or_addr)

    def popen(self, host: TestHost, argv: list[str], **kw: Any) -> subprocess.Popen:
        """Start ``argv`` inside ``host``'s namespace; it dies with this process (PDEATHSIG).

        The child enters the namespace itself (setns before exec), so the pid is the
        program's own and Popen's other arguments work as usual. A caller's own
        ``preexec_fn`` runs after both.
        """
        extra: Callable[[], None] | None = kw.pop("preexec_fn", None)
        path = str(NETNS_DIR / host.name)

        def enter_and_tie() -> None:
            _setns(path)
            die_with_parent()
            if extra is not None:
                extra()

        proc = subprocess.Popen(argv, preexec_fn=enter_and_tie, **kw)
        self._procs.append(proc)
        return proc

    def run(self, host: TestHost, argv: list[str], timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside ``host`` to completion and capture its output (text)."""
        return subprocess.run(host.argv(argv), capture_output=True, text=True, timeout=timeout, check=False)

    @contextlib.contextmanager
    def enter(self, host: TestHost) -> Iterator[None]:
        """Switch the calling thread into ``host``'s network namespace, and back afterwards.

        Sockets opened inside stay in that namespace after the switch back; threads and
        subprocesses started inside inherit it.
        """
        own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(NETNS_DIR / host.name)
            try:
                yield
            finally:
                if _libc().setns(own, _CLONE_NEWNET) != 0:
                    raise InfraError(
                        f"cannot return from namespace {host.name}: {os.strerror(ctypes.get_errno())}"
                    )
        finally:
            os.close(own)

    def partition(self, side_a: Iterable[TestHost], side_b: Iterable[TestHost]) -> None:
        """Block traffic both ways between every host of ``side_a`` and every host of ``side_b``.

        A blackhole route to each peer on each side: packets in flight are dropped, so an
        established TCP connection retransmits until its own timeout, as across a real cut;
        a new connect to a cut peer fails at once (EINVAL) instead of timing out.
        Partitions add up; ``heal()`` removes them all.
        """
        side_a, side_b = list(side_a), list(side_b)
        if {h.name for h in side_a} & {h.name for h in side_b}:
            raise InfraError("a host cannot be on both sides of a partition")
        per_ns: dict[str, list[str]] = {}
        for a in side_a:
            for b in side_b:
                for src, dst in ((a, b), (b, a)):
                    if (src.name, dst.addr) in self._routes or dst.addr in per_ns.get(src.name, []):
                        continue
                    per_ns.setdefault(src.name, []).append(dst.addr)
        # one `ip -batch` a namespace: a cut of many hosts (a group's holders) lands in
        # milliseconds, not one process per route
        for ns, addrs in per_ns.items():
            _ip_batch(ns, [f"route add blackhole {addr}/32" for addr in addrs])
            self._routes.extend((ns, addr) for addr in addrs)

    def isolate(self, hosts: Iterable[TestHost]) -> None:
        """Partition ``hosts`` from every other host."""
        inside = list(hosts)
        names = {h.name for h in inside}
        self.partition(inside, [h for h in self.hosts if h.name not in names])

    def heal(self) -> None:
        """Remove every partition route; traffic flows again (connections that gave up stay closed)."""
        routes, self._routes = self._routes, []
        per_ns: dict[str, list[str]] = {}
        for ns, addr in routes:
            per_ns.setdefault(ns, []).append(addr)
        errors = []
        for ns, addrs in per_ns.items():
            proc = _ip_batch(ns, [f"route del blackhole {addr}/32" for addr in addrs], check=False)
            if proc.returncode != 0 and (NETNS_DIR / ns).exists():
                errors.append(f"{ns}: {proc.stderr.strip()}")
        if errors:
            raise InfraError(f"heal failed in {len(errors)} host(s): {errors[0]}")

    @property
    def partitioned(self) -> list[tuple[str, str]]:
        """The blackhole routes in place: (namespace, cut address)."""
        return list(self._routes)

    def close(self) -> None:
        """Kill every process in the hosts, delete every namespace (veths and routes go with them)."""
        if self._closed:
            return
        self._closed = True
        _live.discard(self)
        for proc in self._procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.terminate()
        names = [n for n in _namespaces() if n.startswith(self.run_prefix + "-")]
        remove_namespaces(names, grace=2.0)
        for proc in self._procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(1)
        self._procs.clear()
        self._routes.clear()
        if self._reaper_pipe is not None:
            os.close(self._reaper_pipe)
            self._reaper_pipe = None
        if self._reaper is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._reaper.wait(5)

    def __enter__(self) -> TestHostNet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_all_at_exit() -> None:
    for net in list(_live):
        with contextlib.suppress(Exception):
            net.close()


atexit.register(_close_all_at_exit)
