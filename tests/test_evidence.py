"""The evidence rule, interrupted purchases, the console table and URLs kept off the command line."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from bench.measure import evidence
from bench.run.case import Case, RunSettings
from bench.run.command import summary_table
from bench.run.locust import locust_argv
from workloads.checks.core import check_flash_sale, check_stock, indeterminate_purchases
from workloads.harness.catalog import WORKLOADS
from workloads.harness.recording import HISTORY_COLUMNS, history_frame


def history(*events: tuple) -> pd.DataFrame:
    return history_frame(tuple(e) + (None,) * (len(HISTORY_COLUMNS) - len(e)) for e in events)


def acquires(ok: int, errors: int = 0, timeouts: int = 0) -> pd.DataFrame:
    ev, t = [], 0
    for i in range(ok):
        ev += [("c", i, "acquire", "invoke", "L", t), ("c", i, "acquire", "ok", "L", t + 1)]
        ev += [
            ("c", 10_000 + i, "release", "invoke", "L", t + 2),
            ("c", 10_000 + i, "release", "ok", "L", t + 3),
        ]
        t += 10
    for i in range(errors):
        ev += [("e", i, "acquire", "invoke", "L", t), ("e", i, "acquire", "fail", "L", t + 1, None, None,
                                                        "BackendUnavailable: Connection refused")]  # fmt: skip
        t += 10
    for i in range(timeouts):
        ev += [
            ("w", i, "acquire", "invoke", "L", t),
            ("w", i, "acquire", "fail", "L", t + 1, None, None, "timed out"),
        ]
        t += 10
    return history(*ev)


# the evidence rule ---------------------------------------------------------------------------


def test_enough_acquisitions_keep_a_valid_verdict() -> None:
    row = {"verdict": "valid"}
    evidence.apply(row, acquires(50, errors=10, timeouts=500), fault_injected=False)
    assert row == {"verdict": "valid", "verdict_reason": ""}


def test_server_errors_dominating_make_the_verdict_unknown() -> None:
    row = {"verdict": "valid"}
    evidence.apply(row, acquires(60, errors=17_044), fault_injected=False)
    assert row["verdict"] == "unknown"
    assert row["verdict_reason"].startswith(evidence.NO_EVIDENCE)
    assert "BackendUnavailable" in row["verdict_reason"] and "17,104" in row["verdict_reason"]
    assert evidence.lacking([row]) == [row]


def test_an_injected_server_fault_may_cause_errors() -> None:
    row = {"verdict": "valid"}
    evidence.apply(row, acquires(60, errors=500), fault_injected=True)
    assert row["verdict"] == "valid"


def test_too_few_acquisitions_say_why_and_explain_a_short_duration() -> None:
    row = {"verdict": "valid"}
    evidence.apply(
        row, acquires(evidence.MIN_ACQUISITIONS - 1), fault_injected=False, duration_s=1, spawn_s=1
    )
    assert row["verdict"] == "unknown"
    assert f"at least {evidence.MIN_ACQUISITIONS}" in row["verdict_reason"]
    assert "--duration 3" in row["verdict_reason"]


def test_invalid_stays_invalid_and_incomplete_recordings_are_unknown() -> None:
    row = {"verdict": "invalid"}
    evidence.apply(row, acquires(2, errors=100), fault_injected=False)
    assert row["verdict"] == "invalid"
    row = {"verdict": "valid"}
    evidence.apply(
        row, acquires(100), fault_injected=False, recording_complete=False, recording_problems=["w1 lost"]
    )
    assert row["verdict"] == "unknown" and "w1 lost" in row["verdict_reason"]
    row = {"verdict": "valid"}
    evidence.server_died(row, ["redis-lock"])
    assert row["verdict"] == "unknown" and "redis-lock died" in row["verdict_reason"]


# interrupted purchases -------------------------------------------------------------------------


def _state(initial: int, stock: int, ordered: int, max_qty: int = 3) -> dict:
    item = {"initial": initial, "stock": stock, "orders_units": ordered, "orders_count": ordered}
    return {"items": {"item-0": item}, "max_qty": max_qty, "fencing": {"mode": "off"}}


def _purchases(*finished: bool, qty: int = 2) -> pd.DataFrame:
    ev = []
    for i, done in enumerate(finished):
        ev.append(("c", i, "purchase", "invoke", "flash-sale:item-0", 10 * i, None, qty))
        if done:
            ev.append(("c", i, "purchase", "ok", "flash-sale:item-0", 10 * i + 5, None, qty))
    return history(*ev)


def test_a_purchase_cut_off_after_writing_the_stock_is_indeterminate_not_lost() -> None:
    h = _purchases(True, True, False, qty=2)  # the third wrote the stock, then Locust stopped it
    assert indeterminate_purchases(h) == {"item-0": (1, 2)}
    r = check_stock(_state(100, 94, 4), indeterminate_purchases(h))
    assert r.status == "valid", r.detail
    assert r.counters["indeterminate_purchases"] == 1 and r.counters["lost_updates"] == 0
    assert check_flash_sale(h, _state(100, 94, 4)).status == "valid"


def test_indeterminate_purchases_bound_the_excuse() -> None:
    h = _purchases(True, False, qty=2)
    # 5 taken, 2 ordered, 2 excusable: 1 unit no sale can have taken (blind writes lose
    # decrements, never add them): the harness's fault, so the case decides nothing
    r = check_stock(_state(100, 95, 2), indeterminate_purchases(h))
    assert r.status == "unknown" and r.counters["lost_updates"] == 0
    assert "1 units taken from stock with no order" in r.detail and "harness fault" in r.detail
    # more ordered than taken is two writers on one stock: never excused
    r = check_stock(_state(100, 98, 4), indeterminate_purchases(h))
    assert r.status == "invalid" and r.counters["lost_updates"] == 2
    # without any cut-off purchase, stock taken without an order is a ledger that lost orders
    r = check_stock(_state(100, 94, 4), indeterminate_purchases(_purchases(True, True)))
    assert r.status == "unknown"
    # the ledger read again after the stock says whether sales were still running meanwhile
    late = _state(100, 94, 4)
    late["items"]["item-0"]["orders_count_after"] = 5
    r = check_stock(late, indeterminate_purchases(_purchases(True, True)))
    assert r.status == "unknown" and "orders appended while the final state was read: item-0 +1" in r.detail
    # a real lost update beside a ledger gap is still a failure
    r = check_stock({**_state(100, 94, 4), "items": {"item-0": {"initial": 100, "stock": 94, "orders_units": 4,
                     "orders_count": 2}, "item-1": {"initial": 100, "stock": 98, "orders_units": 4,
                     "orders_count": 2}}}, {})  # fmt: skip
    assert r.status == "invalid" and r.counters["lost_updates"] == 2


def test_old_histories_without_quantities_use_max_qty() -> None:
    h = history(("c", 0, "purchase", "invoke", "flash-sale:item-0", 0))
    assert check_stock(_state(100, 97, 0, max_qty=3), indeterminate_purchases(h)).status == "valid"
    assert check_stock(_state(100, 96, 0, max_qty=3), indeterminate_purchases(h)).status == "unknown"


# the console table -------------------------------------------------------------------------


def test_console_table_fits_80_columns_without_breaking_ids_or_numbers() -> None:
    rows = [
        {"case": "postgres.unique-insert-expiry__long-cs__fenced", "impl": "postgres.unique-insert-expiry",
         "scenario": "long-cs+fenced", "throughput_acq_s": 12345.6, "acquire_p50_us": 1234567.0,
         "acquire_p99_us": 98765432.0, "verdict": "invalid", "data_safe": True, "overlapping_holds": 12,
         "fencing": "enforce", "stale_writes_refused": 3,
         "hold_inflation": 3.14, "generator_bound": True, "verdict_reason": ""},
        {"case": "redis.python-redis-lock__flash-sale", "impl": "redis.python-redis-lock", "scenario": "flash-sale",
         "throughput_acq_s": float("nan"), "acquire_p50_us": float("nan"), "acquire_p99_us": float("nan"),
         "verdict": "unknown", "verdict_reason": "no evidence: 99% of 17,104 acquire attempts failed with server "
         "errors (BackendUnavailable): the lock server was unreachable or failing", "trial": 2},
        {"case": "redis.setnx-del__flash-sale", "impl": "redis.setnx-del", "scenario": "flash-sale",
         "throughput_acq_s": 118.0, "acquire_p50_us": 3120.0, "acquire_p99_us": 45000.0, "verdict": "invalid",
         "data_safe": False, "lost_updates": 7},
    ]  # fmt: skip
    table, notes = summary_table(rows, "lockbench run 20261201T000000Z-abcdef")
    console = Console(width=80, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(table)
    for note in notes:
        console.print(note, markup=False, highlight=False)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    for token in ("postgres.unique-insert-expiry", "redis.python-redis-lock #3", "long-cs+fenced", "12,346",
                  "1.23s", "98.77s", "12,346†", "lock unsafe,", "(fenced):", "INVALID: 7 lost",
                  "redis.setnx-del", "BackendUnavailable"):  # fmt: skip
        assert token in text, (token, text)
    assert "(1) redis.python-redis-lock__flash-sale: no evidence" in text


# URLs never on Locust's command line -----------------------------------------------------------


def test_locust_argv_keeps_urls_with_passwords_in_a_private_file(tmp_path: Path) -> None:
    case = Case(impl="redis.set-nx-px-lua", backend="redis", workload=WORKLOADS["flash-sale"])
    lock_urls = ["redis://admin:hunter2@127.0.0.1:6379/0", "redis://:s3cret@127.0.0.1:6390/0"]
    argv = locust_argv(case, RunSettings(), lock_urls, "redis://u:resourcepw@127.0.0.1:6380/0", tmp_path)
    line = " ".join(argv)
    for secret in ("hunter2", "s3cret", "resourcepw", "redis://"):
        assert secret not in line
    path = Path(argv[argv.index("--lockbench-urls-file") + 1])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {
        "lock_urls": lock_urls,
        "resource_url": "redis://u:resourcepw@127.0.0.1:6380/0",
    }


# live progress -------------------------------------------------------------------------------


def test_progress_line_has_rate_elapsed_and_an_eta_for_the_whole_run() -> None:
    from bench.run.progress import FIRST_GUESS_OVERHEAD_S, LiveProgress

    cases = [
        Case(
            impl=f"redis.i{i}",
            backend="redis",
            workload=WORKLOADS["flash-sale"],
            settings=RunSettings(duration=d),
        )
        for i, d in enumerate((8, 8, 4))
    ]
    progress = LiveProgress(Console(file=open(os.devnull, "w")), cases)  # noqa: SIM115
    progress.case_started(cases[0], 0, 3)
    eta = progress.eta_s()
    assert 20 + 3 * FIRST_GUESS_OVERHEAD_S - 1 < eta <= 20 + 3 * FIRST_GUESS_OVERHEAD_S
    progress.tick({"t": 100.0, "acquisitions": 0})
    progress.tick({"t": 102.0, "acquisitions": 500, "errors": 3})
    text = progress.text(3)
    assert "250 acq/s" in text and "3 errors" in text and "left" in text and "redis.i0 x flash-sale" in text
    progress.case_t0 -= 10  # the first case took 10 s of wall time for 8 s of load: 2 s overhead
    progress.case_started(cases[1], 1, 3)
    assert progress.overheads == [pytest.approx(2, abs=0.5)]
    assert progress.eta_s() == pytest.approx(8 + 2 + 4 + 2, abs=0.5)


def test_eta_counts_a_solo_calibration_by_what_it_took_not_its_longest_window() -> None:
    from bench.run.case import calibration_case
    from bench.run.progress import LiveProgress

    case = Case(
        impl="redis.i", backend="redis", workload=WORKLOADS["flash-sale"], settings=RunSettings(duration=8)
    )
    plan = [calibration_case(case), case, calibration_case(case), case]
    lines = Console(file=io.StringIO(), width=200)
    progress = LiveProgress(lines, plan)
    progress.case_started(plan[0], 0, 4)
    progress.case_t0 -= 1.2  # the solo ended on its acquisitions after 1.2 s of its 3 s window
    progress.case_started(plan[1], 1, 4)
    assert progress.solo_walls == [pytest.approx(1.2, abs=0.3)] and progress.overheads == []
    progress.case_t0 -= 10
    progress.case_started(plan[2], 2, 4)
    assert progress.overheads == [pytest.approx(2, abs=0.5)]
    assert progress.eta_s() == pytest.approx(1.2 + 8 + 2, abs=0.6)
    printed = lines.file.getvalue()
    assert "solo calibration: 1 user, up to 3s or 250 acquisitions" in printed
    assert "redis.i x flash-sale: 8s, 50 users" in printed
