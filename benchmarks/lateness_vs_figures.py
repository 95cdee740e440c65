"""How much a late Locust loop moves a matrix case's figures: the evidence behind the bound rule.

A case is generator-bound when one of its Locust processes' loops ran over 2 ms late for more
than 15% of the time (``bench/measure/fidelity.py`` ``LATE_SHARE_LIMIT``). Issue 39 asks for a
2-core machine 1.5 cores busy with at most 5% of a full matrix's cases bound; more lanes make the
machine busier and the loops later. This asks whether the loops' lateness is only a flag or moves
the figures a case reports, from matrix folders already run (no load of its own):

- cases are grouped by impl x scenario x workload (the fenced and unfenced runs, the controls'
  copies, the shards' and the runs' repeats of one cell: the same experiment);
- in each group with at least three cases, the reference is the case whose loop was least late,
  if that is at most ``--ref-limit`` late (a group without a quiet case is left out);
- each case's hold p50, acquire p50 and throughput are taken as ratios to the reference's, and
  the ratios' medians (and the hold's 90th percentile) are printed by band of lateness.

The floor is thus measured in the same data: the band of the least-late cases is 1.00 by
construction, and the other bands say what the lateness added. Flash-sale, lease-expiry and
long-cs cases with more than one buyer only (a crash case's holds are cut short on purpose).

    .venv/bin/python benchmarks/lateness_vs_figures.py MATRIX_FOLDER [MATRIX_FOLDER ...]

A folder is a `bench matrix` run folder (or a merged one); several runs of one plan give the
groups their repeats. Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

WORKLOADS = ("flash-sale", "lease-expiry", "long-cs")
BANDS = (0.0, 0.05, 0.10, 0.15, 0.20, 0.30, 0.50, 1.0)


def cases_of(folders: list[Path]) -> pd.DataFrame:
    """Every case row of the folders, with the folder it came from."""
    frames = []
    for folder in folders:
        table = folder / "cases.parquet"
        if not table.is_file():
            sys.exit(f"lateness_vs_figures: {folder} has no cases.parquet (give bench matrix run folders)")
        frame = pd.read_parquet(table)
        frame["folder"] = folder.name
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def ratios(cases: pd.DataFrame, ref_limit: float) -> pd.DataFrame:
    """Each case's figures over its group's least-late case's (groups without a quiet case left out)."""
    keep = cases["workload"].isin(WORKLOADS) & cases["users"].gt(1) & cases["hold_p50_us"].gt(0)
    rows = cases.loc[keep].copy()
    rows["group"] = rows["impl"] + " | " + rows["matrix_scenario"].astype(str) + " | " + rows["workload"]
    out = []
    for _, group in rows.groupby("group"):
        if len(group) < 3:
            continue
        ref = group.loc[group["loop_lag_late_share"].idxmin()]
        if ref["loop_lag_late_share"] > ref_limit:
            continue
        out.append(
            pd.DataFrame(
                {
                    "late": group["loop_lag_late_share"],
                    "hold_x": group["hold_p50_us"] / ref["hold_p50_us"],
                    "acquire_x": group["acquire_p50_us"] / max(ref["acquire_p50_us"], 1.0),
                    "throughput_x": group["throughput_acq_s"] / max(ref["throughput_acq_s"], 1e-9),
                }
            )
        )
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame(columns=["late"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--ref-limit", type=float, default=0.08, help="latest a group's reference may be")
    args = parser.parse_args()
    cases = cases_of(args.folders)
    table = ratios(cases, args.ref_limit)
    if table.empty:
        sys.exit("lateness_vs_figures: no group of three or more cases with a quiet reference")
    table["band"] = pd.cut(table["late"], BANDS, include_lowest=True)
    summary = table.groupby("band", observed=True).agg(
        cases=("late", "size"),
        hold_x=("hold_x", "median"),
        hold_x_p90=("hold_x", lambda s: s.quantile(0.9)),
        acquire_x=("acquire_x", "median"),
        throughput_x=("throughput_x", "median"),
    )
    print(f"{len(cases)} cases in {len(args.folders)} folders; {len(table)} in groups with a quiet reference")
    print("figures as ratios to the group's least-late case, by share of time a loop ran over 2 ms late:")
    print(summary.round(2).to_string())
    print(
        json.dumps({str(k): {c: round(float(v), 3) for c, v in row.items()} for k, row in summary.iterrows()})
    )


if __name__ == "__main__":
    main()
