"""Does a prior on where along each axis good configs sit, learnt on other kernels, pick better start configs?

For each recording, leave its kernel family out; on the others, each axis level is reduced to a
feature that means the same in every kernel: a two-level axis's level (0 / 1), or an ordered numeric
axis's position among its levels in quarters (first quarter ... last). A feature's lift is its share
among each recording's best 5 % of configs over its share among all of them (each recording counts
once). The held-out space's start-up draws 10 configs without repeats, with probability proportional
to the product of its features' lifts to the power ``beta`` (0: uniform, the default search's start),
and the best of the 10 is scored as a fraction of the optimum, averaged over 400 draws.

    PYTHONPATH=$PWD python3 docs/experiments/position_prior.py RECORDING... [--beta 0 0.5 1 2]

(2026-12-02, results_sampler.md: no gain.)
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from tuner.evaluate.replay import load_recording

QUARTERS = 4
TOP_SHARE = 0.05
STARTUP = 10
DRAWS = 400


def family(path: Path) -> str:
    """A kernel's name without its GPU: benchmark_hub's FAMILY__GPU, Kernel Tuner's KERNEL_GPU, our grids."""
    name = path.name.split(".")[0]
    if "__" in name:
        return name.split("__")[0]
    for ours in ("patch_embed", "fc1", "fc2"):
        if name.startswith(ours):
            return "ours"
    return name.split("_")[0]


def features(path: Path) -> tuple[list[list[tuple[str, int]]], np.ndarray]:
    """Each measured config's features (see the module docstring) and its time."""
    recording = load_recording(path)
    axes = [a for a, values in recording.axes.items() if len(values) > 1]
    rows, ms = [], []
    for key, record in recording.records.items():
        if record.status != "ok" or record.ms is None:
            continue
        config = dict(zip(recording.axes, key, strict=True))
        row = []
        for axis in axes:
            values = recording.axes[axis]
            index = values.index(config[axis])
            if len(values) == 2:
                row.append(("flag", index))
            elif all(isinstance(v, int | float) for v in values):
                row.append(("position", min(QUARTERS - 1, int(index / (len(values) - 1) * QUARTERS - 1e-9)) if index else 0))
        rows.append(row)
        ms.append(record.ms)
    return rows, np.array(ms)


def lifts(tables: list[tuple[list[list[tuple[str, int]]], np.ndarray]]) -> dict[tuple[str, int], float]:
    good: dict[tuple[str, int], float] = {}
    every: dict[tuple[str, int], float] = {}
    for rows, ms in tables:
        top = ms <= np.quantile(ms, TOP_SHARE)
        for row, is_top in zip(rows, top, strict=True):
            for feature in row:
                every[feature] = every.get(feature, 0.0) + 1 / len(rows)
                if is_top:
                    good[feature] = good.get(feature, 0.0) + 1 / top.sum()
    kinds = {kind for kind, _ in every}
    good_total = {k: sum(v for (kind, _), v in good.items() if kind == k) for k in kinds}
    every_total = {k: sum(v for (kind, _), v in every.items() if kind == k) for k in kinds}
    return {f: (good.get(f, 0.0) / good_total[f[0]] + 0.01) / (every[f] / every_total[f[0]] + 0.01) for f in every}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recordings", nargs="+", type=Path)
    parser.add_argument("--beta", nargs="+", type=float, default=[0.0, 0.5, 1.0, 2.0])
    args = parser.parse_args()
    data = {path: features(path) for path in args.recordings}
    rng = np.random.default_rng(0)
    for beta in args.beta:
        fractions = {}
        for path, (rows, ms) in data.items():
            lift = lifts([table for other, table in data.items() if family(other) != family(path)])
            score = np.array([np.prod([lift.get(f, 1.0) for f in row]) for row in rows]) ** beta
            drawn = [ms.min() / ms[rng.choice(len(ms), size=STARTUP, replace=False, p=score / score.sum())].min()
                     for _ in range(DRAWS)]
            fractions[path.name.split(".")[0]] = float(np.mean(drawn))
        print(f"beta {beta}: mean {np.mean(list(fractions.values())):.3f}  "
              + "  ".join(f"{name} {value:.3f}" for name, value in fractions.items()))


if __name__ == "__main__":
    main()
