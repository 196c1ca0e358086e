#!/usr/bin/env bash
# `tuner run --workers 2` (one worker per GPU, one journal file) against one worker, on a
# two-GPU host, alternating, each run with an empty compile cache and a new study:
#   bash docs/experiments/two_gpus.sh OUTDIR [TRIALS] [ROUNDS] [SQLITE: 1 = also one worker on SQLite]
# Rate = trials finished per second from the first trial's end to the last's, read from the
# storage (the same for both); GPU busy = share of 0.5 s nvidia-smi samples >= 50 %, per GPU.
set -uo pipefail
out=${1:?output folder}; trials=${2:-400}; rounds=${3:-2}; sqlite=${4:-1}; study=studies/patch_embed_sm90a.toml
export PYTHONUNBUFFERED=1
nvidia-smi -L
run() {  # label workers storage
  local label=$1 workers=$2 storage=$3
  export TUNER_CACHE_DIR=$(mktemp -d)
  nvidia-smi --query-gpu=index,utilization.gpu,clocks.sm,power.draw --format=csv,noheader,nounits -lms 500 \
    > "$out/smi_$label.csv" &
  local smi=$!
  local t0=$(date +%s.%N)
  python3 -m tuner run "$study" --storage "$storage" --trials "$trials" --workers "$workers" --json \
    > "$out/summary_$label.json" 2> "$out/stderr_$label.txt"
  local rc=$?
  local t1=$(date +%s.%N)
  kill $smi; wait $smi 2>/dev/null
  python3 docs/experiments/two_gpus_rate.py "$label" "$storage" "$out/smi_$label.csv" "$rc" \
    "$(python3 -c "print(round($t1 - $t0, 2))")" | tee -a "$out/rates.txt"
  [ $rc -eq 0 ] || tail -5 "$out/stderr_$label.txt"
}
for r in $(seq 1 "$rounds"); do
  run "one_journal_$r" 1 "$out/one_$r.log"
  run "two_journal_$r" 2 "$out/two_$r.log"
done
[ "$sqlite" = 1 ] && run one_sqlite 1 "sqlite:///$out/one_sqlite.db"
cat "$out/rates.txt"
