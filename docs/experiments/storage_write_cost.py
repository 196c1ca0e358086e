"""What one trial's storage writes cost here: set_user_attr one by one vs. nothing else.

    python docs/experiments/storage_write_cost.py [URL]   (default: a fresh SQLite file in /tmp)
"""

import sys
import tempfile
import time

import optuna

from tuner.store.optuna_private import set_user_attrs

optuna.logging.set_verbosity(optuna.logging.WARNING)


def main() -> None:
    url = sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{tempfile.mkdtemp()}/w.db"
    study = optuna.create_study(storage=url, study_name="writes")
    attrs = {f"attr_{i}": float(i) for i in range(22)}
    costs = {"ask": 0.0, "suggest x14": 0.0, "set_user_attr x22": 0.0, "set_user_attrs (one transaction)": 0.0, "tell": 0.0}
    n = 30
    for _ in range(n):
        t = time.perf_counter()
        trial = study.ask()
        costs["ask"] += time.perf_counter() - t
        t = time.perf_counter()
        for i in range(14):
            trial.suggest_categorical(f"p{i}", [1, 2, 4])
        costs["suggest x14"] += time.perf_counter() - t
        t = time.perf_counter()
        for key, value in attrs.items():
            trial.set_user_attr(key, value)
        costs["set_user_attr x22"] += time.perf_counter() - t
        t = time.perf_counter()
        set_user_attrs(trial, attrs)
        costs["set_user_attrs (one transaction)"] += time.perf_counter() - t
        t = time.perf_counter()
        study.tell(trial, 1.0)
        costs["tell"] += time.perf_counter() - t
    for step, seconds in costs.items():
        print(f"{1000 * seconds / n:8.1f} ms per trial  {step}")


if __name__ == "__main__":
    main()
