"""A Locust stop reads no source file (workloads/harness/cheap_stop.py).

Run in a child Python: importing Locust monkey-patches the process (gevent), which a pytest-xdist
worker's own threads do not survive.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent(
    """
    import inspect, json
    from locust import User, constant, runners, task
    from locust.env import Environment
    from workloads.harness import cheap_stop

    class Idle(User):
        wait_time = constant(1)

        @task
        def nothing(self):
            pass

    reads = []
    inspect.getmodule = lambda obj, *_: reads.append(str(obj))

    def stop_a_runner():
        Environment(user_classes=[Idle]).create_local_runner().stop()

    def who_called_me():  # Runner.stop's own words, for its caller
        return runners.inspect.getframeinfo(runners.inspect.stack()[1][0])

    def here():
        return who_called_me()

    stop_a_runner()  # Locust's own inspect first: its stop looks for the source of every frame
    before = len(reads)
    reads.clear()
    cheap_stop.install()
    stop_a_runner()
    caller = here()
    print(json.dumps({"before": before, "after": len(reads), "function": caller.function,
                      "line": caller.lineno, "isclass": runners.inspect.isclass(Idle)}))
    """
)


def test_a_runner_stop_reads_no_source_and_still_names_its_caller() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    # Locust's own stop walked the modules: without that, cheap_stop would have no reason left
    assert seen["before"] > 0, seen
    assert seen["after"] == 0, seen  # installed: no module walked, no source read
    assert seen["function"] == "here" and seen["line"] > 0, seen  # the caller is still named
    assert seen["isclass"] is True  # every other name is the real module's
