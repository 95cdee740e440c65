"""A buyer's wait after a server error (workloads/harness/backoff.py): what resets it and what does not."""

from __future__ import annotations

from workloads.harness.backoff import CAP_S, FIRST_S, ErrorBackoff
from workloads.harness.recording import STOPPED_ERROR


def test_errors_double_the_wait_to_its_cap_and_an_answer_resets_it() -> None:
    b = ErrorBackoff()
    assert b.wait_s == 0.0
    waits = []
    for _ in range(8):
        b.after("ConnectionError")
        waits.append(b.wait_s)
    assert waits[:3] == [FIRST_S, 2 * FIRST_S, 4 * FIRST_S] and waits[-1] == CAP_S
    b.after(STOPPED_ERROR)  # the case's end cut a wait short: nobody failed, the wait stays
    assert b.wait_s == CAP_S
    b.after("timeout")  # the server answered that the lock was taken
    assert b.wait_s == 0.0
    b.after("BackendUnavailable")
    b.after(None)  # granted
    assert b.wait_s == 0.0
