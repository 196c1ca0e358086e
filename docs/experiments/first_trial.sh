#!/usr/bin/env bash
# Time to the first trial of a warm run (compile cache kept): this tree and, alternately in the same
# session, another checkout of the project (e.g. the commit before a change), 10-trial runs.
# IDLE_S=N: the GPU rests N seconds before each run (a first run after idle; default 0: back to back).
# FRESH=1: each run with an empty compile and enumeration cache of its own (no fill).
# NO_START=1: the study without its [search] start (a user's first study: its first run chooses its
#   reference from its first configs, tuner/run/probe.py), written beside it in each tree.
#   bash docs/experiments/first_trial.sh OUTDIR [ROUNDS] [OTHER_TREE] [STUDY]
# Each tree runs from its own folder: `python -m` puts the current folder first on sys.path, so a
# PYTHONPATH naming the other tree would not take effect (it did not before 2026-11-26, evening).
set -uo pipefail
out=$(realpath "${1:?output folder}"); rounds=${2:-4}; other=${3:+$(realpath "$3")}; study=${4:-studies/patch_embed_sm90a.toml}
export PYTHONUNBUFFERED=1 TUNER_CACHE_DIR=${TUNER_CACHE_DIR:-$(mktemp -d)}
here=$PWD
if [ -n "${NO_START:-}" ]; then  # the same file in each tree, its kernel path still relative to it
  for tree in "$here" ${other:+"$other"}; do
    (cd "$tree" && python3 -c "import sys, tomllib; from tuner.study.inline import toml_text
d = tomllib.load(open(sys.argv[1], 'rb')); d.get('search', {}).pop('start', None)
open(sys.argv[2], 'w').write(toml_text({'study': d.pop('study'), **{k: v for k, v in d.items() if k != 'space'},
    **{f'space.{k}': v for k, v in d.get('space', {}).items()}}))" "$study" "${study%.toml}_no_start.toml")
  done
  study=${study%.toml}_no_start.toml
  trap 'for tree in "$here" ${other:+"$other"}; do rm -f "$tree/$study"; done' EXIT
fi
for tree in "$here" ${other:+"$other"}; do  # fills the cache for each tree's code
  [ -n "${FRESH:-}" ] && break
  (cd "$tree" && python3 -m tuner run "$study" --storage "sqlite:///$out/first_fill_$(basename "$tree").db" --trials 20 --json > /dev/null 2>&1)
done
for round in $(seq "$rounds"); do
  for tree in "$here" ${other:+"$other"}; do
    label=$([ "$tree" = "$here" ] && echo this || echo other)
    sleep "${IDLE_S:-0}"
    [ -n "${FRESH:-}" ] && export TUNER_CACHE_DIR=$(mktemp -d)
    (cd "$tree" && python3 -m tuner run "$study" --storage "sqlite:///$out/first_$label$round.db" \
      --trials 10 --json > "$out/first_$label$round.json" 2> "$out/first_$label$round.err")
    tail -1 "$out/first_$label$round.json" | python3 -c "import json,sys; s=json.loads(sys.stdin.read()); print('$label', s['first_trial_s'], s['startup_s'])" \
      || tail -3 "$out/first_$label$round.err"
    python3 -c "import optuna, sys; optuna.logging.set_verbosity(optuna.logging.WARNING); t = optuna.load_study(study_name=None, \
storage=sys.argv[1]).trials[0]; print('  its first trial:', {k: t.user_attrs.get(k) for k in ('measured_ahead', 'before_steady', 'pairs')})" \
      "sqlite:///$out/first_$label$round.db" 2>/dev/null || true
  done
done
