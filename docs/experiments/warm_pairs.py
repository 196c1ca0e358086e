"""Warm start against cold on pairs of recordings, per seed (the protocol of bench_sampler.py's
warm-start table: the source is 100 trials of the default sampler in the same journal storage, the
target 25 trials with --warm-start, the cold run 25 trials on the same seed). Run from any
checkout (PYTHONPATH) to compare two versions on the same seeds: the source studies are the same.

    PYTHONPATH=$PWD python3 docs/experiments/warm_pairs.py [--seeds 10] [--first-seed 0] [--pruner] [--search MODULE:CLASS] SOURCE:TARGET ...
    PYTHONPATH=$PWD python3 docs/experiments/warm_pairs.py --pruner --seeds 5 --permutations A,B,C D,E ...

``--whole-source`` warm-starts from the source recording itself (every config it holds, as a user
with a Kernel Tuner cache of another GPU passes it to ``--warm-start``) instead of 100 trials of it.

``--permutations`` takes every ordered pair within each comma-separated group (the same kernel on
several GPUs). With ``--all-others`` each member of a group is a target instead, warm-started from the
whole recordings of all the other members at once (``--warm-start A B C``). The last line sums up: the
mean over the pairs, warm and cold, and the pairs whose warm runs end below their cold runs by more than
two standard errors of the paired difference.

SOURCE and TARGET are Kernel Tuner caches in tests/data/kernel_tuner, named without .json.gz,
e.g. convolution_milo_A100:convolution_RTX_Titan, or paths to caches (our own recordings:
studies/recorded/*.json). With ``--pruner`` every run stops slower configs as a GPU study does; a cache
without per-launch times (our own exports) then replays from a copy with 40 times per config drawn
around its recorded time, as wide as its recorded confidence interval (``with_launch_times``).
"""
import argparse
import itertools
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from bench_sampler import run_tuner, space_for  # noqa: E402

from tuner.evaluate.replay import ReplayEvaluator, load_recording  # noqa: E402

CACHES = ROOT / "tests/data/kernel_tuner"


def cache_path(name: str) -> Path:
    return Path(name) if "/" in name else CACHES / f"{name}.json.gz"


def with_launch_times(path: Path, folder: Path, launches: int = 40) -> Path:
    """``path`` itself when its configs hold per-launch times, else a copy in ``folder`` whose configs
    hold ``launches`` times drawn log-normally around the recorded time, with the spread that makes
    the recorded 95 % interval of the ratio (``ratio_ci``, 0.5 % where there is none) that of their mean."""
    if path.suffix == ".gz":
        return path
    data = json.loads(path.read_text())
    rng = random.Random(0)
    for entry in data["cache"].values():
        if entry.get("times") or not isinstance(entry.get("time"), (int, float)):
            continue
        low, high = entry.get("ratio_ci") or (1 / 1.005, 1.005)
        sigma = max(math.log(high / low), 1e-4) / (2 * 1.96) * math.sqrt(launches)
        entry["times"] = [entry["time"] * math.exp(rng.gauss(0.0, sigma)) for _ in range(launches)]
    copy = folder / path.name
    copy.write_text(json.dumps(data))
    return copy


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=25)
    parser.add_argument("--pruner", action="store_true",
                        help="every run with the pruner on, as a study on a GPU runs (the caches hold per-launch times)")
    parser.add_argument("--ahead", type=int, default=0,
                        help="the target runs propose this many trials beyond the one measured, as a GPU run does")
    parser.add_argument("--search", default="", metavar="MODULE:CLASS",
                        help="a ParzenSearch subclass (e.g. parzen_variants:WarmUniform) for every run, source and cold "
                             "runs too: a change to runs with a prior leaves those as they are")
    parser.add_argument("--whole-source", action="store_true",
                        help="the source is the other GPU's whole recording (--warm-start FILE), not 100 trials of it")
    parser.add_argument("--all-others", action="store_true",
                        help="with --permutations: each GPU of a group is a target, warm-started from the whole "
                             "recordings of all the others at once")
    parser.add_argument("--permutations", action="store_true",
                        help="each argument is a comma-separated group: every ordered pair within it")
    parser.add_argument("pairs", nargs="+", metavar="SOURCE:TARGET")
    args = parser.parse_args()
    if args.permutations and args.all_others:
        args.whole_source = True
        args.pairs = [";".join(m for m in members if m != target) + f":{target}"
                      for members in (group.split(",") for group in args.pairs) for target in members]
    elif args.permutations:
        args.pairs = [f"{a}:{b}" for group in args.pairs for a, b in itertools.permutations(group.split(","), 2)]
    if args.search:
        import importlib

        from tuner.search import sampler

        sys.path.insert(0, str(Path(__file__).parent))
        module, name = args.search.split(":")
        sampler.ParzenSearch = getattr(importlib.import_module(module), name)
    if args.ahead:  # a replayed config takes no time, so nothing would be asked ahead: each takes 20 ms here
        evaluate = ReplayEvaluator.evaluate
        ReplayEvaluator.evaluate = lambda self, *a, **k: (time.sleep(0.02), evaluate(self, *a, **k))[1]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    means, below = [], []
    for pair in args.pairs:
        source, target = pair.split(":")
        started = time.time()
        folder = Path(tempfile.mkdtemp())
        paths = [cache_path(name) for name in (*source.split(";"), target)]  # sources ";"-separated: --all-others
        if args.pruner:
            paths = [with_launch_times(p, folder) for p in paths]
        rs, rt = load_recording(paths[0]), load_recording(paths[-1])
        ss, st = space_for(None, rs), space_for(None, rt)
        warm, cold, reached = [], [], []  # reached: the source study's best, as a fraction of the source's optimum
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            with tempfile.TemporaryDirectory() as tmp:
                url = str(Path(tmp) / "warm.log")
                if args.whole_source:
                    source_names = [str(p) for p in paths[:-1]]
                else:
                    source_names = ["source0"]
                    ran = run_tuner(ss, rs, "tpe", seed, 100, storage=url, study_name=source_names[0], pruner=args.pruner)
                    reached.append(rs.optimum() / min(ran))
                values = run_tuner(st, rt, "tpe", seed, args.budget, storage=url, warm_start=source_names, study_name="target",
                                   pruner=args.pruner, ahead=args.ahead)
            warm.append(rt.optimum() / min(values))
            cold.append(rt.optimum() / min(run_tuner(st, rt, "tpe", seed, args.budget, pruner=args.pruner, ahead=args.ahead)))
        print(f"{pair}: warm {statistics.mean(warm):.3f} worst {min(warm):.3f} cold {statistics.mean(cold):.3f} "
              f"({time.time() - started:.0f} s)"
              + (f" source study {statistics.mean(reached):.3f}" if reached else "") + "\n"
              f"  warm {[round(w, 3) for w in warm]}\n  cold {[round(c, 3) for c in cold]}", flush=True)
        means.append((statistics.mean(warm), statistics.mean(cold)))
        differences = [w - c for w, c in zip(warm, cold, strict=True)]
        error = statistics.stdev(differences) / math.sqrt(len(differences)) if len(differences) > 1 else 0.0
        if statistics.mean(differences) < -2 * error:
            below.append(f"{pair} ({statistics.mean(differences):+.3f} ± {error:.3f})")
    print(f"{len(means)} pairs: warm {statistics.mean(m[0] for m in means):.3f} cold {statistics.mean(m[1] for m in means):.3f}; "
          f"warm below cold by more than 2 standard errors: {len(below)}" + "".join(f"\n  {b}" for b in below))


if __name__ == "__main__":
    main()
