"""A case run again in its folder gives its workers their hosts back (workloads/harness/netns.py).

Shard 3/4 of the standard matrix, 2026-12-05: PostgreSQL's partition-client control failed under
a stall, the matrix ran it again in the same scratch folder, and the first attempt's claims
(``netns.0``, ``netns.1``, written by workers long dead) left the new workers no host: "no free
client host among 2", no buyer started, the control was unknown and three cells undecided.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.run import group, runner
from workloads.harness.netns import CLAIM_PREFIX, NetnsError, claims, clear_claims, enter_own_host


def _claimed_by_the_dead(out: Path, hosts: int) -> None:
    for i in range(hosts):
        (out / f"{CLAIM_PREFIX}{i}").write_text(f"{4_000_000 + i} lb1x-m0-client-{i}\n")


def test_an_earlier_attempts_claims_leave_no_host_until_cleared(tmp_path: Path) -> None:
    _claimed_by_the_dead(tmp_path, 2)
    (tmp_path / "locust.log").write_text("the first attempt's output\n")
    with pytest.raises(NetnsError, match="no free client host among 2"):
        enter_own_host(["lb1x-m0-client-0", "lb1x-m0-client-1"], tmp_path)
    assert sorted(claims(tmp_path)) == [4_000_000, 4_000_001]  # the nemesis would cut dead pids' hosts
    clear_claims(tmp_path)
    assert claims(tmp_path) == {}
    os.close(os.open(tmp_path / f"{CLAIM_PREFIX}0", os.O_WRONLY | os.O_CREAT | os.O_EXCL))  # free again
    assert (tmp_path / "locust.log").exists()  # only the claims go


def test_every_launch_clears_the_claims_first() -> None:
    """Both ways a case is launched (alone, or in a group) clear its folder's claims."""
    assert runner.clear_claims is clear_claims and group.clear_claims is clear_claims
    for source in (runner.run_case, group._prepare):
        code = source.__code__
        assert "clear_claims" in code.co_names, f"{source.__qualname__} launches without clearing claims"
