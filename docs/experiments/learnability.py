"""How well can a smooth model of a recorded space point at its optimum, given every measurement?

An upper bound on what a surrogate of that form can do in 100 trials: log time is fitted (ridge,
lambda = 1) on *all* the working configs of each space as main effects of the axes (one-hot), as
main effects plus every pairwise interaction, and (where Kernel Tuner's names mark them) as main
effects plus the thread count and the work per thread (the products of the ``block_size_*`` and of
the ``tile_size_*`` axes, and of both, one-hot); the configs are then ranked by the fit. Printed:
the optimum's rank, and the best true fraction of the optimum among the fit's top 5 / 20 / 50 /
100 (a config that failed counts 0).

    python docs/experiments/learnability.py [--recordings PATH ...]
"""
from __future__ import annotations

import argparse
import itertools
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_sampler import RECORDINGS, space_for, user_recordings  # noqa: E402

from parzen_variants import product_levels  # noqa: E402

from tuner.search.pool import Pool  # noqa: E402
from tuner.evaluate.replay import load_recording  # noqa: E402


def one_hot(codes: np.ndarray, levels: list[int], pairs: bool) -> np.ndarray:
    axes = [a for a, n in enumerate(levels) if n > 1]
    columns = [np.eye(levels[a])[codes[:, a]] for a in axes]
    if pairs:
        columns += [np.eye(levels[a] * levels[b])[codes[:, a] * levels[b] + codes[:, b]]
                    for a, b in itertools.combinations(axes, 2)]
    return np.hstack(columns)


def products(pool: Pool) -> list[np.ndarray]:
    """One-hot columns of the product of the ``block_size_*`` axes, of the ``tile_size_*`` axes and of both."""
    columns = []
    for prefixes in (["block_size"], ["tile_size"], ["block_size", "tile_size"]):
        if (derived := product_levels(pool, prefixes)) is not None:
            axes, table, n = derived
            columns.append(np.eye(n)[table[tuple(pool.codes[:, a] for a in axes)]])
    return columns


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--recordings", type=Path, nargs="+", default=None, metavar="PATH")
    args = parser.parse_args()
    spaces = RECORDINGS if args.recordings is None else user_recordings(args.recordings, parser)
    print(f"{'space':32s} {'model':13s} {'rank':>5s}  top5  top20  top50 top100")
    for label, study_file, path in spaces:
        recording = load_recording(path)
        space = space_for(study_file, recording)
        valid = space.valid
        times = np.array([(r.ms if (r := recording.lookup(p)) is not None and r.status == "ok" else math.inf) for p in valid])
        works = np.isfinite(times)
        fraction = times[works].min() / times
        optimum = int(np.argmax(fraction))
        pool = Pool(space, valid)
        codes = pool.codes
        y = np.log(times[works])
        levels = Pool(space, []).levels
        models = {"main": one_hot(codes, levels, False), "pairs": one_hot(codes, levels, True)}
        if derived := products(pool):
            models["main+products"] = np.hstack([models["main"], *derived])
        for name, x in models.items():
            fitted = x[works]
            weights = np.linalg.solve(fitted.T @ fitted + np.eye(x.shape[1]), fitted.T @ (y - y.mean()))
            order = np.argsort(x @ weights, kind="stable")
            rank = int(np.flatnonzero(order == optimum)[0])
            tops = "  ".join(f"{fraction[order[:k]].max():.3f}" for k in (5, 20, 50, 100))
            print(f"{label:32s} {name:13s} {rank:5d}  {tops}", flush=True)


if __name__ == "__main__":
    main()
