"""What the loop-lag probe (workloads/harness/loop_lag.py) costs: CPU seconds per second.

A gevent loop runs for ``DURATION_S`` with ``CLIENTS`` greenlets that each wake every
``--client-sleep`` seconds (a light, timer-driven load like clients between operations),
once without and once with the probe, alternating ``ROUNDS`` times so that drift of the
machine falls on both alike. CPU is this process's user + system time. Prints one JSON
line: the median CPU s/s without and with the probe, their difference (the probe's cost,
as a share of one core) and the probe's own figures of the last round.

    .venv/bin/python benchmarks/loop_lag_cost.py [DURATION_S] [ROUNDS] [CLIENTS] [--client-sleep S] [--interval S]

Aim (issue 22): under 0.01 of a core. Measure on a quiet machine (load average < 1).
"""

from gevent import monkey

monkey.patch_all()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from workloads.harness.loop_lag import INTERVAL_S, LoopLagProbe  # noqa: E402


def _cpu() -> float:
    t = os.times()
    return t.user + t.system


def one_round(duration_s: float, clients: int, client_sleep_s: float, probe: LoopLagProbe | None) -> float:
    """CPU seconds per wall second of the loop over ``duration_s``, with ``probe`` running or not."""
    end = time.monotonic() + duration_s

    def client() -> None:
        while time.monotonic() < end:
            gevent.sleep(client_sleep_s)

    if probe is not None:
        probe.start()
    cpu0, t0 = _cpu(), time.monotonic()
    gevent.joinall([gevent.spawn(client) for _ in range(clients)])
    cpu1, t1 = _cpu(), time.monotonic()
    if probe is not None:
        probe.stop()
    return (cpu1 - cpu0) / (t1 - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("duration_s", nargs="?", type=float, default=10.0)
    parser.add_argument("rounds", nargs="?", type=int, default=3)
    parser.add_argument("clients", nargs="?", type=int, default=1)
    parser.add_argument("--client-sleep", type=float, default=0.01)
    parser.add_argument("--interval", type=float, default=INTERVAL_S, help="the probe's grid spacing (s)")
    args = parser.parse_args()
    probe = LoopLagProbe(interval_s=args.interval)
    without, with_ = [], []
    for _ in range(args.rounds):
        without.append(one_round(args.duration_s, args.clients, args.client_sleep, None))
        with_.append(one_round(args.duration_s, args.clients, args.client_sleep, probe))
    figures = {k: v for k, v in probe.figures().items() if k != "loop_lag_hist"}
    out = {
        "duration_s": args.duration_s,
        "rounds": args.rounds,
        "clients": args.clients,
        "interval_s": args.interval,
        "cpu_s_per_s_without": statistics.median(without),
        "cpu_s_per_s_with": statistics.median(with_),
        "probe_cost_share_of_core": statistics.median(with_) - statistics.median(without),
        "all_without": without,
        "all_with": with_,
        "probe_figures_last_round": figures,
        "load_average": os.getloadavg(),
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
