"""A worker's spawn message builds Locust's argument parser once, and a drain loses no value.

Both were bursts in every Locust worker's loop (workloads/harness/cheap_spawn.py, recording.py
``Recorder.drain``). The parser check runs in a child Python: importing Locust monkey-patches the
process (gevent), which a pytest-xdist worker's own threads do not survive.
"""

from __future__ import annotations

import textwrap

from tests.helpers import python_json
from workloads.harness.recording import Recorder, decode_histogram

SCRIPT = textwrap.dedent(
    """
    import inspect, json, sys
    from locust import argument_parser, runners

    builds = []
    real_setup = argument_parser.setup_parser_arguments
    argument_parser.setup_parser_arguments = lambda parser: (builds.append(1), real_setup(parser))[1]
    plain = argument_parser.default_args_dict()
    if sys.argv[1] == "install":
        from workloads.harness import cheap_spawn
        cheap_spawn.install()
        cheap_spawn.install()  # twice is once
    builds.clear()
    # what WorkerRunner.handle_message does with a spawn message's options: one call per option
    options = {**plain, "lockbench_case": "c", "lockbench_out": "/x"}
    kept = {k: v for k, v in options.items() if k not in argument_parser.default_args_dict()}
    print(json.dumps({
        "builds": len(builds), "options": len(options), "kept": sorted(kept),
        "same": argument_parser.default_args_dict() == plain,
        "asked_per_option": "argument_parser.default_args_dict()" in inspect.getsource(runners.WorkerRunner.handle_message),
    }))
    """
)


def test_a_spawn_message_builds_locusts_parser_once_and_keeps_the_same_options() -> None:
    before, after = python_json("-c", SCRIPT, "plain"), python_json("-c", SCRIPT, "install")
    # Locust still asks once per option; if it stops, this patch (and this test) can go
    assert before["asked_per_option"]
    assert before["builds"] == before["options"] > 50
    assert after["builds"] == 1 and after["same"]
    assert after["kept"] == before["kept"] == ["lockbench_case", "lockbench_out"]


def test_a_drain_hands_over_every_value_and_starts_empty() -> None:
    rec = Recorder()
    for ms in (5, 50, 500):
        rec.record("hold", ms * 1_000_000)
    first = rec.drain()
    assert first["counts"]["hold"] == 3 and rec.hists["hold"].get_total_count() == 0
    rec.record("hold", 7_000_000)
    second = rec.drain()
    assert second["counts"]["hold"] == 1
    assert decode_histogram(first["hists"]["hold"]).get_total_count() == 3
    # 7 ms in microseconds: the first drain's 5, 50 and 500 ms are gone from the second
    assert decode_histogram(second["hists"]["hold"]).get_min_value() > 6_900
    merged = Recorder()
    merged.absorb({**first, "events": []})
    merged.absorb({**second, "events": []})
    assert merged.hists["hold"].get_total_count() == 4 and merged.totals["hold"] == 4
