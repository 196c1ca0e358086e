"""Where a trial's seconds go on the measuring side: the parent's measuring thread and the worker.

    python docs/experiments/measure_path_profile.py OUT_JSON tuner-run-arguments...

Runs ``tuner run`` in this process with timers wrapped around the steps of the measuring path
(the parent's storage look-ups, compile hand-over, verdicts; the worker's load, check,
warm-up, timed blocks and its wait for each verdict). The worker is the CUDA backend, timed
by this file (TUNER_WORKER_BACKEND=this_file:TimedCudaBackend). Totals per trial go to OUT_JSON.
"""

import atexit
import collections
import functools
import json
import os
import sys
import time

TOTALS: collections.Counter = collections.Counter()
COUNTS: collections.Counter = collections.Counter()


def timed(owner, name: str, label: str) -> None:
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            TOTALS[label] += time.perf_counter() - started
            COUNTS[label] += 1

    setattr(owner, name, wrapper)


def dump(path: str) -> None:
    with open(path, "w") as f:
        json.dump({k: {"s": round(v, 4), "calls": COUNTS[k]} for k, v in TOTALS.items()}, f, indent=1)


def _worker_timers() -> None:
    from tuner.device import timing as measure
    from tuner.device import worker

    timed(worker.Channel, "block", "worker: send block + wait for the verdict")
    timed(worker.CudaBackend, "load", "worker: load module")
    timed(worker.CudaBackend, "check", "worker: check output")
    timed(worker.CudaBackend, "time", "worker: timed launches")
    timed(measure.Measurer, "_warm_up", "worker: warm-up (launches)")
    timed(measure.Measurer, "measure", "worker: whole measurement")


try:
    from tuner.device.worker import CudaBackend
except ImportError:  # no CUDA here: only the parent's side is useful
    CudaBackend = object


class TimedCudaBackend(CudaBackend):
    def __init__(self):
        _worker_timers()
        atexit.register(dump, os.environ["PROFILE_OUT"] + ".worker.json")

    def prepare(self, *args):
        dump(os.environ["PROFILE_OUT"] + ".worker.json")  # a worker killed at the end still leaves its figures
        return super().prepare(*args)

    def unload(self, handle):
        super().unload(handle)
        if COUNTS["worker: whole measurement"] % 20 == 0:
            dump(os.environ["PROFILE_OUT"] + ".worker.json")


if __name__ == "__main__":
    out = sys.argv[1]
    os.environ["PROFILE_OUT"] = out
    os.environ["TUNER_WORKER_BACKEND"] = f"{os.path.abspath(__file__)}:TimedCudaBackend"
    from tuner.cli import commands as cli
    from tuner.compile import nvrtc as compile
    from tuner.run import objective
    from tuner.run import pipeline
    from tuner.device import supervisor

    timed(objective.Objective, "_stored", "parent: stored result look-up")
    timed(objective.Objective, "_await_twin", "parent: twin look-up")
    timed(compile.CompilePool, "result", "parent: compile hand-over")
    timed(supervisor.Supervisor, "_receive", "parent: waiting for the worker")
    timed(objective.Objective, "measure", "parent: measuring thread per trial")
    timed(pipeline.Pipeline, "_ask", "parent main: ask (sampler + storage)")
    timed(pipeline.Pipeline, "_record", "parent main: record + tell")
    original_reporter = objective.Objective._reporter

    def reporter(self, trial):
        report = original_reporter(self, trial)

        def timed_report(*args):
            started = time.perf_counter()
            try:
                return report(*args)
            finally:
                TOTALS["parent: verdict (report + prune decision)"] += time.perf_counter() - started
                COUNTS["parent: verdict (report + prune decision)"] += 1

        return timed_report

    objective.Objective._reporter = reporter
    sys.argv = ["tuner", "run", *sys.argv[2:]]
    try:
        code = cli.main()
    finally:
        dump(out + ".parent.json")
    sys.exit(code)
