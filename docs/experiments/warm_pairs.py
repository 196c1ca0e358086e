"""Warm start against cold on pairs of recordings, per seed (the protocol of bench_sampler.py's
warm-start table: the source is 100 trials of the default sampler in the same journal storage, the
target 25 trials with --warm-start, the cold run 25 trials on the same seed). Run from any
checkout (PYTHONPATH) to compare two versions on the same seeds: the source studies are the same.

    PYTHONPATH=$PWD python3 docs/experiments/warm_pairs.py [--seeds 10] SOURCE:TARGET ...

SOURCE and TARGET are Kernel Tuner caches in tests/data/kernel_tuner, named without .json.gz,
e.g. convolution_milo_A100:convolution_RTX_Titan.
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from bench_sampler import run_tuner, space_for  # noqa: E402

from tuner.evaluate.replay import load_recording  # noqa: E402

CACHES = ROOT / "tests/data/kernel_tuner"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=int, default=25)
    parser.add_argument("pairs", nargs="+", metavar="SOURCE:TARGET")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for pair in args.pairs:
        source, target = pair.split(":")
        started = time.time()
        rs, rt = load_recording(CACHES / f"{source}.json.gz"), load_recording(CACHES / f"{target}.json.gz")
        ss, st = space_for(None, rs), space_for(None, rt)
        warm, cold = [], []
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory() as tmp:
                url = str(Path(tmp) / "warm.log")
                run_tuner(ss, rs, "tpe", seed, 100, storage=url, study_name="source0")
                values = run_tuner(st, rt, "tpe", seed, args.budget, storage=url, warm_start=["source0"], study_name="target")
            warm.append(rt.optimum() / min(values))
            cold.append(rt.optimum() / min(run_tuner(st, rt, "tpe", seed, args.budget)))
        print(f"{pair}: warm {statistics.mean(warm):.3f} worst {min(warm):.3f} cold {statistics.mean(cold):.3f} "
              f"({time.time() - started:.0f} s)\n  warm {[round(w, 3) for w in warm]}\n  cold {[round(c, 3) for c in cold]}", flush=True)


if __name__ == "__main__":
    main()
