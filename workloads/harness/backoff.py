"""How long a buyer waits before its next try after its lock's server failed it.

A client whose server is gone (killed, restarting, cut off) gets its refusal in microseconds:
``connection refused`` needs no round trip. The workloads' buyers loop with no wait of their
own, so without a pause each one tried again at once, thousands of times a second. Measured
(2026-12-06, load 0.99 at the start): one matrix case of ``redis.set-nx-px-lua`` x
lease-expiry-task whose lock server was SIGKILLed kept its Locust processes at 2.0 cores for
the 20 s until the case ended, every other lane's generator waiting behind them, and each try
wrote two history rows that said nothing new.

So a try that failed with an error from the client or the server (not a timeout: the server
answered that the lock was taken, after the wait the buyer asked for) is followed by a wait
that doubles from :data:`FIRST_S` up to :data:`CAP_S`, and a grant or a timeout resets it. The
cap bounds what the wait can add to a measured recovery (a grant after the server is back) at
0.1 s, a hundredth of the shortest recovery bound the matrix holds a lock to (10 s).
"""

from __future__ import annotations

from workloads.harness.recording import STOPPED_ERROR

#: The first wait after a failed try (s).
FIRST_S = 0.005
#: The longest wait between two failed tries (s).
CAP_S = 0.1


class ErrorBackoff:
    """One buyer's wait before its next try: 0 after a grant, doubling after each failed try.

    Why per buyer and not in the lock: the algorithms stay as their designs describe them, and
    the wait goes where the buyer already waits between purchases (Locust's ``wait_time``), which
    a case's end interrupts.
    """

    def __init__(self, first_s: float = FIRST_S, cap_s: float = CAP_S) -> None:
        self.first_s = first_s
        self.cap_s = cap_s
        #: seconds to wait before the next try
        self.wait_s = 0.0

    def after(self, error: str | None) -> None:
        """Take the outcome of a try: ``error`` as ``RecordedLock.acquire`` gives it (None: granted)."""
        if error is None or error == "timeout":
            self.wait_s = 0.0  # the server answered
        elif error != STOPPED_ERROR:  # the case's end cut a wait short: no failure of anyone's
            self.wait_s = min(self.cap_s, max(self.first_s, self.wait_s * 2))


def wait_of(user: object) -> float:
    """A buyer's backoff wait (its ``backoff`` attribute); 0 before its ``on_start`` made one."""
    backoff = getattr(user, "backoff", None)
    return backoff.wait_s if isinstance(backoff, ErrorBackoff) else 0.0
