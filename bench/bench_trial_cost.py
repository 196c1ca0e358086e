"""Does a trial cost more as a study grows? A long replay on SQLite, timed per trial.

    PYTHONPATH=$PWD python3 bench/bench_trial_cost.py [--trials 2000] [--replay CACHE] [--storage URL]

Runs ``tuner run --replay`` (no GPU) into a fresh SQLite file, then reads each trial's
completion time back and prints the mean cost per trial of the first and of the last
``--window`` trials, and their ratio (docs/RELIABILITY.md records it; the target is <= 1.2).
``--profile FILE`` writes a cProfile of the run.

A window of 100 trials lasts a few seconds, and on a virtual machine the CPU's own speed moves
by ±15 % over such stretches with nothing else running (a fixed loop timed the same way shows it).
So ``--runs N`` repeats the replay N times and prints each run's ratio and their median, and
beside each run the same ratio for a yardstick: a fixed CPU loop timed in a separate process
during the run's first and last windows (no study, so any ratio it shows is the machine's).
``--paired ROUNDS`` measures the growth alone: it makes a study of ``--window`` trials
and one of ``--trials - --window``, then in each round resumes a copy of each by 40 trials,
alternately, and prints the mean cost per new trial at both sizes and their ratio.
``--count`` measures the work instead of the time, which the machine's speed cannot move: the
Python function calls (every thread) and SQL statements per trial over the first and the last
window of one run (a profiler counts them during those windows only), and their ratios.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_REPLAY = ROOT / "tests" / "data" / "kernel_tuner" / "convolution_RTX_Titan.json.gz"  # 4,362 configs


def completion_times(url: str, after: int = 0) -> list[float]:
    """When each trial numbered ``after`` on completed (POSIX seconds), in order."""
    names = optuna.get_all_study_names(url)
    study = optuna.load_study(study_name=names[0], storage=url)
    return sorted(t.datetime_complete.timestamp() for t in study.get_trials(deepcopy=False)
                  if t.datetime_complete is not None and t.number >= after)


def per_trial_costs(url: str, after: int = 0) -> list[float]:
    """Seconds between consecutive completions of the trials numbered ``after`` on, in completion order."""
    done = completion_times(url, after)
    return [b - a for a, b in zip(done, done[1:], strict=False)]


YARDSTICK = """
import sys, time
while True:
    started = time.perf_counter()
    total = sum(i * i % 7 for i in range(60_000))
    print(time.time(), time.perf_counter() - started, flush=True)
    time.sleep(0.1)
"""


COUNTER = """
import json, sys
from tuner.testing import work_per_trial
trials, window = int(sys.argv[3]), int(sys.argv[4])
code, (first, last) = work_per_trial(["run", "--replay", sys.argv[1], "--storage", sys.argv[2], "--trials", str(trials),
                                      "--seed", sys.argv[5], "--json"], [(1, window), (trials - window, window)])
print(json.dumps({"first": first, "last": last}))
sys.exit(code)
"""


def window_ratio(done: list[float], window: int) -> tuple[float, float, float]:
    """Mean seconds per trial over the first and the last ``window`` trials, and last / first."""
    first = (done[window] - done[0]) / window
    last = (done[-1] - done[-1 - window]) / window
    return first, last, last / first


def yardstick_ratio(samples: list[tuple[float, float]], done: list[float], window: int) -> float:
    """The yardstick's mean loop time during the last window over that during the first."""
    def mean_between(lo: float, hi: float) -> float:
        inside = [d for t, d in samples if lo <= t <= hi]
        return statistics.mean(inside) if inside else float("nan")
    return mean_between(done[-1 - window], done[-1]) / mean_between(done[0], done[window])


def repeated(args, tmp: str) -> dict:
    """``--runs``: the whole replay N times, each beside the yardstick."""
    runs = []
    for n in range(args.runs):
        url = f"sqlite:///{Path(tmp) / f'run{n}.db'}"
        log = Path(tmp) / f"yardstick{n}.txt"
        with log.open("w") as out:
            yardstick = subprocess.Popen([sys.executable, "-c", YARDSTICK], stdout=out)
            run = run_tuner(url, args.replay, args.trials, args.seed + n)
            yardstick.kill()
            yardstick.wait()
        samples = [(float(t), float(d)) for t, d in (line.split() for line in log.read_text().splitlines() if line.count(" ") == 1)]
        if run.returncode != 0:
            raise SystemExit(run.stderr[-2000:])
        done = completion_times(url)
        first, last, ratio = window_ratio(done, args.window)
        runs.append({"first_ms": round(first * 1e3, 2), "last_ms": round(last * 1e3, 2), "ratio": round(ratio, 3),
                     "yardstick_ratio": round(yardstick_ratio(samples, done, args.window), 3)})
        print(json.dumps(runs[-1]), flush=True)
    return {"trials": args.trials, "runs": args.runs, "median_ratio": round(statistics.median(r["ratio"] for r in runs), 3),
            "yardstick_ratios": [r["yardstick_ratio"] for r in runs], "replay": Path(args.replay).name}


def counted(args, tmp: str) -> dict:
    """``--count``: calls and SQL statements per trial in the first and the last window."""
    url = f"sqlite:///{Path(tmp) / 'count.db'}"
    run = subprocess.run([sys.executable, "-c", COUNTER, args.replay, url, str(args.trials), str(args.window), str(args.seed)],
                         cwd=ROOT, capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(run.stderr[-2000:])
    windows = json.loads(run.stdout.strip().splitlines()[-1])
    w, first, last = args.window, windows["first"], windows["last"]
    return {"trials": args.trials, "window": w, "calls_first": round(first[0]), "calls_last": round(last[0]),
            "calls_ratio": round(last[0] / first[0], 3), "sql_first": round(first[1], 1), "sql_last": round(last[1], 1),
            "sql_ratio": round(last[1] / first[1], 3), "replay": Path(args.replay).name}


def run_tuner(url: str, replay: str, trials: int, seed: int, profile: str | None = None) -> subprocess.CompletedProcess:
    python = [sys.executable, *(["-m", "cProfile", "-o", profile] if profile else [])]
    cmd = [*python, "-m", "tuner", "run", "--replay", replay, "--storage", url, "--trials", str(trials),
           "--seed", str(seed), "--json"]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def paired(args, tmp: str) -> dict:
    """Cost per trial at two study sizes, measured in turns (see the module docstring)."""
    chunk, sizes = 40, (args.window, args.trials - args.window)
    for n in sizes:
        if run_tuner(f"sqlite:///{Path(tmp) / f'{n}.db'}", args.replay, n, args.seed).returncode != 0:
            raise SystemExit(f"the replay to {n} trials failed")
    means: dict[int, list[float]] = {n: [] for n in sizes}
    for round_ in range(args.paired):
        for n in sizes if round_ % 2 == 0 else sizes[::-1]:
            db = Path(tmp) / "resumed.db"
            shutil.copy(Path(tmp) / f"{n}.db", db)
            if run_tuner(f"sqlite:///{db}", args.replay, n + chunk, args.seed).returncode != 0:
                raise SystemExit(f"resuming the study of {n} trials failed")
            means[n].append(statistics.mean(per_trial_costs(f"sqlite:///{db}", after=n)))
            db.unlink()
    small, large = (statistics.mean(means[n]) for n in sizes)
    return {"rounds": args.paired, "sizes": list(sizes), "small_ms": round(small * 1e3, 2),
            "large_ms": round(large * 1e3, 2), "ratio": round(large / small, 3), "replay": Path(args.replay).name}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--replay", default=str(DEFAULT_REPLAY))
    parser.add_argument("--storage", help="default: a fresh SQLite file in a temporary folder")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--profile", help="write a cProfile of the run here")
    parser.add_argument("--paired", type=int, metavar="ROUNDS", help="time the two study sizes in turns, ROUNDS each")
    parser.add_argument("--runs", type=int, help="repeat the replay N times (seeds SEED..SEED+N-1), beside a yardstick")
    parser.add_argument("--count", action="store_true", help="count calls and SQL statements per trial instead of timing")
    args = parser.parse_args()
    if args.count:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(counted(args, tmp)))
        return 0
    if args.runs:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(repeated(args, tmp)))
        return 0
    if args.paired:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(paired(args, tmp)))
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        url = args.storage or f"sqlite:///{Path(tmp) / 'bench.db'}"
        run = run_tuner(url, args.replay, args.trials, args.seed, args.profile)
        if run.returncode != 0:
            print(run.stderr[-2000:], file=sys.stderr)
            return run.returncode
        done = completion_times(url)
    first, last, ratio = window_ratio(done, args.window)
    print(json.dumps({"trials": len(done), "first_ms": round(first * 1e3, 2), "last_ms": round(last * 1e3, 2),
                      "ratio": round(ratio, 3), "replay": Path(args.replay).name}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
