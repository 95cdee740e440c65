"""RedLock under a partition, with and without a master restarting empty (issue 15).

Kleppmann's counter-example to RedLock, reproduced on test hosts (needs root): five
masters without persistence, each on its own host; client A's host is cut off from
masters D and E, so A's RedLock gets A, B, C: a bare majority, a valid lock. Then:

* ``cut only``: client B (reaching all five) tries to take the same lock: A, B and C
  still hold A's key, so B gets 2 of 5 at most and must fail (the lock holds);
* ``cut + restart``: master C is killed and started again without its data (no
  persistence, as the seeds run it); B now gets C, D and E, a majority, while A's
  validity has not run out: two holders at once (the lock breaks).

    .venv/bin/python benchmarks/redlock_cut_restart.py [--ttl 10]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from infra.redis_server import RedisServer
from infra.testhosts import TestHostNet
from lockimpls.base import LockOptions, LockTimeout
from lockimpls.redlock import RedLock


def scenario(restart: bool, ttl: float) -> str:
    with tempfile.TemporaryDirectory(prefix="lockbench-redlock-cut-") as tmp, TestHostNet(0) as net:
        control = net.add_host("control")
        a_host, b_host = net.add_host("client-a"), net.add_host("client-b")
        masters = []
        with net.enter(control):
            for name in "ABCDE":
                host = net.add_host(f"master-{name}")
                masters.append(
                    RedisServer(Path(tmp), f"master-{name}", host=host.addr, launcher=host.argv([])).start()
                )
            urls = [m.url for m in masters]
            net.partition([a_host], [net.host("master-D"), net.host("master-E")])
            options = LockOptions(ttl=ttl)
            with net.enter(a_host):
                lock_a = RedLock("cut-restart", urls, options)
                lease_a = lock_a.acquire(timeout=5)
            held_on = [m.url for m in masters if m.process.alive() and _has_key(net, control, m)]
            if restart:
                masters[2].restart()  # C: SIGKILL and start again, every key gone
            with net.enter(b_host):
                lock_b = RedLock("cut-restart", urls, options)
                try:
                    lease_b = lock_b.acquire(timeout=1)
                except LockTimeout:
                    lease_b = None
            a_valid = lease_a.remaining() is not None and lease_a.remaining() > 0
            for m in masters:
                m.stop()
    both = lease_b is not None and a_valid
    return (
        f"A held on {len(held_on)} of 5 masters; B {'got' if lease_b else 'did not get'} the lock"
        f"{' while A still held it (two holders)' if both else ''}"
    )


def _has_key(net: TestHostNet, control, master: RedisServer) -> bool:
    import redis

    with net.enter(control):
        client = redis.Redis(master.host, master.port, socket_timeout=2)
        try:
            return bool(client.keys("*cut-restart*"))
        finally:
            client.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ttl", type=float, default=10.0, help="RedLock TTL in seconds")
    args = parser.parse_args()
    print("| scenario | outcome |")
    print("|---|---|")
    for restart in (False, True):
        start = time.monotonic()
        outcome = scenario(restart, args.ttl)
        label = "A cut off D and E, C restarts empty" if restart else "A cut off D and E"
        print(f"| {label} | {outcome} ({time.monotonic() - start:.0f} s) |", flush=True)


if __name__ == "__main__":
    main()
