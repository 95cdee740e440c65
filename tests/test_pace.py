"""``--pace``: a paced buyer starts a purchase at most R times a second; unpaced, it never waits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Run in a child: importing a locustfile imports Locust, which monkey-patches the interpreter.
PROBE = """
import time, types
from workloads.flash_sale import FlashSaleUser
def starts(pace, n):
    user = types.SimpleNamespace(opts=types.SimpleNamespace(pace=pace), _last_start=0.0)
    out = []
    for _ in range(n):
        time.sleep(FlashSaleUser.wait_time(user))
        out.append(time.monotonic())
    return out
paced = starts(20.0, 6)
flat = [FlashSaleUser.wait_time(types.SimpleNamespace(opts=types.SimpleNamespace(pace=0.0), _last_start=0.0))
        for _ in range(3)]
gaps = [b - a for a, b in zip(paced, paced[1:])]
print(min(gaps), max(flat))
"""


def test_a_paced_buyer_starts_at_most_r_purchases_a_second() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    min_gap, flat_wait = map(float, out.stdout.split())
    assert min_gap >= 0.05 - 0.002  # 20 a second: 50 ms apart at least (sleep never wakes early)
    assert flat_wait == 0.0
