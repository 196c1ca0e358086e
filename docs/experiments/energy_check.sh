#!/bin/bash
# Issue 34 on one GPU (about 3-4 minutes on an H100): the energy counter's update interval and
# step (bench/energy_probe.py), energy per launch of 10 patch_embed configs in two separate
# invocations, the nvidia-smi cross-check, and the comparison. Everything lands in $OUT.
#   OUT=/tmp/energy bash docs/experiments/energy_check.sh
set -u
OUT=${OUT:-.}
mkdir -p "$OUT"
python3 bench/energy_probe.py --out "$OUT" > "$OUT/probe.log" 2>&1 || echo "probe failed: see probe.log"
python3 docs/experiments/energy_repeat.py measure "$OUT/run1.json" > "$OUT/run1.log" 2>&1 || echo "run1 failed: see run1.log"
python3 docs/experiments/energy_repeat.py measure "$OUT/run2.json" > "$OUT/run2.log" 2>&1 || echo "run2 failed: see run2.log"
python3 docs/experiments/energy_repeat.py smi "$OUT/smi.json" > "$OUT/smi.log" 2>&1 || echo "smi failed: see smi.log"
python3 docs/experiments/energy_repeat.py compare "$OUT/run1.json" "$OUT/run2.json" "$OUT/smi.json" 2>&1 | tee "$OUT/compare.txt"
grep -A3 '"energy_mj"' "$OUT/energy_probe.json" | head -20
