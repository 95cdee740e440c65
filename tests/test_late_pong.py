"""A worker whose first clock answer comes late is still named by its host, and still measured.

On a loaded runner a worker's first pong came after the master's 1 s wait (full suite,
2026-12-07, third suite run back to back): the master gave up on it after that one round, and
the worker was named by its Locust id instead of its host (``clock_offsets`` lost ``alpha``).
The check runs in a child Python: importing Locust monkey-patches the process (gevent).
"""

from __future__ import annotations

import textwrap

from tests.helpers import python_json

SCRIPT = textwrap.dedent(
    """
    import json, types
    import gevent
    from workloads.harness import locust_glue as glue

    # per worker: how late its answers to rounds 0 and 1 come, and whether later rounds are on time
    WORKERS = {"late": (0.3, True), "silent": (60.0, True), "never": (60.0, False)}
    sent = {node: [] for node in WORKERS}

    class Runner:
        environment = None  # the case's environment: the pongs below name the same (None)

        def send_message(self, kind, data, client_id):
            sent[client_id].append(data["i"])
            delay, later_on_time = WORKERS[client_id]
            if data["i"] >= 2 and later_on_time:
                delay = 0.0
            msg = types.SimpleNamespace(node_id=client_id, data={"i": data["i"], "t": 0, "host": client_id + "-host", "pid": 7})
            gevent.spawn_later(delay, glue._on_pong, None, msg)

    glue.PONG_WAIT_S = 0.2
    gevent.get_hub().loop.update_now()  # as _on_init does: the loop's "now" is from before the imports
    out = glue._measure_clocks(Runner(), list(WORKERS))
    gevent.sleep(0.5)  # the late worker's late answers arrive
    st = glue.context(None).state
    glue._name_workers(st)
    print(json.dumps({n: {"pings": len(sent[n]), "measured": n in out, "name": glue._worker_name(st, n)} for n in WORKERS}))
    """
)


def test_a_late_first_answer_still_names_and_measures_the_worker() -> None:
    seen = python_json("-c", SCRIPT)
    # rounds 0 and 1 answered after the wait, then on time: named by its host, its clock measured
    assert seen["late"] == {"pings": 24, "measured": True, "name": "late-host"}
    # rounds 0 and 1 never in time, round 2 on time: measured from the rounds it answered
    assert seen["silent"]["measured"] and seen["silent"]["pings"] == 24
    # never in time: given up after three rounds, not all 24
    assert seen["never"]["pings"] == 3 and not seen["never"]["measured"]
