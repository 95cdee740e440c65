"""How long ``bench history`` takes over 100 and 1,000 run folders: reading, change points, the page, drawing.

    .venv/bin/python benchmarks/history_scale.py                 # 100 and 1,000 folders in a temp dir
    .venv/bin/python benchmarks/history_scale.py --runs 100 300
    .venv/bin/python benchmarks/history_scale.py --screenshot docs/history-page.png

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
    args = parser.parse_args()
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
