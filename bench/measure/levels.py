"""The ``--evidence`` levels: how many strikes (k) and grants after them (n) a "survived" needs.

Its own module, importing nothing heavy, because the CLI checks ``--evidence`` and the matrix's
scenarios are sized by it before any history is read (bench/measure/strikes.py reads them).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EvidenceTarget:
    """What a survived fault case needs before it is shown as survived (green).

    ``acquisitions`` 0 means "every acquisition is itself a strike" (long-cs, where every
    critical section outlasts the lease): k then bounds both rates and n adds nothing.
    """

    strikes: int = 10
    acquisitions: int = 1000

    def text(self) -> str:
        n = f" and n >= {self.acquisitions:,}" if self.acquisitions else ""
        return f"k >= {self.strikes}{n}"


#: ``--evidence`` levels: what each bounds (rule of three, 95%).
LEVELS: dict[str, EvidenceTarget] = {
    "quick": EvidenceTarget(3, 300),
    "standard": EvidenceTarget(10, 1000),
    "thorough": EvidenceTarget(30, 3000),
}
DEFAULT_TARGET = LEVELS["standard"]
