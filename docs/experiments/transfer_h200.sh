#!/usr/bin/env bash
# Transfer across shapes on a GPU (issue 30): FC1 and FC2 as new studies (no start configs; every
# config paired with the best known config, so a best value <= 1.00 reaches it) warm-started from
# a patch_embed study, against cold runs on the same seeds, 25 trials each.
#   bash docs/experiments/transfer_h200.sh OUTDIR [SEEDS] [SOURCE_TRIALS] [OTHER_TREE]
# OTHER_TREE: another checkout of the project (e.g. the commit before a change) also runs the cold and
# warm runs, from the same source study and storage (its study names end in _other).
# SKIP_COLD=1: no cold runs (they do not depend on a change to the warm start).
set -uo pipefail
out=$(realpath "${1:?output folder}"); seeds=${2:-2}; source_trials=${3:-60}; other=${4:+$(realpath "$4")}
export PYTHONUNBUFFERED=1
db="sqlite:///$out/transfer.db"
python3 -m tuner run studies/patch_embed_sm90a.toml --storage "$db" --trials "$source_trials" --json > "$out/source.json" 2> "$out/source.err" \
  || { tail -5 "$out/source.err"; exit 1; }
for shape in fc1 fc2; do
  # the study file without its start configs, paired with its first start config (the best known)
  python3 - "$shape" "$out/${shape}_new.toml" <<'EOF'
import re, sys, tomllib
shape, dest = sys.argv[1], sys.argv[2]
text = open(f"studies/{shape}_sm90a.toml").read()
best = tomllib.loads(text)["search"]["start"][0]
text = re.sub(r"^start = \[.*?\}\]\s*$", "", text, flags=re.S | re.M)
text = text.replace('kernel = "../kernel/', 'kernel = "' + __import__("os").getcwd() + '/kernel/')
inline = "{" + ", ".join(f"{k} = {v}" for k, v in best.items()) + "}"
text = text.replace("[measure]\n", f"[measure]\nreference = {inline}\n", 1)
open(dest, "w").write(text)
EOF
  for seed in $(seq 0 $((seeds - 1))); do
    for mode in $([ "${SKIP_COLD:-}" = 1 ] || echo cold) warm ${other:+$([ "${SKIP_COLD:-}" = 1 ] || echo cold_other) warm_other}; do
      warm=(); [ "${mode#cold}" = "$mode" ] && warm=(--warm-start patch_embed_sm90a)
      tree=$PWD; [ "${mode%_other}" != "$mode" ] && tree=$other
      (cd "$tree" && python3 -m tuner run "$out/${shape}_new.toml" --storage "$db" --study-name "${shape}_${mode}_$seed" \
        --trials 25 --seed "$seed" "${warm[@]}" > "$out/${shape}_${mode}_$seed.out" 2> "$out/${shape}_${mode}_$seed.err")
      grep "^warm start" "$out/${shape}_${mode}_$seed.err"
      python3 - "$db" "${shape}_${mode}_$seed" <<'EOF'
import sys, optuna
study = optuna.load_study(study_name=sys.argv[2], storage=sys.argv[1])
complete = [t if t.state == optuna.trial.TrialState.COMPLETE else None for t in study.trials]  # a stopped one: an estimate
values = [t.value for t in complete if t is not None]
first = next((i + 1 for i, t in enumerate(complete) if t is not None and t.value <= 1.0), None)
print(f"{sys.argv[2]}: best {min(values):.4f} of the best known ({study.user_attrs.get('device_name', '')}); "
      f"<= 1.00 at trial {first}")
EOF
    done
  done
done
