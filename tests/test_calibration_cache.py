"""Kept calibrations (issue 42 item 2): reused on the same commit, machine and parameters, refused otherwise."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from bench.measure.fidelity import Solo
from bench.run.calibration_cache import MAX_AGE_S, CalibrationCache, key_of
from bench.run.case import Case, RunSettings
from workloads.harness.catalog import WORKLOADS

COMMIT = "0123456789abcdef0123456789abcdef01234567"
MACHINE = "x86_64-2cpu-24gib"


def _case(**lock_params: object) -> Case:
    settings = RunSettings(users=1, processes=1, duration=3.0, lock_params=dict(lock_params))
    return Case(
        impl="redis.set-nx-px-lua", backend="redis", workload=WORKLOADS["flash-sale"], settings=settings
    )


SOLO = Solo(3050.0, 120.0, 500, hold_mean_us=3100.0)


def test_a_kept_calibration_is_reused_on_the_same_commit_machine_and_parameters(tmp_path: Path) -> None:
    kept = CalibrationCache(tmp_path, COMMIT, MACHINE)
    case = _case()
    assert kept.lookup(case) is None  # nothing kept yet
    kept.keep(case, SOLO, "20261203T000000Z-aaaaaa")
    hit = kept.lookup(case)
    assert hit is not None and hit[0].hold_p50_us == 3050.0 and hit[1]["run_id"] == "20261203T000000Z-aaaaaa"
    # the run's length and its user count do not shape one client's hold: still the same entry
    longer = replace(case, settings=replace(case.settings, duration=8.0, users=50))
    assert kept.lookup(longer) is not None


def test_a_kept_calibration_is_refused_when_the_lock_s_parameters_differ(tmp_path: Path) -> None:
    kept = CalibrationCache(tmp_path, COMMIT, MACHINE)
    kept.keep(_case(), SOLO, "r1")
    assert kept.lookup(_case(pool_max=4)) is None
    ttl = _case()
    assert kept.lookup(replace(ttl, settings=replace(ttl.settings, ttl=1.0))) is None
    assert kept.lookup(replace(_case(), fencing="enforce")) is None
    assert key_of(_case(), COMMIT, MACHINE) != key_of(_case(pool_max=4), COMMIT, MACHINE)


def test_another_commit_machine_a_dirty_checkout_or_recalibrate_measure_again(tmp_path: Path) -> None:
    CalibrationCache(tmp_path, COMMIT, MACHINE).keep(_case(), SOLO, "r1")
    assert CalibrationCache(tmp_path, "f" * 40, MACHINE).lookup(_case()) is None
    assert CalibrationCache(tmp_path, COMMIT, "aarch64-64cpu-256gib").lookup(_case()) is None
    dirty = CalibrationCache(tmp_path, COMMIT + "+dirty", MACHINE)
    assert dirty.lookup(_case()) is None and "dirty" in dirty.why_not()
    dirty.keep(_case(), SOLO, "r2")  # and keeps nothing either
    assert not list(tmp_path.glob("*")) or all(
        json.loads(p.read_text())["commit"] == COMMIT for p in tmp_path.glob("*.json")
    )
    again = CalibrationCache(tmp_path, COMMIT, MACHINE, recalibrate=True)
    assert again.lookup(_case()) is None and "--recalibrate" in again.why_not()


def test_a_stale_or_damaged_entry_is_measured_again(tmp_path: Path) -> None:
    kept = CalibrationCache(tmp_path, COMMIT, MACHINE)
    kept.keep(_case(), SOLO, "r1")
    assert kept.lookup(_case(), now=time.time() + MAX_AGE_S + 60) is None
    path = next(tmp_path.glob("*.json"))
    path.write_text("{not json")
    assert kept.lookup(_case()) is None
