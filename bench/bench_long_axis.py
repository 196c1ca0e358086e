"""Storage per trial and time to the first trial for long axes (issue 33, item 9).

    PYTHONPATH=. python bench/bench_long_axis.py [--out DIR]

Two spaces, each replayed for 5 trials into a fresh SQLite file by the real Runner (a fake
evaluator: no GPU): one axis of 10^6 values, and 2,000,000 configs over three axes. Prints,
per space: seconds to the first trial, peak RSS, and the database bytes per trial (the
trials' rows: the file's size after the run minus its size with the study and no trial).
"""

from __future__ import annotations

import argparse
import json
import resource
import sqlite3
import tempfile
import time
from pathlib import Path

from tuner.contract.kernel_spec import KernelSpec
from tuner.evaluate import evaluator
from tuner.measurement.value import Measurement
from tuner.run.runner import Runner, RunSettings
from tuner.search.space import Space

SPACES = {
    "axis_1e6": {"X": list(range(1_000_000))},
    "configs_2e6": {"X": list(range(1000)), "Y": list(range(500)), "Z": [1, 2, 3, 4]},
}


class FlatSpec(KernelSpec):
    name = "flat"
    params = {"X": 0, "Y": 0, "Z": 1}

    def check(self, config, problem):
        return None

    def source_hash(self) -> str:
        return "flat-v1"


class Evaluator(evaluator.Evaluator):
    kind = "replay"

    def evaluate(self, params, config, report):
        return Measurement("ok", ms=1.0 + sum(int(v) for v in params.values()) * 1e-6)


def _trial_bytes(db: Path) -> int:
    """Bytes of the trial tables' rows (params with their distributions, attributes, values)."""
    with sqlite3.connect(db) as conn:
        total = 0
        for table in ("trial_params", "trial_user_attributes", "trial_system_attributes", "trial_values", "trials"):
            cols = [r[1] for r in conn.execute(f"pragma table_info({table})")]
            expr = " + ".join(f"coalesce(length({c}), 0)" for c in cols)
            total += conn.execute(f"select coalesce(sum({expr}), 0) from {table}").fetchone()[0]
        return total


def run(name: str, axes: dict, folder: Path, trials: int = 5) -> dict:
    db = folder / f"{name}.db"
    started = time.monotonic()
    space = Space(FlatSpec(Path(__file__)), {}, axes, list(axes), [])
    settings = RunSettings(study_name=name, trials=trials, sampler="tpe", seed=0, pruner=False, progress=None,
                           started=started)
    runner = Runner(space, Evaluator(), settings, f"sqlite:///{db}")
    summary = runner.run()
    n = len(runner.study.trials)
    return {"space": name, "configs": space.total, "trials": n,
            "first_trial_s": summary.get("first_trial_s"), "wall_s": round(time.monotonic() - started, 2),
            "bytes_per_trial": _trial_bytes(db) // max(n, 1), "db_bytes": db.stat().st_size,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", choices=list(SPACES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, axes in SPACES.items():
            if args.only in (None, name):
                print(json.dumps(run(name, axes, Path(tmp))), flush=True)


if __name__ == "__main__":
    main()
