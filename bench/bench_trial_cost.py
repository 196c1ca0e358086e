"""Does a trial cost more as a study grows? A long replay on SQLite, timed per trial.

    PYTHONPATH=$PWD python3 bench/bench_trial_cost.py [--trials 2000] [--replay CACHE] [--storage URL]

Runs ``tuner run --replay`` (no GPU) into a fresh SQLite file, then reads each trial's
completion time back and prints the mean cost per trial of the first and of the last
``--window`` trials, and their ratio (docs/RELIABILITY.md records it; the target is <= 1.2).
``--profile FILE`` writes a cProfile of the run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REPLAY = ROOT / "tests" / "data" / "kernel_tuner" / "convolution_RTX_Titan.json.gz"  # 4,362 configs


def per_trial_costs(url: str) -> list[float]:
    """Seconds between consecutive trials' completions, in completion order."""
    names = optuna.get_all_study_names(url)
    study = optuna.load_study(study_name=names[0], storage=url)
    done = sorted(t.datetime_complete for t in study.get_trials(deepcopy=False) if t.datetime_complete is not None)
    return [(b - a).total_seconds() for a, b in zip(done, done[1:], strict=False)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--replay", default=str(DEFAULT_REPLAY))
    parser.add_argument("--storage", help="default: a fresh SQLite file in a temporary folder")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", help="write a cProfile of the run here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = args.storage or f"sqlite:///{Path(tmp) / 'bench.db'}"
        python = [sys.executable, *(["-m", "cProfile", "-o", args.profile] if args.profile else [])]
        cmd = [*python, "-m", "tuner", "run", "--replay", args.replay, "--storage", url, "--trials", str(args.trials),
               "--seed", str(args.seed), "--json"]
        run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stderr[-2000:], file=sys.stderr)
            return run.returncode
        costs = per_trial_costs(url)
    w = args.window
    first, last = statistics.mean(costs[:w]), statistics.mean(costs[-w:])
    print(json.dumps({"trials": len(costs) + 1, "first_ms": round(first * 1e3, 2), "last_ms": round(last * 1e3, 2),
                      "ratio": round(last / first, 3), "replay": Path(args.replay).name}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
