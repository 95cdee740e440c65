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
def lateness(pace, n):
    user = types.SimpleNamespace(opts=types.SimpleNamespace(pace=pace), _last_start=0.0)
    first = time.monotonic()
    early = []
    for i in range(n):
        time.sleep(FlashSaleUser.wait_time(user))
        early.append(first + i / pace - time.monotonic())  # > 0: start i came before its slot
    return early
flat = [FlashSaleUser.wait_time(types.SimpleNamespace(opts=types.SimpleNamespace(pace=0.0), _last_start=0.0))
        for _ in range(3)]
print(max(lateness(20.0, 6)), max(flat))
"""


def test_a_paced_buyer_starts_at_most_r_purchases_a_second() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    earliest, flat_wait = map(float, out.stdout.split())
    # 20 a second: start i never before the first call plus i x 50 ms (a sleep never wakes early;
    # a busy machine only makes starts later)
    assert earliest <= 0.0005
    assert flat_wait == 0.0
