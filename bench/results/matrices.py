"""Which safety matrix answers "is it safe?" for the locks of a run (issue 31 item 4).

A default ``bench run`` injects no fault, so it cannot say anything about safety itself; a
``bench matrix`` folder in the same results directory can. This module finds, for each lock
of a run, the newest finished matrix folder that put it through faults: first among matrices
of the same commit and machine class, else the newest of another commit (same machine class),
which the report then shows as older ("from matrix X of commit Y").

The folders are read the way ``bench history`` reads them (bench/history/read.py): run.json
with ``json``, every candidate's cases.parquet in one DuckDB scan (``read_parquet([...],
filename = true, union_by_name = true)``), here only for the impls each matrix holds. Without
DuckDB (an old .venv), pyarrow reads the same column. The report itself (dashboards/) reads the
chosen folders' files; this module only names them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.results.folder import SCHEMA_VERSION
from resultsio import parse_json

#: Folders under a results root that hold no runs (the same list as bench history's).
EXCLUDED = ("baselines", "comparisons", "history")


@dataclass(frozen=True)
class MatrixSource:
    """One matrix folder chosen for some locks, and whether it is of the run's own commit.

    Why a record: the report must say where each safety figure came from (matrix id, date,
    commit), and a matrix of another commit must be shown as older, not as this code's answer.
    """

    path: Path
    run_id: str
    started_at: str
    git_commit: str
    same_commit: bool
    impls: tuple[str, ...]


def _commit(value: object) -> str:
    """A run.json commit without '+dirty': uncommitted edits are still that commit's matrix."""
    return str(value or "").removesuffix("+dirty")


def _meta(path: Path) -> dict | None:
    try:
        # depth-limited (resultsio): a damaged, deeply nested run.json beside the run is skipped, not a crash
        meta = parse_json((path / "run.json").read_bytes())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return meta if isinstance(meta, dict) else None


def _impls_by_folder(folders: list[Path]) -> dict[Path, set[str]]:
    """{folder: impls in its cases.parquet}, all folders in one DuckDB scan (pyarrow file by file without it)."""
    files = [str(f / "cases.parquet") for f in folders]
    found: dict[Path, set[str]] = {f: set() for f in folders}
    by_file = {str(f / "cases.parquet"): f for f in folders}
    try:
        import duckdb
    except ImportError:
        duckdb = None
    if duckdb is not None:
        con = duckdb.connect()
        try:
            rows = con.execute(
                "SELECT DISTINCT filename, impl FROM read_parquet($files, filename = true, union_by_name = true)",
                {"files": files},
            ).fetchall()
            for name, impl in rows:
                if impl is not None and name in by_file:
                    found[by_file[name]].add(str(impl))
            return found
        except duckdb.Error:
            pass  # one damaged file fails the scan: read them one by one below
        finally:
            con.close()
    import pyarrow.parquet as pq

    for folder in folders:
        try:
            table = pq.read_table(folder / "cases.parquet", columns=["impl"])
        except Exception:  # noqa: BLE001 - a damaged matrix is left out, never fatal to a run's report
            continue
        found[folder] = {str(v) for v in table.column("impl").to_pylist() if v is not None}
    return found


def find_matrices(results_dir: Path, impls: list[str], commit: str, machine_class: str) -> list[MatrixSource]:
    """The matrix folders that answer for ``impls``, each lock from the newest matrix that has it.

    Same commit first, then other commits; only matrices of ``machine_class`` whose run.json says
    they finished (``complete`` or ``complete-with-failures``). Returns [] when none holds any of
    ``impls`` (the report then says "not tested" and names ``bench matrix``).
    """
    root = Path(results_dir)
    if not root.is_dir():
        return []
    candidates: list[tuple[bool, str, Path, dict]] = []
    for path in root.iterdir():
        if not path.is_dir() or path.name in EXCLUDED or path.name.startswith("."):
            continue
        if not (path / "cases.parquet").is_file():
            continue
        meta = _meta(path)
        if meta is None or meta.get("kind") != "matrix" or meta.get("schema") != SCHEMA_VERSION:
            continue
        if str(meta.get("status") or "") not in ("complete", "complete-with-failures"):
            continue
        host = meta.get("host") if isinstance(meta.get("host"), dict) else {}
        if str(host.get("machine_class") or "") != machine_class:
            continue
        same = bool(commit) and _commit(meta.get("git_commit")) == _commit(commit)
        candidates.append((same, str(meta.get("started_at") or ""), path, meta))
    if not candidates:
        return []
    # same commit first, newest first within each
    candidates.sort(key=lambda c: (c[0], c[1], c[2].name), reverse=True)
    held = _impls_by_folder([c[2] for c in candidates])
    wanted = list(dict.fromkeys(impls))
    sources: list[MatrixSource] = []
    taken: set[str] = set()
    for same, started, path, meta in candidates:
        mine = tuple(i for i in wanted if i in held.get(path, set()) and i not in taken)
        if not mine:
            continue
        taken.update(mine)
        sources.append(
            MatrixSource(
                path=path,
                run_id=str(meta.get("run_id") or path.name),
                started_at=started,
                git_commit=str(meta.get("git_commit") or ""),
                same_commit=same,
                impls=mine,
            )
        )
    return sources


def safety_sources_json(sources: list[MatrixSource]) -> list[dict[str, object]]:
    """What the report is given: per matrix, its folder, provenance and the locks it answers for."""
    return [
        {
            "path": str(s.path),
            "run_id": s.run_id,
            "started_at": s.started_at,
            "git_commit": s.git_commit,
            "same_commit": s.same_commit,
            "impls": list(s.impls),
        }
        for s in sources
    ]


def sources_for_run(run_dir: Path) -> list[dict[str, object]]:
    """The safety sources for a run folder's report: matrices beside it (its parent folder) for its locks.

    [] for a matrix run itself (its own grid answers), or when run.json names no locks.
    """
    run_dir = Path(run_dir)
    meta = _meta(run_dir)
    if meta is None or meta.get("kind") == "matrix":
        return []
    impls = meta.get("impls") if isinstance(meta.get("impls"), list) else []
    host = meta.get("host") if isinstance(meta.get("host"), dict) else {}
    found = find_matrices(
        run_dir.resolve().parent,
        [str(i) for i in impls],
        str(meta.get("git_commit") or ""),
        str(host.get("machine_class") or ""),
    )
    return safety_sources_json(found)
