"""``bench report`` of a matrix folder, as a ratio to a floor measured in the same run, with where its time goes.

    .venv/bin/python benchmarks/matrix_report.py results/<matrix-run-id>
    .venv/bin/python benchmarks/matrix_report.py results/<matrix-run-id> --repeat 5

Issue 42 item 5: a standard full matrix's report in at most 5 s. Each timing is a fresh
process, so imports count as a user's wait does:

* floor: read the folder's tables (run.json, cases.parquet and every history/*.parquet the
  over-time chart reads), the least a report drawing the same figures must do;
* ``bench report FOLDER --out ...``: the whole command, page written.

Printed: the median of ``--repeat`` timings of each, wall and CPU (user + sys, which the
machine's other work moves less), the ratio to the floor, and the load average before and
after; counts that do not move with the load (the page's size, its figures, the over-time
chart's lines drawn and kept behind a click); then, in one process, the CPU seconds of each
part of the page (dashboards/page.py's sections and figures). The machine is shared: the
ratio is the figure, the lead measures on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PYTHON = str(ROOT / ".venv" / "bin" / "python")

from timing import timed  # noqa: E402 - beside this file (benchmarks/timing.py)

FLOOR = (
    "import sys, pandas as pd, pyarrow.parquet as pq, json\n"
    "from pathlib import Path\n"
    "folder = Path(sys.argv[1])\n"
    "json.loads((folder / 'run.json').read_text())\n"
    "pd.read_parquet(folder / 'cases.parquet')\n"
    "for f in sorted((folder / 'history').glob('*.parquet')):\n"
    "    pq.read_table(f, columns=['client', 'seq', 'op', 'type', 'lock', 't_ns']).to_pandas()\n"
)


def over_time_lines(page: str) -> tuple[int, int]:
    """(lines drawn, lines behind a click) of the page's over-time chart; a line is its p50, p99 and acq/s traces."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", page):
        data, end = decoder.raw_decode(page, match.end())
        layout, _ = decoder.raw_decode(page, page.index("{", end))
        if "seconds since the case" in json.dumps(layout):
            p50 = [t for t in data if not str(t.get("name", "")).endswith((" p99", " acq/s"))]
            hidden = sum(1 for t in p50 if t.get("visible") == "legendonly")
            return len(p50) - hidden, hidden
    return 0, 0


def parts(folder: Path) -> list[tuple[str, float]]:
    """CPU seconds of each section and figure of the page, in one process (the page is built, not written)."""
    import dashboards.page as page
    from dashboards.load import load_run

    spent: dict[str, float] = {}

    def timing(name: str, fn):  # type: ignore[no-untyped-def]
        def wrapped(*args, **kwargs):  # type: ignore[no-untyped-def]
            t = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.process_time() - t

        return wrapped

    for name in dir(page):
        if name.endswith(("_section", "_figure", "_table")) and callable(getattr(page, name)):
            setattr(page, name, timing(name, getattr(page, name)))
    t = time.process_time()
    run = load_run(folder)
    spent["load_run (resultsio checks)"] = time.process_time() - t
    t = time.process_time()
    page.build_page([run], None)
    spent["build_page, all of it"] = time.process_time() - t
    return sorted(spent.items(), key=lambda kv: -kv[1])


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "folder", type=Path, help="a matrix run folder (bench matrix, or bench merge of shards)"
    )
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = args.folder
    with tempfile.TemporaryDirectory(prefix="lockbench-matrix-report-") as scratch:
        out = Path(scratch) / "report.html"
        kinds = {
            "floor: run.json, cases.parquet, every history file": [PYTHON, "-c", FLOOR, str(folder)],
            "bench report": [PYTHON, "-m", "bench", "report", str(folder), "--out", str(out)],
        }
        rows: dict[str, list[tuple[float, float, str, str]]] = {k: [] for k in kinds}
        for _ in range(args.repeat):
            for name, argv in kinds.items():
                rows[name].append(timed(argv))
        floor_wall, floor_cpu = (
            sorted(r[i] for r in rows[next(iter(kinds))])[args.repeat // 2] for i in (0, 1)
        )
        cases = sum(1 for _ in (folder / "history").glob("*.parquet"))
        page = out.read_text(encoding="utf-8")
        drawn, hidden = over_time_lines(page)
        print(
            f"{folder} ({cases} history files); page {out.stat().st_size / 1e6:.1f} MB, "
            f"{page.count('Plotly.newPlot(')} figures; over-time chart: {drawn} lines drawn, "
            f"{hidden} behind a click"
        )
        for name, runs in rows.items():
            wall, cpu, before, after = sorted(runs)[len(runs) // 2]
            print(
                f"{name:<52} {wall:6.2f} s wall ({wall / floor_wall:4.1f} x floor)  {cpu:6.2f} s CPU "
                f"({cpu / floor_cpu:4.1f} x floor)  load {before} -> {after}"
            )
    print("CPU seconds by part of the page (one process):")
    for name, seconds in parts(folder):
        print(f"  {name:<40} {seconds:6.2f}")


if __name__ == "__main__":
    main()
