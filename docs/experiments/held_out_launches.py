"""Warm against cold with the winner's curse taken out: each config's recorded launches are split in
two halves; the runs search the recording made of one half, and the config each run ends with is
judged by its time in the other half. A search that ends on a config whose recorded time was lucky
gains nothing there, so a difference between warm and cold runs that is only measurement noise of
the recording disappears, and a real one stays.

    PYTHONPATH=$PWD python3 docs/experiments/held_out_launches.py [--seeds 10] SOURCE TARGET

SOURCE and TARGET are Kernel Tuner caches with per-launch times (``times``); the warm run starts from
the whole SOURCE (``--warm-start SOURCE``), both runs use the pruner, 25 trials. Printed: the mean
fraction of the target's optimum (all launches) warm and cold, on the searched half and on the other.
"""
import argparse
import gzip
import json
import math
import statistics
import sys
import tempfile
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
from bench_sampler import space_for  # noqa: E402

from tuner.evaluate.replay import ReplayEvaluator, load_recording  # noqa: E402
from tuner.run.runner import Runner, RunSettings  # noqa: E402


def halves(path: Path, folder: Path) -> tuple[Path, Path]:
    """Two copies of the cache at ``path``: one with each config's even launches, one with its odd ones."""
    data = json.loads(gzip.open(path).read())
    copies = []
    for half in (0, 1):
        cache = {}
        for key, entry in data["cache"].items():
            entry = dict(entry)
            times = entry.get("times")
            if isinstance(times, list) and len(times) >= 2:
                entry["times"] = times[half::2]
                entry["time"] = statistics.fmean(entry["times"])
            cache[key] = entry
        copy = folder / f"{path.name.removesuffix('.json.gz')}_{half}.json"
        copy.write_text(json.dumps({**data, "cache": cache}))
        copies.append(copy)
    return copies[0], copies[1]


def best_config(space, recording, seed: int, budget: int, warm_start: list[str], storage: str) -> dict:
    """The config a run of the tuner on ``recording`` ends with (its fastest measured config)."""
    settings = RunSettings(study_name=f"target-{seed}", sampler="tpe", trials=budget, seed=seed, pruner=True,
                           progress=None, warm_start=warm_start)
    runner = Runner(space, ReplayEvaluator(recording), settings, storage_url=storage)
    runner.run()
    measured = [t for t in runner.study.trials if t.state.is_finished() and t.user_attrs.get("status") == "ok"]
    return min(measured, key=lambda t: recording.lookup(t.params).ms).params


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=int, default=25)
    parser.add_argument("source", type=Path)
    parser.add_argument("target", type=Path)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    whole = load_recording(args.target)
    folder = Path(tempfile.mkdtemp())
    searched, other = (load_recording(p) for p in halves(args.target, folder))
    space = space_for(None, searched)
    fractions: dict[str, dict[str, list[float]]] = {run: {"searched": [], "other": []} for run in ("warm", "cold")}
    for seed in range(args.seeds):
        for run in ("warm", "cold"):
            with tempfile.TemporaryDirectory() as tmp:
                warm_start = [str(args.source)] if run == "warm" else []
                config = best_config(space, searched, seed, args.budget, warm_start, str(Path(tmp) / "study.log"))
            for half, recording in (("searched", searched), ("other", other)):
                fractions[run][half].append(whole.optimum() / recording.lookup(config).ms)
    for half in ("searched", "other"):
        differences = [w - c for w, c in zip(fractions["warm"][half], fractions["cold"][half], strict=True)]
        error = statistics.stdev(differences) / math.sqrt(len(differences))
        print(f"{half:9s} warm {statistics.fmean(fractions['warm'][half]):.4f} cold {statistics.fmean(fractions['cold'][half]):.4f} "
              f"difference {statistics.fmean(differences):+.4f} ± {error:.4f}", flush=True)


if __name__ == "__main__":
    main()
