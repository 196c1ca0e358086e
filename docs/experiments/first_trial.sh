#!/usr/bin/env bash
# Time to the first trial of a warm run (compile cache kept), through the `tuner` entry (the
# worker spawned before the command line's imports) and, alternately, through the command line
# module itself (the worker spawned after them), in the same session.
#   bash docs/experiments/first_trial.sh OUTDIR [ROUNDS] [STUDY]
set -uo pipefail
out=${1:?output folder}; rounds=${2:-4}; study=${3:-studies/patch_embed_sm90a.toml}
export PYTHONUNBUFFERED=1 TUNER_CACHE_DIR=${TUNER_CACHE_DIR:-$(mktemp -d)}
python3 -m tuner run "$study" --storage "sqlite:///$out/first_fill.db" --trials 20 --json > /dev/null 2>&1  # fills the cache
for round in $(seq "$rounds"); do
  for entry in launch cli; do
    if [ "$entry" = launch ]; then cmd=(python3 -m tuner); else cmd=(python3 -c "import sys; from tuner.cli import main; sys.exit(main())"); fi
    "${cmd[@]}" run "$study" --storage "sqlite:///$out/first_$entry$round.db" --trials 10 --json \
      > "$out/first_$entry$round.json" 2> "$out/first_$entry$round.err"
    tail -1 "$out/first_$entry$round.json" | python3 -c "import json,sys; s=json.loads(sys.stdin.read()); print('$entry', s['first_trial_s'], s['startup_s'])" \
      || tail -3 "$out/first_$entry$round.err"
  done
done
