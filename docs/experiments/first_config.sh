#!/usr/bin/env bash
# Issue 32 item 1 on one GPU (about 2 minutes): the 16-config neighbourhood measured by `tuner grid`
# in two separate invocations; does the first config of each invocation repeat like the others?
#   OUT=/tmp/first bash docs/experiments/first_config.sh
# Prints repeatability.py's summary, then per invocation the session warm-up (seconds, steady) and
# the first-measured config's value in both runs.
set -uo pipefail
OUT=${OUT:-.}; mkdir -p "$OUT"
study=docs/experiments/patch_embed_neighbourhood.toml
export PYTHONUNBUFFERED=1
for run in a b; do
  python3 -m tuner grid "$study" --storage "sqlite:///$OUT/first_config.db" --study-name "nb_$run" \
    > "$OUT/grid_$run.txt" 2> "$OUT/grid_$run.err" || tail -5 "$OUT/grid_$run.err"
done
url="sqlite:///$OUT/first_config.db"
python3 docs/experiments/repeatability.py "$url" nb_a "$url" nb_b | tee "$OUT/repeatability.txt"
python3 - "$url" <<'PY' | tee -a "$OUT/repeatability.txt"
import sys, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
runs = {r: sorted(optuna.load_study(study_name=f"nb_{r}", storage=sys.argv[1]).get_trials(deepcopy=False),
                  key=lambda t: t.number) for r in "ab"}
value = {r: {tuple(sorted(t.params.items())): t for t in ts if t.value is not None} for r, ts in runs.items()}
for r, ts in runs.items():
    first = next(t for t in ts if t.value is not None)
    other = value["b" if r == "a" else "a"].get(tuple(sorted(first.params.items())))
    a = first.user_attrs
    diff = (first.value / other.value - 1) * 100 if other else float("nan")
    print(f"run {r}: warm-up {a.get('session_warmup_s')} s, steady {a.get('session_steady')}, drift {a.get('session_drift')}; "
          f"first config {first.value:.4f} [{a.get('ratio_lo'):.4f}, {a.get('ratio_hi'):.4f}] vs the other run "
          f"{other.value if other else None}: {diff:+.2f} %")
PY
