"""What a strike leaves behind: its window in time, and what it was to each case of a group. Pure data."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FaultWindow:
    """When a fault started and ended (monotonic ns, the clock of the history) and what it did."""

    kind: str
    start_ns: int
    end_ns: int
    detail: str
    #: case label -> why this strike's server was not one the case's holder's grant rested on
    missed: dict[str, str] = field(default_factory=dict)
    #: when the struck service answered again (monotonic ns; 0: at ``end_ns``). A restart's action
    #: ends once the server answers; a member or leader kill leaves the others serving at once.
    service_at_ns: int = 0

    @property
    def service_ns(self) -> int:
        return self.service_at_ns or self.end_ns


@dataclass
class StrikeMark:
    """What one strike was to one case of the group: did its precondition hold, and if not, why.

    Why per case: one strike serves every case whose holder was inside its critical section,
    holding the lock, when the fault hit; for the others the strike proved nothing.
    """

    strike: int
    hit: bool
    reason: str = ""
    holder: str | None = None
