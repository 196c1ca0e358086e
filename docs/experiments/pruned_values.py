"""What the search learns from configs the pruner stopped: nothing but "slower" (the rule before
2026-11-27), or their running value as a ranked estimate. Replays the practice spaces and our own
Hopper recordings with a pruner simulated on Pool + ParzenSearch (as sampler_sim.py does): a config
slower than the best complete one by more than PRUNE_AT is stopped, its estimate its recorded time
times log-normal noise of NOISE (a few blocks' median).

    cd docs/experiments && PYTHONPATH=../.. python3 pruned_values.py [--seeds 20] [--budget 100] [--recordings PATH...]

``--recordings``: Kernel Tuner caches (files or folders) instead of the practice spaces and ours.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_sampler import OWN_KERNEL, RECORDINGS, mean_over_spaces, space_for, user_recordings  # noqa: E402
from sampler_sim import recorded_times  # noqa: E402

from tuner.evaluate.replay import load_recording  # noqa: E402
from tuner.search.parzen import ParzenSearch  # noqa: E402
from tuner.search.pool import Pool  # noqa: E402
from tuner.search.sampler import ordered_axis  # noqa: E402

PRUNE_AT = 0.01
NOISE = 0.02
MODES = ("unpruned", "slower", "estimate")


def simulate(space, times, ordered, seed: int, budget: int, mode: str) -> list[float]:
    pool, search = Pool(space, space.valid), ParzenSearch(seed=seed)
    noise = np.random.default_rng(seed + 1000)
    best, values = math.inf, []
    for _ in range(budget):
        row = search.propose(pool, ordered)
        if row is None:
            break
        code = pool.codes[row].copy()
        pool._take(code, +1)
        t = float(times[row])
        obs = pool.observations
        if not math.isfinite(t):
            obs.add(code, None, failed=True)
        elif mode != "unpruned" and t > best * (1 + PRUNE_AT):
            if mode == "slower":
                obs.add(code, None)
            else:  # ranked by its estimate, never the best
                obs.since_best += 1
                obs.measured.append(code)
                obs.values.append(t * math.exp(noise.normal(0, NOISE)))
                obs.weights.append(1.0)
        else:
            obs.add(code, t)
            best = min(best, t)
        values.append(t)
    return values


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--budget", type=int, default=100)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--prune-at", type=float, default=0.01)
    parser.add_argument("--recordings", type=Path, nargs="+", default=None, metavar="PATH")
    args = parser.parse_args()
    global PRUNE_AT
    PRUNE_AT = args.prune_at
    budgets = [b for b in (25, 50, 100, 200) if b <= args.budget]
    table = {m: {b: [] for b in budgets} for m in MODES}
    ours = [(label, None, path) for label, path, _ in OWN_KERNEL] if args.recordings is None else []
    spaces = ours + (RECORDINGS if args.recordings is None else user_recordings(args.recordings, parser))
    for label, study_file, path in spaces:
        recording = load_recording(path)
        space = space_for(study_file, recording)
        times = recorded_times(recording, space)
        optimum = times[np.isfinite(times)].min()
        ordered = [ordered_axis(v) for v in space.axes.values()]
        started = time.perf_counter()
        line = []
        for mode in MODES:
            curves = [np.minimum.accumulate(simulate(space, times, ordered, s, args.budget, mode)) for s in range(args.first_seed, args.first_seed + args.seeds)]
            fr = {b: np.asarray([optimum / c[min(b, len(c)) - 1] for c in curves]) for b in budgets}
            for b in budgets:
                table[mode][b].append(fr[b])
            line.append(f"{mode} " + " ".join(f"{fr[b].mean():.3f}" for b in budgets))
        print(f"{label:24s} " + " | ".join(line) + f"  {time.perf_counter() - started:.0f}s", flush=True)
    practice = slice(len(ours), None)
    for name, part in (("all", slice(None)), ("practice", practice), ("ours", slice(0, len(ours)))):
        if not table["slower"][budgets[0]][part]:
            continue
        diff = {b: [e - s for e, s in zip(table["estimate"][b][part], table["slower"][b][part], strict=True)] for b in budgets}
        print(f"PAIRED estimate - slower, {name:9s}" + "  ".join("{:+.3f}±{:.3f}".format(*mean_over_spaces(diff[b])[:2]) for b in budgets))
    for mode in MODES:
        print(f"MEAN practice {mode:10s} " + "  ".join("{:.3f}±{:.3f}/{:.3f}".format(*mean_over_spaces(table[mode][b][practice])) for b in budgets))


if __name__ == "__main__":
    main()
