#!/bin/bash
# On the device: the benchmark (best configs of each shape vs cuBLAS, one process; plan PLAN, default
# final3 = paired timing) + an ncu look
# at the patch_embed kernel. Writes $OUT/results.md, $OUT/full.log, $OUT/ncu.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader > "$OUT/gpu.txt"
PLAN=${PLAN:-final3}
# SM clock and power every 100 ms while the benchmark runs: these kernels are power-limited (1.36-1.60 GHz under ncu)
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader -lms 100 > "$OUT/clocks.csv" &
SMI=$!
timeout 300 python3 bench/harness.py "bench/plan_$PLAN.json" > "$OUT/full.log" 2>&1
kill $SMI 2>/dev/null
if command -v ncu >/dev/null && [ "${NCU:-1}" = 1 ]; then
  timeout 200 ncu --clock-control none -k gemm_sm90a -c 1 --metrics \
gpu__time_duration.sum,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,\
dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors_srcunit_tex_op_read.sum,\
lts__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,\
l1tex__throughput.avg.pct_of_peak_sustained_elapsed,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct \
    env OUT=/tmp python3 bench/harness.py bench/plan_ncu.json > "$OUT/ncu.txt" 2>&1
fi
cat "$OUT/gpu.txt"; grep -A30 "=== summary" "$OUT/full.log" | cut -c1-160; grep -E "gpu__|sm__|dram__|lts__|l1tex__|smsp__" "$OUT/ncu.txt" | tail -12
