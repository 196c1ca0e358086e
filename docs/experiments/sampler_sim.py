"""Fast replay of the default sampler's proposals (no Optuna storage): Pool + ParzenSearch driven
directly, for trying sampler ideas quickly. The product benchmark is bench/bench_sampler.py.

    python docs/experiments/sampler_sim.py [--seeds 5] [--first-seed 0] [--budget 200] [--only conv]
        [--set NAME=VALUE] [--model MODULE:CLASS] [--ours] [--recordings PATH...] [--reach FRACTION]

``--model`` replaces ParzenSearch by any class with its ``propose(pool, ordered)`` (e.g.
``gp_prototype:Alternate``, run from this folder). The MEAN line is the mean over the spaces ±
its standard error over seeds / the worst seed of any space. ``--paired MODULE:CLASS`` runs that
model too, on the same seeds, and prints its difference to the first (a paired comparison: both
runs agree until the variant first acts, so the error is far smaller than that of two means).
"""
from __future__ import annotations

import argparse
import functools
import importlib
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_sampler import OURS, RECORDINGS, mean_over_spaces, space_for, user_recordings  # noqa: E402

from tuner.search.parzen import ParzenSearch  # noqa: E402
from tuner.search.pool import Pool  # noqa: E402
from tuner.evaluate.replay import load_recording  # noqa: E402
from tuner.search.sampler import ordered_axis  # noqa: E402


def recorded_times(recording, space) -> np.ndarray:
    """Each valid config's recorded time in ms (inf where it failed or was not recorded)."""
    return np.array([(r.ms if (r := recording.lookup(p)) is not None and r.status == "ok" else math.inf)
                     for p in space.valid])


def simulate(pool_factory, times: np.ndarray, ordered, seed: int, budget: int, random: bool = False, knobs=(),
             model: str = "") -> list[float]:
    pool = pool_factory()
    if model:
        module, name = model.split(":")
        search = getattr(importlib.import_module(module), name)(seed=seed)
    else:
        search = ParzenSearch(seed=seed)
    for key, value in knobs:
        setattr(search, key, float(value) if "." in value else int(value))
    rng = np.random.default_rng(seed)
    values = []
    for _ in range(budget):
        row = int(pool.random_untried(1, rng)[0]) if random else search.propose(pool, ordered)
        if row is None:
            break
        code = pool.codes[row]
        pool._take(code, +1)
        t = times[row]
        pool.observations.add(code.copy(), float(t) if math.isfinite(t) else None, failed=not math.isfinite(t))
        values.append(float(t))
    return values


def reach_line(times: np.ndarray, optimum: float, fraction: float, budget: int, curves: list[np.ndarray]) -> str:
    """Configs within ``fraction`` of the optimum, the chance that ``budget`` uniform draws without
    replacement meet one, and the share of the seeds' runs that met one (and that all 5 of 5 would)."""
    near = int((optimum / times >= fraction).sum())
    miss = math.prod((len(times) - near - i) / (len(times) - i) for i in range(min(budget, len(times) - near)))
    met = float(np.mean([optimum / c[min(budget, len(c)) - 1] >= fraction for c in curves]))
    return (f"{'':24s} configs within {fraction:g}: {near} of {len(times)}; random meets one in {budget}: "
            f"{1 - miss:.2f}; seeds that did: {met:.2f} (5 of 5: {met ** 5:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--model", default="", help="MODULE:CLASS proposing rows instead of ParzenSearch")
    parser.add_argument("--budget", type=int, default=200)
    parser.add_argument("--only", default="")
    parser.add_argument("--ours", action="store_true", help="our own recorded Hopper spaces too")
    parser.add_argument("--recordings", type=Path, nargs="+", default=None, metavar="PATH",
                        help="Kernel Tuner caches (files or folders) instead of the practice spaces")
    parser.add_argument("--random", action="store_true")
    parser.add_argument("--set", action="append", default=[], help="NAME=VALUE: a ParzenSearch attribute")
    parser.add_argument("--paired", default="", metavar="MODULE:CLASS", help="a variant run on the same seeds, compared")
    parser.add_argument("--reach", type=float, default=0.0, metavar="FRACTION",
                        help="also print, per space, how many configs are within FRACTION of the optimum, the chance "
                             "that uniform sampling meets one within the budget, and the share of seeds that did")
    args = parser.parse_args()
    budgets = [b for b in (25, 50, 100, 200) if b <= args.budget]
    table: dict[int, list[np.ndarray]] = {b: [] for b in budgets}
    differences: dict[int, list[np.ndarray]] = {b: [] for b in budgets}
    spaces = RECORDINGS if args.recordings is None else user_recordings(args.recordings, parser)
    for label, study_file, path in spaces + (OURS if args.ours else []):
        if args.only not in label:
            continue
        recording = load_recording(path)
        space = space_for(study_file, recording)
        valid = space.valid
        times = recorded_times(recording, space)
        optimum = times[np.isfinite(times)].min()
        ordered = [ordered_axis(v) for v in space.axes.values()]
        started = time.perf_counter()
        models = [args.model, args.paired] if args.paired else [args.model]
        curves: dict[str, list[np.ndarray]] = {m: [] for m in models}
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            for m in models:
                vals = simulate(functools.partial(Pool, space, valid), times, ordered, seed, args.budget, args.random, [kv.split("=", 1) for kv in args.set], m)
                curves[m].append(np.minimum.accumulate(vals))
        lines = {m: [] for m in models}
        for b in budgets:
            fractions = {m: np.asarray([optimum / c[min(b, len(c)) - 1] for c in curves[m]]) for m in models}
            if (label, study_file, path) in spaces:  # the mean is over the practice (or given) spaces
                table[b].append(fractions[args.model])
                if args.paired:
                    differences[b].append(fractions[args.paired] - fractions[args.model])
            for m in models:
                lines[m].append(f"{fractions[m].mean():.3f}/{fractions[m].min():.3f}")
        print(f"{label:24s} " + "  ".join(lines[args.model]) + f"   {time.perf_counter() - started:.1f}s", flush=True)
        if args.reach:
            print(reach_line(times, optimum, args.reach, args.budget, curves[args.model]), flush=True)
        if args.paired:
            print(f"{'  ' + args.paired:24s} " + "  ".join(lines[args.paired]), flush=True)
    if table[budgets[0]]:
        print(f"{'MEAN':24s} " + "  ".join("{:.3f}±{:.3f}/{:.3f}".format(*mean_over_spaces(table[b])) for b in budgets))
    if differences[budgets[0]]:
        print(f"{'PAIRED DIFFERENCE':24s} " + "  ".join("{:+.3f}±{:.3f}".format(*mean_over_spaces(differences[b])[:2]) for b in budgets))


if __name__ == "__main__":
    main()
