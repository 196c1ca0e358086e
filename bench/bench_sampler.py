"""How fast does each sampler reach the winner of a recorded full grid? (replay, no GPU)

    python bench/bench_sampler.py [--seeds 20]

For each recording and sampler: the mean over seeds of (optimum / best found) after a
budget of trials, and the trials needed to reach the optimum and to come within 1% of it.
Ratios are against the recording's own optimum, measured in the same run for every
sampler (valid-only TPE, valid-only random, grid order).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import optuna

from tuner.replay import ReplayEvaluator, load_recording, make_replay_spec
from tuner.runner import Runner, RunSettings
from tuner.space import Space
from tuner.spec import load_spec
from tuner.study_file import load_study

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = [
    ("pnpoly RTX 3090 (Kernel Tuner)", None, ROOT / "tests/data/kernel_tuner/pnpoly_RTX_3090.json.gz", 100),
    ("patch_embed H200 (ours)", ROOT / "studies/patch_embed_sm90a_grid.toml",
     ROOT / "studies/recorded/patch_embed_sm90a_grid_h200.csv", 40),
]


def space_for(study_file, recording):
    if study_file is None:
        return Space(make_replay_spec(recording), {}, recording.axes, list(recording.axes), [])
    cfg = load_study(study_file)
    return Space.from_study(cfg, load_spec(cfg.kernel))


def one_run(space, recording, sampler, seed, budget):
    settings = RunSettings(study_name=f"{sampler}-{seed}", sampler=sampler, trials=budget, seed=seed, pruner=False, progress=False)
    runner = Runner(space, ReplayEvaluator(recording), settings, storage_url="memory")
    runner.run()
    optimum = recording.optimum()
    best, to_opt, to_1pct = float("inf"), None, None
    for t in runner.study.trials:
        if t.value is not None:
            best = min(best, t.value)
        if to_1pct is None and best <= optimum * 1.01:
            to_1pct = t.number + 1
        if to_opt is None and best <= optimum:
            to_opt = t.number + 1
    return optimum / best, to_opt, to_1pct


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    print(f"{'recording':34} {'sampler':7} {'budget':>6} {'best/opt':>8} {'reached opt':>11} {'median to opt':>13} {'median to 1%':>12} {'s':>5}")
    for label, study_file, path, budget in RECORDINGS:
        if not path.is_file():
            print(f"{label}: {path} missing, skipped")
            continue
        recording = load_recording(path)
        space = space_for(study_file, recording)
        baseline = None
        for sampler in ("tpe", "random", "grid"):
            started = time.perf_counter()
            runs = [one_run(space, recording, sampler, seed, budget) for seed in range(args.seeds if sampler != "grid" else 1)]
            ratio = statistics.mean(r[0] for r in runs)
            reached = [r[1] for r in runs if r[1] is not None]
            within = [r[2] for r in runs if r[2] is not None]
            baseline = baseline or ratio
            print(f"{label:34} {sampler:7} {budget:6d} {ratio:8.4f} {len(reached):5d}/{len(runs):<5d} "
                  f"{statistics.median(reached) if reached else '-':>13} {statistics.median(within) if within else '-':>12} "
                  f"{time.perf_counter() - started:5.1f}")


if __name__ == "__main__":
    main()
