"""Several cases in one Locust process: an Environment and a runner per case, one gevent loop.

Why: a matrix group ran one Locust process per case, so two cores carried 12-54 loops that
each woke for their own few events, and queued behind each other as soon as the machine was
busy (docs/architecture.md, "What makes the loops late"). The same paced flash-sale work as
one process per case and as one process per group of 12 (``benchmarks/group_in_one_process.py``,
load 0.22 at the start, 2026-12-07): at 24 cases, 24 processes saturated both cores with
every loop late 75-80% of the time and 1.42 client CPU-ms an acquisition; 2 processes ran
the same cases at 1.23 cores, loops late under 2%, 0.64 CPU-ms.

Each case is given as the very argv bench would start its own Locust with. It keeps what
its own process gave it: its options, its users (a runner of its own, Locust's own
statistics), its recording, loop-lag window and output folder (``locust_glue.context``).
The harness's listeners are copied into a set of events per case, so what a runner adds
(its request counter, its spawn mark) hears only its own case. The cases start together
(nothing to wait for at a start gate: they share one process) and each ends as its own
process would: at its ``--run-time``, at its stop rule, or when its runner quits. As a
case ends its exit code goes to ``<out>/case-exit.json``, so bench ends that case's part of
the strikes at once, as it did when the case's process exited; its recording is written once
every case has ended (``locust_glue.DEFERRED_OUTPUTS``), so no case's teardown runs inside
another's load.

Who may share (bench decides, ``bench/run/group.py``): cases of one locustfile, each a
single local process (no ``--processes``, master, worker or test hosts), whose workload
never stops or kills the process (crash, a world or session pause: those stop every case
in it). What sharing gives up: a case has no CPU seconds of its own (its totals keep the
process's ``cpu_share`` and ``cases_in_process``); its loop lag is the shared loop's over its
own window.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import gevent
import locust
from locust.argument_parser import get_parser
from locust.env import Environment
from locust.event import EventHook, Events
from locust.log import setup_logging
from locust.util.load_locustfile import load_locustfile

from workloads.harness import locust_glue
from workloads.harness.start_gate import EXIT_FILE

log = logging.getLogger("lockbench.group")


def _own_events() -> Events:
    """Locust's events with every listener registered so far (the harness's, the workload's), apart."""
    events = Events()
    for name, hook in vars(locust.events).items():
        if isinstance(hook, EventHook):
            getattr(events, name)._handlers = list(hook._handlers)
    return events


def _locustfile(argv: list[str]) -> str:
    for flag in ("-f", "--locustfile"):
        if flag in argv:
            return argv[argv.index(flag) + 1]
    raise SystemExit("a grouped case names no locustfile (-f)")


class _Case:
    """One case of the process: its options, environment and runner, and how it ended."""

    def __init__(self, opts: Any, user_classes: dict[str, Any]) -> None:
        self.opts = opts
        if self.opts.processes or self.opts.master or self.opts.worker:
            raise SystemExit(
                "a grouped case runs in one local process (no --processes, --master or --worker)"
            )
        names = self.opts.user_classes or list(user_classes)
        self.env = Environment(
            user_classes=[user_classes[n] for n in names],
            events=_own_events(),
            host=self.opts.host,
            parsed_options=self.opts,
        )
        self.runner = self.env.create_local_runner()
        ctx = locust_glue.context(self.env)
        self.env.events.spawning_complete.add_listener(
            lambda **_: setattr(ctx.state, "t_spawned_ns", time.monotonic_ns())
        )
        self.env.events.init.fire(environment=self.env, runner=self.runner, web_ui=None)
        self.out = Path(self.opts.lockbench_out) if self.opts.lockbench_out else None

    def start(self) -> None:
        """Begin the load (the harness's ``test_start``: reset, probe, stop rule), and its run-time limit."""
        gevent.spawn(self.runner.start, self.opts.num_users or 1, self.opts.spawn_rate or 1)
        if self.opts.run_time:
            gevent.spawn_later(self.opts.run_time, self._time_up)

    def _time_up(self) -> None:
        log.info("%s: --run-time limit reached, stopping", self.opts.lockbench_case)
        self.runner.quit()

    def wait(self) -> int:
        """Until the case's runner has quit; then its quitting event, its exit code and its exit file."""
        self.runner.greenlet.join()
        self.env.events.quitting.fire(environment=self.env, reverse=True)
        self.runner.quit()
        code = self.env.process_exit_code or 0
        log.info("%s: ended (exit code %d)", self.opts.lockbench_case, code)
        if self.out is not None:
            tmp = self.out / f".{EXIT_FILE}.tmp"
            tmp.write_text(json.dumps({"exit": code, "pid": os.getpid()}))
            os.replace(tmp, self.out / EXIT_FILE)
        return code


def run(argvs: list[list[str]]) -> int:
    """Run every case of ``argvs`` (Locust argv without the program) side by side; the worst exit code."""
    files = {_locustfile(argv) for argv in argvs}
    if len(files) != 1:
        raise SystemExit(f"the cases of one process share one locustfile, not {sorted(files)}")
    user_classes, _ = load_locustfile(files.pop())  # imports the workload: its options, its listeners
    parser = get_parser()  # with the workload's options, once for every case
    options = [parser.parse_args(args=argv) for argv in argvs]
    setup_logging(options[0].loglevel, options[0].logfile)
    gevent.get_hub().loop.update_now()  # the run-time timers are set from the loop's "now"
    locust_glue.DEFERRED_OUTPUTS = []
    cases = [_Case(opts, user_classes) for opts in options]
    gevent.get_hub().loop.update_now()
    for case in cases:
        case.start()
    codes = gevent.joinall([gevent.spawn(case.wait) for case in cases], raise_error=True)
    for write in locust_glue.DEFERRED_OUTPUTS:  # every case has ended: nothing runs beside this now
        write()
    return max((g.value or 0) for g in codes)


def main() -> None:
    """``python -m workloads.harness.group_locust SPEC``: SPEC is a JSON file of the cases' argvs (a cold start)."""
    import sys

    argvs = json.loads(Path(sys.argv[1]).read_text())
    sys.exit(run(argvs))


if __name__ == "__main__":
    main()
