"""How long PostgreSQL keeps the lock of a client that a partition cut off (issue 15).

A holder on one test host takes a session advisory lock (``pg_advisory_lock``) or a row
lock (``SELECT ... FOR UPDATE`` in an open transaction); then its host is cut off the
server's host (blackhole routes both ways) and a client on a third host polls for the same
lock every 50 ms. Measured: the cut to the moment the other client gets it, with the
server's defaults and with the server-side timeouts that end a dead session sooner
(set per session through the connection's ``options``). Needs root (test hosts).

    .venv/bin/python benchmarks/pg_partition_timeouts.py [--limit 30]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import psycopg

from infra.postgres_server import PostgresServer
from infra.testhosts import TestHostNet

KEEPALIVE = "-c tcp_keepalives_idle=2 -c tcp_keepalives_interval=1 -c tcp_keepalives_count=3"
IDLE_TX = "-c idle_in_transaction_session_timeout=3000"

CASES = [
    ("advisory", "server defaults", ""),
    ("advisory", "tcp_keepalives idle 2 s, interval 1 s, count 3", KEEPALIVE),
    ("for-update", "server defaults", ""),
    ("for-update", "idle_in_transaction_session_timeout 3 s", IDLE_TX),
    ("for-update", "tcp_keepalives idle 2 s, interval 1 s, count 3", KEEPALIVE),
]


def hold(kind: str, dsn: str, options: str, key: int) -> psycopg.Connection:
    conn = psycopg.connect(dsn, options=options or None, autocommit=kind == "advisory", connect_timeout=5)
    if kind == "advisory":
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    else:
        conn.execute("SELECT id FROM partition_rows WHERE id = %s FOR UPDATE", (key,))
    return conn


def try_take(kind: str, conn: psycopg.Connection, key: int) -> bool:
    if kind == "advisory":
        got = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()[0]
        if got:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
        return bool(got)
    try:
        with conn.transaction():
            conn.execute("SELECT id FROM partition_rows WHERE id = %s FOR UPDATE NOWAIT", (key,))
        return True
    except psycopg.errors.LockNotAvailable:
        return False


def measure(
    net: TestHostNet, dsn: str, server_host, kind: str, options: str, key: int, limit: float
) -> float | None:
    holder_host, other_host = net.host("holder"), net.host("other")
    with net.enter(holder_host):
        holder = hold(kind, dsn, options, key)
    with net.enter(other_host):
        other = psycopg.connect(dsn, autocommit=True, connect_timeout=5)
    try:
        if try_take(kind, other, key):
            raise RuntimeError("the lock was free before the cut")
        net.partition([holder_host], [server_host])
        start = time.monotonic()
        while time.monotonic() - start < limit:
            if try_take(kind, other, key):
                return time.monotonic() - start
            time.sleep(0.05)
        return None
    finally:
        net.heal()
        other.close()
        holder.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--limit", type=float, default=20.0, help="seconds to wait for the lock after the cut"
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lockbench-pgcut-") as tmp, TestHostNet(0) as net:
        control = net.add_host("control")
        net.add_host("holder")
        net.add_host("other")
        server_host = net.add_host("postgres")
        with net.enter(control):
            server = PostgresServer(Path(tmp), host=server_host.addr, launcher=server_host.argv([])).start()
            try:
                with psycopg.connect(server.url, autocommit=True) as conn:
                    conn.execute("CREATE TABLE partition_rows (id int PRIMARY KEY)")
                    conn.execute("INSERT INTO partition_rows SELECT generate_series(1, 100)")
                print(
                    f"PostgreSQL {server.version()}; cut lasts up to {args.limit:g} s; machine shared, figures approximate"
                )
                print(
                    "| lock | server-side setting of the holder's session | cut to the next client's grant |"
                )
                print("|---|---|---|")
                for key, (kind, label, options) in enumerate(CASES, start=1):
                    took = measure(net, server.url, server_host, kind, options, key, args.limit)
                    shown = f"{took:.1f} s" if took is not None else f"kept for all {args.limit:g} s"
                    print(f"| {kind} | {label} | {shown} |", flush=True)
            finally:
                server.stop()


if __name__ == "__main__":
    main()
