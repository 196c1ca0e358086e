"""Trials per second of `tuner run`, serial (--compile-ahead 0) against pipelined, in one run.

    python bench/bench_pipeline.py                            # fake GPU and fake NVRTC with fixed delays
    python bench/bench_pipeline.py --compile-s 0.42 --measure-s 0.3 --jobs 16
    python bench/bench_pipeline.py --real-nvrtc               # real compiles of the example kernel

The GPU is the worker double (tests/fake_backend.py; FAKE_TRIAL_DELAY_S per measurement) and,
unless --real-nvrtc, NVRTC is its stand-in (FAKE_COMPILE_DELAY_S per compile). Each mode runs
the same study on a fresh SQLite file and a fresh compile cache; the summary's sustained
trials/s and first-trial time are printed, then the ratio. Expected: serial about
1 / (compile + measure + bookkeeping), pipelined about 1 / max(compile / jobs, measure).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fake_backend.py"


def run(study: Path, ahead: int, trials: int, env: dict, folder: Path) -> dict:
    db = f"sqlite:///{folder / f'ahead{ahead}.db'}"
    cmd = [sys.executable, "-m", "tuner", "run", str(study), "--storage", db, "--trials", str(trials),
           "--compile-ahead", str(ahead), "--no-pruner", "--cache-dir", str(folder / f"cache{ahead}"), "--json"]
    result = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"tuner run failed: {result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--study", type=Path, default=ROOT / "studies" / "example_sgemm.toml")
    p.add_argument("--trials", type=int, default=24)
    p.add_argument("--compile-s", type=float, default=0.42, help="fake compile time (a median NVRTC compile of a GEMM config)")
    p.add_argument("--measure-s", type=float, default=0.3, help="fake measurement time")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile processes of the pipelined run")
    p.add_argument("--real-nvrtc", action="store_true", help="compile for real (NVRTC) instead of the fixed delay")
    args = p.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUNER_WORKER_BACKEND": f"{FAKE}:FakeBackend",
           "FAKE_TRIAL_DELAY_S": str(args.measure_s), "FAKE_COMPILE_DELAY_S": str(args.compile_s)}
    if not args.real_nvrtc:
        env["TUNER_COMPILER"] = f"{FAKE}:fake_nvrtc"
    compile_s = "NVRTC" if args.real_nvrtc else f"{args.compile_s} s"
    print(f"{platform.node()}, {os.cpu_count()} CPUs; {args.study.name}, {args.trials} trials; compile {compile_s}, "
          f"measure {args.measure_s} s, {args.jobs} compile processes")
    rates = {}
    with tempfile.TemporaryDirectory(prefix="tuner-bench-pipeline-") as tmp:
        for label, ahead in (("serial", 0), ("pipelined", args.jobs)):
            s = run(args.study, ahead, args.trials, env, Path(tmp))
            rates[label] = s["trials_per_s"]
            print(json.dumps({"mode": label, "compile_ahead": ahead, **{k: s[k] for k in
                              ("trials_run", "statuses", "first_trial_s", "trials_per_s", "run_s")}}), flush=True)
    bound = 1 / max(args.compile_s / args.jobs, args.measure_s) if not args.real_nvrtc else None
    print(f"serial {rates['serial']:.2f} trials/s, pipelined {rates['pipelined']:.2f} trials/s: "
          f"x{rates['pipelined'] / rates['serial']:.2f}" + (f" (bound {bound:.2f} trials/s)" if bound else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
