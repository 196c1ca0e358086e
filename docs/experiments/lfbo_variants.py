"""Likelihood-free BO (LFBO) in the manner of Helion's LFBOPatternSearch, against the default Parzen search
(an experiment, not product code; it needs scikit-learn, which is not a project dependency:
``python3 -m pip install scikit-learn``).

LFBO (Song et al. 2022, "A General Recipe for Likelihood-free Bayesian Optimization") replaces the two
densities of TPE by one classifier of "good" against "rest": a random forest fitted on every observation,
labelled good for the best share of the measured configs and rest otherwise (failed and stopped configs are
rest, so the same model learns where configs fail), the good ones weighted by how far they beat the
threshold (mean weight 1, as Helion does: the classifier's probability then ranks as expected improvement
does). Proposals are the untried config with the highest predicted P(good) among candidates made by
perturbing the best configs (Helion's pattern-search neighbours: here every untried config at most
``radius`` axes away from one of the ``n_bases`` best, any level on those axes) plus, unless switched off,
a uniform sample of the untried set. Helion picks a batch and keeps it diverse with a similarity penalty
(mean leaf co-occurrence with the configs already picked); one proposal at a time, as here, has no batch,
so there is no penalty. Ties (a forest fitted on a handful of good configs gives many candidates the same
probability) are broken at random.

The first ``n_startup_trials`` proposals are uniform over the untried set, drawn with the same generator as
``ParzenSearch`` so that a paired run agrees with the default until LFBO first acts. The forest is a loop
of scikit-learn decision trees on bootstrap weights (what RandomForestClassifier does, without its
per-fit overhead of about 1 ms per tree, which would put a proposal at 60-110 ms).

Variants (classes below):

* ``LFBO``: good = the best max(1, ceil(0.1 n)) of n measured configs, 50 trees, candidates = untried configs
  within 2 axes of the 5 best plus 1,024 uniform untried ones;
* ``LFBOLocal``: the same with the neighbours of the best configs only (no uniform sample), as Helion's
  pattern search;
* ``LFBOQ30``: good = the best 30 % (Helion's docstring's default; its code's is 0.1);
* ``LFBOMix``: the default ParzenSearch, with every other proposal after the start-up made by ``LFBO``.

Compare with the default on the practice spaces (paired: same seeds; a few minutes to a quarter of an hour
on a 2-core machine):

    cd docs/experiments && PYTHONPATH=../.. python3 sampler_sim.py --seeds 40 --budget 100 --paired lfbo_variants:LFBO

At exit the module prints how many proposals LFBO made and their mean cost in ms (fit + scoring).

Results (this 2-core machine, 2026-11-27; default 0.847 / 0.910 / 0.942 at 25 / 50 / 100, seeds 0-39), paired
difference variant - default ± its standard error, and by space at 100 (convolution A100, A4000, TITAN RTX, GEMM,
pnpoly 2080 Ti / 3090):

* ``LFBO``: +0.005 ± 0.005 / -0.004 ± 0.006 / -0.000 ± 0.005; +0.026, +0.012, +0.001, +0.001, -0.001, -0.041; 40 ms
* ``LFBOLocal``: -0.001 ± 0.005 / -0.006 ± 0.005 / -0.002 ± 0.006; +0.032, +0.009, -0.010, -0.002, +0.000, -0.044
* ``LFBOQ30``: -0.021 ± 0.006 / -0.020 ± 0.008 / +0.001 ± 0.006; +0.007, +0.043, -0.003, +0.005, -0.002, -0.045
* ``LFBOMix``: -0.001 ± 0.006 / +0.002 ± 0.006 / +0.009 ± 0.006; +0.022, +0.051, -0.001, -0.014, +0.002, -0.006;
  seeds 40-79 (default 0.861 / 0.914 / 0.946): -0.005 ± 0.005 / -0.010 ± 0.005 / -0.006 ± 0.006
  (convolution A100 -0.030 there)

None beats the default beyond the seed noise; not kept.
"""
from __future__ import annotations

import atexit
import math
import sys
import time

import numpy as np

from tuner.search.parzen import ParzenSearch

#: (proposals made by the classifier, seconds they took), per class name, printed at exit
COST: dict[str, list[float]] = {}


@atexit.register
def _print_cost() -> None:
    for name, (count, seconds) in COST.items():
        if count:
            print(f"{name}: {int(count)} classifier proposals, {1000 * seconds / count:.1f} ms each", file=sys.stderr)


class LFBO:
    """Chooses the next row of a Pool by a random-forest classifier of good against rest (module docstring)."""

    n_startup_trials = 10
    n_trees = 50
    #: share of the measured configs labelled good (at least one)
    good_share = 0.1
    #: weight the good configs by how far they beat the threshold (Helion's weighted classification)
    weighted = True
    #: candidates: untried configs within ``radius`` axes of the ``n_bases`` best, plus ``n_uniform`` uniform ones
    n_bases = 5
    radius = 2
    n_uniform = 1024

    def __init__(self, seed: int | None = None, rng: np.random.Generator | None = None):
        self.rng = rng if rng is not None else np.random.default_rng(seed)
        self._pool_id = None
        self._near: dict[bytes, np.ndarray] = {}

    # -- encoding ---------------------------------------------------------------------------------------
    def _prepare(self, pool, ordered) -> None:
        """Per pool: the feature matrix of every row (level index per ordered axis, one-hot per other axis;
        axes of one level left out), and a cache of each base's rows within ``radius`` axes."""
        if self._pool_id == id(pool):
            return
        columns = []
        for axis, n in enumerate(pool.levels):
            if n == 1:
                continue
            column = pool.codes[:, axis]
            if ordered[axis]:
                columns.append(column[:, None].astype(np.float32))
            else:
                columns.append((column[:, None] == np.arange(n)[None, :]).astype(np.float32))
        self._features = np.ascontiguousarray(np.concatenate(columns, axis=1))
        self._pool_id = id(pool)
        self._near = {}

    def _features_of(self, pool, codes) -> np.ndarray:
        rows = [pool.row(code) for code in codes]
        return self._features[rows]

    def _within(self, pool, code) -> np.ndarray:
        """Rows (tried or not) that differ from ``code`` in 1 .. radius axes (cached per code)."""
        key = np.asarray(code, dtype=np.int32).tobytes()
        rows = self._near.get(key)
        if rows is None:
            distance = (pool.codes != np.asarray(code, dtype=np.int32)[None, :]).sum(axis=1)
            rows = np.flatnonzero((distance >= 1) & (distance <= self.radius))
            self._near[key] = rows
        return rows

    # -- the classifier ---------------------------------------------------------------------------------
    def _training_set(self, obs):
        values = np.asarray(obs.values, dtype=float)
        n = len(values)
        order = np.argsort(values, kind="stable")
        n_good = max(1, math.ceil(self.good_share * n))
        labels = np.zeros(n + len(obs.slower) + len(obs.failed))
        labels[order[:n_good]] = 1.0
        weights = np.ones(len(labels))
        if self.weighted and n_good < n:
            threshold = values[order[n_good]]  # the best config labelled rest
            gain = np.maximum(threshold - values[order[:n_good]], 1e-5 * max(abs(threshold), 1e-30))
            weights[order[:n_good]] = gain / gain.mean()
        codes = [*obs.measured, *obs.slower, *obs.failed]
        return codes, labels, weights

    def _fit_predict(self, x_train, labels, weights, x_candidates) -> np.ndarray:
        """Mean P(good) of a forest of ``n_trees`` trees (bootstrap weights, sqrt(features) per split)."""
        import sklearn  # only when run: the experiment needs scikit-learn, the project does not
        from sklearn.tree import DecisionTreeClassifier

        n = len(labels)
        p = np.zeros(len(x_candidates))
        with sklearn.config_context(skip_parameter_validation=True, assume_finite=True):
            for _ in range(self.n_trees):
                boot = np.bincount(self.rng.integers(n, size=n), minlength=n) * weights
                if boot[labels == 1].sum() == 0:  # no good config drawn: this tree says 0 everywhere
                    continue
                tree = DecisionTreeClassifier(max_features="sqrt", random_state=int(self.rng.integers(2**31)))
                tree.fit(x_train, labels, sample_weight=boot, check_input=False)
                if len(tree.classes_) < 2:
                    p += 1.0
                    continue
                value = tree.tree_.predict(x_candidates)
                p += value[:, 1] / value.sum(axis=1)
        return p / self.n_trees

    # -- proposals --------------------------------------------------------------------------------------
    def _uniform(self, pool):
        rows = pool.random_untried(1, self.rng)
        return int(rows[0]) if len(rows) else None

    def propose(self, pool, ordered, prior=None) -> int | None:
        """The row to try next, or None when nothing is left (a prior is ignored)."""
        obs = pool.observations
        if len(obs) + len(pool.in_flight_codes()) < self.n_startup_trials or not obs.measured:
            return self._uniform(pool)
        return self._classifier_proposal(pool, ordered)

    def _classifier_proposal(self, pool, ordered) -> int | None:
        started = time.perf_counter()
        try:
            return self._choose(pool, ordered)
        finally:
            cost = COST.setdefault(type(self).__name__, [0, 0.0])
            cost[0] += 1
            cost[1] += time.perf_counter() - started

    def _choose(self, pool, ordered) -> int | None:
        self._prepare(pool, ordered)
        obs = pool.observations
        codes, labels, weights = self._training_set(obs)
        if labels.min() == labels.max():  # one class only: nothing to learn yet
            return self._uniform(pool)
        best = [obs.measured[i] for i in np.argsort(obs.values, kind="stable")[: self.n_bases]]
        candidates = [self._within(pool, code) for code in best]
        if self.n_uniform:
            candidates.append(pool.random_untried(self.n_uniform, self.rng))
        rows = np.unique(np.concatenate(candidates)).astype(np.int64)
        rows = rows[pool.tried[rows] == 0]
        if not len(rows):
            return self._uniform(pool)
        score = self._fit_predict(self._features_of(pool, codes), labels, weights, self._features[rows])
        top = np.flatnonzero(score >= score.max() - 1e-12)
        return int(rows[top[self.rng.integers(len(top))]])


class LFBOLocal(LFBO):
    """Candidates: the untried configs within 2 axes of the 5 best only (no uniform sample)."""

    n_uniform = 0


class LFBOQ30(LFBO):
    """Good: the best 30 % of the measured configs."""

    good_share = 0.3


class LFBOMix(ParzenSearch):
    """The default search; after its start-up, every other proposal is LFBO's (sharing its generator)."""

    lfbo_class = LFBO

    def __init__(self, seed: int | None = None, **kwargs):
        super().__init__(seed=seed, **kwargs)
        self.lfbo = self.lfbo_class(rng=self.rng)
        self.count = 0

    def propose(self, pool, ordered, prior=None):
        obs = pool.observations
        if len(obs) + len(pool.in_flight_codes()) >= self.n_startup_trials and obs.measured:
            self.count += 1
            if self.count % 2 == 1:
                return self.lfbo._classifier_proposal(pool, ordered)
        return super().propose(pool, ordered, prior)
