#!/usr/bin/env bash
# On a Hopper GPU host: tune the three shapes with `tuner run`, then time each study's winner
# against cuBLAS (and cuBLAS + a separate epilogue) in one process with bench/harness.py.
# Usage: bash scripts/device_tune_shapes.sh OUTDIR [TRIALS]
set -uo pipefail
out=${1:?output folder}; trials=${2:-40}
export PYTHONUNBUFFERED=1 TUNER_CACHE_DIR=${TUNER_CACHE_DIR:-/tmp/tuner-cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
for shape in patch_embed fc1 fc2; do
  timeout 170 python3 -m tuner run "studies/${shape}_sm90a.toml" --storage "sqlite:///$out/shapes.db" --trials "$trials" --json | tail -1
done
python3 -m tuner status --storage "sqlite:///$out/shapes.db"
python3 scripts/plan_from_studies.py "sqlite:///$out/shapes.db" "$out/plan_tuned.json"
timeout 200 python3 bench/harness.py "$out/plan_tuned.json" > "$out/tuned_vs_cublas.log" 2>&1
grep -A20 "=== summary" "$out/tuned_vs_cublas.log" | cut -c1-170
