#!/usr/bin/env bash
# Ctrl-C on a GPU host at several moments of `tuner run`, then resume: nothing RUNNING after any
# interrupt, and the resumed run ends at the exact budget.
# The interrupted runs ask for 5,000 trials (never reached); the resume asks for 40 more than are done.
#   bash docs/experiments/ctrl_c_gpu.sh OUTDIR [STUDY]
set -uo pipefail -m  # job control: a background job of a script otherwise ignores SIGINT
out=${1:?output folder}; study=${2:-studies/patch_embed_sm90a.toml}
db="sqlite:///$out/ctrl_c.db"
count() {  # trials per state
  python3 -c "import optuna,sys,collections; optuna.logging.set_verbosity(optuna.logging.ERROR)
s=optuna.load_study(study_name=None if len(optuna.get_all_study_names('$db'))!=1 else optuna.get_all_study_names('$db')[0], storage='$db')
c=collections.Counter(t.state.name for t in s.trials); print(dict(c) if '${1:-}' != 'done' else c['COMPLETE']+c['PRUNED'])"
}
for after in 4.5 7.3 9.1 12.7 15.2; do
  python3 -m tuner run "$study" --storage "$db" --trials 5000 > /dev/null 2> "$out/stderr_$after.txt" &
  pid=$!
  sleep "$after"; kill -INT $pid; wait $pid; rc=$?
  echo "SIGINT after ${after}s: rc $rc, traceback $(grep -c Traceback "$out/stderr_$after.txt"), states $(count)"
done
budget=$(( $(count done) + 40 ))
python3 -m tuner run "$study" --storage "$db" --trials $budget --json > "$out/final.json" 2> "$out/stderr_final.txt"
echo "resume to $budget: rc $?, states $(count)"
