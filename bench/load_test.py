"""Load test: N replay workers (no GPU) sharing one study through Postgres and a journal file.

    python bench/load_test.py                       # 8 workers, a 1000-trial budget, both storages
    python bench/load_test.py --workers 4 --trials 60 --storages journal

Runs the real CLI (``tuner run --replay FILE --workers N``) and then reads the study back:

- lost: trials that never reached a finished state (RUNNING/WAITING/FAIL left behind)
  plus gaps in the trial numbers; must be 0;
- configs with more than one trial, and of those how many were *measured* more than once
  (a repeat must be a ``duplicate`` that reused the stored value);
- throughput (trials/s over the whole run, start-up included);
- peak Postgres connections (pg_stat_activity polled every 50 ms) against max_connections.

Prints one JSON line per storage (and a Markdown table row) for docs/RELIABILITY.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATASETS = ROOT / "tests" / "data" / "kernel_tuner"
POSTGRES_URL = os.environ.get("TUNER_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


class ConnectionPoller(threading.Thread):
    """Polls pg_stat_activity (all client backends, and those on our database) until stopped."""

    def __init__(self, url: str, period_s: float = 0.05):
        super().__init__(daemon=True)
        import sqlalchemy

        self.engine = sqlalchemy.create_engine(url, pool_size=1, max_overflow=0)
        self.period_s = period_s
        self.peak_total = 0
        self.peak_db = 0
        self.samples = 0
        self._halt = threading.Event()
        with self.engine.connect() as conn:
            self.max_connections = int(conn.execute(sqlalchemy.text("show max_connections")).scalar())
            self.database = conn.execute(sqlalchemy.text("select current_database()")).scalar()
            self.baseline = self._count(conn)

    def _count(self, conn) -> tuple[int, int]:
        import sqlalchemy

        row = conn.execute(sqlalchemy.text(
            "select count(*), count(*) filter (where datname = current_database()) "
            "from pg_stat_activity where backend_type = 'client backend' and pid <> pg_backend_pid()"
        )).one()
        return int(row[0]), int(row[1])

    def run(self) -> None:
        with self.engine.connect() as conn:
            while not self._halt.is_set():
                total, db = self._count(conn)
                conn.commit()
                self.peak_total = max(self.peak_total, total)
                self.peak_db = max(self.peak_db, db)
                self.samples += 1
                time.sleep(self.period_s)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)
        self.engine.dispose()


def analyse(url: str, study_name: str) -> dict:
    import optuna
    from optuna.trial import TrialState

    from tuner.store.storage import open_storage

    study = optuna.load_study(study_name=study_name, storage=open_storage(url))
    trials = study.get_trials(deepcopy=False)
    states = Counter(t.state.name for t in trials)
    numbers = sorted(t.number for t in trials)
    gaps = len(set(range(numbers[-1] + 1)) - set(numbers)) if numbers else 0
    # a trial created in a race for the budget's last place is failed unmeasured (over_budget): not lost
    surplus = sum(1 for t in trials if t.state == TrialState.FAIL and t.user_attrs.get("status") == "over_budget")
    unfinished = sum(1 for t in trials if t.state not in (TrialState.COMPLETE, TrialState.PRUNED)) - surplus
    by_config = defaultdict(list)
    for t in trials:
        if t.params:
            by_config[tuple(sorted(t.params.items()))].append(t)
    repeated = {k: ts for k, ts in by_config.items() if len(ts) > 1}
    measured_twice = sum(1 for ts in repeated.values() if sum(
        t.user_attrs.get("status") != "duplicate" and t.state in (TrialState.COMPLETE, TrialState.PRUNED) for t in ts) > 1)
    duplicates = sum(1 for t in trials if t.user_attrs.get("status") == "duplicate")
    runners = Counter(t.user_attrs.get("runner_pid") for t in trials)
    return {
        "trials": len(trials),
        "states": dict(states),
        "statuses": dict(Counter(t.user_attrs.get("status", t.state.name.lower()) for t in trials)),
        "lost": unfinished + gaps,
        "distinct_configs": len(by_config),
        "configs_with_repeats": len(repeated),
        "duplicate_trials_reused": duplicates,
        "configs_measured_twice": measured_twice,
        "over_budget": surplus,
        # what the budget counts: finished trials that did not reuse a stored value
        "measured": sum(1 for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)
                        and t.user_attrs.get("status") != "duplicate"),
        "trials_per_worker": sorted(runners.values(), reverse=True),
    }


def run_one(kind: str, dataset: Path, workers: int, trials: int, seed: int, workdir: Path) -> dict:
    name = f"load_{kind}_{uuid.uuid4().hex[:8]}"
    url = POSTGRES_URL if kind == "postgres" else str(workdir / f"{name}.log")
    poller = ConnectionPoller(POSTGRES_URL) if kind == "postgres" else None
    if poller:
        poller.start()
    cmd = [sys.executable, "-m", "tuner", "run", "--replay", str(dataset), "--storage", url, "--study-name", name,
           "--workers", str(workers), "--trials", str(trials), "--seed", str(seed), "--json"]
    started = time.monotonic()
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir, env={**os.environ, "PYTHONPATH": str(ROOT)})
    elapsed = time.monotonic() - started
    if poller:
        poller.stop()
    if result.returncode != 0:
        raise SystemExit(f"{kind}: tuner run failed ({result.returncode}): {result.stderr[-2000:]}")
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    report = {"storage": kind, "study": name, "workers": workers, "budget": trials, "dataset": dataset.name,
              "elapsed_s": round(elapsed, 1), **analyse(url, name)}
    report["throughput_trials_per_s"] = round(report["trials"] / elapsed, 2)
    report["cli_summary_trials"] = summary["trials"]
    if poller:
        report.update(peak_connections_total=poller.peak_total, peak_connections_db=poller.peak_db,
                      baseline_connections=poller.baseline[0], baseline_connections_db=poller.baseline[1],
                      max_connections=poller.max_connections,
                      poll_samples=poller.samples)
        import optuna

        from tuner.store.storage import open_storage

        optuna.delete_study(study_name=name, storage=open_storage(url))  # keep the shared test db small
    return report


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--trials", type=int, default=1000, help="the study's trial budget, shared by all workers")
    p.add_argument("--dataset", default="convolution_milo_A100.json.gz")
    p.add_argument("--storages", default="postgres,journal")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    dataset = DATASETS / args.dataset
    reports = []
    with tempfile.TemporaryDirectory(prefix="tuner-load-") as tmp:
        for kind in args.storages.split(","):
            report = run_one(kind, dataset, args.workers, args.trials, args.seed, Path(tmp))
            print(json.dumps(report), flush=True)
            reports.append(report)
    print(f"\n{platform.node()}, {os.cpu_count()} CPUs, {dt.date.today().isoformat()}")
    print("| storage | workers | budget | trials | lost | distinct configs | repeats (reused) | measured twice | "
          "trials/s | peak conns (db/all, max) |")
    for r in reports:
        conns = (f"{r['peak_connections_db']}/{r['peak_connections_total']}, {r['max_connections']}"
                 if "max_connections" in r else "-")
        print(f"| {r['storage']} | {r['workers']} | {r['budget']} | {r['trials']} | {r['lost']} | {r['distinct_configs']} | "
              f"{r['configs_with_repeats']} ({r['duplicate_trials_reused']}) | {r['configs_measured_twice']} | "
              f"{r['throughput_trials_per_s']} | {conns} |")
    return 0 if all(r["lost"] == 0 for r in reports) else 1


if __name__ == "__main__":
    sys.exit(main())
