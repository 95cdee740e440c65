"""What a case is: one impl under one workload, parameter set, fencing mode and trial.

The definitions every other room of ``bench/run`` shares (the settings of a run, a case and
its id, the solo calibration case beside it, the errors a case ends with), apart from the
code that runs, launches or judges one.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from bench.measure import fidelity
from bench.measure.strikes import EvidenceTarget
from bench.nemesis.faults import FaultSpec
from lockimpls.base import DEFAULT_RETRY_INTERVAL
from workloads.checks.stop_rules import StopRule
from workloads.harness.catalog import WorkloadInfo

#: Longest load window of a solo calibration case (one client): it ends sooner, as soon as
#: it holds :data:`SOLO_ACQUISITIONS` (``calibration_case`` below).
CALIBRATION_S = 3.0
#: Acquisitions that end a solo calibration early. The hold p50 of 250 samples lies, with 95%
#: confidence, between the sample's 43.8th and 56.2nd percentiles (binomial order statistics):
#: for a 1 ms critical section, holds of 1,263-1,423 us at their p50 (Redis, 2026-12-05), a few
#: percent of a hold, against the 2x by which a case is judged inflated. One client of a 1 ms
#: critical section reaches it in under half a second. It was 500 until 2026-12-05: 0.85 s a
#: lock, 10.5 s of a commit's first default run (overhead share 1.21), for a p50 within 4.4
#: percentiles instead of 6.2.
SOLO_ACQUISITIONS = 250


class ServerDied(Exception):
    """A server the run started is gone: the remaining cases would measure nothing."""


class CaseFailed(Exception):
    """A case produced no usable recording (Locust crashed, a server died).

    ``log``: the case's Locust output where there was one, so the results folder keeps it
    (``logs/<case>.log``) even though the case has no row of its own to hang it on.
    """

    def __init__(self, message: str, log: str | None = None) -> None:
        super().__init__(message)
        self.log = log


@dataclass
class RunSettings:
    """Everything about how to drive Locust that is the same for every case of a run."""

    users: int = 50
    spawn_rate: float = 50.0
    duration: float = 8.0
    processes: int = 1
    ttl: float = 10.0
    retry_interval: float = DEFAULT_RETRY_INTERVAL
    acquire_timeout: float = 5.0
    clock_skew: float = 0.0
    skewed_clients: float = 0.0
    lock_params: dict[str, Any] = field(default_factory=dict)
    workload_options: dict[str, Any] = field(default_factory=dict)
    #: JSON of a workloads.checks.stop_rules.StopRule: end the case once its evidence is in ("" = run the duration)
    stop_rule: str = ""
    #: master mode: Locust listens here and waits for ``expect_workers`` remote workers
    master_bind: tuple[str, int] | None = None
    expect_workers: int = 0
    #: seconds a master waits for its workers before the case fails
    workers_wait_s: float = 120.0
    #: how often a server fault strikes in one case (bench/nemesis/faults.py), and the purchases
    #: the service must grant between two strikes
    strikes: int = 1
    grants_between: int = 0
    #: what a survived fault case needs to be shown as survived (bench/measure/strikes.py)
    evidence: EvidenceTarget = field(default_factory=EvidenceTarget)


@dataclass
class Case:
    """One impl x one workload x one parameter set x one trial."""

    impl: str
    backend: str
    workload: WorkloadInfo
    trial: int = 0
    params: dict[str, Any] = field(default_factory=dict)
    fencing: str = "off"  # off | observe (unfenced, stale writes counted) | enforce (fenced)
    fault: FaultSpec | None = None
    settings: RunSettings = field(default_factory=RunSettings)
    #: a one-client calibration of the impl (bench/measure/fidelity.py), not a case of the results
    solo: bool = False

    @property
    def scenario(self) -> str:
        """What the case puts the lock through: workload, fault and fencing, e.g. ``long-cs+fenced``."""
        parts = [self.workload.name]
        if self.fault:
            parts.append(self.fault.label)
        if self.fencing != "off":
            parts.append("fenced" if self.fencing == "enforce" else "unfenced")
        return "+".join(parts)

    @property
    def case_id(self) -> str:
        safe = self.impl.replace(":", "_").replace("/", "_")
        base = f"{safe}__{self.scenario.replace('+', '__').replace('@', '-')}"
        if self.solo:
            return f"{base}__solo"
        return f"{base}__t{self.trial}" if self.params.get("trials", 1) > 1 else base

    @property
    def calibration_key(self) -> tuple[str, str, str]:
        """Cases that share a solo calibration: same impl, workload steps and fencing mode."""
        return (self.impl, self.workload.name, self.fencing)


def calibration_case(case: Case) -> Case:
    """The one-client, short, fault-free twin of ``case``: its solo calibration.

    It ends after :data:`SOLO_ACQUISITIONS` acquisitions (a stop rule, as the matrix's cases
    end on their evidence) or after :data:`CALIBRATION_S`, whichever comes first.
    """
    duration = min(CALIBRATION_S, case.settings.duration)  # never longer than the case itself
    rule = StopRule("start", acquisitions=SOLO_ACQUISITIONS).to_json()
    settings = replace(case.settings, users=1, spawn_rate=1.0, processes=1, duration=duration, stop_rule=rule)
    return replace(case, fault=None, trial=0, settings=settings, solo=True)


def with_calibration(cases: list[Case]) -> list[Case]:
    """``cases`` with each impl's solo calibration just before its first contended case.

    Interleaved rather than all at the start, so a calibration sees the same machine as
    the cases it calibrates. Only workloads whose steps one client reproduces are
    calibrated (:data:`bench.measure.fidelity.CALIBRATED_WORKLOADS`).
    """
    out: list[Case] = []
    seen: set[tuple[str, str, str]] = set()
    for case in cases:
        key = case.calibration_key
        if case.workload.name in fidelity.CALIBRATED_WORKLOADS and key not in seen:
            seen.add(key)
            out.append(calibration_case(case))
        out.append(case)
    return out
