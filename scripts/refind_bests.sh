#!/usr/bin/env bash
# Issue #31 item 4: each Hopper study from scratch (no start configs), paired with today's documented best
# of its own precision class (the class's study file's first start config) as the reference; then `tuner best`.
# Each trial's ratio < 1 is faster than today's best.
# Usage: bash scripts/refind_bests.sh OUTDIR [TRIALS] [SHAPES...]   (CLASSES="_precise" for the precise class only)
set -uo pipefail
out=${1:?output folder}; trials=${2:-60}; shift $(( $# > 1 ? 2 : 1 ))
shapes=${*:-patch_embed fc1 fc2}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 TUNER_CACHE_DIR=${TUNER_CACHE_DIR:-/tmp/tuner-cache}
db="sqlite:///$out/refind.db"
for shape in $shapes; do
  for class in ${CLASSES-"" _precise}; do
    src=studies/${shape}_sm90a${class}.toml
    dst=$out/${shape}_sm90a${class}_scratch.toml
    # the study without [search] start, and [measure] reference = its own first start config
    python3 - "$src" "$src" "$dst" <<'PY'
import re, sys, tomllib
from pathlib import Path
src, documented, dst = sys.argv[1:]
text = Path(src).read_text()
best = tomllib.loads(Path(documented).read_text())["search"]["start"][0]
text = re.sub(r"(?ms)^start = \[.*?\}\]\s*$\n", "", text)
inline = ", ".join(f"{k} = {v!r}".replace("'", '"') for k, v in best.items())
text = text.replace("[measure]\n", f"[measure]\nreference = {{{inline}}}\n", 1)
text = text.replace('kernel = "../kernel/', f'kernel = "{Path.cwd()}/kernel/', 1)
name = tomllib.loads(text)["study"]["name"]
Path(dst).write_text(text.replace(f'name = "{name}"', f'name = "{name}_scratch"', 1))
PY
    echo "== $dst"
    python3 -m tuner run "$dst" --storage "$db" --trials "$trials" --seed 0 --json | tail -1 | tee -a "$out/refind.jsonl"
    python3 -m tuner best --storage "$db" --study "$(basename "$dst" .toml)" > "$out/$(basename "$dst" .toml).best.txt" 2>&1
    # the class's study file with the re-found winner as its start config (bench/bench_vs_cublas.py measures it)
    python3 - "$src" "$dst" "$db" "$out/$(basename "$src" .toml)_found.toml" <<'PY'
import re, sys, tuner
from pathlib import Path
src, scratch, db, found = sys.argv[1:]
best = tuner.load(scratch, storage=db)
inline = ", ".join(f"{k} = {v!r}".replace("'", '"') for k, v in best.best_params.items())
text = re.sub(r"(?ms)^start = \[.*?\}\]\s*$", f"start = [{{{inline}}}]", Path(src).read_text(), count=1)
text = text.replace('kernel = "../kernel/', f'kernel = "{Path.cwd()}/kernel/', 1)
Path(found).write_text(text)
print(f"re-found: {best.best_value:.4f} of the documented best, {best.best_flags}")
PY
  done
done
