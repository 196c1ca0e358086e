#!/usr/bin/env bash
# Throughput of the README's main job on a GPU host: trials/s, first trial, GPU busy share.
#   bash docs/experiments/throughput.sh OUTDIR [TRIALS] [STUDY]
# Two runs: "fresh" (empty compile cache, new study), then "warm" (the cache kept, a new study).
# GPU busy = share of 0.5 s nvidia-smi samples with utilisation >= 50 % while `tuner run` runs.
set -uo pipefail
out=${1:?output folder}; trials=${2:-200}; study=${3:-studies/patch_embed_sm90a.toml}
export PYTHONUNBUFFERED=1 TUNER_CACHE_DIR=$(mktemp -d)
for label in fresh warm; do
  echo "== $label: tuner run $study --trials $trials"
  nvidia-smi --query-gpu=utilization.gpu,clocks.sm,power.draw --format=csv,noheader,nounits -lms 500 > "$out/smi_$label.csv" &
  smi=$!
  python3 -m tuner run "$study" --storage "sqlite:///$out/$label.db" --trials "$trials" --json \
    > "$out/summary_$label.json" 2> "$out/stderr_$label.txt"
  echo "rc $?"
  kill $smi; wait $smi 2>/dev/null
  awk -F, '{n++; if ($1+0 >= 50) b++} END {printf "gpu busy %.0f%% of %d samples\n", 100*b/n, n}' "$out/smi_$label.csv"
  tail -1 "$out/summary_$label.json" | python3 -c "import json,sys; s=json.loads(sys.stdin.read()); print({k: s.get(k) for k in ('trials_run','statuses','first_trial_s','trials_per_s','run_s','startup_s')})" || tail -5 "$out/stderr_$label.txt"
done
