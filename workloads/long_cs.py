"""long-cs: flash-sale whose critical sections have a heavy tail that crosses the lease.

Defaults: ``--cs pareto:100ms:1.2`` (about 15% of critical sections outlast a 0.5 s
lease) and ``--lock-ttl 0.5``. A lock with a lease and no renewal lets a second buyer
in while the first is still working: overlaps, and lost updates unless the resource
enforces fencing tokens.
"""

from __future__ import annotations

from typing import Any

from locust import events

from workloads.flash_sale import FlashSale, FlashSaleUser
from workloads.harness import locust_glue as harness

__all__ = ["FlashSaleUser"]

DEFAULTS = {"cs": "pareto:100ms:1.2", "lock_ttl": 0.5}


@events.init_command_line_parser.add_listener
def _defaults(parser: Any) -> None:
    parser.set_defaults(**DEFAULTS)


class LongCs(FlashSale):
    """flash-sale with long, heavy-tailed critical sections (the defaults above)."""

    name = "long-cs"


harness.use_workload(LongCs())
