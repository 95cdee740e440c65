"""When a fault case has the evidence its checker needs, so it can stop early.

Fault scenarios are triggered by events (a pause, a crash, a server fault while a lock is
held, a critical section that outlasts the lease), not by the clock. Once the event has
happened and enough acquisitions followed it for the checker to judge (or long enough
has passed that none will come: a stuck lock), more load adds nothing but time. A
:class:`StopRule` says what to wait for; :class:`EvidenceWatch` follows the history as it
arrives and says when the rule is met. Pure: no I/O, no Locust.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

#: event kind -> the history (op, type) that marks it; "long-hold" and "start" are computed
MARKERS = {"pause": ("pause", "ok"), "crash": ("crash", "info"), "fault": ("fault-hold", "ok")}
KINDS = ("start", "long-hold", *MARKERS)


@dataclass(frozen=True)
class StopRule:
    """Stop once ``count`` events of ``event`` happened and then ``acquisitions`` more
    acquisitions succeeded, or no acquisition came for ``or_after_s`` seconds after that
    event (the lock stalled: a stuck lock gives no more evidence by waiting).

    ``after_first``: also wait until that many acquisitions followed the *first* event (the
    evidence a survived fault case needs: grants after a strike, bench/measure/strikes.py).

    ``event`` is ``start`` (the test start), ``pause`` / ``crash`` / ``fault`` (the
    workload's markers) or ``long-hold`` (a hold longer than ``long_hold_s`` ended).

    ``stall_after_any``: also stop when ``or_after_s`` passed with no acquisition after *any*
    event, before ``count`` of them: where each event needs a holder (a crash), a lock that
    nobody gets any more brings no further event, and waiting for the cap only costs time.
    """

    event: str = "start"
    count: int = 1
    acquisitions: int = 0
    or_after_s: float | None = None
    long_hold_s: float = 0.0
    after_first: int = 0
    stall_after_any: bool = False

    def __post_init__(self) -> None:
        if self.event not in KINDS:
            raise ValueError(f"unknown stop event {self.event!r}; valid: {', '.join(KINDS)}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> StopRule | None:
        """The rule in ``text`` (``--lockbench-stop``), None for an empty string."""
        return cls(**json.loads(text)) if text else None


class EvidenceWatch:
    """Follows history events (the recorder's tuples) and tells when a rule is met.

    Why incremental: the master checks a few times a second while events keep coming, so
    each check looks only at what arrived since the last one.
    """

    def __init__(self, rule: StopRule, start_ns: int) -> None:
        self.rule = rule
        self.seen = 0
        self.trigger_ns: int | None = start_ns if rule.event == "start" else None
        self.after = 0
        self._acquired: dict[tuple[str, str], int] = {}
        self._pending_acquires: list[int] = []
        self.hits = 0
        self.first_ns: int | None = start_ns if rule.event == "start" else None
        self.last_acquire_ns = 0
        self.after_first = 0
        self._before_first: list[int] = []
        self.last_hit_ns = 0

    def feed(self, events: list[Any]) -> None:
        """Look at the events appended since the last call (``events`` is the whole list)."""
        rule = self.rule
        marker = MARKERS.get(rule.event)
        new = events[self.seen :]
        self.seen = len(events)
        for client, _seq, op, type_, lock, t_ns, *_ in new:
            if op == "acquire" and type_ == "ok":
                self._acquired[(client, lock)] = t_ns
                self.last_acquire_ns = max(self.last_acquire_ns, t_ns)
                if self.first_ns is None:
                    self._before_first.append(t_ns)
                elif t_ns > self.first_ns:
                    self.after_first += 1
                if self.trigger_ns is None:
                    self._pending_acquires.append(t_ns)
                elif t_ns > self.trigger_ns:
                    self.after += 1
                continue
            if self.trigger_ns is not None:
                continue
            hit = False
            if marker is not None:
                hit = (op, type_) == marker
            elif rule.event == "long-hold" and op == "release" and type_ == "invoke":
                began = self._acquired.get((client, lock))
                hit = began is not None and (t_ns - began) / 1e9 > rule.long_hold_s
            if hit:
                self._count_hit(t_ns)

    def _count_hit(self, t_ns: int) -> None:
        self.hits += 1
        self.last_hit_ns = max(self.last_hit_ns, t_ns)
        if self.first_ns is None:
            self.first_ns = t_ns
            self.after_first = sum(1 for t in self._before_first if t > t_ns)
            self._before_first.clear()
        if self.hits >= self.rule.count:
            self.trigger_ns = t_ns
            # workers' chunks arrive out of order: acquisitions seen before the marker may follow it
            self.after = sum(1 for t in self._pending_acquires if t > t_ns)
            self._pending_acquires.clear()

    def satisfied(self, now_ns: int) -> bool:
        """True once the event happened and either enough acquisitions or enough time followed."""
        waited = self.rule.or_after_s
        if self.trigger_ns is None:
            if not (self.rule.stall_after_any and self.hits and waited is not None):
                return False
            return (now_ns - max(self.last_hit_ns, self.last_acquire_ns)) / 1e9 >= waited  # stuck
        if self.after >= self.rule.acquisitions and self.after_first >= self.rule.after_first:
            return True
        since = max(self.trigger_ns, self.last_acquire_ns)
        return waited is not None and (now_ns - since) / 1e9 >= waited
