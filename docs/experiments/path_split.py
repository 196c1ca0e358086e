"""What a search that splits its budget among code paths would get: one independent search per path
(every flag at one value; the default search, cold, on that path's configs only), its trials dealt
out by a rule, against the default search over the whole space. No path is told: the rules read only
each path's best so far.

    PYTHONPATH=$PWD python3 docs/experiments/path_split.py CACHE [--seeds 10] [--startup 5]

Rules (a budget of 100 in all):
* ``equal``: the paths in turn;
* ``halving``: successive halving, a third of the budget per round shared by the paths still in,
  the better half by its best kept after each round;
* ``greedyN``: N trials on each path, then each trial to the path whose best is highest.

A bound on path bandits built on separate models: where even these rules fall short of the default,
sharing one model of the shapes across paths is worth more than sampling each path apart.
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

BUDGET = 100
REPORTED = (25, 50, 100)


def best_so_far(space, valid, times, ordered, seed: int, startup: int, optimum: float) -> np.ndarray:
    """The fraction of the optimum the default search over ``valid`` holds after each of BUDGET trials."""
    measured = simulate(functools.partial(Pool, space, valid), times, ordered, seed, min(BUDGET, len(valid)),
                        knobs=[("n_startup_trials", str(startup))])
    curve = optimum / np.minimum.accumulate(np.array(measured))
    return np.concatenate([curve, np.full(BUDGET - len(curve), curve[-1])])


def dealt(curves: np.ndarray, order: list[int]) -> np.ndarray:
    """The best over all paths after each trial when the trials go to the paths in ``order``."""
    taken, out = np.zeros(len(curves), dtype=int), []
    for path in order[:BUDGET]:
        taken[path] += 1
        out.append(max(curves[p, taken[p] - 1] for p in range(len(curves)) if taken[p]))
    return np.array(out)


def halving(curves: np.ndarray) -> list[int]:
    order, alive, taken = [], list(range(len(curves))), np.zeros(len(curves), dtype=int)
    while len(order) < BUDGET:
        share = max(1, (BUDGET // 3) // len(alive))
        for path in alive:
            order += [path] * share
            taken[path] += share
        alive = sorted(alive, key=lambda p: -curves[p, min(taken[p], BUDGET) - 1])[: math.ceil(len(alive) / 2)]
    return order


def greedy(curves: np.ndarray, first: int) -> list[int]:
    order, taken = [], np.zeros(len(curves), dtype=int)
    for path in range(len(curves)):
        order += [path] * first
        taken[path] += first
    while len(order) < BUDGET:
        path = int(np.argmax([curves[p, min(taken[p], BUDGET) - 1] for p in range(len(curves))]))
        order.append(path)
        taken[path] += 1
    return order


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cache", type=Path)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--startup", type=int, default=5, help="uniform trials that start each path's search")
    args = parser.parse_args()
    recording = load_recording(args.cache)
    space = space_for(None, recording)
    times = recorded_times(recording, space)
    optimum = times[np.isfinite(times)].min()
    ordered = [ordered_axis(v) for v in space.axes.values()]
    pool = Pool(space, space.valid)
    flags = [pool.axes[axis] for axis in pool.flags]
    paths: dict[tuple, list[int]] = {}
    for row, config in enumerate(space.valid):
        paths.setdefault(tuple(config[f] for f in flags), []).append(row)
    found: dict[str, list[np.ndarray]] = {name: [] for name in ("default", "equal", "halving", "greedy4", "greedy8")}
    for seed in range(args.seeds):
        found["default"].append(best_so_far(space, space.valid, times, ordered, seed, 10, optimum))
        curves = np.array([best_so_far(space, [space.valid[r] for r in rows], times[rows], ordered, seed * 100 + i,
                                       args.startup, optimum) for i, rows in enumerate(paths.values())])
        found["equal"].append(dealt(curves, [i % len(curves) for i in range(BUDGET)]))
        found["halving"].append(dealt(curves, halving(curves)))
        found["greedy4"].append(dealt(curves, greedy(curves, 4)))
        found["greedy8"].append(dealt(curves, greedy(curves, 8)))
    print(f"{args.cache.name}: {len(paths)} code paths over {flags}; mean / worst seed at {' / '.join(map(str, REPORTED))}")
    for name, runs in found.items():
        table = np.array(runs)
        print(f"  {name:8s} " + "  ".join(f"{table[:, b - 1].mean():.3f}/{table[:, b - 1].min():.3f}" for b in REPORTED))


if __name__ == "__main__":
    main()
