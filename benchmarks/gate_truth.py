"""Does ``bench gate`` tell the truth? A/A false alarms and the catch rate of an injected slowdown.

1. A/A: the ``ci`` suite run twice with the same code, ``--pairs`` times; every gate that
   says anything but PASS on an A/A pair is a false alarm (a regression) or a refusal
   (not enough data; none expected with the suite's 5 trials).
2. Slowdown: the ``ci`` suite with ``test.slowed`` (wrapping redis.set-nx-px-lua) in place
   of redis.set-nx-px-lua, and redis.set-nx-px unchanged as a control, so the gate sees
   the same 4 comparisons as in CI. Baseline: ``delay_s`` 0; candidate: ``delay_s`` =
   SLOWDOWN x the baseline's mean time per acquisition (1 / throughput), spent busy
   after every grant, so each acquisition's critical path is SLOWDOWN longer. Run
   ``--pairs`` times: how often the gate says REGRESSION for the slowed impl (and
   whether it ever flags the control). Baseline and candidate runs alternate (A B A B)
   so machine-load drift hits both. The same runs are also gated using only their
   first k trials (k = 3, 4, 5) to show what the trial count buys.

Every run is a real ``bench run`` (servers started and stopped by it). Runtime with the
defaults: about 35 minutes on 2 cores (40 runs). The runs are listed in OUT/runs.json;
``--regate [--rule R ...]`` judges them again under other rules without re-running.
Output: a Markdown summary on stdout and in OUT/gate_truth.md, verdicts in
OUT/gate_truth.json.

``--burners N`` runs N CPU burners (a busy loop each) beside every run, as a busy CI runner
would have them: the load average before and after each run is recorded (runs.json ``loads``)
and summarised. On 2 cores one burner beside the run brings the load average to about 2.

Run: ``.venv/bin/python benchmarks/gate_truth.py [--pairs 10] [--burners 1] [--out results/gate-truth]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gate.compare import run_gate  # noqa: E402
from bench.gate.rules import DEFAULT_RULES  # noqa: E402

#: (load average 1-min before, after) of every run, in order (runs.json ``loads``)
LOADS: list[tuple[float, float]] = []


def _load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def burners(n: int) -> list[subprocess.Popen]:
    """``n`` processes that keep a core busy each until killed (a loaded CI runner)."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def bench_run(out: Path, *args: str) -> Path:
    """One real ``bench run --suite ci ARGS``; returns its results folder."""
    before = _load()
    cmd = [
        sys.executable,
        "-m",
        "bench",
        "run",
        "--suite",
        "ci",
        "--no-report",
        "--results-dir",
        str(out),
        *args,
    ]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1800)
    LOADS.append((before, _load()))
    # exit 1 is a run whose case failed or was undecided: its folder is a result the gate must judge
    if r.returncode not in (0, 1) or not r.stdout.strip():
        raise SystemExit(f"bench run failed ({r.returncode}): {r.stderr.strip().splitlines()[-1:]}")
    return Path(r.stdout.strip().splitlines()[-1])


def first_trials(run: Path, k: int, tmp: Path) -> Path:
    """A copy of ``run`` (run.json, the case tables, each kept case's files) with trials 0..k-1 only.

    The gate refuses a folder whose cases lack their files (``hist/<case>.json``, ``history/...``).
    """
    dest = tmp / f"{run.name}-k{k}"
    if dest.exists():
        return dest
    dest.mkdir(parents=True)
    cases = pd.read_csv(run / "cases.csv")
    cases = cases[cases["trial"] < k]
    cases.to_csv(dest / "cases.csv", index=False)
    if (run / "cases.parquet").exists():
        table = pd.read_parquet(run / "cases.parquet")
        table[table["case"].isin(set(cases["case"]))].to_parquet(dest / "cases.parquet", index=False)
    kept = set(cases["case"])
    for folder in (p for p in run.iterdir() if p.is_dir()):
        (dest / folder.name).mkdir()
        for source in folder.iterdir():  # per-case files are named <case>.<ext>
            # copies, not links: a results folder's files must lie inside it. A merged file (all of an
            # impl's trials) is kept whole: the gate's test compares trials, not the merged figures
            if source.is_file() and (
                source.name.endswith(".merged.json") or any(source.name.startswith(f"{c}.") for c in kept)
            ):
                shutil.copyfile(source, dest / folder.name / source.name)
    meta = json.loads((run / "run.json").read_text())
    meta["cases"] = [str(c) for c in cases["case"]]
    (dest / "run.json").write_text(json.dumps(meta))
    return dest


def gate(base: Path, cand: Path, rules: list[str]) -> dict:
    # the slowdown's candidate differs from its baseline by its lock_params (delay_s) on purpose
    result = run_gate(base, cand, rules, allow_param_diff=["lock_params"])
    flagged = sorted({r.impl for r in result.rows if r.outcome == "regression"})
    changes = {
        f"{r.impl} {r.metric}": r.change
        for r in result.rows
        if r.change is not None and r.metric != "violations"
    }
    return {"verdict": result.verdict, "exit": result.exit_code, "flagged": flagged, "changes": changes}


def mean_throughput(run: Path, impl: str = "test.slowed") -> float:
    cases = pd.read_csv(run / "cases.csv")
    return float(cases.loc[cases["impl"] == impl, "throughput_acq_s"].median())


def measure(args: argparse.Namespace) -> dict:
    """The runs: A/A pairs and slowdown pairs (folder names under OUT/aa and OUT/slow)."""
    runs: dict = {"pairs": args.pairs, "slowdown": args.slowdown, "aa": [], "slow": []}
    if not args.skip_aa:
        for i in range(args.pairs):
            a1, a2 = bench_run(args.out / "aa"), bench_run(args.out / "aa")
            runs["aa"].append([a1.name, a2.name])
            print(f"A/A pair {i + 1}/{args.pairs} done", file=sys.stderr, flush=True)
    if not args.skip_slowdown:
        slow_params = None
        impls = ["--impl", "test.slowed", "--impl", "redis.set-nx-px"]
        for i in range(args.pairs):
            base = bench_run(args.out / "slow", *impls, "--lock-params", '{"delay_s": 0}')
            if slow_params is None:
                delay = args.slowdown / mean_throughput(base)
                slow_params = json.dumps({"delay_s": round(delay, 6), "delay_mode": "busy"})
                runs["delay_s"] = round(delay, 6)
            cand = bench_run(args.out / "slow", *impls, "--lock-params", slow_params)
            runs["slow"].append([base.name, cand.name])
            print(f"slowdown pair {i + 1}/{args.pairs} done", file=sys.stderr, flush=True)
    return runs


def judge(out: Path, runs: dict, rules: list[str]) -> dict:
    """Gate every recorded pair under ``rules``; A/A at full trials, slowdown at 3, 4 and 5."""
    report: dict = {"rules": rules, "slowdown": runs["slowdown"], "delay_s": runs.get("delay_s")}
    report["aa"] = [{"pair": p, **gate(out / "aa" / p[0], out / "aa" / p[1], rules)} for p in runs["aa"]]
    if runs["slow"]:
        pairs = [(out / "slow" / b, out / "slow" / c) for b, c in runs["slow"]]
        by_k: dict[str, list[dict]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for k in (3, 4, 5):
                by_k[str(k)] = [
                    {
                        "pair": [b.name, c.name],
                        **gate(first_trials(b, k, Path(tmp)), first_trials(c, k, Path(tmp)), rules),
                    }
                    for b, c in pairs
                ]
        report["slowdown_by_trials"] = by_k
        for key, impl in (
            ("slowdown_throughput_change", "test.slowed"),
            ("control_throughput_change", "redis.set-nx-px"),
        ):
            report[key] = statistics.median(
                (mean_throughput(c, impl) - mean_throughput(b, impl)) / mean_throughput(b, impl)
                for b, c in pairs
            )
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    parser.add_argument("--slowdown", type=float, default=0.20)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "gate-truth")
    parser.add_argument("--burners", type=int, default=0, help="CPU burners beside every run")
    parser.add_argument("--skip-aa", action="store_true")
    parser.add_argument("--skip-slowdown", action="store_true")
    parser.add_argument(
        "--rule", action="append", default=None, help="gate rules (default: bench's defaults)"
    )
    parser.add_argument(
        "--regate", action="store_true", help="judge the runs recorded in OUT/runs.json again"
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rules = args.rule or list(DEFAULT_RULES)
    started = time.monotonic()
    if args.regate:
        runs = json.loads((args.out / "runs.json").read_text())
    else:
        burning = burners(args.burners)
        try:
            if burning:
                time.sleep(30)  # let the load average (a 1-minute mean) climb to what the burners make
            runs = measure(args)
        finally:
            for proc in burning:
                proc.kill()
        runs["measure_s"] = round(time.monotonic() - started)
        runs["burners"] = args.burners
        runs["loads"] = LOADS
        (args.out / "runs.json").write_text(json.dumps(runs, indent=2))
    report = judge(args.out, runs, rules)
    report["measure_s"] = runs.get("measure_s")
    report["burners"] = runs.get("burners", 0)
    report["loads"] = runs.get("loads", [])
    (args.out / "gate_truth.json").write_text(json.dumps(report, indent=2, default=str))
    summary = summarize(report)
    (args.out / "gate_truth.md").write_text(summary)
    print(summary)
    return 0


def _count(rows: list[dict], verdict: str) -> int:
    return sum(1 for r in rows if r["verdict"] == verdict)


def summarize(report: dict) -> str:
    lines = [f"Rules: {', '.join(report['rules'])} (runs measured in {report.get('measure_s')} s)", ""]
    loads = [x for pair in report.get("loads") or [] for x in pair]
    if loads:
        lines.insert(
            1,
            f"Load average (1 min) before/after each run: {min(loads):.2f} to {max(loads):.2f}, median "
            f"{statistics.median(loads):.2f}, with {report.get('burners', 0)} CPU burner(s) beside the runs.",
        )
    if report["aa"]:
        aa = report["aa"]
        lines.append(
            f"- A/A, ci suite (2 impls x 5 trials x 3 s per run), {len(aa)} pairs: "
            f"{_count(aa, 'REGRESSION')} false alarms (REGRESSION), "
            f"{_count(aa, 'NOT ENOUGH DATA')} not enough data, {_count(aa, 'PASS')} pass."
        )
    if "slowdown_by_trials" in report:
        lines.append(
            f"- Slowdown: +{report['slowdown'] * 100:.0f}% critical path per acquisition (test.slowed, busy "
            f"delay_s={report['delay_s']} after each grant), redis.set-nx-px untouched as a control; median "
            f"throughput change {report['slowdown_throughput_change'] * 100:+.1f}% (slowed), "
            f"{report['control_throughput_change'] * 100:+.1f}% (control):"
        )
        for k, rows in report["slowdown_by_trials"].items():
            caught = sum(1 for r in rows if "test.slowed" in r["flagged"])
            control = sum(1 for r in rows if "redis.set-nx-px" in r["flagged"])
            lines.append(
                f"  - {k} trials per side: slowed impl caught {caught}/{len(rows)}, control flagged "
                f"{control}/{len(rows)} (gate: REGRESSION {_count(rows, 'REGRESSION')}, "
                f"NOT ENOUGH DATA {_count(rows, 'NOT ENOUGH DATA')}, PASS {_count(rows, 'PASS')})"
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
