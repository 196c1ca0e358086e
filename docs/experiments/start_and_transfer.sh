#!/usr/bin/env bash
# One GPU call (2026-11-26): time to the first trial on a fresh machine and warm (issue 32 item 3),
# the first config of an invocation against a second one (item 1), transfer across shapes (issue 30),
# and the GPU tests of the host dry run, the Python API and the worker.
#   OUT=/tmp/x bash docs/experiments/start_and_transfer.sh
set -uo pipefail
OUT=${OUT:-.}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TUNER_CACHE_DIR=$(mktemp -d)
first() {  # study, label: a 10-trial run, its first_trial_s and the session warm-up of its first trial
  python3 -m tuner run "$1" --storage "sqlite:///$OUT/start.db" --study-name "$2" --trials 10 --json \
    > "$OUT/$2.json" 2> "$OUT/$2.err" || tail -3 "$OUT/$2.err"
  tail -1 "$OUT/$2.json" | python3 -c "import json,sys; s=json.loads(sys.stdin.read()); print('$2', 'first_trial_s', s['first_trial_s'], 'startup', s.get('startup_s'))"
  python3 - "$OUT/start.db" "$2" <<'PY'
import sys, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
ts = [t for t in optuna.load_study(study_name=sys.argv[2], storage=f"sqlite:///{sys.argv[1]}").trials if "session_warmup_s" in t.user_attrs]
for t in ts[:1]:
    print("  warm-up", {k: t.user_attrs[k] for k in ("session_warmup_s", "session_steady", "session_drift")})
PY
}
nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; date -u
first studies/patch_embed_sm90a.toml pe_fresh        # empty compile cache, a machine just started
first studies/fc1_sm90a.toml fc1_fresh
first studies/patch_embed_sm90a.toml pe_warm1        # compile cache filled
first studies/patch_embed_sm90a.toml pe_warm2
first studies/fc1_sm90a.toml fc1_warm
timeout 120 bash docs/experiments/first_config.sh > "$OUT/first_config.txt" 2>&1; tail -4 "$OUT/first_config.txt"
timeout 240 bash docs/experiments/transfer_h200.sh "$OUT" 1 60 > "$OUT/transfer.txt" 2>&1; tail -12 "$OUT/transfer.txt"
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_host_dry_run.py tests/test_api.py tests/test_gpu.py 2>&1 | tail -8
rm -f "$OUT"/*.db
