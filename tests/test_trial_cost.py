"""A trial's bookkeeping does not grow with the study (issue 33, item 12).

The timing itself is bench/bench_trial_cost.py (numbers in docs/RELIABILITY.md); this counts
the work, which is deterministic: deciding whether a trial takes a place in the budget is
done once per trial, not once per trial per ask (quadratic in the study's size).
"""

from __future__ import annotations

import itertools
import types

import numpy as np
import optuna

from tests.conftest import PNPOLY
from tuner.cli import commands as cli
from tuner.run import objective, runner
from tuner.search import parzen
from tuner.search import pool as pool_module
from tuner.search.pool import Observations, Pool
from tuner.store import optuna_private
from tuner.testing import work_per_trial

TRIALS = 300


def test_budget_checks_look_at_each_trial_once(monkeypatch, tmp_path):
    calls = 0
    counts = runner.Runner._counts

    def counted(self, *args):
        nonlocal calls
        calls += 1
        return counts(self, *args)

    monkeypatch.setattr(runner.Runner, "_counts", counted)
    code = cli.main(["run", "--replay", str(PNPOLY), "--storage", f"sqlite:///{tmp_path / 'c.db'}",
                     "--trials", str(TRIALS), "--seed", "1", "--json"])
    assert code == 0
    # each trial: once when finished, plus a few times while in flight; quadratic was ~TRIALS**2
    assert TRIALS <= calls <= 6 * TRIALS, calls


def test_budget_and_repeat_lookups_read_each_finished_trial_once(monkeypatch, tmp_path):
    """The checks before and after each ask, and the look-up of a stored result, go over the
    trials finished since their last look (and those in flight), not over the whole study."""
    calls = {"facts": 0, "key_of": 0}
    facts, key_of = runner._Tally.facts, objective.Objective._key_of

    def counted_facts(self, t):
        calls["facts"] += 1
        return facts(self, t)

    def counted_key_of(self, t):
        calls["key_of"] += 1
        return key_of(self, t)

    monkeypatch.setattr(runner._Tally, "facts", counted_facts)
    monkeypatch.setattr(objective.Objective, "_key_of", counted_key_of)
    code = cli.main(["run", "--replay", str(PNPOLY), "--storage", f"sqlite:///{tmp_path / 'c.db'}",
                     "--trials", str(TRIALS), "--seed", "1", "--json"])
    assert code == 0
    # a few per trial; reading the whole study each time was ~TRIALS**2 / 2 per check
    assert calls["facts"] <= 10 * TRIALS, calls
    assert calls["key_of"] <= 4 * TRIALS, calls


def test_each_trial_reads_only_the_new_and_unfinished_trials(monkeypatch, tmp_path):
    """The budget checks, the sampler's pool and the repeat look-up read the trials created
    since their last read and those unfinished then (``optuna_private.read_trials``), not the
    whole study: ``study.get_trials`` filters and sorts every trial on each call. Counted:
    the trials each read hands over or goes through."""
    rows = {"get_trials": 0, "read_trials": 0}
    get_trials, read_trials = optuna.Study.get_trials, optuna_private.read_trials

    def counted_get_trials(self, deepcopy=True, states=None):
        rows["get_trials"] += len(get_trials(self, deepcopy=False))  # the whole study, whatever the states
        return get_trials(self, deepcopy=deepcopy, states=states)

    def counted_read_trials(study, numbers, start):
        trials, total = read_trials(study, numbers, start)
        rows["read_trials"] += len(trials)
        return trials, total

    monkeypatch.setattr(optuna.Study, "get_trials", counted_get_trials)
    monkeypatch.setattr(optuna_private, "read_trials", counted_read_trials)
    # no pruner: its best value is re-read on a wall-clock interval, not per trial
    code = cli.main(["run", "--replay", str(PNPOLY), "--storage", f"sqlite:///{tmp_path / 'c.db'}",
                     "--trials", str(TRIALS), "--seed", "1", "--no-pruner", "--json"])
    assert code == 0
    # four readers, a trial or two each per trial, and a few whole reads before and after the
    # run; reading the whole study per check was ~4 * TRIALS**2 / 2 (180,000)
    assert rows["read_trials"] <= 12 * TRIALS, rows
    assert rows["get_trials"] <= 6 * TRIALS, rows


def test_mixture_density_is_the_product_of_its_kernels():
    """Mixture.log_density gathers each axis's kernel by the observations' levels first, then by
    the candidates': the numbers of the direct formula, bit for bit (proposals stay the same)."""
    levels, ordered = [8, 1, 5, 3, 2], [True, True, True, False, False]
    rng = np.random.default_rng(3)

    def codes(n):
        return np.stack([rng.integers(k, size=n) for k in levels], axis=1).astype(np.int32)

    candidates = codes(300)
    for sharp, n_obs in ((False, 40), (True, 200)):  # 200: a subsample of MAX_COMPONENTS
        mixture = parzen.Mixture(levels, ordered, sharp=sharp)
        mixture.add(list(codes(n_obs)), weight=0.5)
        got = mixture.log_density(candidates, np.random.default_rng(7))
        draw = np.random.default_rng(7)
        weights = np.full(n_obs, 0.5)
        obs = np.stack(mixture.codes)
        if n_obs > parzen.MAX_COMPONENTS:
            keep = draw.choice(n_obs, size=parzen.MAX_COMPONENTS, replace=False)
            obs, weights = obs[keep], weights[keep] * (weights.sum() / weights[keep].sum())
        shrink = 0.0 if sharp else parzen.scott_shrink(round(0.5 * n_obs), levels)  # the bandwidth of their weight
        product = np.ones((len(candidates), len(obs)))
        for axis, n in enumerate(levels):
            if n > 1:
                product *= parzen._kernel(n, ordered[axis], shrink)[candidates[:, axis]][:, obs[:, axis]]
        uniform = 1.0 / np.prod(levels)
        expected = np.log((float(np.exp(-np.sum(np.log(levels)))) + product @ weights) / (1.0 + 0.5 * n_obs))
        assert np.array_equal(got, expected), (sharp, np.abs(got - expected).max())
        assert np.allclose(np.exp(got), (uniform + product @ weights) / (1.0 + 0.5 * n_obs))


def test_the_work_per_trial_late_in_a_study_is_the_work_early(tmp_path):
    """Item 12's measure in work, which a machine's speed cannot move: the Python calls (every
    thread) and SQL statements per trial over trials 150-200 and over the last 50 of the run
    (before 150 the Parzen mixtures still grow to their cap of components)."""
    code, per_trial = work_per_trial(["run", "--replay", str(PNPOLY), "--storage", f"sqlite:///{tmp_path / 'c.db'}",
                                      "--trials", str(TRIALS), "--seed", "1", "--no-pruner", "--json"],
                                     [(150, 50), (TRIALS - 50, 50)])
    assert code == 0
    (first_calls, first_sql), (last_calls, last_sql) = per_trial
    assert first_sql > 10 and first_calls > 1000, per_trial  # the windows were counted
    assert last_sql <= 1.02 * first_sql, per_trial
    assert last_calls <= 1.05 * first_calls, per_trial


def _trials_by_id(path) -> bool:
    """Does SQLite serve Optuna's sync query (the trials in flight, and those new since) by trial
    id rather than by scanning the study's trials?"""
    import sqlite3

    with sqlite3.connect(path) as connection:
        plan = connection.execute("EXPLAIN QUERY PLAN SELECT * FROM trials WHERE study_id = ? "
                                  "AND (trial_id IN (?, ?) OR trial_id > ?)", (1, 5, 9, 60)).fetchall()
    searches = [row[-1] for row in plan if row[-1].startswith(("SEARCH", "SCAN"))]
    return bool(searches) and all("PRIMARY KEY" in step for step in searches)


def test_a_growing_study_file_gives_sqlite_the_statistics_to_look_trials_up_by_id(tmp_path):
    path = tmp_path / "c.db"
    url = f"sqlite:///{path}"
    assert cli.main(["run", "--replay", str(PNPOLY), "--storage", url, "--trials", "20", "--seed", "1", "--json"]) == 0
    assert not _trials_by_id(path)  # small: no statistics yet, the planner's default
    assert cli.main(["run", "--replay", str(PNPOLY), "--storage", url, "--trials", "70", "--seed", "1", "--json"]) == 0
    assert _trials_by_id(path)  # told when the study passed 64 trials, during the run


def test_a_study_file_without_statistics_gets_them_when_a_run_resumes_it(tmp_path):
    import sqlite3

    path = tmp_path / "c.db"
    url = f"sqlite:///{path}"
    assert cli.main(["run", "--replay", str(PNPOLY), "--storage", url, "--trials", "70", "--seed", "1", "--json"]) == 0
    with sqlite3.connect(path) as connection:  # as a file written before the statistics were
        connection.execute("DROP TABLE sqlite_stat1")
    assert not _trials_by_id(path)
    assert cli.main(["run", "--replay", str(PNPOLY), "--storage", url, "--trials", "72", "--seed", "1", "--json"]) == 0
    assert _trials_by_id(path)


def test_observations_read_as_arrays_stay_the_lists_they_stand_for():
    """``Observations.array`` keeps its arrays between reads and converts only what was appended;
    whatever was appended (by ``add`` or to a list itself), or a list replaced, it reads as the list."""
    obs = Observations()
    assert obs.array("measured").shape == (0, 0) and obs.array("values").shape == (0,)
    rng = np.random.default_rng(0)
    for step in range(40):
        code = rng.integers(5, size=3).astype(np.int32)
        obs.add(code, None if step % 7 == 3 else float(rng.random()), failed=step % 11 == 5)
        if step % 3 == 0:  # read part-way, as a proposal does between trials
            assert np.array_equal(obs.array("measured"), np.stack(obs.measured))
            assert np.array_equal(obs.array("values"), np.asarray(obs.values))
    obs.measured.append(np.array([4, 4, 4], dtype=np.int32))  # an experiment's direct append
    assert np.array_equal(obs.array("measured")[-1], [4, 4, 4]) and len(obs.array("measured")) == len(obs.measured)
    obs.failed = [np.array([1, 2, 3], dtype=np.int32)]  # replaced by a shorter list
    assert obs.array("failed").tolist() == [[1, 2, 3]]
    obs.values = [float(v) for v in range(len(obs.values) + 5)]  # replaced by a longer one
    assert obs.array("values").tolist() == obs.values
    assert np.array_equal(obs.array("slower"), np.stack(obs.slower))


class _CountedReads(list):
    """A list that counts the items read from it (whole iterations and slices)."""

    reads = 0

    def __iter__(self):
        _CountedReads.reads += len(self)
        return super().__iter__()

    def __getitem__(self, key):
        item = super().__getitem__(key)
        _CountedReads.reads += len(item) if isinstance(key, slice) else 1
        return item


def test_a_proposal_reads_only_the_observations_new_since_the_last():
    """The search's proposals go over the study's observations as arrays kept between proposals:
    each observation is read a bounded number of times, not once per proposal (quadratic in the
    study's length: 42 ms a proposal at 20,000 trials, against under 2 ms now; bench_sampler.py
    --proposal-cost)."""
    axes = {"a": list(range(12)), "b": list(range(10)), "c": list(range(6)), "d": [0, 1]}
    space = types.SimpleNamespace(axis_names=list(axes), axes=axes)
    pool = Pool(space, [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())])
    obs = pool.observations
    for name in ("measured", "values", "weights", "slower", "failed"):
        setattr(obs, name, _CountedReads())
    search, ordered = parzen.ParzenSearch(seed=0), [True, True, True, False]
    _CountedReads.reads = 0
    proposals = 300
    for step in range(proposals):
        if step % 50 == 49:
            obs.since_best = 10 * len(axes)  # a plateau now and then: the local moves' bases
        row = search.propose(pool, ordered)
        code = pool.codes[row]
        pool.tried[row], pool.n_tried = 1, pool.n_tried + 1
        ms = 1.0 + float(np.abs(code - 3).sum())
        obs.add(code.copy(), None if step % 13 == 0 else ms, failed=step % 17 == 0, stopped=step % 5 == 0)
    assert _CountedReads.reads > 0
    # per proposal a handful of new items and single look-ups; re-reading every list was ~5 * proposals ** 2 / 2
    assert _CountedReads.reads <= 20 * proposals, _CountedReads.reads


class _NumpyCountingSorts:
    """numpy, with the number of elements each ``argsort`` was given counted."""

    sorted_elements = 0

    def __getattr__(self, name):
        return getattr(np, name)

    def argsort(self, a, *args, **kwargs):
        _NumpyCountingSorts.sorted_elements += len(a)
        return np.argsort(a, *args, **kwargs)


def test_the_ranking_of_measured_configs_merges_new_values_instead_of_sorting_them_all(monkeypatch):
    """``Observations.order`` is a stable sort of the values (ties in trial order) kept as values
    arrive: the values new since the last call are sorted and merged, so a proposal late in a long
    study does not sort its whole history (1.2 ms at 20,000 trials, twice per proposal)."""
    monkeypatch.setattr(pool_module, "np", _NumpyCountingSorts())
    rng = np.random.default_rng(0)
    obs = Observations()
    arrivals = [1, 1, 5, 1, 30, 1, 1, 2, 100] + [1] * 200
    for batch in arrivals:
        for value in rng.integers(0, 20, size=batch):  # many ties
            obs.add(np.zeros(2, dtype=np.int64), float(value))
        order = obs.order()
        assert list(order) == list(np.argsort(obs.array("values"), kind="stable"))
        assert list(obs.by_value()[1]) == sorted(obs.values)
    assert _NumpyCountingSorts.sorted_elements == sum(arrivals)
