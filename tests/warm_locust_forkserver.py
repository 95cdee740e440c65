"""The tests' warm Locust server: ``workloads.harness.warm_locust``'s imports once per pytest process.

Why: every ``bench run`` starts a warm Locust process (bench/run/warm.py), which spends about
1.5 CPU-s importing Locust, gevent, pandas, pyarrow and every lock client before its first
case; some 140 test calls pay it. This server has done those imports and, for each bench
child of tests/bench_forkserver.py that asks, forks a process that runs warm_locust's own
``serve()`` on the two pipes the bench child handed over: the same protocol, the same case
forks, the same Locust ``main()``, in the asking thread's network namespace (bench spawns a
partition case's warm process inside a test host). What the product does and this does not:
start the warm process with ``exec`` (so its imports are a fresh interpreter's and take
seconds: tests/test_matrix_failures.py kills a server inside them and asks for the product's
spawn), and tie it to bench with ``PR_SET_PDEATHSIG``; here a thread waits on the bench
process's pidfd and kills the warm process when bench ends, which is what the signal does.

Run as ``python -m tests.warm_locust_forkserver SOCKET`` (by tests.bench_forkserver.ForkServer).
"""

from __future__ import annotations

# Locust first, as in warm_locust itself: it monkey-patches the standard library.
from workloads.harness import warm_locust  # isort: skip

import os
import signal
import sys
from pathlib import Path
from typing import Any

from tests.bench_forkserver import accept_until_stdin_closes, become, listen, recv_request, send_message
from workloads.harness.netns import _setns


def _die_with(parent: int) -> None:
    """SIGKILL this process when ``parent`` ends, as ``PR_SET_PDEATHSIG`` does for a real child."""
    from gevent.monkey import get_original

    start_thread = get_original("_thread", "start_new_thread")
    wait_readable = get_original("select", "select")
    try:
        pidfd = os.pidfd_open(parent)
    except ProcessLookupError:
        os._exit(1)

    def watch() -> None:
        wait_readable([pidfd], [], [])
        os.kill(os.getpid(), signal.SIGKILL)

    start_thread(watch, ())


def serve(path: str) -> None:
    """Preload, then fork a warm process per connection until stdin closes.

    The loop uses the unpatched ``select``, ``_socket`` and ``waitpid``: a gevent selector or
    socket here would leave watchers on this process's descriptors in the hub every fork
    inherits, and a watcher on a descriptor that is always readable spins the loop of every
    case's Locust (measured: twice the client CPU per acquisition, loops late a quarter of the time).
    """
    import _socket
    import contextlib

    from gevent.monkey import get_original
    from gevent.os import fork_gevent

    reap = get_original("os", "waitpid")
    warm_locust._preload()
    listener = listen(path, _socket.socket)

    def reap_ended() -> None:
        with contextlib.suppress(ChildProcessError):
            while reap(-1, os.WNOHANG)[0] > 0:
                pass

    def handle(conn: Any) -> None:
        request, fds = recv_request(conn, 3)
        pid = fork_gevent()  # the child's hub made fresh, as gevent's own fork does
        if pid == 0:
            code = 1
            try:
                _setns(Path(request["netns"]))  # the asking bench thread's, as an exec'd child's would be
                become(request, fds, [conn.fileno(), listener.fileno()])
                os.setsid()
                _die_with(int(request["parent"]))
                warm_locust.serve()
                code = 0
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        send_message(conn, {"pid": pid})

    accept_until_stdin_closes(listener, handle, get_original("select", "select"), reap_ended)


if __name__ == "__main__":
    serve(sys.argv[1])
