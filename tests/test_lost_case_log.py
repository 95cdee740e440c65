"""A case whose Locust left no recording keeps its Locust output (issue 39: every error names a kept file).

In P (the full standard matrix, 2026-12-06) ``redis.redlock x lease-expiry-task`` ended "Locust
exited with code 0 and no recording": the message carried four lines of Locust's table and the
rest went with the scratch folder, so nobody could say why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.results.folder import RunFolder
from bench.run.case import Case, CaseFailed, RunSettings
from bench.run.runner import finish_case
from infra.stack import Stack
from workloads.harness.catalog import WORKLOADS


def test_a_case_without_a_recording_keeps_its_locust_output_with_secrets_stripped(tmp_path: Path) -> None:
    case = Case(
        impl="redis.set-nx-px-lua", backend="redis", workload=WORKLOADS["flash-sale"],
        settings=RunSettings(users=1, processes=1, duration=3.0),
    )  # fmt: skip
    out = tmp_path / "scratch"
    out.mkdir()
    (out / "locust.log").write_text(
        "[worker] lost its master's heartbeat\nconnect redis://:s3cret@127.0.0.1:6390/0 refused\nthe table\n"
    )
    with pytest.raises(CaseFailed) as caught:
        finish_case(case, Stack(["redis"]), out, 0, None, "0", None, None, {})
    message, log = str(caught.value), caught.value.log
    assert f"no recording (its Locust output: logs/{case.case_id}.log)" in message
    assert log is not None and "lost its master's heartbeat" in log and "s3cret" not in log
    folder = RunFolder(tmp_path / "results", {"params": {}})
    kept = folder.keep_log(case.case_id, log)
    assert kept == folder.path / "logs" / f"{case.case_id}.log" and kept.read_text() == log
