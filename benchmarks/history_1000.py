"""``bench history`` over 1,000 copies of a real 10-lock run, as a ratio to a floor measured in the same run.

    .venv/bin/python benchmarks/history_1000.py                       # newest run under /tmp/q1, or one made now
    .venv/bin/python benchmarks/history_1000.py --of results/<run-id> --copies 1000

Issue 42 item 4: the bar is 1,000 folders in under 10 s with the page, on the first pass (no
kept verdicts) as on later ones. The copies come from benchmarks/history_scale.py's
``copy_run`` (files hard-linked; each copy its own run id, start time and noisy figures, a 10%
step for one lock two thirds of the way, so the change points cost what they would). Each
timing is a fresh process with the page written:

* floor: list the folders and ``json.load`` every run.json (what any history must do);
* ``bench history`` over 10 of the folders (a second floor: start-up, imports, one page);
* ``bench history`` over all, no kept verdicts (the first pass);
* ``bench history`` over all again (verdicts kept in history/.checked.json).

Printed: wall seconds, the ratio to the median floor, CPU seconds (user + sys: the machine's
other work moves them less), and the load average before and after
each (the machine is shared: the ratio is the figure; the lead measures on a quiet machine).
Without ``--of``, the newest folder under /tmp/q1 is used if there is one, else one default
run is made (``scripts/bench run --backend redis --workload flash-sale``, about 100 s).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from history_scale import FLOOR, copy_run  # noqa: E402
from timing import timed  # noqa: E402

from bench.history.checked import CACHE_NAME, RACY_NS  # noqa: E402

PYTHON = str(ROOT / ".venv" / "bin" / "python")
BENCH = [PYTHON, "-m", "bench"]


def source_run(given: Path | None, scratch: Path) -> Path:
    """The run folder to copy: ``--of``, else the newest under /tmp/q1, else a default run made now."""
    if given is not None:
        return given
    q1 = Path("/tmp/q1")
    found = sorted(p for p in q1.iterdir() if (p / "run.json").is_file()) if q1.is_dir() else []
    if found:
        return found[-1]
    made = scratch / "source"
    cmd = [str(ROOT / "scripts" / "bench"), "run", "--backend", "redis", "--workload", "flash-sale"]
    subprocess.run([*cmd, "--results-dir", str(made)], check=True, capture_output=True)
    return sorted(p for p in made.iterdir() if (p / "run.json").is_file())[-1]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--of", type=Path, default=None, help="the run folder to copy (default: see above)")
    parser.add_argument("--copies", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3, help="timings of each kind (the median is printed)")
    parser.add_argument("--keep", type=Path, default=None, help="build the copies here and keep them")
    args = parser.parse_args()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="lockbench-history-1000-"))
    try:
        source = source_run(args.of, scratch)
        root = scratch / "results"
        few = scratch / "few"
        if not root.is_dir():
            t0 = time.perf_counter()
            made = copy_run(source, root, args.copies)
            few.mkdir(parents=True, exist_ok=True)
            for path in made[:10]:
                shutil.copytree(path, few / path.name, copy_function=shutil.copy2)
            print(f"{args.copies} copies of {source} made in {time.perf_counter() - t0:.0f} s")
            time.sleep(RACY_NS / 1e9 + 0.5)  # past the window in which a verdict is not kept
        page = scratch / "page.html"
        cache = root / "history" / CACHE_NAME
        kinds = {
            "floor: list + json.load every run.json": lambda: [PYTHON, "-c", FLOOR, str(root)],
            "bench history over 10 folders": lambda: [*BENCH, "history", str(few), "--out", str(page)],
            f"bench history over {args.copies}, first pass": lambda: [*BENCH, "history", str(root), "--out", str(page)],
            f"bench history over {args.copies}, verdicts kept": lambda: [
                *BENCH, "history", str(root), "--out", str(page)
            ],
        }  # fmt: skip
        rows: dict[str, list[tuple[float, float, str, str]]] = {k: [] for k in kinds}
        for _ in range(args.repeat):
            for name, argv in kinds.items():
                if "first pass" in name:
                    cache.unlink(missing_ok=True)
                rows[name].append(timed(argv(), ok=(0, 2)))
        floor = sorted(t for t, _, _, _ in rows["floor: list + json.load every run.json"])[args.repeat // 2]
        for name, runs in rows.items():
            took, cpu, before, after = sorted(runs)[len(runs) // 2]
            print(
                f"{name:<48} {took:7.2f} s wall  {took / floor:6.1f} x floor  {cpu:6.2f} s CPU  "
                f"load {before} -> {after}"
            )
        print(f"page: {page.stat().st_size / 1e6:.1f} MB")
    finally:
        if args.keep is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
