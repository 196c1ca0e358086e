#!/usr/bin/env bash
# One device session of the tuner on a GPU host (our own H100/H200 runs):
#   1. resume the example study from a SQLite file brought back from an earlier session;
#   2. `tuner grid` over the focused patch_embed space (every valid config, recorded CSV);
#   3. a Bayesian (TPE) study over the same space, to count trials to the grid's winner.
# Usage: bash scripts/device_session.sh OUTDIR [EXAMPLE_DB]
set -uo pipefail
out=${1:?output folder}
example_db=${2:-}
export PYTHONUNBUFFERED=1 TUNER_CACHE_DIR=${TUNER_CACHE_DIR:-/tmp/tuner-cache}
tuner() { python3 -m tuner "$@"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
if [ -n "$example_db" ]; then
  cp "$example_db" "$out/example.db"
  echo "== resume example_sgemm from the brought-back SQLite file"
  tuner status --storage "sqlite:///$out/example.db"
  tuner run studies/example_sgemm.toml --storage "sqlite:///$out/example.db" --trials 20 --json
fi
echo "== grid: patch_embed_sm90a_grid"
time tuner grid studies/patch_embed_sm90a_grid.toml --storage "sqlite:///$out/patch_embed.db" \
  --csv "$out/patch_embed_sm90a_grid.csv" > "$out/grid_table.txt"
head -25 "$out/grid_table.txt"; tail -4 "$out/grid_table.txt"
echo "== TPE study over the same space"
time tuner run studies/patch_embed_sm90a_grid.toml --storage "sqlite:///$out/patch_embed.db" --trials 40 --seed 0 --json
tuner status --storage "sqlite:///$out/patch_embed.db"
