#!/usr/bin/env bash
# Issue 32's repeatability protocol on one GPU machine: `tuner grid` of docs/experiments/repeat16_fc2.toml
# (16 configs, no start, no [measure] reference: the study chooses its reference from its first configs)
# in N invocations, each into a fresh SQLite file OUT/r16_I.db. Run it on a second machine too, then
# compare any two files: python3 docs/experiments/repeatability.py sqlite:///A repeat16_fc2.grid sqlite:///B repeat16_fc2.grid
# Usage: bash docs/experiments/repeat16.sh OUT [N]
set -uo pipefail
out=${1:?output folder}; n=${2:-2}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TUNER_CACHE_DIR=${TUNER_CACHE_DIR:-/tmp/tuner-cache}
nvidia-smi --query-gpu=name,power.limit,driver_version,serial --format=csv,noheader | tee "$out/gpu.txt"
for i in $(seq 1 "$n"); do
  timeout 120 python3 -m tuner grid docs/experiments/repeat16_fc2.toml --storage "sqlite:///$out/r16_$i.db" \
    --csv "$out/r16_$i.csv" --json > "$out/r16_$i.json" 2> "$out/r16_$i.err"
  echo "invocation $i: exit $?"
done
