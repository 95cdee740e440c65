"""Reading a results folder: one reader and one declared schema for every command that reads one.

``bench gate``, ``bench report`` (dashboards), ``bench history`` and the shard merge all call
:func:`read_results`. It stands apart from ``bench`` and ``dashboards`` so both may import it
(dashboards imports nothing from bench): it imports neither, nor workloads, infra or lockimpls.
"""

from resultsio.read import FINISHED, Problem, Results, parse_json, read_results
from resultsio.schema import REQUIRED_COLUMNS, SCHEMA_VERSION, VERDICTS, VIOLATION_COLUMNS, trial_group

__all__ = [
    "FINISHED", "REQUIRED_COLUMNS", "SCHEMA_VERSION", "VERDICTS", "VIOLATION_COLUMNS", "Problem", "Results",
    "parse_json", "read_results", "trial_group",
]  # fmt: skip
