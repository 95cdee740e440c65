"""How long ``bench report DIR`` takes to render a results folder, against a floor measured in the same run.

    .venv/bin/python benchmarks/report_render.py /tmp/fullmx            # 3 renders, median
    .venv/bin/python benchmarks/report_render.py /tmp/fullmx --runs 5

Each render is a fresh ``python -m bench report DIR --out <temp>/report.html`` (interpreter
start, imports and all: what a user waits for); it never writes into DIR. The floor is a fresh
``python -c`` that only imports dashboards and reads the folder with ``resultsio.read_results``
(the reader the renderer starts with), so the ratio render / floor says how much the page
itself costs over reading run.json and cases.csv. Both are timed as wall clock and as CPU
seconds of the child (``resource.getrusage``): on a shared machine the wall clock includes
other work, the CPU seconds do not. ``uptime``'s load average is printed before and after,
to be written beside any figure taken from here (issue 31).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``uptime`` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f}"


def timed(cmd: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the child) of one command run to completion; raises on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def floor_cmd(folder: Path) -> list[str]:
    """Import the renderer and read the folder with resultsio, nothing else."""
    code = "import sys, dashboards.report; from resultsio import read_results; read_results(sys.argv[1])"
    return [PYTHON, "-c", code, str(folder)]


def render_cmd(folder: Path, out: Path) -> list[str]:
    return [PYTHON, "-m", "bench", "report", str(folder), "--out", str(out)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a results folder (a run or a matrix)")
    parser.add_argument("--runs", type=int, default=3, help="renders (and floors) to take the median of")
    args = parser.parse_args(argv)
    folder = args.folder.resolve()
    print(f"folder {folder}: {len(list((folder / 'history').glob('*.parquet')))} histories")
    print(f"load average before: {load_average()} ({os.cpu_count()} cores)")
    renders: list[tuple[float, float]] = []
    floors: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory(prefix="report-render-") as tmp:
        out = Path(tmp) / "report.html"
        for i in range(args.runs):
            floors.append(timed(floor_cmd(folder)))
            renders.append(timed(render_cmd(folder, out)))
            print(
                f"run {i + 1}: render {renders[-1][0]:.1f} s wall / {renders[-1][1]:.1f} s CPU, "
                f"floor {floors[-1][0]:.1f} s / {floors[-1][1]:.1f} s; load average {load_average()}"
            )
        size = out.stat().st_size
        html = out.read_text(encoding="utf-8")
    wall, cpu = (statistics.median(r[k] for r in renders) for k in (0, 1))
    fwall, fcpu = (statistics.median(f[k] for f in floors) for k in (0, 1))
    print(f"render median: {wall:.2f} s wall, {cpu:.2f} s CPU (min {min(r[0] for r in renders):.2f} s wall)")
    print(f"floor median:  {fwall:.2f} s wall, {fcpu:.2f} s CPU (import + resultsio.read_results)")
    print(f"ratio render / floor: {wall / fwall:.1f}x wall, {cpu / fcpu:.1f}x CPU")
    timelines = html.count('class="tl-data"')
    print(
        f"report.html: {size / 1e6:.2f} MB, plotly.js embedded {html.count('* plotly.js v')} time(s), "
        f"{html.count('Plotly.newPlot(')} figures, {timelines} timelines"
    )
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
