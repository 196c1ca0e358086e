#!/usr/bin/env bash
# On a Hopper GPU host: new studies of the three shapes over the current kernel's space,
# warm-started from earlier studies in the same SQLite file, then each winner timed against
# cuBLAS in one process (interleaved rounds).  Usage: bash scripts/device_retune_shapes.sh OUT DB SUFFIX TRIALS
set -uo pipefail
out=${1:?}; db=${2:?}; suffix=${3:?}; trials=${4:-60}
export PYTHONUNBUFFERED=1 TUNER_CACHE_DIR=${TUNER_CACHE_DIR:-/tmp/tuner-cache}
cp "$db" "$out/shapes.db"
for shape in patch_embed fc1 fc2; do
  timeout 170 python3 -m tuner run "studies/${shape}_sm90a.toml" --storage "sqlite:///$out/shapes.db" \
    --study-name "${shape}_sm90a${suffix}" --warm-start "${shape}_sm90a" --trials "$trials" --json | tail -1 | cut -c1-400
done
python3 -m tuner status --storage "sqlite:///$out/shapes.db"
python3 scripts/plan_from_studies.py "sqlite:///$out/shapes.db" "$out/plan.json" "$suffix"
timeout 240 python3 bench/harness.py "$out/plan.json" > "$out/harness.log" 2>&1
grep -A20 "=== summary" "$out/harness.log" | cut -c1-200
