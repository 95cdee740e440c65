"""The herd effect, measured: seed 000's one ephemeral node vs seed 004's sequential nodes.

Every case is a real ``bench run --workload flash-sale --items 1`` (one hot lock) against a
ZooKeeper server this script starts, so the server's ``mntr`` counters can be read before
and after each case. Per case it reports:

- notifications per release: watch callbacks the clients received (``lockstat_watch_notifications``,
  summed over every lock instance) / acquisitions;
- server watches fired per release: the server's ``zk_sum_node_deleted_watch_count`` delta /
  acquisitions (the cross-check: with one shared session per process the server sends one
  notification per process and kazoo fans it out to every waiting callback; with
  ``--lock-params '{"session": "per-lock"}'`` it sends one per waiter);
- requests per acquire: ``server_cmds_per_acquire`` (``zk_packets_received`` delta / acquisitions);
- handoff gap p50 and acquire p50 (microseconds), acquisitions per second.

``--floor`` also measures, in this process, the uncontended acquire+release p50 of each impl
divided by one create+delete of an ephemeral-sequential node on the same session.

Run: ``.venv/bin/python benchmarks/herd.py [--duration 5] [--users 10 50] [--sessions shared per-lock] [--floor]``.
Machines here are noisy: compare within one run, and run it more than once.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infra.zookeeper_server import ZooKeeperServer  # noqa: E402
from lockimpls import zk_conn  # noqa: E402
from lockimpls.base import LockOptions  # noqa: E402
from lockimpls.registry import ids_for_backend, resolve  # noqa: E402

HERD_IMPLS = ["zookeeper.ephemeral", "zookeeper.sequential"]
WATCHES_FIRED = "zk_sum_node_deleted_watch_count"


def run_case(server: ZooKeeperServer, impl: str, users: int, session: str, args: argparse.Namespace) -> dict:
    before = server.mntr()
    with tempfile.TemporaryDirectory(prefix="lockbench-herd-") as tmp:
        argv = [
            sys.executable, "-m", "bench", "run", "--impl", impl, "--workload", "flash-sale", "--items", "1",
            "--users", str(users), "--duration", str(args.duration), "--cs", args.cs,
            "--acquire-timeout", "60", "--zk-hosts", server.hosts, "--no-report", "--results-dir", tmp,
            "--lock-params", json.dumps({"session": session}),
        ]  # fmt: skip
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=args.duration + 300)
        if r.returncode != 0:
            raise SystemExit(f"bench run failed for {impl} x {users}: {r.stderr.strip()[-800:]}")
        (run,) = [p for p in Path(tmp).iterdir() if p.is_dir()]
        row = pd.read_csv(run / "cases.csv").iloc[0]
    after = server.mntr()
    acq = int(row["acquisitions"]) or 1
    return {
        "impl": impl.split(".", 1)[1],
        "session": session,
        "users": users,
        "acq/s": _r(row["throughput_acq_s"]),
        "notif/release": _r(float(row.get("lockstat_watch_notifications", 0)) / acq, 2),
        "wakeups/release": _r(float(row.get("lockstat_wakeups", 0)) / acq, 2),
        "server watches/release": _r((int(after[WATCHES_FIRED]) - int(before[WATCHES_FIRED])) / acq, 2),
        "requests/acquire": _r(row["server_cmds_per_acquire"], 1),
        "handoff p50 us": _r(row["handoff_p50_us"]),
        "acquire p50 us": _r(row["acquire_p50_us"]),
        "verdict": row["verdict"],
    }


def _r(value: object, digits: int = 0) -> float | None:
    """A figure rounded for the table; None (printed as None) when it is missing or NaN."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if x != x else round(x, digits)


def _p50_us(samples: list[int]) -> float:
    return statistics.median(samples) / 1000.0


def floor_table(server: ZooKeeperServer, rounds: int) -> pd.DataFrame:
    """Uncontended acquire+release p50 of each impl / create+delete of an ephemeral-sequential node.

    The floor and the impls are timed round-robin (one pair of each per round), so a
    noisy neighbour slows all of them alike instead of whichever ran at that moment.
    """
    session = zk_conn.session_for([server.url])
    session.ensure_started()
    client = session.client
    client.ensure_path("/lockbench/floor")

    def floor_pair() -> None:
        client.delete(client.create("/lockbench/floor/n-", b"x", ephemeral=True, sequence=True))

    steps = {"floor: create+delete": floor_pair}
    locks = [resolve(impl)("floor", [server.url], LockOptions()) for impl in ids_for_backend("zookeeper")]
    for lock in locks:
        steps[lock.id] = lambda lock=lock: lock.release(lock.acquire(timeout=5))
    samples: dict[str, list[int]] = {name: [] for name in steps}
    for i in range(rounds + 50):
        for name, step in steps.items():
            t0 = time.perf_counter_ns()
            step()
            if i >= 50:  # the first rounds warm the JIT and the session
                samples[name].append(time.perf_counter_ns() - t0)
    floor_us = _p50_us(samples["floor: create+delete"])
    rows = [
        {"impl": name, "pair p50 us": round(_p50_us(v)), "x floor": round(_p50_us(v) / floor_us, 2)}
        for name, v in samples.items()
    ]
    for lock in locks:
        lock.close()
    zk_conn.close_sessions()
    return pd.DataFrame(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of load per case")
    parser.add_argument("--users", type=int, nargs="+", default=[10, 50], help="contenders on the one lock")
    parser.add_argument("--sessions", nargs="+", default=["shared"], choices=["shared", "per-lock"])
    parser.add_argument("--cs", default="1ms", help="critical-section time")
    parser.add_argument("--floor", action="store_true", help="also measure the uncontended floor ratios")
    parser.add_argument("--rounds", type=int, default=500, help="pairs per impl for --floor")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    with tempfile.TemporaryDirectory(prefix="lockbench-herd-zk-") as workdir:
        server = ZooKeeperServer(Path(workdir)).start()
        try:
            if args.floor:
                print(floor_table(server, args.rounds).to_string(index=False), flush=True)
                print(flush=True)
            rows = []
            for session in args.sessions:
                for users in args.users:
                    for impl in HERD_IMPLS:
                        rows.append(run_case(server, impl, users, session, args))
                        print(f"  done {impl} x {users} users ({session})", file=sys.stderr, flush=True)
            print(pd.DataFrame(rows).to_string(index=False))
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
