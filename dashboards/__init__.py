"""lockbench dashboards: render a results folder into one self-contained report.html (files only)."""

from dashboards.load import ReportInputError
from dashboards.report import ReportWriteError, render_report

__all__ = ["ReportInputError", "ReportWriteError", "render_report"]
