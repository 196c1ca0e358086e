"""How fast does each sampler approach the optimum of a recorded full grid, and what does it cost? (replay, no GPU)

    python bench/bench_sampler.py [--quick] [--seeds 5] [--kernel-tuner all] [--out docs/experiments/results_sampler.md]
    python bench/bench_sampler.py --quick --seeds 20 --recordings FOLDER [--warm-pair SOURCE[,SOURCE...] TARGET]
    python bench/bench_sampler.py --own-kernel [--seeds 10] [--budget 200] [--out FILE]
    python bench/bench_sampler.py --proposal-cost

Quality: for each recording and strategy, the fraction of the optimum (optimum / best found)
after 25 / 50 / 100 / 200 counted configurations (each a distinct valid config, failures
included), mean and worst over seeds (the mean over the practice spaces with its standard
error over seeds: means closer than two of those are not told apart), and the score of
Willemsen et al. (FGCS 2024): (random - strategy) / (random - optimum) in time, averaged
over every budget from 1 to the largest, where ``random`` is the exact expected best of
uniform random search without repeats at that budget. Strategies: the tuner's default (``tpe``), the tuner's ``random``,
plain Optuna TPE (TPESampler defaults over categorical axes: invalid proposals are not
counted, repeats reuse the value and are not counted), and Kernel Tuner's strategies when
``kernel_tuner`` is importable (``--kernel-tuner``: genetic_algorithm and pso by default, any of
its strategy names, or ``all`` for the ones listed in ``KERNEL_TUNER_ALL``).

Own kernel (``--own-kernel``, issue #30): on the Hopper grid recordings of patch_embed, FC1 and FC2,
the counted configs until the best found is within 1 % of the recording's optimum, median and worst
over seeds, for the default sampler cold and, on FC1 and FC2, transferred (``--warm-start`` from a
60-trial patch_embed study of the same seed, as ``--warm-pair`` does; the source's trials are not
counted), against the tuner's ``random`` and the exact median of uniform random search without repeats.

Cost: replay wall time per trial of ``tuner`` (default sampler, the Runner, SQLite) against
plain Optuna TPE with the same SQLite storage (ratio, same run) at 100 and 1,000 trials, and
the sampler's own time per ask at 1k / 10k / 100k valid configs (synthetic spaces), and per
proposal with 200 / 2,000 / 20,000 trials finished (``--proposal-cost``: that table alone).
"""

from __future__ import annotations

import argparse
import datetime as dt
import gzip
import json
import math
import random
import shlex
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna

from tuner.contract.kernel_spec import load_spec
from tuner.errors import UserError
from tuner.evaluate.replay import Record, Recording, ReplayEvaluator, load_recording, recording_space
from tuner.run.runner import Runner, RunSettings
from tuner.search.parzen import ParzenSearch
from tuner.search.pool import Observations, Pool
from tuner.search.sampler import ordered_axis
from tuner.search.space import Space
from tuner.study.file import load_study
from tuner.testing import ask_seconds

ROOT = Path(__file__).resolve().parents[1]
CACHES = ROOT / "tests/data/kernel_tuner"
#: (label, study file or None when the recording carries its space, recording)
RECORDINGS = [
    ("convolution A100", None, CACHES / "convolution_milo_A100.json.gz"),
    ("convolution A4000", None, CACHES / "convolution_milo_A4000.json.gz"),
    ("convolution TITAN RTX", None, CACHES / "convolution_RTX_Titan.json.gz"),
    ("GEMM RTX 2080 Ti", None, CACHES / "gemm_RTX_2080_Ti.json.gz"),
    ("pnpoly RTX 2080 Ti", None, CACHES / "pnpoly_RTX_2080_Ti.json.gz"),
    ("pnpoly RTX 3090", None, CACHES / "pnpoly_RTX_3090.json.gz"),
]
PATCH_EMBED_HOPPER = ROOT / "studies/recorded/patch_embed_sm90a_hopper_grid_h200.json"
OURS = [
    ("patch_embed H200 (264)", ROOT / "studies/patch_embed_sm90a_grid.toml", ROOT / "studies/recorded/patch_embed_sm90a_grid_h200.csv"),
    ("patch_embed Hopper grid H200 (1,184)", None, PATCH_EMBED_HOPPER),
]
#: --own-kernel: (label, recording, the recording a transferred run warm-starts from, or None). FC1 and FC2
#: share most of patch_embed's axes (FC1 has GELU_H2 instead of EXTRA_TMA / EPI_BATCH): the product's case
#: of a new shape started from an earlier study
OWN_KERNEL = [
    ("patch_embed H200", PATCH_EMBED_HOPPER, None),
    ("FC1 H200", ROOT / "studies/recorded/fc1_sm90a_hopper_grid_h200.json", PATCH_EMBED_HOPPER),
    ("FC2 H100", ROOT / "studies/recorded/fc2_sm90a_hopper_grid_h100.json", PATCH_EMBED_HOPPER),
    ("FC2 H200", ROOT / "studies/recorded/fc2_sm90a_hopper_grid_h200.json", PATCH_EMBED_HOPPER),
]
#: --own-kernel: "found" is a time within this fraction of the optimum
WITHIN = 0.01
BUDGETS = (25, 50, 100, 200)
#: Kernel Tuner 1.5's strategies that run on a cache file without further options
KERNEL_TUNER_ALL = ("genetic_algorithm", "pso", "bayes_opt", "dual_annealing", "basinhopping", "greedy_ils", "mls",
                    "simulated_annealing", "firefly_algorithm", "diff_evo")
#: the same kernel on two GPUs; then two versions of a kernel with other axes and values (the source's configs are
#: mapped onto the target's space: tuner/search/transfer.py)
WARM_PAIRS = [("convolution A100", "convolution A4000"), ("pnpoly RTX 3090", "pnpoly RTX 2080 Ti"),
              ("convolution A100", "convolution TITAN RTX")]


def user_recordings(paths: list[Path], parser: argparse.ArgumentParser, option: str = "--recordings") -> list[tuple[str, None, Path]]:
    """(label, None, file) for each recording named or found in a named folder (``*.json``, ``*.json.gz``);
    a path that is neither, or a file that is no recording, stops the run before any is measured."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(f for f in path.iterdir() if f.name.endswith((".json", ".json.gz")))
        elif path.is_file():
            files.append(path)
        else:
            parser.error(f"{option}: {path} is neither a file nor a folder")
    if not files:
        parser.error(f"{option}: no .json or .json.gz file there")
    for file in files:
        try:
            load_recording(file)
        except UserError as error:
            parser.error(f"{option}: {error}")
    return [(f.name.removesuffix(".gz").removesuffix(".json"), None, f) for f in files]


def space_for(study_file: Path | None, recording: Recording) -> Space:
    if study_file is None:
        return recording_space(recording)
    cfg = load_study(study_file)
    return Space.from_study(cfg, load_spec(cfg.kernel))


def run_tuner(space: Space, recording: Recording, sampler: str, seed: int, budget: int, storage: str = "memory",
              warm_start: list[str] | None = None, study_name: str | None = None, pruner: bool = False,
              ahead: int = 0) -> list[float]:
    """The tuner's run on a recording; ``ahead``: trials proposed beyond the one measured, as a GPU run
    with that many compile processes proposes them (a replay alone proposes each when it is measured)."""
    settings = RunSettings(study_name=study_name or f"{sampler}-{seed}", sampler=sampler, trials=budget, seed=seed,
                           pruner=pruner, progress=None, warm_start=warm_start or [])
    evaluator = ReplayEvaluator(recording, ahead=ahead)
    runner = Runner(space, evaluator, settings, storage_url=storage)
    runner.run()
    trials = [t for t in runner.study.trials if t.state.is_finished() and t.user_attrs.get("status") != "duplicate"]
    return [(recording.lookup(t.params).ms if t.user_attrs.get("status") == "ok" else math.inf) for t in trials]


def run_plain_tpe(recording: Recording, seed: int, budget: int, storage: str | None = None) -> list[float]:
    """Plain Optuna TPE over the recording's axes: a new valid config counts, an invalid one or a repeat does not."""
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.TPESampler(seed=seed))
    counted: dict[tuple, float] = {}

    def objective(trial: optuna.Trial) -> float:
        params = {a: trial.suggest_categorical(a, v) for a, v in recording.axes.items()}
        record = recording.lookup(params)
        if record is None or record.status == "invalid":
            raise optuna.TrialPruned()
        key = tuple(params.values())
        counted.setdefault(key, record.ms if record.status == "ok" else math.inf)
        if record.status != "ok":
            raise optuna.TrialPruned()
        return record.ms

    def enough(study, trial) -> None:
        if len(counted) >= budget:
            study.stop()

    study.optimize(objective, n_trials=50 * budget, callbacks=[enough])
    return list(counted.values())[:budget]


def run_kernel_tuner(recording: Recording, strategy: str, seed: int, budget: int) -> list[float]:  # pragma: no cover - optional
    """Kernel Tuner's strategy on the cache file itself (simulation mode), when it is installed.
    Its search space is the recorded configs (the tuner's valid set for a recording)."""
    import kernel_tuner

    opener = gzip.open if recording.path.name.endswith(".gz") else open
    with opener(recording.path, "rt") as f:
        data = json.load(f)
    keys = list(data["tune_params_keys"])
    recorded = {tuple(entry[k] for k in keys) for entry in data["cache"].values()}

    def recorded_config(params: dict) -> bool:
        return tuple(params[k] for k in keys) in recorded

    with tempfile.TemporaryDirectory() as tmp:  # simulation mode reads an uncompressed X.json
        cache = Path(tmp) / "cache.json"
        cache.write_text(json.dumps(data))
        np.random.seed(seed)
        random.seed(seed)  # Kernel Tuner's strategies draw from both
        results, _ = kernel_tuner.tune_kernel(
            data["kernel_name"], "", data["problem_size"], [], {k: data["tune_params"][k] for k in keys},
            restrictions=[recorded_config],
            simulation_mode=True, cache=str(cache), strategy=strategy,
            strategy_options={"max_fevals": budget}, verbose=False, quiet=True)
    return [r["time"] if isinstance(r.get("time"), (int, float)) else math.inf for r in results][:budget]


def best_so_far(values: list[float], length: int) -> np.ndarray:
    out = np.minimum.accumulate(np.asarray(values + [math.inf] * max(0, length - len(values)), dtype=float)[:length])
    return out


def random_expected_best(recording: Recording, space: Space, length: int) -> np.ndarray:
    """E[best time] of uniform random search without repeats over the valid set, budgets 1..length."""
    times = []
    for params in space.valid:
        record = recording.lookup(params)
        times.append(record.ms if record is not None and record.status == "ok" else math.inf)
    times_arr = np.asarray(times)
    times_arr = np.sort(np.where(np.isfinite(times_arr), times_arr, times_arr[np.isfinite(times_arr)].max()))  # a failure: the worst
    n = len(times_arr)
    i = np.arange(1, n + 1)
    out = []
    for budget in range(1, length + 1):
        b = min(budget, n)
        # P(the i-th fastest is the best of b draws) = C(n-i, b-1) / C(n, b), i = 1..n
        p = np.exp(_log_comb(n - i, b - 1) - _log_comb(np.array(n), b))
        out.append(float((p * times_arr).sum() / p.sum()))
    return np.asarray(out)


def _log_comb(n, k):
    n = np.asarray(n, dtype=float)
    valid = n >= k
    value = np.where(valid, np.vectorize(math.lgamma)(n + 1) - math.lgamma(k + 1) - np.vectorize(math.lgamma)(np.maximum(n - k, 0) + 1), -np.inf)
    return value


@dataclass
class Row:
    space: str
    strategy: str
    fractions: dict[int, np.ndarray]  # budget -> each seed's fraction of the optimum
    score: float
    seconds: float


def mean_over_spaces(fractions: list[np.ndarray]) -> tuple[float, float, float]:
    """(mean, its standard error over seeds, worst seed of any space) of each space's per-seed
    fractions: each seed's are averaged over the spaces first, so the error is the spread between seeds."""
    per_seed = np.mean(fractions, axis=0)
    error = float(per_seed.std(ddof=1) / math.sqrt(len(per_seed))) if len(per_seed) > 1 else math.nan
    return float(per_seed.mean()), error, float(np.min(fractions))


def quality(label: str, study_file, path: Path, strategies: list[str], seeds: int, budgets: tuple[int, ...]) -> list[Row]:
    recording = load_recording(path)
    space = space_for(study_file, recording)
    optimum = min(r.ms for k, r in recording.records.items() if r.status == "ok" and space.is_valid(dict(zip(recording.axes, k, strict=True))))
    length = min(max(budgets), len(space.valid))
    random_curve = random_expected_best(recording, space, length)
    rows = []
    for strategy in strategies:
        if strategy.startswith("kt-") and recording.format != "kernel_tuner":
            continue  # Kernel Tuner simulates on its own cache files only
        started = time.perf_counter()
        curves = []
        for seed in range(seeds):
            if strategy in ("tpe", "random"):
                values = run_tuner(space, recording, strategy, seed, length)
            elif strategy == "optuna-tpe":
                values = run_plain_tpe(recording, seed, length)
            else:
                values = run_kernel_tuner(recording, strategy.removeprefix("kt-"), seed, length)
            curves.append(best_so_far(values, length))
        curves_arr = np.stack(curves)
        fractions = {}
        for b in budgets:
            fractions[b] = optimum / curves_arr[:, min(b, length) - 1]
        worst = max(r.ms for r in recording.records.values() if r.status == "ok")
        mean_curve = np.where(np.isfinite(curves_arr), curves_arr, worst).mean(axis=0)  # only failures so far: the worst time
        gap = random_curve - optimum
        score = float(np.mean(np.where(gap > 0, (random_curve - mean_curve) / np.where(gap > 0, gap, 1.0), 1.0)))
        rows.append(Row(label, strategy, fractions, score, time.perf_counter() - started))
    return rows


def warm_start_quality(pairs: list[tuple[str, list[Path], str, Path]], seeds: int, budget: int = 25,
                       source_budget: int = 100) -> list[tuple[str, float, float, float]]:
    """For each (sources' label, source files, target label, target file): fraction at ``budget``
    on the target with the source studies (``source_budget`` trials of the default sampler on
    each other GPU, same storage) as --warm-start, against a cold start."""
    out = []
    for sources_label, source_paths, target, target_path in pairs:
        sources = [load_recording(path) for path in source_paths]
        rt = load_recording(target_path)
        st = space_for(None, rt)
        warm, cold = [], []
        for seed in range(seeds):
            values = run_warm(sources, rt, st, seed, budget, source_budget)
            warm.append(rt.optimum() / min(values))
            cold.append(rt.optimum() / min(run_tuner(st, rt, "tpe", seed, budget)))
        out.append((f"{sources_label} -> {target}", statistics.mean(warm), min(warm), statistics.mean(cold)))
    return out


def run_warm(sources: list[Recording], recording: Recording, space: Space, seed: int, budget: int,
             source_budget: int) -> list[float]:
    """``run_tuner`` of the default sampler on ``recording`` warm-started (``--warm-start``) from a
    ``source_budget``-trial study of the default sampler on each source, same seed, same storage."""
    with tempfile.TemporaryDirectory() as tmp:
        url = str(Path(tmp) / "warm.log")  # one journal file holds all the studies
        names = [f"source{i}" for i in range(len(sources))]
        for name, rs in zip(names, sources, strict=True):
            run_tuner(space_for(None, rs), rs, "tpe", seed, source_budget, storage=url, study_name=name)
        return run_tuner(space, recording, "tpe", seed, budget, storage=url, warm_start=names, study_name="target")


def configs_to_optimum(values: list[float], optimum: float, within: float = WITHIN) -> float:
    """Counted configs until one is within ``within`` of ``optimum`` (time <= (1 + within) * optimum); inf when none is."""
    return next((i + 1 for i, v in enumerate(values) if v <= (1 + within) * optimum), math.inf)


def random_median_to_optimum(n: int, near: int) -> int:
    """Median counted configs of uniform random search without repeats over ``n`` configs until one of
    the ``near`` good ones is drawn: the first budget b with P(none in b draws) = C(n - near, b) / C(n, b) <= 1/2."""
    missed = 1.0
    for b in range(1, n + 1):
        missed *= (n - near - b + 1) / (n - b + 1)
        if missed <= 0.5:
            return b
    raise ValueError("no good config")


@dataclass
class OwnRow:
    space: str
    start: str  # "cold" or "transferred"
    configs: int  # valid configs in the space
    near: int  # of them, within WITHIN of the optimum
    tpe: list[float]  # each seed's counted configs to the optimum (inf: not within the budget)
    random: list[float] | None  # the same for the tuner's random sampler (cold only)


def own_kernel(targets: list[tuple[str, Path, Path | None]], seeds: int, budget: int, source_budget: int = 60) -> list[OwnRow]:
    """For each (label, recording, source recording or None): the default sampler's counted configs to within
    ``WITHIN`` of the optimum per seed, cold (with the tuner's random beside it) and, with a source, warm-started."""
    rows = []
    for label, path, source_path in targets:
        recording = load_recording(path)
        space = space_for(None, recording)
        optimum = recording.optimum()
        near = sum(1 for p in space.valid if (r := recording.lookup(p)) is not None and r.status == "ok"
                   and r.ms is not None and r.ms <= (1 + WITHIN) * optimum)
        tpe = [configs_to_optimum(run_tuner(space, recording, "tpe", seed, budget), optimum) for seed in range(seeds)]
        uniform = [configs_to_optimum(run_tuner(space, recording, "random", seed, budget), optimum) for seed in range(seeds)]
        rows.append(OwnRow(label, "cold", len(space.valid), near, tpe, uniform))
        if source_path is not None:
            source = load_recording(source_path)
            warm = [configs_to_optimum(run_warm([source], recording, space, seed, budget, source_budget), optimum)
                    for seed in range(seeds)]
            rows.append(OwnRow(label, "transferred", len(space.valid), near, warm, None))
    return rows


def replay_time(path: Path, trials: int) -> tuple[float, float]:
    """(tuner, plain Optuna TPE) wall seconds per trial, SQLite, the same run."""
    recording = load_recording(path)
    space = space_for(None, recording)
    space.require_valid()  # enumerated once, as a run does before its first trial
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        run_plain_tpe(recording, 0, trials, storage=f"sqlite:///{tmp}/plain.db")
        plain = (time.perf_counter() - started) / trials
        started = time.perf_counter()
        run_tuner(space, recording, "tpe", 0, trials, storage=f"sqlite:///{tmp}/tuner.db")
        ours = (time.perf_counter() - started) / trials
    return ours, plain


def synthetic_recording(n_valid: int, seed: int = 0) -> Recording:
    """A space of about 2 * n_valid configs, half of them valid, with a smooth random landscape."""
    rng = np.random.default_rng(seed)
    axes: dict = {"a": list(range(16)), "b": list(range(8)), "c": [1, 2, 4, 8], "d": [0, 1]}
    size = 16 * 8 * 4 * 2
    extra = 0
    while size < 2 * n_valid:
        axes[f"e{extra}"] = list(range(10))
        size *= 10
        extra += 1
    if size > 4 * n_valid:  # trim the last axis to land near 2 * n_valid
        last = f"e{extra - 1}"
        keep = max(2, round(10 * 2 * n_valid / size))
        axes[last] = list(range(keep))
        size = size // 10 * keep
    names = list(axes)
    grids = np.stack(np.meshgrid(*[np.arange(len(v)) for v in axes.values()], indexing="ij"), -1).reshape(-1, len(names))
    valid = rng.random(len(grids)) < n_valid / len(grids)
    weights = rng.normal(size=len(names))
    ms = 1.0 + np.abs((grids / np.maximum(1, [len(v) - 1 for v in axes.values()])) @ weights) + 0.1 * rng.random(len(grids))
    records = {tuple(axes[n][i] for n, i in zip(names, row, strict=True)): Record("ok", float(m), [float(m)] * 10)
               for row, m, ok in zip(grids, ms, valid, strict=True) if ok}
    return Recording(Path(f"synthetic-{n_valid}"), "csv", axes, records)


def ask_cost(n_valid: int, trials: int = 200, measured_from: int = 100) -> tuple[int, float]:
    """(valid configs, mean ms of one ask of the default sampler over trials measured_from..trials)."""
    recording = synthetic_recording(n_valid)
    recording.digest = lambda: f"synthetic{n_valid}"  # no file behind it
    space = recording_space(recording)
    return len(space.valid), 1e3 * statistics.mean(ask_seconds(space, recording, trials)[measured_from:])


def _observed(space: Space, recording: Recording, n: int, seed: int) -> Pool:
    """A pool of ``space`` with ``n`` distinct configs of ``recording`` observed (1 in 20 failed, 1 in 20 stopped)."""
    pool = Pool(space, space.valid)
    draw = np.random.default_rng(seed)
    for row in draw.choice(pool.size, size=n, replace=False):
        code = pool.codes[row]
        record = recording.lookup(pool.decode(code))
        pool.tried[row] = 1
        pool.observations.add(code, None if draw.random() < 0.05 else record.ms, failed=draw.random() < 0.05)
    pool.n_tried = n
    return pool


def _median_proposal_ms(pool: Pool, ordered: list[bool], prior: Observations | None, proposals: int) -> tuple[float, float]:
    """Median ms of a density-ratio proposal and of a plateau's move (every base's moves scanned)."""
    medians = []
    patience = 0 if prior is not None else sum(1 for levels in pool.levels if levels > 1)
    n = len(pool.observations)
    plateau = 10 * n + (10 * n - patience) % 2  # a plateau moves on every other turn from there
    untried = iter(pool.random_untried(2 * proposals, np.random.default_rng(n)))
    for since_best in (1, plateau):
        search = ParzenSearch(seed=0)
        seconds = []
        for _ in range(proposals):
            # as in a run, a value arrives before each proposal (slower than the best: the plateau goes on)
            row = next(untried)
            pool.tried[row], pool.n_tried = 1, pool.n_tried + 1
            pool.observations.add(pool.codes[row], 2 * pool.observations.best)
            pool.observations.since_best = since_best
            started = time.perf_counter()
            search.propose(pool, ordered, prior)
            seconds.append(time.perf_counter() - started)
        medians.append(1e3 * statistics.median(seconds))
    return medians[0], medians[1]


def proposal_cost_by_history(n_valid: int = 100_000, finished: tuple[int, ...] = (200, 2_000, 20_000),
                             proposals: int = 21) -> list[tuple[int, float, float]]:
    """(finished trials, median ms of a density-ratio proposal, of a plateau's move) of the default
    search on a synthetic space, its pool filled with that many distinct configs (1 in 20 failed)."""
    recording = synthetic_recording(n_valid)
    space = recording_space(recording)
    ordered = [ordered_axis(values) for values in space.axes.values()]
    return [(n, *_median_proposal_ms(_observed(space, recording, n, seed=n), ordered, None, proposals)) for n in finished]


def proposal_cost_by_prior(n_valid: int = 100_000, priors: tuple[int, ...] = (0, 1_000, 10_000, 100_000),
                           own: int = 50, proposals: int = 21) -> list[tuple[int, float, float]]:
    """(configs in the prior, median ms of a density-ratio proposal, of a plateau's move) of a warm run
    with ``own`` trials finished on the synthetic space: a prior as large as a whole Kernel Tuner cache
    of another GPU (``--warm-start FILE``) is read, not re-sorted, on each proposal."""
    recording = synthetic_recording(n_valid)
    space = recording_space(recording)
    ordered = [ordered_axis(values) for values in space.axes.values()]
    rows = []
    for size in priors:
        prior = _observed(space, recording, min(size, len(space.valid)), seed=size).observations if size else None
        rows.append((size, *_median_proposal_ms(_observed(space, recording, own, seed=1), ordered, prior, proposals)))
    return rows


def parse_args() -> tuple[argparse.Namespace, argparse.ArgumentParser]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, budgets to 100, timing at 100 trials only")
    parser.add_argument("--seeds", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="write the Markdown tables here")
    parser.add_argument("--recordings", type=Path, nargs="+", default=None, metavar="PATH",
                        help="recorded spaces (Kernel Tuner cache files, or folders of them) to measure instead of the "
                             "practice spaces; the warm-start and cost tables are left out")
    parser.add_argument("--warm-pair", type=Path, nargs=2, action="append", default=[], metavar=("SOURCE", "TARGET"),
                        help="recordings of one kernel on other GPUs and on the target: warm start on TARGET from studies of "
                             "SOURCE (files joined by commas; repeatable; replaces the default pairs)")
    parser.add_argument("--own-kernel", action="store_true",
                        help="instead: the search benchmark on our own kernel (configs to within 1 %% of the optimum "
                             "of each Hopper grid recording, cold and transferred; 10 seeds unless --seeds)")
    parser.add_argument("--budget", type=int, default=200, help="--own-kernel: configs per run (default 200)")
    parser.add_argument("--proposal-cost", action="store_true",
                        help="instead: only the sampler's time per proposal with 200 / 2,000 / 20,000 trials finished")
    parser.add_argument("--kernel-tuner", default="genetic_algorithm,pso", metavar="STRATEGIES",
                        help="Kernel Tuner strategies to compare, comma-separated, 'all', or '' for none (when kernel_tuner is installed)")
    return parser.parse_args(), parser


def kernel_tuner_strategies(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """``kt-NAME`` for each Kernel Tuner strategy asked for; none when Kernel Tuner is not installed
    (an error when some were named explicitly)."""
    try:
        from kernel_tuner.interface import strategy_map
    except ImportError:
        if args.kernel_tuner not in (parser.get_default("kernel_tuner"), ""):
            parser.error("--kernel-tuner needs kernel_tuner importable (pip install kernel_tuner)")
        return []
    names = KERNEL_TUNER_ALL if args.kernel_tuner == "all" else [n for n in args.kernel_tuner.split(",") if n]
    unknown = sorted(set(names) - set(strategy_map))
    if unknown:
        parser.error(f"--kernel-tuner: no strategy {', '.join(unknown)} in Kernel Tuner (it has: {', '.join(sorted(strategy_map))})")
    return [f"kt-{name}" for name in names]


def warm_start_pairs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[tuple[str, list[Path], str, Path]]:
    """(sources' label, source files, target label, target file) from ``--warm-pair``, or the default pairs."""
    if not args.warm_pair:
        paths = {label: path for label, _, path in RECORDINGS}
        return [(source, [paths[source]], target, paths[target]) for source, target in WARM_PAIRS]
    pairs = []
    for sources, target in args.warm_pair:
        source_paths = [Path(part) for part in str(sources).split(",")]
        if any(path.is_dir() for path in [*source_paths, target]):
            parser.error("--warm-pair: recording files, not folders")
        *found, (target_label, _, _) = user_recordings([*source_paths, target], parser, "--warm-pair")
        pairs.append((" + ".join(label for label, _, _ in found), source_paths, target_label, target))
    return pairs


def own_kernel_report(args: argparse.Namespace) -> None:
    seeds = args.seeds or 10
    lines = [f"## Search on our own kernel — replay, CPU, 2 cores, {dt.date.today().isoformat()}", "",
             f"`python bench/bench_sampler.py {shlex.join(sys.argv[1:])}` (seeds 0-{seeds - 1}, {args.budget} configs a run). "
             f"Counted configs (distinct, as run) until the best found is within {WITHIN * 100:g} % of the recording's optimum: "
             f"median / worst seed (>{args.budget}: not within the budget), then each seed's. Transferred: "
             "`--warm-start` from a 60-trial patch_embed study of the same seed (its trials not counted). "
             "Uniform: the exact median of random search without repeats.", ""]

    def count(value: float) -> str:
        return f">{args.budget}" if math.isinf(value) else f"{value:g}"

    def emit(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    emit("| space | configs (within 1 %) | start | tpe median / worst | tpe per seed | random median / worst | uniform median |")
    emit("|---|---|---|---|---|---|---|")
    for row in own_kernel(OWN_KERNEL, seeds, args.budget):
        uniform = (f"{count(statistics.median(row.random))} / {count(max(row.random))} | "
                   f"{random_median_to_optimum(row.configs, row.near)}" if row.random is not None else "– | –")
        emit(f"| {row.space} | {row.configs:,} ({row.near}) | {row.start} | {count(statistics.median(row.tpe))} / "
             f"{count(max(row.tpe))} | {' '.join(count(v) for v in row.tpe)} | {uniform} |")
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


def proposal_cost_table(emit) -> None:
    _cost_table(emit, "by finished trials (synthetic space of ~100k valid configs; ratio to 200 trials)",
                "finished trials", proposal_cost_by_history())
    emit()
    _cost_table(emit, "by the size of a warm start's prior (the same space, 50 trials finished; ratio to none)",
                "configs in the prior", proposal_cost_by_prior())


def _cost_table(emit, title: str, first: str, rows: list[tuple[int, float, float]]) -> None:
    emit(f"## Sampler time per proposal {title}")
    emit()
    emit(f"| {first} | ms, density ratio | ms, plateau move | ratios |")
    emit("|---|---|---|---|")
    _, ratio_base, move_base = rows[0]
    for n, ratio_ms, move_ms in rows:
        emit(f"| {n:,} | {ratio_ms:.2f} | {move_ms:.2f} | {ratio_ms / ratio_base:.2f} / {move_ms / move_base:.2f} |")


def main() -> None:
    args, parser = parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if args.budget < 1:
        parser.error("--budget: at least 1")
    if args.proposal_cost:
        proposal_cost_table(print)
        return
    if args.own_kernel:
        own_kernel_report(args)
        return
    seeds = args.seeds or (3 if args.quick else 5)
    budgets = BUDGETS[:3] if args.quick else BUDGETS
    strategies = ["tpe", "random", "optuna-tpe"] + kernel_tuner_strategies(args, parser)
    averaged = RECORDINGS if args.recordings is None else user_recordings(args.recordings, parser)
    warm_pairs = warm_start_pairs(args, parser)
    lines = [f"# Sampler benchmark — replay, CPU, 2 cores, {dt.date.today().isoformat()}", "",
             f"`python bench/bench_sampler.py {shlex.join(sys.argv[1:])}` ({seeds} seeds). Fraction = optimum / best "
             "found after B counted configs (mean / worst seed; over the spaces: mean ± its standard error over seeds / worst); "
             "score = Willemsen et al. (FGCS 2024), averaged over "
             f"budgets 1..{max(budgets)}; strategies: {', '.join(strategies)}.", ""]

    def emit(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    emit("## Quality")
    emit()
    emit("| space | strategy | " + " | ".join(f"@{b}" for b in budgets) + " | score | s |")
    emit("|---|---|" + "---|" * (len(budgets) + 2))
    averaged_rows: dict[str, list[Row]] = {}
    for label, study_file, path in averaged + (OURS if args.recordings is None else []):
        if not path.is_file():
            emit(f"| {label} | missing: {path.name} |")
            continue
        for row in quality(label, study_file, path, strategies, seeds, budgets):
            if (label, study_file, path) in averaged:
                averaged_rows.setdefault(row.strategy, []).append(row)
            cells = " | ".join(f"{row.fractions[b].mean():.3f} / {row.fractions[b].min():.3f}" for b in budgets)
            emit(f"| {label} | {row.strategy} | {cells} | {row.score:.3f} | {row.seconds:.0f} |")
    kind = "practice spaces" if args.recordings is None else "spaces"
    for strategy, rows in averaged_rows.items():
        cells = " | ".join("**{:.3f}** ± {:.3f} / {:.3f}".format(*mean_over_spaces([r.fractions[b] for r in rows])) for b in budgets)
        emit(f"| mean of the {len(rows)} {kind} | {strategy} | {cells} | {statistics.mean(r.score for r in rows):.3f} | |")
    if args.recordings is None or args.warm_pair:
        emit()
        emit("## Warm start (source: 100 trials of the default sampler on the other GPU, same storage; fraction at 25)")
        emit()
        emit("| pair | warm mean | warm worst seed | cold mean |")
        emit("|---|---|---|---|")
        for pair, warm, worst, cold in warm_start_quality(warm_pairs, seeds):
            emit(f"| {pair} | {warm:.3f} | {worst:.3f} | {cold:.3f} |")
    if args.recordings is None:  # the cost tables measure the practice spaces
        emit()
        emit("## Replay wall time per trial (SQLite; plain = Optuna TPESampler defaults, same storage, same run)")
        emit()
        emit("| recording | trials | tuner ms/trial | plain TPE ms/trial | ratio |")
        emit("|---|---|---|---|---|")
        for trials in ((100,) if args.quick else (100, 1000)):
            for label, _, path in RECORDINGS:
                ours, plain = replay_time(path, trials)
                emit(f"| {label} | {trials} | {1e3 * ours:.1f} | {1e3 * plain:.1f} | {ours / plain:.2f} |")
        emit()
        emit("## Sampler time per ask (synthetic spaces, in-memory storage, asks 100-200)")
        emit()
        emit("| valid configs | ms per ask |")
        emit("|---|---|")
        for n_valid in (1_000, 10_000, 100_000):
            size, ms = ask_cost(n_valid)
            emit(f"| {size:,} | {ms:.2f} |")
        emit()
        proposal_cost_table(emit)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
