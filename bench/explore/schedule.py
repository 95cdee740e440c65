"""A fault schedule: a short timed list of events against one lock, and its file (``schedule.json``).

Why a schedule and not a scenario: the matrix strikes one fault kind at a time; real incidents
combine them (a holder pauses while its master restarts). A schedule says exactly what happens,
and when, to the one holder bench claims in each round, so it can be shrunk, written and replayed.

Time zero of every event is the claim: the moment the first holder granted after bench armed the
case's mailbox told bench it holds the lock (``bench.nemesis.faults.Mailbox.poll_claim``), plus
50 ms for the holder to record its claim (a strike before that record would not count). An
event's ``at`` is seconds after that, so ``at`` 0.4 with a 1 s lease is "0.4 lease after grant".

Event kinds (``KIND_ORDER``, weakest first: Hypothesis shrinks a choice towards the first):

* holder events, delivered through the case's mailbox to the claimed holder, which obeys them
  (``workloads/flash_sale.py`` ``FlashSaleUser._obey``):
  ``task-pause`` (its task sleeps ``seconds`` while its process runs on: watchdogs, keepalives
  and heartbeats go on) and ``world-pause`` (the holder's whole process is stopped, SIGSTOP, for
  ``seconds``: every renewal stops with it);
* server events, made by bench on the servers it started: ``restart`` (SIGKILL and start again
  on the same port and data; Redis keeps no persistence here), ``restart-aof`` (the same on a
  Redis whose append-only file is fsynced every second: the persistence arm), ``kill-member``,
  ``kill-leader`` (3-node ZooKeeper or etcd ensembles; healed after the round), ``failover``
  (Redis Sentinel).

A schedule fails when its case's verdict is ``invalid`` (a lost lock, an overlap, oversold
stock, a stale write accepted) or when the lock stays unavailable past its own recovery bound
after a round's events (stuck: bench.explore.execute.stuck_after).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.errors import UserError

TASK_PAUSE = "task-pause"
WORLD_PAUSE = "world-pause"
HOLDER_KINDS = (TASK_PAUSE, WORLD_PAUSE)
#: Every event kind, weakest first (a pause before a server fault; a task pause before a world pause).
#: ``restart-aof`` is a restart its server's append-only file mostly survives: weaker than ``restart``.
KIND_ORDER = (TASK_PAUSE, WORLD_PAUSE, "restart-aof", "kill-member", "restart", "kill-leader", "failover")
#: The file format's version (``schedule.json`` ``format``).
FORMAT = 1


@dataclass(frozen=True)
class Event:
    """One fault event: what (``kind``), when (``at`` s after the claim) and how much (``params``).

    Why frozen: events are compared, hashed and sorted while a failure is shrunk.
    """

    kind: str
    at: float
    params: dict[str, float] = field(default_factory=dict, hash=False, compare=True)

    @property
    def seconds(self) -> float:
        """How long a pause lasts (0 for a server event, which lasts as long as its action)."""
        return float(self.params.get("seconds", 0.0))

    def as_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "at": round(self.at, 3), "params": dict(self.params)}

    def text(self) -> str:
        """``+0.4s restart`` or ``+0.0s world-pause 2.5s``."""
        extra = f" {self.seconds:g}s" if self.kind in HOLDER_KINDS else ""
        return f"+{self.at:g}s {self.kind}{extra}"


@dataclass
class Schedule:
    """A schedule against one lock: its events, the lock and its parameters, and the seed that drew it.

    Why the lock's settings travel with it: a replay must run exactly what failed (lease, users,
    rounds), not what today's defaults would be.
    """

    impl: str
    backend: str
    events: list[Event]
    settings: dict[str, Any] = field(default_factory=dict)
    lock_params: dict[str, Any] = field(default_factory=dict)
    fencing: str = "off"
    seed: int | None = None
    topology: str | None = None

    def sorted_events(self) -> list[Event]:
        return sorted(self.events, key=lambda e: (e.at, KIND_ORDER.index(e.kind)))

    @property
    def span_s(self) -> float:
        """Seconds from the claim to the end of the last event (a pause's end)."""
        return max((e.at + e.seconds for e in self.events), default=0.0)

    def size(self) -> tuple[int, float, float]:
        """What shrinking makes smaller: fewer events, then weaker (shorter pauses), then ..."""
        strength = sum(KIND_ORDER.index(e.kind) for e in self.events)
        return (len(self.events), sum(e.seconds for e in self.events), strength)

    def text(self) -> str:
        """One line: ``redis.set-nx-px-lua: +0s restart, +0.5s task-pause 3s``."""
        body = ", ".join(e.text() for e in self.sorted_events()) or "(no events)"
        return f"{self.impl}: {body}"

    def as_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "impl": self.impl,
            "backend": self.backend,
            "topology": self.topology,
            "events": [e.as_json() for e in self.sorted_events()],
            "settings": self.settings,
            "lock_params": self.lock_params,
            "fencing": self.fencing,
            "seed": self.seed,
            "time_zero": "the claim: the first holder granted after bench armed the strike says it holds",
        }

    def write(self, path: Path) -> None:
        from bench.results.folder import atomic_write_text

        atomic_write_text(path, json.dumps(self.as_json(), indent=2) + "\n")

    @classmethod
    def from_json(cls, data: Any, where: str = "schedule") -> Schedule:
        """A schedule from parsed JSON; UserError (one line) when a field is missing or wrong."""
        if not isinstance(data, dict):
            raise UserError(f"{where}: not a schedule (a JSON object with impl, backend and events)")
        try:
            events = [
                Event(
                    str(e["kind"]), float(e["at"]), {k: float(v) for k, v in (e.get("params") or {}).items()}
                )
                for e in data["events"]
            ]
            schedule = cls(
                impl=str(data["impl"]),
                backend=str(data["backend"]),
                events=events,
                settings=dict(data.get("settings") or {}),
                lock_params=dict(data.get("lock_params") or {}),
                fencing=str(data.get("fencing") or "off"),
                seed=None if data.get("seed") is None else int(data["seed"]),
                topology=data.get("topology"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise UserError(f"{where}: a damaged schedule ({type(exc).__name__}: {exc})") from None
        unknown = [e.kind for e in events if e.kind not in KIND_ORDER]
        if unknown:
            raise UserError(f"{where}: unknown event kind {unknown[0]!r}; kinds are {', '.join(KIND_ORDER)}")
        if any(e.at < 0 or e.seconds < 0 for e in events):
            raise UserError(f"{where}: an event with a negative time")
        return schedule

    @classmethod
    def read(cls, path: Path) -> Schedule:
        """``schedule.json`` (or a results folder holding one); UserError when it cannot be read."""
        if path.is_dir():
            path = path / "schedule.json"
        try:
            text = path.read_text()
        except OSError as exc:
            raise UserError(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UserError(f"{path}: not JSON ({exc})") from None
        return cls.from_json(data, str(path))
