"""Experiment (not the product): a Bayesian model of log time as main effects plus pairwise
interactions of the axes, searched by Thompson sampling over the valid untried pool, numpy only.

log t(x) = sum_a m_a[x_a] + sum_{a<b} p_ab[x_a, x_b] + noise. Priors: main effects of an ordered
axis correlated over level distance (Gaussian, width ``width`` levels), of a choice axis
independent; a pair's prior is the Kronecker product of its two axes' correlations. The prior
scales of main effects and pairs and the noise are chosen by marginal likelihood over a small grid.
Failed configs enter with the worst value seen. Proposal: one posterior draw, the untried config it
predicts fastest among those the Parzen feasibility model does not expect to fail.

    cd docs/experiments && python sampler_sim.py --seeds 20 --budget 100 --model pairwise_prototype:Pairwise
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from tuner.search.parzen import Mixture, ParzenSearch

GRID = [(m, p, s) for m in (0.5, 1.0) for p in (0.1, 0.3, 1.0) for s in (0.01, 0.05, 0.2)]


def _corr(levels: int, ordered: bool, width: float) -> np.ndarray:
    index = np.arange(levels)
    if not ordered:
        return np.eye(levels)
    return np.exp(-0.5 * ((index[:, None] - index[None, :]) / width) ** 2)


def _sqrt(matrix: np.ndarray) -> np.ndarray:
    vals, vecs = np.linalg.eigh(matrix)
    return (vecs * np.sqrt(np.clip(vals, 0, None))) @ vecs.T


class Pairwise:
    def __init__(self, seed=None, n_startup_trials=10, width=1.0, sample=8192, greedy=False):
        self.rng = np.random.default_rng(seed)
        self.n_startup_trials = n_startup_trials
        self.width = width
        self.sample = sample
        self.greedy = greedy
        self.blocks = None

    def _setup(self, pool, ordered):
        axes = [a for a, n in enumerate(pool.levels) if n > 1]
        roots = {a: _sqrt(_corr(pool.levels[a], ordered[a], self.width)) for a in axes}
        blocks = []  # (axes, root of the prior correlation, is_pair)
        for a in axes:
            blocks.append(((a,), roots[a], False))
        for a, b in itertools.combinations(axes, 2):
            blocks.append(((a, b), np.kron(roots[a], roots[b]), True))
        self.blocks = blocks

    def _index(self, codes, pool, block_axes):
        if len(block_axes) == 1:
            return codes[:, block_axes[0]]
        a, b = block_axes
        return codes[:, a] * pool.levels[b] + codes[:, b]

    def _features(self, codes, pool):
        """Z = X Lambda^{1/2} per block: (main part, pair part) for the rows ``codes``."""
        main, pair = [], []
        for block_axes, root, is_pair in self.blocks:
            (pair if is_pair else main).append(root[self._index(codes, pool, block_axes)])
        return np.hstack(main), np.hstack(pair)

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        if len(own) < self.n_startup_trials or not own.measured:
            rows = pool.random_untried(1, self.rng)
            return int(rows[0]) if len(rows) else None
        if self.blocks is None:
            self._setup(pool, ordered)
        y = np.log(np.asarray(own.values))
        codes = list(own.measured)
        worst = y.max()
        extra = own.slower + own.failed
        if extra:
            codes += extra
            y = np.concatenate([y, np.full(len(extra), worst)])
        codes = np.stack(codes)
        mu, sd = y.mean(), y.std() + 1e-9
        ys = (y - mu) / sd
        zm, zp = self._features(codes, pool)
        km, kp = zm @ zm.T, zp @ zp.T
        n = len(ys)
        best, choice = -math.inf, None
        for m, p, s in GRID:  # marginal likelihood (function space)
            K = m * km / max(1, len(self.blocks)) + p * kp / max(1, len(self.blocks)) + s * np.eye(n)
            try:
                L = np.linalg.cholesky(K)
            except np.linalg.LinAlgError:
                continue
            alpha = np.linalg.solve(L, ys)
            ll = -0.5 * alpha @ alpha - np.log(np.diag(L)).sum()
            if ll > best:
                best, choice = ll, (m, p, s)
        m, p, s = choice
        nb = max(1, len(self.blocks))
        Z = np.hstack([zm * math.sqrt(m / nb), zp * math.sqrt(p / nb)])
        A = Z.T @ Z / s + np.eye(Z.shape[1])
        La = np.linalg.cholesky(A)
        mean = np.linalg.solve(La.T, np.linalg.solve(La, Z.T @ ys / s))
        if self.greedy:
            w = mean
        else:
            w = mean + np.linalg.solve(La.T, self.rng.standard_normal(len(mean)))
        rows = pool.random_untried(self.sample, self.rng)
        if not len(rows):
            return None
        cand = pool.codes[rows]
        cm, cp = self._features(cand, pool)
        f = np.hstack([cm * math.sqrt(m / nb), cp * math.sqrt(p / nb)]) @ w
        if own.failed:
            ok, failed = Mixture(pool.levels, ordered, sharp=True), Mixture(pool.levels, ordered, sharp=True)
            ok.add(own.measured + own.slower)
            failed.add(own.failed)
            log_ok = ok.log_density(cand, self.rng) + math.log(ok.mass + 1.0)
            log_fail = failed.log_density(cand, self.rng) + math.log(failed.mass + 1.0)
            feasible = log_ok - np.logaddexp(log_ok, log_fail) > math.log(0.5)
            if feasible.any():
                f = np.where(feasible, f, np.inf)
        return int(rows[int(np.argmin(f))])


class Alternate:
    """Parzen and pairwise proposals in turn."""

    def __init__(self, seed=None):
        self.parzen = ParzenSearch(seed=seed)
        self.pairwise = Pairwise(seed=seed)
        self.turn = 0

    def propose(self, pool, ordered, prior=None):
        self.turn += 1
        return (self.pairwise if self.turn % 2 else self.parzen).propose(pool, ordered)
