"""Solo calibrations kept between runs: a lock measured alone once per commit, not once per run.

Why: every ``bench run`` measured every lock alone again (31.7 s of a 158 s default run), though
a lock's solo hold on one commit, one machine class and one set of parameters does not change
between two runs. A calibration is kept in ``~/.cache/lockbench/calibrations/<key>.json``
(``$XDG_CACHE_HOME`` respected; ``LOCKBENCH_CALIBRATIONS_DIR`` names another folder, or ``off``)
and reused while it matches and is fresh. Not in the results folder: a results folder holds run
folders only, which `bench history`, the gate's finders and users' own scripts list:

* the key is the commit, the machine class, the impl, the workload, the fencing mode, and every
  setting that shapes one client's hold (lock parameters, lease, retry interval, critical
  section, items...); a run with other lock parameters is measured anew (never reused across them);
* a dirty or unknown checkout is never reused (the code under it may have changed between runs);
* an entry older than :data:`MAX_AGE_S` is stale and measured again; ``--recalibrate`` measures
  every lock again and replaces the entries.

run.json ``calibration.solo`` says for each lock whether its figure was measured in this run or
reused, from which run and how old.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.measure import fidelity
from bench.run.case import Case

#: A kept calibration older than this is measured again (a week: the machine's packages and
#: kernel move on even where the commit does not).
MAX_AGE_S = 7 * 24 * 3600.0
#: The variable naming the folder of kept calibrations ("off": keep and reuse none).
DIR_ENV = "LOCKBENCH_CALIBRATIONS_DIR"


def default_folder() -> Path | None:
    """Where calibrations are kept: ``$LOCKBENCH_CALIBRATIONS_DIR``, else the user's cache folder; None: off."""
    chosen = os.environ.get(DIR_ENV)
    if chosen is not None:
        return None if chosen.strip() in ("", "off", "0") else Path(chosen)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "lockbench" / "calibrations"


#: Settings that do not shape one client's hold: left out of the key.
_NOT_IN_KEY = ("duration", "stop_rule", "users", "spawn_rate", "processes", "master_bind", "expect_workers",
               "workers_wait_s", "strikes", "grants_between", "evidence")  # fmt: skip


def reusable_commit(commit: str) -> bool:
    """Only a clean, known checkout's calibrations are kept and reused."""
    return bool(commit) and commit != "unknown" and not commit.endswith("+dirty")


def key_of(case: Case, commit: str, machine_class: str) -> str:
    """The cache key of ``case``'s solo calibration (a hex digest of what shapes the solo hold)."""
    settings = {k: v for k, v in dataclasses.asdict(case.settings).items() if k not in _NOT_IN_KEY}
    material = {
        "commit": commit, "machine_class": machine_class, "impl": case.impl, "workload": case.workload.name,
        "fencing": case.fencing, "settings": settings,
    }  # fmt: skip
    text = json.dumps(material, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


class CalibrationCache:
    """The kept calibrations under one results folder; reads and writes never fail a run."""

    def __init__(
        self, folder: Path | None, commit: str, machine_class: str, recalibrate: bool = False
    ) -> None:
        self.folder = Path(folder) if folder is not None else Path()
        self.commit = commit
        self.machine_class = machine_class
        self.recalibrate = recalibrate
        self.off = folder is None
        self.enabled = reusable_commit(commit) and not self.off

    def why_not(self) -> str:
        """Why nothing is reused in this run ("" when it may be)."""
        if self.recalibrate:
            return "--recalibrate: every lock measured again"
        if self.off:
            return f"{DIR_ENV} is off"
        if not self.enabled:
            return f"the checkout is {'dirty' if self.commit.endswith('+dirty') else 'not a known commit'}"
        return ""

    def lookup(self, case: Case, now: float | None = None) -> tuple[fidelity.Solo, dict[str, Any]] | None:
        """A fresh kept calibration of ``case`` (its Solo and its entry), or None."""
        if self.recalibrate or not self.enabled:
            return None
        path = self.folder / f"{key_of(case, self.commit, self.machine_class)}.json"
        try:
            entry = json.loads(path.read_text())
            solo = fidelity.Solo(
                float(entry["hold_p50_us"]), float(entry["acquire_p50_us"]), int(entry["acquisitions"]),
                hold_mean_us=float(entry.get("hold_mean_us", float("nan"))),
            )  # fmt: skip
            measured = float(entry["measured_at"])
        except (OSError, ValueError, KeyError, TypeError):
            return None
        age = (now if now is not None else time.time()) - measured
        if age < 0 or age > MAX_AGE_S or solo.acquisitions < fidelity.MIN_SOLO_ACQUISITIONS:
            return None
        if entry.get("commit") != self.commit or entry.get("impl") != case.impl:
            return None
        return solo, {**entry, "age_s": round(age, 1)}

    def keep(self, case: Case, solo: fidelity.Solo, run_id: str) -> None:
        """Keep ``solo`` for later runs (atomically; a full disk or a read-only folder keeps nothing)."""
        if not self.enabled:
            return
        entry = {
            **solo.as_json(), "measured_at": time.time(), "run_id": run_id, "commit": self.commit,
            "machine_class": self.machine_class, "impl": case.impl, "workload": case.workload.name,
            "fencing": case.fencing,
        }  # fmt: skip
        path = self.folder / f"{key_of(case, self.commit, self.machine_class)}.json"
        with contextlib.suppress(OSError):
            self.folder.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-")
            with os.fdopen(fd, "w") as fh:
                json.dump(entry, fh)
            os.replace(tmp, path)
