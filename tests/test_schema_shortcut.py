"""resultsio's shortcut for a table that passes (issue 42 item 7): the same verdict as pandera, without it.

``table_passes`` runs the schema's own check functions over a case table and says True only
where pandera's validation would pass; anything else goes through pandera, which names the
cells. These tests hold the shortcut to pandera on clean and damaged tables (pandera as the
oracle), hold the one-pass number check to its rules, and show that reading a clean folder
does not import pandera at all. No server: the folders are written the way bench writes them.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pandera.pandas as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resultsio import read_results
from resultsio.schema import NUMBER_CHECKS, NumberCheck, cases_schema, table_passes
from tests.helpers import PROJECT
from tests.test_gate import noisy, write_run

#: cells a damaged table may hold: numbers out of every range, text, blanks, flags, verdicts
CELLS: list[object] = [
    np.nan, -1, 0.5, 1e30, float("inf"), -float("inf"), "fast", "", "VALID", "valid", "invalid", "true",
    "maybe", None, 0, 1e13, 2.0, " 3 ", "nan", "earned", "bogus", True, -1e300, "1e3",
]  # fmt: skip


def _pandera_passes(frame: pd.DataFrame) -> bool:
    try:
        cases_schema().validate(frame, lazy=True)
    except (pa.errors.SchemaErrors, pa.errors.SchemaError):
        return False
    return True


def _spoiled(frame: pd.DataFrame, rng: random.Random) -> pd.DataFrame:
    """``frame`` with one to three random kinds of damage (a cell, a column dropped or emptied, a row repeated...)."""
    frame = frame.copy()
    for _ in range(rng.choice([1, 1, 2, 3])):
        op, column = rng.random(), rng.choice(list(frame.columns))
        if op < 0.65:
            value = rng.choice(CELLS)
            if isinstance(value, str | bool) or value is None or frame[column].dtype.kind not in "fiu":
                frame[column] = frame[column].astype(object)
            elif frame[column].dtype.kind in "iu":
                frame[column] = frame[column].astype(float)
            frame.loc[frame.index[rng.randrange(len(frame))], column] = value
        elif op < 0.72:
            frame = frame.drop(columns=[column])
        elif op < 0.80:
            frame = pd.concat([frame, frame.iloc[:1]])
        elif op < 0.86:
            frame[column] = frame[column].astype("string")
        elif op < 0.92:
            frame["lockstat_x"] = rng.choice([1.0, -1.0, "x", np.nan])
        else:
            frame[column] = np.nan
    return frame


@pytest.fixture(scope="module")
def clean_table(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    run = write_run(
        tmp_path_factory.mktemp("shortcut"),
        "r",
        {"redis.x": {"throughput_acq_s": noisy(1000)}, "redis.y": {"throughput_acq_s": noisy(900)}},
    )
    return pd.read_csv(
        run / "cases.csv", dtype={c: "string" for c in ("case", "impl", "workload", "verdict")}
    )


def test_the_shortcut_passes_a_clean_table_and_never_one_pandera_refuses(clean_table: pd.DataFrame) -> None:
    assert _pandera_passes(clean_table) and table_passes(clean_table)
    rng = random.Random(42)
    seen = {True: 0, False: 0}
    for _ in range(300):
        frame = _spoiled(clean_table, rng)
        oracle = _pandera_passes(frame)
        shortcut = table_passes(frame)
        assert not shortcut or oracle, frame  # a pass by the shortcut is a pass by pandera, always
        if frame.columns.is_unique:  # with repeated column names the shortcut defers to pandera
            assert shortcut == oracle, frame  # and it decides alone wherever it can: no table needlessly slow
        seen[oracle] += 1
    assert seen[True] >= 20 and seen[False] >= 100, seen  # the corpus holds both kinds


@settings(max_examples=200, deadline=None)
@given(
    cells=st.lists(
        st.one_of(
            st.floats(allow_nan=True, allow_infinity=True),
            st.integers(-(10**15), 10**15),
            st.sampled_from(["", " ", "nan", "x", "1e3", " 7 ", "inf"]),
            st.none(),
        ),
        min_size=1,
        max_size=8,
    ),
    check=st.sampled_from(sorted(NUMBER_CHECKS)),
    as_text=st.booleans(),
)
def test_a_number_check_in_one_pass_is_the_and_of_its_rules(cells: list, check: str, as_text: bool) -> None:
    rule: NumberCheck = NUMBER_CHECKS[check]
    column = pd.Series(cells, dtype="string" if as_text else None)
    if not as_text and column.dtype == object:
        column = column.astype(object)
    expected = np.ones(len(column), dtype=bool)
    for _, one in rule.rules():
        result = one(column)
        if result is not True:
            expected &= np.asarray(result, dtype=bool)
    got = rule(column)
    assert np.array_equal(np.ones(len(column), dtype=bool) if got is True else np.asarray(got), expected)


def test_reading_a_clean_folder_imports_no_pandera_and_a_damaged_one_names_the_cell(tmp_path: Path) -> None:
    clean = write_run(tmp_path, "clean", {"redis.x": {"throughput_acq_s": noisy(1000)}})
    probe = (
        "import sys; from resultsio import read_results; r = read_results(sys.argv[1]); "
        "print(len(r.problems), 'pandera' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(clean)], capture_output=True, text=True, cwd=PROJECT
    )
    assert out.stdout.split() == ["0", "False"], out.stderr
    damaged = write_run(tmp_path, "damaged", {"redis.x": {"throughput_acq_s": noisy(1000)}})
    frame = pd.read_csv(damaged / "cases.csv")
    frame.loc[1, "overlapping_holds"] = -3
    frame.to_csv(damaged / "cases.csv", index=False)
    problems = read_results(damaged).problems
    first = problems[0]
    assert first.column == "overlapping_holds" and "is negative in case" in first.what, [
        str(p) for p in problems
    ]


def test_a_damaged_table_s_problems_under_the_doubtful_declarations_are_those_of_the_whole_schema(
    clean_table: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    import resultsio.read as reader
    import resultsio.schema as schema

    rng = random.Random(7)
    frames = [f for f in (_spoiled(clean_table, rng) for _ in range(80)) if not table_passes(f)]
    narrowed = [[str(p) for p in reader._schema_problems(f, "cases.csv")] for f in frames]
    # every declaration in doubt: the whole schema
    monkeypatch.setattr(schema, "doubtful", lambda frame: None)
    whole = [[str(p) for p in reader._schema_problems(f, "cases.csv")] for f in frames]
    assert narrowed == whole
    assert len(frames) >= 40 and sum(1 for p in whole if p) >= 40  # damage of many kinds, each named
