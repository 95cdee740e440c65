"""The stop's test of a waiting client (``locust_glue._waiting_between_polls``), under gevent (issue 42 item 3).

Each lock waits in ``Lock._between_attempts`` its own way under gevent: the polling template and
redis-py's adapter in gevent's sleep, reentrant on a ``threading.Semaphore`` (gevent's lock inside
``Condition.wait``) or a gevent Event. The glue must know each of those as a wait it may end, and
must not take for one a client whose lock is called through code outside lockimpls, an acquire
outside the recording, or a lock that waits in a request (python-redis-lock's BLPOP).

The clients run in a fresh interpreter with gevent's monkey patching, as in a Locust worker
(``python -m tests.test_stop_waiters_frames``), against a real redis-server.
"""

from __future__ import annotations

import itertools
import json
import sys
import uuid
from typing import Any

import pytest

from tests.helpers import python_json


class Outside:
    """User code between the recording and the lock: its frames are not the lock's."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name

    def acquire(self, timeout: float | None = None) -> Any:
        return self.inner.acquire(timeout)


def _urls(impl: str, url: str) -> list[str]:
    from lockimpls.registry import resolve

    n = resolve(impl).servers
    return [url] if n == 1 else [url.rsplit("/", 1)[0] + f"/{i + 1}" for i in range(n)]


def probe(impl: str, url: str, how: str) -> dict[str, Any]:
    """Hold ``impl``'s lock; a second client waits for it (``how``: recorded, outside, bare).

    If the glue takes the client for one waiting between attempts, the stop's callback ends it;
    otherwise the holder lets go and the client gets the lock.
    """
    import gevent

    from lockimpls.base import LockOptions
    from lockimpls.registry import resolve
    from workloads.harness import locust_glue as glue
    from workloads.harness.recording import RecordedLock, Recorder

    cls, urls, name = resolve(impl), _urls(impl, url), f"frames-{uuid.uuid4().hex[:8]}"
    holder, waiter = cls(name, urls, LockOptions()), cls(name, urls, LockOptions())
    lease = holder.acquire(timeout=5.0)
    recorder = Recorder()
    target = Outside(waiter) if how == "outside" else waiter
    call = target.acquire if how == "bare" else RecordedLock(target, recorder, "c", itertools.count()).acquire
    client = gevent.spawn(call, 10.0)
    seen = False
    waits: set[str] = set()  # the top frame of each wait taken for one between attempts
    for i in range(120):  # as the stop does: look again and again, the hub's callback checks again
        gevent.sleep(0.005)
        if client.ready():
            break
        if glue._waiting_between_polls(client):
            seen = True
            waits.add(client.gr_frame.f_code.co_name)
            if i >= 20:  # first 0.1 s: only look, so a waiter settles into its usual wait
                gevent.get_hub().loop.run_callback(glue._stop_waiting, client)
    still_waiting = not client.ready()
    holder.release(lease)
    client.join(timeout=15.0)
    if client.successful() and client.value is not None:
        got = client.value if how == "bare" else client.value[0]
        if got is not None:
            waiter.release(got)
    errors = [e[8] for e in recorder.events if e[3] != "invoke"]  # the error column
    return {
        "seen": seen,
        "ended_at_once": seen and not still_waiting,
        "errors": errors,
        "waits": sorted(waits),
    }


CASES = [
    ("redis.set-nx-px-lua", "recorded", True),
    ("redis.redis-py", "recorded", True),
    ("redis.pottery-redlock", "recorded", True),
    ("redis.redlock", "recorded", True),
    ("redis.reentrant", "recorded", True),
    ("redis.set-nx-px-lua", "outside", False),
    ("redis.set-nx-px-lua", "bare", False),
    ("redis.python-redis-lock", "recorded", False),
]


@pytest.fixture(scope="module")
def probed(redis_server: Any) -> dict[str, dict[str, Any]]:
    return python_json("-m", "tests.test_stop_waiters_frames", redis_server.url)


@pytest.mark.parametrize(("impl", "how", "ended"), CASES)
def test_the_stop_ends_only_a_recorded_wait_between_attempts(
    impl: str, how: str, ended: bool, probed: dict[str, dict[str, Any]]
) -> None:
    from workloads.harness.recording import STOPPED

    seen = probed[f"{impl} {how}"]
    assert seen["seen"] is ended, seen
    if impl == "redis.reentrant":
        assert "acquire" in seen["waits"], seen  # on the channel's Semaphore: gevent's lock in Condition.wait
    if ended:
        assert seen["ended_at_once"], seen
        assert len(seen["errors"]) == 1 and seen["errors"][0].startswith(STOPPED), seen
    else:
        assert not any((e or "").startswith(STOPPED) for e in seen["errors"]), seen


if __name__ == "__main__":
    from gevent import monkey

    monkey.patch_all()
    redis_url = sys.argv[1]
    print(json.dumps({f"{impl} {how}": probe(impl, redis_url, how) for impl, how, _ in CASES}))
