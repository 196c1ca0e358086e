"""Write a bench/harness.py plan from the best trial of each tuned study (tuner's winners
timed against cuBLAS in one process, interleaved rounds).

    python3 scripts/plan_from_studies.py STORAGE OUT.json [STUDY_NAME_SUFFIX]
"""

import json
import sys

import optuna

from tuner.storage import open_storage

optuna.logging.set_verbosity(optuna.logging.ERROR)
storage = open_storage(sys.argv[1])
suffix = sys.argv[3] if len(sys.argv) > 3 else ""
plan = {"timing": {"warmup": 10, "repeats": 50, "interleave": 5}, "problems": {}}
for summary in optuna.get_all_study_summaries(storage):
    study = optuna.load_study(study_name=summary.study_name, storage=storage)
    if study.user_attrs.get("kernel") != "gemm_sm90a" or not summary.study_name.endswith(suffix):
        continue
    best = study.best_trial
    flags = dict(f[2:].split("=", 1) for f in best.user_attrs["flags"].split())
    problem_keys = ("M", "N", "K", "EPILOGUE", "SEQ_LEN")
    config = {k: int(v) if v.lstrip("-").isdigit() else v for k, v in flags.items() if k not in problem_keys}
    problem = {k: study.user_attrs["problem"][k] for k in problem_keys}
    shape = study.user_attrs.get("shape") or summary.study_name
    plan["problems"][shape] = {"problem": problem, "jobs": [{"config": config, "time": True, "expect_fail": False}]}
    print(f"{shape}: tuner best {best.value:.4f} ms (trial {best.number} of {len(study.trials)})")
json.dump(plan, open(sys.argv[2], "w"), indent=1)
