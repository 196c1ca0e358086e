"""Benchmark: the Plotly report of a 10,000-trial study (target: under 30 s on 2 cores).

    python bench/bench_report.py                 # SQLite (built once in out/bench/, then reused)
    python bench/bench_report.py --journal       # a journal file instead (quick to build)
    python bench/bench_report.py --trials 2000

Builds a synthetic study that follows the trial record contract (dashboards.demo), then
times ``write_report`` from the storage URL: loading every trial, all figures, the top
table, the failure breakdown, the index, writing the HTML. Prints the time; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import optuna

from dashboards.demo import make_study
from dashboards.report import write_report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=10_000)
    ap.add_argument("--journal", action="store_true", help="use a journal file instead of SQLite")
    ap.add_argument("--dir", default="out/bench", help="where the storage and the report go")
    ap.add_argument("--fresh", action="store_true", help="rebuild the storage even if it exists")
    args = ap.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

    base = Path(args.dir)
    base.mkdir(parents=True, exist_ok=True)
    name = f"bench-{args.trials}"
    if args.journal:
        path = base / f"report-{args.trials}.log"
        url = str(path)
    else:
        path = base / f"report-{args.trials}.db"
        url = f"sqlite:///{path}"
    if args.fresh and path.exists():
        path.unlink()
    if not path.exists():
        t0 = time.perf_counter()
        if args.journal:
            from optuna.storages import JournalStorage
            from optuna.storages.journal import JournalFileBackend

            storage = JournalStorage(JournalFileBackend(str(path)))
        else:
            storage = url
        make_study(storage, name, shape="fc1", n_trials=args.trials, seed=7)
        print(f"built {args.trials} trials in {path} in {time.perf_counter() - t0:.1f} s (not timed)")

    out = base / "report"
    t0, c0 = time.perf_counter(), time.process_time()
    pages = write_report(url, out, study_names=[name])
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    size = sum(p.stat().st_size for p in pages) / 1e6
    print(f"report of {args.trials} trials ({'journal' if args.journal else 'SQLite'}): "
          f"{elapsed:.1f} s wall ({cpu:.1f} s CPU), {len(pages)} pages, {size:.1f} MB, cores {os.cpu_count()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
