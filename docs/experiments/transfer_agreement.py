"""A warm start's prior weighted by how well it ranks the study's own configs, against the prior
at its fixed fading weight, and against a cold start (issue 30: transfer never below the cold run).

FROZEN: the two variants (``ParzenSearch.weigh_prior_by_agreement``, ``explore_beside_prior``) live
only in commit a91b537 and were not kept (docs/experiments/results_sampler.md, "2026-11-26 (afternoon):
a prior weighted by its agreement"); run this file in a checkout of that commit. On main it stops.

    PYTHONPATH=$PWD python3 docs/experiments/transfer_agreement.py [--seeds 10] [--only NAME ...]

For each pair and seed the source study runs once (the default sampler, 100 trials on Kernel Tuner
caches as in bench_sampler.py's warm-start table, 60 on our patch_embed Hopper grid as in its
--own-kernel rows); the target then runs warm-started with ``ParzenSearch.weigh_prior_by_agreement``
off and on, and cold, on the same seed. Prints the fraction of the optimum at 25 configs and, for our
own kernel, the configs to within 1 % of the optimum (budget 200), per variant: mean, worst, and the
paired difference of the two warm variants with its standard error over seeds.
"""
import argparse
import math
import statistics
import sys
import tempfile
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from bench_sampler import configs_to_optimum, run_tuner, space_for  # noqa: E402

from tuner.evaluate.replay import load_recording  # noqa: E402
from tuner.search.parzen import ParzenSearch  # noqa: E402

CACHES = ROOT / "tests/data/kernel_tuner"
RECORDED = ROOT / "studies/recorded"
#: (name, source, target, source trials, target budget)
PAIRS = [
    ("conv A100->A4000", CACHES / "convolution_milo_A100.json.gz", CACHES / "convolution_milo_A4000.json.gz", 100, 25),
    ("pnpoly 3090->2080Ti", CACHES / "pnpoly_RTX_3090.json.gz", CACHES / "pnpoly_RTX_2080_Ti.json.gz", 100, 25),
    ("conv milo A100->TITAN", CACHES / "convolution_milo_A100.json.gz", CACHES / "convolution_RTX_Titan.json.gz", 100, 25),
    ("conv TITAN->milo A100", CACHES / "convolution_RTX_Titan.json.gz", CACHES / "convolution_milo_A100.json.gz", 100, 25),
    ("patch_embed->FC1", RECORDED / "patch_embed_sm90a_hopper_grid_h200.json", RECORDED / "fc1_sm90a_hopper_grid_h200.json", 60, 200),
    ("patch_embed->FC2", RECORDED / "patch_embed_sm90a_hopper_grid_h200.json", RECORDED / "fc2_sm90a_hopper_grid_h100.json", 60, 200),
]


def main() -> None:
    if not hasattr(ParzenSearch, "weigh_prior_by_agreement"):
        raise SystemExit("frozen: run this in a checkout of commit a91b537 (the variants are not on main)")
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--only", nargs="*", default=[])
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for name, source_path, target_path, source_budget, budget in PAIRS:
        if args.only and name not in args.only:
            continue
        rs, rt = load_recording(source_path), load_recording(target_path)
        ss, st = space_for(None, rs), space_for(None, rt)
        optimum = rt.optimum()
        runs: dict[str, list[list[float]]] = {"fixed": [], "agreement": [], "explore": [], "cold": []}
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory() as tmp:
                url = str(Path(tmp) / "warm.log")
                run_tuner(ss, rs, "tpe", seed, source_budget, storage=url, study_name="source0")
                for variant, on, explore in (("fixed", False, False), ("agreement", True, False), ("explore", True, True)):
                    ParzenSearch.weigh_prior_by_agreement, ParzenSearch.explore_beside_prior = on, explore
                    runs[variant].append(run_tuner(st, rt, "tpe", seed, budget, storage=url, warm_start=["source0"],
                                                   study_name=f"target-{variant}"))
            runs["cold"].append(run_tuner(st, rt, "tpe", seed, budget))
        print(name, flush=True)
        at25 = {v: [optimum / min(values[:25]) for values in r] for v, r in runs.items()}
        for variant, fractions in at25.items():
            line = f"  {variant:9s} @25 mean {statistics.mean(fractions):.3f} worst {min(fractions):.3f}"
            if budget > 25:
                counts = [configs_to_optimum(values, optimum) for values in runs[variant]]
                line += f"  to 1 %: median {statistics.median(counts):g} worst {max(counts):g} " + " ".join(
                    ">" if math.isinf(c) else str(c) for c in counts)
            print(line, flush=True)
        for variant in ("agreement", "explore"):
            diff = [a - b for a, b in zip(at25[variant], at25["fixed"], strict=True)]
            print(f"  {variant} - fixed @25: {statistics.mean(diff):+.3f} ± {statistics.stdev(diff) / math.sqrt(len(diff)):.3f}",
                  flush=True)


if __name__ == "__main__":
    main()
