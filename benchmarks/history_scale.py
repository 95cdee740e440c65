"""How long ``bench history`` takes over 100 and 1,000 run folders: reading, change points, the page, drawing.

    .venv/bin/python benchmarks/history_scale.py                 # 100 and 1,000 folders in a temp dir
    .venv/bin/python benchmarks/history_scale.py --runs 100 300
    .venv/bin/python benchmarks/history_scale.py --screenshot docs/history-page.png
    .venv/bin/python benchmarks/history_scale.py --copies 1000 --of results/<run-id>   # a real run, 1,000 times

``--copies N --of FOLDER`` (issue 42): N copies of one real run folder (a default ``bench run``:
10 locks, hist/ and history/ files; files hard-linked, so 1,000 copies take no space), each
with its own run id and start time and, unless ``--identical``, its figures moved by the
run-to-run noise measured here and a 10% throughput step for one lock two thirds of the way
(identical copies make every series constant, and Otava skips a constant series: the change
points would cost nothing). It times, each as a fresh process with the page written: the
floor (list the folders and ``json.load`` every run.json), ``bench history`` with no kept
verdicts (every folder checked by the results reader, as before issue 42), and ``bench
history`` again, ``--repeat`` times (the verdicts kept in history/.checked.json), each as a
ratio to the median floor, with the load average before and after each.

Each generated folder is what the ``ci`` suite leaves (2 impls x 5 trials of flash-sale),
written with bench/results/folder.py's writer so the schema is real; throughput carries the
run-to-run noise measured here (5.4%) and a 10% step two thirds of the way. Timings are
wall-clock of this process on whatever else the machine is doing: print ``uptime`` beside
them. "browser" is headless Chromium loading the page and drawing every panel (its own
start-up, measured on a blank page, subtracted); skipped without Chromium.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.history.changes import MEASURED_NOISE_CV  # noqa: E402
from bench.history.command import history_command, page_data  # noqa: E402
from bench.history.read import read_runs  # noqa: E402
from bench.history.series import build_series, order_runs  # noqa: E402
from bench.results.folder import RunFolder, atomic_write_frame  # noqa: E402
from dashboards.history import render_history  # noqa: E402

IMPLS = {"redis.set-nx-px-lua": 430.0, "redis.set-nx-px": 400.0}
TRIALS = 5
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def generate(root: Path, runs: int, seed: int = 1, slowed: str = "redis.set-nx-px") -> None:
    """``runs`` ci-suite-like run folders under ``root``; ``slowed`` gets 10% slower two thirds of the way."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    noise = MEASURED_NOISE_CV["throughput"]
    start = datetime(2026, 1, 1, tzinfo=UTC)
    step_at = runs * 2 // 3
    for i in range(runs):
        when = start + timedelta(hours=i)
        meta = {
            "started_at": when.isoformat(),
            "command": "bench run --suite ci",
            "git_commit": hashlib.sha1(f"commit {i}".encode()).hexdigest(),
            "host": {"machine_class": "x86_64-2cpu-24gib", "cpus": 2},
            "params": {"workload": "flash-sale", "duration_s": 3.0, "users": 10, "processes": 1, "trials": TRIALS,
                       "ttl_s": 10.0, "retry_interval_s": 0.01, "acquire_timeout_s": 5.0, "fencing": "off",
                       "fault": "", "items": 1, "skew": 1.0, "stock": 100000, "max_qty": 3, "cs": "1ms"},
        }  # fmt: skip
        folder = RunFolder(root, meta, run_id=f"{when:%Y%m%dT%H%M%SZ}-{i:06x}")
        drift = rng.normal(1.0, noise)  # the run's own level: what makes runs differ
        rows = []
        for t in range(TRIALS):
            for impl, level in IMPLS.items():
                slow = 0.9 if (i >= step_at and impl == slowed) else 1.0
                tput = level * slow * drift * rng.normal(1.0, 0.02)
                rows.append(
                    {"case": f"{impl}__flash-sale__t{t}", "impl": impl, "backend": "redis", "workload": "flash-sale",
                     "trial": t, "users": 10, "processes": 1, "throughput_acq_s": tput,
                     "acquire_p50_us": 130.0 * rng.lognormal(0, 0.2), "acquire_p99_us": 7e5 * rng.lognormal(0, 0.17),
                     "handoff_p50_us": 170.0 * rng.lognormal(0, 0.12), "hold_inflation": 1.05 * rng.normal(1, 0.03),
                     "overlapping_holds": 0, "witness_violations": 0, "oversold_units": 0, "lost_updates": 0,
                     "verdict": "valid", "scenario": "flash-sale", "fencing": "off", "fault": "",
                     "generator_bound": bool(rng.random() < 0.02)}
                )  # fmt: skip
        frame = pd.DataFrame(rows)
        atomic_write_frame(folder.path / "cases.csv", frame)
        atomic_write_frame(folder.path / "cases.parquet", frame)
        folder.rows = rows
        folder.meta["cases"] = [r["case"] for r in rows]
        folder.finish("complete")
        (folder.path / "report.html").write_text("<html></html>")


def browser_seconds(page: Path) -> float | None:
    """Headless Chromium: load and draw ``page``, minus the same for a blank page; None without Chromium."""
    if not Path(CHROMIUM).exists():
        return None

    def once(url: str) -> float:
        with tempfile.TemporaryDirectory() as profile:
            t0 = time.perf_counter()
            subprocess.run(
                [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                 "--window-size=1400,900", "--dump-dom", url],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600, check=False,
            )  # fmt: skip
            return time.perf_counter() - t0

    return max(0.0, once(page.resolve().as_uri()) - once("about:blank"))


def measure(runs: int, workdir: Path) -> dict[str, float | int | None]:
    root = workdir / f"runs-{runs}"
    t0 = time.perf_counter()
    generate(root, runs)
    made = time.perf_counter() - t0
    t0 = time.perf_counter()
    loaded = read_runs([root])
    read_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    order = order_runs(loaded.runs, workdir)
    series = build_series(loaded, order)
    series_s = time.perf_counter() - t0
    out = root / "history" / "index.html"
    t0 = time.perf_counter()
    settings = {"max_pvalue": 0.001, "min_magnitude": 0.05, "window": 50, "min_runs": 20, "rules": []}
    render_history(page_data(loaded, order, series, out, settings, None, None), out)
    render_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        history_command([root], out=out, say=lambda _: None)
    command_s = time.perf_counter() - t0
    panels = sum(len(s.panels) for s in series)
    changes = [cp.index for s in series for p in s.panels for cp in p.changes if p.metric.key == "throughput"]
    return {
        "runs": runs, "rows": len(loaded.cases), "generate_s": made, "read_s": read_s, "series_s": series_s,
        "render_s": render_s, "command_s": command_s, "page_mb": out.stat().st_size / 1e6, "panels": panels,
        "throughput_changes": len(changes), "browser_s": browser_seconds(out),
    }  # fmt: skip


def copy_run(source: Path, root: Path, count: int, identical: bool = False, seed: int = 1) -> list[Path]:
    """``count`` copies of ``source`` under ``root`` (files hard-linked), each its own run; noisy unless ``identical``."""
    import json

    import pandas as pd

    rng = np.random.default_rng(seed)
    noise = MEASURED_NOISE_CV
    meta = json.loads((source / "run.json").read_text())
    start = datetime(2026, 1, 1, tzinfo=UTC)
    frame = pd.read_parquet(source / "cases.parquet")
    slowed = str(frame["impl"].iloc[0])
    latency = [c for c in frame.columns if c.endswith("_us") and pd.api.types.is_numeric_dtype(frame[c])]
    out = []
    for i in range(count):
        when = start + timedelta(minutes=i)
        target = root / f"{when:%Y%m%dT%H%M%SZ}-{i:06x}"
        for dirpath, _dirs, files in os.walk(source):
            here = target / Path(dirpath).relative_to(source)
            here.mkdir(parents=True, exist_ok=True)
            for name in files:
                os.link(Path(dirpath) / name, here / name)
        out.append(target)
        if identical:
            continue
        for name in ("run.json", "cases.csv", "cases.parquet"):
            (target / name).unlink()  # the links: the source stays as it is
        (target / "run.json").write_text(
            json.dumps({**meta, "run_id": target.name, "started_at": when.isoformat()}, indent=2)
        )
        copy = frame.copy()
        drift = max(0.5, rng.normal(1.0, noise["throughput"]))  # the run's level: grants and rate together
        step = np.where((copy["impl"] == slowed) & (i >= count * 2 // 3), 0.9, 1.0)
        if "acquisitions" in copy:
            copy["acquisitions"] = (
                (copy["acquisitions"] * drift * step).round().astype(copy["acquisitions"].dtype)
            )
        copy["throughput_acq_s"] = copy["throughput_acq_s"] * drift * step
        scale = rng.lognormal(0.0, noise["acquire.p99"], size=len(copy))  # every percentile of a row alike
        for column in latency:
            copy[column] = copy[column] * scale
        if "hold_inflation" in copy:
            copy["hold_inflation"] = copy["hold_inflation"] * rng.normal(
                1.0, noise["hold-inflation"], len(copy)
            )
        atomic_write_frame(target / "cases.csv", copy)
        atomic_write_frame(target / "cases.parquet", copy)
    return out


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _timed(args: list[str]) -> tuple[float, str, str]:
    """Wall seconds of ``args`` as a fresh process, with the load average before and after; skips named."""
    before = _load()
    t0 = time.perf_counter()
    r = subprocess.run(args, capture_output=True, text=True, check=False)
    took = time.perf_counter() - t0
    if r.returncode not in (0, 2):
        raise SystemExit(f"{args[:3]}... failed ({r.returncode}): {r.stderr[-2000:]}")
    skipped = [line for line in r.stderr.splitlines() if line.startswith("bench history: skipped")]
    if skipped:
        print(f"  {len(skipped)} folder(s) skipped, e.g. {skipped[0]}")
    return took, before, _load()


FLOOR = (
    "import json, os, sys\n"
    "root = sys.argv[1]\n"
    "for name in sorted(os.listdir(root)):\n"
    "    path = os.path.join(root, name, 'run.json')\n"
    "    if os.path.isfile(path):\n"
    "        with open(path) as f: json.load(f)\n"
)


def measure_copies(source: Path, count: int, workdir: Path, identical: bool, repeat: int) -> None:
    """Floor, bench history without kept verdicts, and with them, over ``count`` copies of ``source``."""
    from bench.history.checked import CACHE_NAME, RACY_NS

    root = workdir / "results"
    t0 = time.perf_counter()
    copy_run(source, root, count, identical)
    print(f"{count} copies of {source} ({'identical' if identical else 'noisy figures'}) made in "
          f"{time.perf_counter() - t0:.0f} s")  # fmt: skip
    time.sleep(
        RACY_NS / 1e9 + 0.5
    )  # past the window in which a verdict is not kept (hard links: shared ctime)
    python = str(ROOT / ".venv" / "bin" / "python")
    bench = [str(ROOT / ".venv" / "bin" / "bench"), "history", str(root), "--out", str(workdir / "page.html")]
    cache = root / "history" / CACHE_NAME
    rows: list[tuple[str, float, str, str]] = []
    floor_row = "floor: list + json.load every run.json"
    rows.append((floor_row, *_timed([python, "-c", FLOOR, str(root)])))
    cache.unlink(missing_ok=True)
    rows.append(("bench history, no kept verdicts (every folder checked)", *_timed(bench)))
    for _ in range(repeat):  # the floor beside each: the machine's load moves both
        rows.append((floor_row, *_timed([python, "-c", FLOOR, str(root)])))
        rows.append(("bench history, verdicts kept", *_timed(bench)))
    floors = sorted(r[1] for r in rows if r[0] == floor_row)
    floor = floors[len(floors) // 2]
    for name, took, before, after in rows:
        print(f"{name:<58} {took:7.2f} s  {took / floor:7.1f} x floor  load {before} -> {after}")
    page = workdir / "page.html"
    print(f"page: {page.stat().st_size / 1e6:.1f} MB; kept verdicts: {cache.stat().st_size / 1e6:.1f} MB")


def screenshot(path: Path) -> None:
    """A page from generated folders (40 runs), its first 1400x900 screen saved as a PNG."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "results"
        generate(root, 40, seed=3)
        out = root / "history" / "index.html"
        with redirect_stdout(io.StringIO()):
            history_command([root], out=out, check=True, say=lambda _: None)
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory() as profile:
            subprocess.run(
                [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                 f"--user-data-dir={profile}", "--window-size=1400,900", f"--screenshot={path.resolve()}",
                 out.resolve().as_uri()],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=True,
            )  # fmt: skip
    print(f"{path}: {path.stat().st_size:,} bytes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--screenshot", type=Path, help="save a screenshot of a generated page here and stop")
    parser.add_argument("--copies", type=int, help="copies of the run folder --of to read (issue 42)")
    parser.add_argument("--of", type=Path, help="a real run folder (a default bench run: 10 locks)")
    parser.add_argument("--identical", action="store_true", help="copies with the source's own figures")
    parser.add_argument(
        "--repeat", type=int, default=3, help="times the floor and the kept-verdicts run are measured"
    )
    args = parser.parse_args()
    if args.copies:
        if args.of is None or not (args.of / "run.json").is_file():
            parser.error("--copies needs --of <run folder> (one with run.json)")
        with tempfile.TemporaryDirectory() as tmp:
            measure_copies(args.of.resolve(), args.copies, Path(tmp), args.identical, args.repeat)
        return
    if args.screenshot:
        screenshot(args.screenshot)
        return
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")
    with tempfile.TemporaryDirectory() as tmp:
        for runs in args.runs:
            r = measure(runs, Path(tmp))
            browser = f"{r['browser_s']:.1f} s" if r["browser_s"] is not None else "n/a (no Chromium)"
            print(
                f"{r['runs']:>5} folders ({r['rows']} case rows, {r['panels']} panels): read {r['read_s']:.2f} s, "
                f"series + change points {r['series_s']:.2f} s, page {r['render_s']:.2f} s "
                f"({r['page_mb']:.1f} MB), whole command {r['command_s']:.2f} s, browser draw {browser}; "
                f"throughput change points found: {r['throughput_changes']} (generating took {r['generate_s']:.0f} s)"
            )
    print(f"uptime: {subprocess.run(['uptime'], capture_output=True, text=True).stdout.strip()}")


if __name__ == "__main__":
    main()
