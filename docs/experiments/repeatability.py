"""How well two measurements of the same configs agree (two `tuner grid` invocations).

    python docs/experiments/repeatability.py URL_A STUDY_A URL_B STUDY_B

Prints per-config differences of the trial value (the paired ratio), the Spearman rank
correlation, whether the 95 % intervals overlap, each run's winner, and the same for the
configs within 3 % of the winner.
"""

import sys

import optuna
import pandas as pd

optuna.logging.set_verbosity(optuna.logging.WARNING)


def frame(url: str, name: str) -> pd.DataFrame:
    rows = []
    for t in optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False):
        if t.value is not None:
            rows.append({"config": tuple(sorted(t.params.items())), "value": t.value,
                         "lo": t.user_attrs.get("ratio_lo"), "hi": t.user_attrs.get("ratio_hi")})
    return pd.DataFrame(rows).set_index("config")


def summarise(both: pd.DataFrame, label: str) -> None:
    diff = (both.value_a - both.value_b).abs() / both[["value_a", "value_b"]].mean(axis=1) * 100
    overlap = ((both.lo_a <= both.hi_b) & (both.lo_b <= both.hi_a)).sum()
    rank = both.value_a.rank().corr(both.value_b.rank())
    print(f"{label:28} n={len(both):3d}  diff median {diff.median():.3f} %  max {diff.max():.3f} %  "
          f"Spearman {rank:.3f}  intervals overlapping {overlap}/{len(both)}")


if __name__ == "__main__":
    a, b = frame(sys.argv[1], sys.argv[2]), frame(sys.argv[3], sys.argv[4])
    both = a.add_suffix("_a").join(b.add_suffix("_b"), how="inner")
    summarise(both, "all configs")
    near = both[both.value_a <= both.value_a.min() * 1.03]
    summarise(near, "within 3 % of the winner")
    print("winner a:", dict(both.value_a.idxmin()), "\nwinner b:", dict(both.value_b.idxmin()))
