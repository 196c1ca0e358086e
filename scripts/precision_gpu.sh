#!/usr/bin/env bash
# Issue #31 items 1-3 on one H100/H200 (~6 min): device correctness of the promoted paths
# (PROMOTE_EVERY, exact small-integer + random inputs, relaunch bitwise), then each Hopper shape in
# both precision classes against the matching cuBLAS mode (paired, GEMM-only), then the outputs of
# ours (PROMOTE_EVERY 0/1/2/4, same tile) and of cuBLAS fast / precise off by more than 0.02 + 2 %
# of the FP32 reference, on the same FP8 inputs. Everything lands in OUTDIR; summary.txt first.
# Usage: bash scripts/precision_gpu.sh OUTDIR [PAIRS]
set -uo pipefail
out=${1:?output folder}
pairs=${2:-200}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TUNER_CACHE_DIR=${TUNER_CACHE_DIR:-/tmp/tuner-cache}
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv,noheader | tee "$out/gpu.txt"
echo "== device correctness (tests/test_gemm_sm90a.py, promoted configs included)"
timeout 240 python3 -m pytest -q -m gpu tests/test_precision.py tests/test_gemm_sm90a.py -k "device_correctness or device_comparison" -p no:cacheprovider \
  > "$out/device_correctness.log" 2>&1
echo "pytest exit $?" >> "$out/device_correctness.log"
tail -3 "$out/device_correctness.log"
echo "== like-for-like timing + error counts"
timeout 330 python3 bench/bench_vs_cublas.py \
  studies/patch_embed_sm90a.toml studies/fc1_sm90a.toml studies/fc2_sm90a.toml \
  studies/patch_embed_sm90a_precise.toml studies/fc1_sm90a_precise.toml studies/fc2_sm90a_precise.toml \
  --pairs "$pairs" --errors --out "$out/bench.json" > "$out/bench.log" 2>&1
echo "bench exit $?" >> "$out/bench.log"
{
  date -u +"%Y-%m-%d %H:%M UTC"; cat "$out/gpu.txt"
  echo; echo "device correctness:"; tail -3 "$out/device_correctness.log"
  echo; sed -n '/^ours \/ cuBLAS/,$p' "$out/bench.log"
} > "$out/summary.txt"
cat "$out/summary.txt"
