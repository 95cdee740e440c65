"""Render one or more lockbench results folders into a single self-contained report.html.

``render_report`` is what ``bench`` calls after a run; ``python -m dashboards RUN_DIR
[RUN_DIR ...]`` does the same by hand (the first folder is the baseline when several are
given, the report goes to results/comparisons/<a>__vs__<b>/report.html).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from dashboards.load import ReportInputError, RunData, load_run
from dashboards.page import build_page


class ReportWriteError(OSError):
    """report.html could not be written (a full disk, a read-only folder): names the file and the way back.

    Why its own type: the run's cases are safe in their folder; the caller says so and how to
    re-render (``bench report <folder>``) instead of a bare "[Errno 28] No space left on device".
    """


def comparison_path(run_dirs: list[Path]) -> Path:
    """Where a comparison goes by default: <results>/comparisons/<a>__vs__<b>/report.html, beside the runs.

    Never inside a run folder: a run's own report.html stays the report of that run.
    """
    last = Path(run_dirs[-1])
    name = "__vs__".join(Path(d).resolve().name for d in run_dirs)
    return last.resolve().parent / "comparisons" / name / "report.html"


def render_report(
    run_dirs: list[Path],
    out: Path | None = None,
    slo_us: float | None = None,
    safety_sources: list[dict[str, Any]] | None = None,
    loaded: list[RunData] | None = None,
) -> Path:
    """Write the report for ``run_dirs[-1]`` (compared with ``run_dirs[0]`` when several) and return its path.

    One folder: <folder>/report.html. Several: :func:`comparison_path` unless ``out`` is given.

    ``safety_sources``: the matrix folders whose cells fill the first screen's safety column (bench
    names them: bench/results/matrices.py); without them a fault-free run reads "no fault tried".

    ``loaded``: the folders already read (:func:`~dashboards.load.load_run`, in the same order),
    so a caller that looked at them first does not pay for reading a matrix twice.

    Raises ReportInputError for a missing folder, a folder without run.json or cases.csv,
    or a results schema this renderer does not know.
    """
    if not run_dirs:
        raise ReportInputError("no results folder given")
    runs = loaded if loaded is not None else [load_run(Path(d)) for d in run_dirs]
    if out is None and len(run_dirs) > 1:
        out = comparison_path(run_dirs)
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ReportInputError(f"cannot create {out.parent}: {exc.strerror}") from None
    out = Path(out) if out is not None else Path(run_dirs[-1]) / "report.html"
    if not out.parent.is_dir():
        raise ReportInputError(f"output folder does not exist: {out.parent}")
    page = build_page(runs, slo_us, safety_sources)
    tmp = ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(page)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a report is meant to be shared
        os.replace(tmp, out)
    except OSError as exc:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise ReportWriteError(exc.errno, f"could not write {out}: {exc.strerror or exc}") from None
    except BaseException:
        if tmp:
            Path(tmp).unlink(missing_ok=True)
        raise
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line: exit 0 and print the report path, or exit 2 with one line on bad input."""
    parser = argparse.ArgumentParser(prog="python -m dashboards", description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path, help="results folders; the first is the baseline")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output file (default: RUN/report.html; several runs: <results>/comparisons/<a>__vs__<b>/report.html)",
    )
    parser.add_argument("--slo-us", type=float, default=None, help="draw an acquire latency SLO line (us)")
    args = parser.parse_args(argv)
    try:
        path = render_report(args.run_dirs, args.out, args.slo_us)
    except ReportInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    return 0
