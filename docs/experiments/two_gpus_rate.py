"""One line per run of two_gpus.sh: trials, sustained rate from the storage, GPU busy per GPU.

    python3 two_gpus_rate.py LABEL STORAGE SMI_CSV EXIT_CODE WALL_S
"""

import csv
import sys
from collections import defaultdict

import optuna

from tuner.store.storage import open_storage


def main() -> None:
    label, storage, smi_csv, code, wall_s = sys.argv[1:6]
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    store = open_storage(storage)
    (summary,) = optuna.get_all_study_summaries(store)
    study = optuna.load_study(study_name=summary.study_name, storage=store)
    trials = study.get_trials(deepcopy=False)
    ended = sorted(t.datetime_complete for t in trials if t.datetime_complete is not None)
    span = (ended[-1] - ended[0]).total_seconds() if len(ended) > 1 else 0.0
    rate = (len(ended) - 1) / span if span > 0 else float("nan")
    workers = len({t.user_attrs.get("runner_pid") for t in trials} - {None})
    configs = len({tuple(sorted(t.params.items())) for t in trials})

    samples: dict[str, list[float]] = defaultdict(list)
    with open(smi_csv) as f:
        for row in csv.reader(f):
            if len(row) >= 2 and row[1].strip().isdigit():
                samples[row[0].strip()].append(float(row[1]))
    busy = " ".join(f"gpu{g} {100 * sum(u >= 50 for u in s) / len(s):.0f}%" for g, s in sorted(samples.items()))
    print(f"{label}: exit {code}, {len(trials)} trials ({len(ended)} ended, {configs} configs) by {workers} runner(s), "
          f"{rate:.2f} trials/s sustained, wall {wall_s} s, busy {busy}")


if __name__ == "__main__":
    main()
