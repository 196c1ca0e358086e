"""How far a search gets when it is told the optimum's code path: the default search (cold) run
on only the configs of one path of a recording (every flag at a given value), against the same
search over the whole space, and the uniform draw's expected best in each.

    PYTHONPATH=$PWD python3 docs/experiments/path_oracle.py CACHE read_only=1 use_shmem=1 use_padding=0 [--seeds 20]

A bound on what finding the right path can buy at a budget: if the search within the path is no
better at 25 trials than the search over the whole space, the shortfall at 25 is in the shape
within a path, not in the path.
"""
from __future__ import annotations

import argparse
import functools
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_sampler import space_for  # noqa: E402
from sampler_sim import recorded_times, simulate  # noqa: E402

from tuner.evaluate.replay import load_recording  # noqa: E402
from tuner.search.pool import Pool  # noqa: E402
from tuner.search.sampler import ordered_axis  # noqa: E402

BUDGETS = (25, 50, 100)


def uniform_expected_best(fractions: np.ndarray, draws: int) -> float:
    """The expected best fraction of ``draws`` configs drawn uniformly without replacement."""
    ranked = np.sort(fractions)[::-1]
    n = len(ranked)
    draws = min(draws, n)

    def log_comb(a: int, b: int) -> float:
        return math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1) if 0 <= b <= a else -math.inf

    # the i-th best is the best drawn when it is drawn and none of the i before it are
    chance = np.array([math.exp(log_comb(n - i - 1, draws - 1) - log_comb(n, draws)) for i in range(n)])
    return float(chance @ ranked)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cache", type=Path)
    parser.add_argument("path", nargs="+", metavar="AXIS=VALUE")
    parser.add_argument("--seeds", type=int, default=20)
    args = parser.parse_args()
    recording = load_recording(args.cache)
    space = space_for(None, recording)
    times = recorded_times(recording, space)
    optimum = times[np.isfinite(times)].min()
    fractions = np.where(np.isfinite(times), optimum / times, 0.0)
    wanted = {name: int(value) for name, value in (item.split("=", 1) for item in args.path)}
    inside = np.array([all(config[name] == value for name, value in wanted.items()) for config in space.valid])
    ordered = [ordered_axis(v) for v in space.axes.values()]
    print(f"{args.cache.name}: {len(times)} configs, {int(inside.sum())} on the path {wanted} "
          f"(its best {fractions[inside].max():.3f} of the optimum)")
    for label, mask in (("whole space", np.ones(len(times), dtype=bool)), ("path only", inside)):
        valid = [config for config, keep in zip(space.valid, mask, strict=True) if keep]
        found = []
        for seed in range(args.seeds):
            values = simulate(functools.partial(Pool, space, valid), times[mask], ordered, seed, max(BUDGETS))
            best = np.minimum.accumulate(values)
            found.append([optimum / best[min(b, len(best)) - 1] for b in BUDGETS])
        search = np.mean(found, axis=0)
        uniform = [uniform_expected_best(fractions[mask], b) for b in BUDGETS]
        print(f"  {label:12s} search {' / '.join(f'{v:.3f}' for v in search)}   "
              f"uniform {' / '.join(f'{v:.3f}' for v in uniform)}   (at {' / '.join(map(str, BUDGETS))})")


if __name__ == "__main__":
    main()
