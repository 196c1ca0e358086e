"""Experiment (not the product): a Gaussian-process search over the valid untried pool, numpy only,
tried against the default ParzenSearch with sampler_sim.py (results in results_sampler.md).

GaussianSearch: Matern 5/2 kernel with one length scale per axis (ordered axes: level index / (n-1);
other axes: same / different), log time standardised, length scales and noise fitted by Adam on the
log marginal likelihood with the dimension-scaled log-normal prior of Hvarfner et al. (2024),
expected improvement over every untried config (or 4,096 of them plus the best ones' neighbours),
times the share of successes among nearby failures. Alternate: Parzen and GP proposals in turn.
Late: Parzen alone until 30 observations, then in turn.

    cd docs/experiments && python sampler_sim.py --seeds 10 --budget 100 --model gp_prototype:Late
"""
from __future__ import annotations
import math
import numpy as np

_erf = np.vectorize(math.erf)
SQRT5 = math.sqrt(5.0)


def _norm_cdf(z):
    return 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))


class GaussianSearch:
    def __init__(self, seed=None, n_startup_trials=10, max_candidates=8192, iters=60, xi=0.0):
        self.rng = np.random.default_rng(seed)
        self.n_startup_trials = n_startup_trials
        self.max_candidates = max_candidates
        self.iters = iters
        self.xi = xi
        self.theta = None
        self.tables = None

    def _tables(self, pool, ordered):
        tabs = []
        for n, o in zip(pool.levels, ordered):
            idx = np.arange(n)
            if n == 1:
                tabs.append(None)
            elif o:
                tabs.append(((idx[:, None] - idx[None, :]) / (n - 1)) ** 2)
            else:
                tabs.append((idx[:, None] != idx[None, :]).astype(float))
        return tabs

    def _sqdist_parts(self, A, B):
        """per-axis squared distance stacks: list of (len(A), len(B)) arrays, axes with >1 level"""
        return [t[A[:, a]][:, B[:, a]] for a, t in enumerate(self.tables) if t is not None]

    @staticmethod
    def _matern(r2):
        r = np.sqrt(np.maximum(r2, 0.0))
        return (1 + SQRT5 * r + 5.0 / 3.0 * r2) * np.exp(-SQRT5 * r)

    def _fit(self, parts, y):
        d = len(parts)
        mu0, sd0 = math.sqrt(2) + 0.5 * math.log(max(d, 1)), math.sqrt(3)
        if self.theta is None or len(self.theta) != d + 1:
            self.theta = np.concatenate([np.full(d, mu0), [math.log(1e-2)]])
        th = self.theta.copy()
        m = np.zeros_like(th); v = np.zeros_like(th)
        n = len(y)
        P = np.stack(parts)  # d, n, n
        lr = 0.05
        for it in range(1, self.iters + 1):
            ell2 = np.exp(2 * th[:d])
            r2 = np.tensordot(1.0 / ell2, P, axes=1)
            r = np.sqrt(np.maximum(r2, 0))
            e = np.exp(-SQRT5 * r)
            K = (1 + SQRT5 * r + 5.0 / 3.0 * r2) * e
            noise = math.exp(th[d]) + 1e-6
            K[np.diag_indices(n)] += noise
            try:
                L = np.linalg.cholesky(K)
            except np.linalg.LinAlgError:
                th[d] += 1.0
                continue
            Linv = np.linalg.solve(L, np.eye(n))
            Kinv = Linv.T @ Linv
            alpha = Kinv @ y
            W = np.outer(alpha, alpha) - Kinv
            dk_dr2 = -5.0 / 6.0 * (1 + SQRT5 * r) * e
            g = np.empty_like(th)
            # dK/dlog ell_a = dk/dr2 * (-2 P_a / ell_a^2)
            for a in range(d):
                g[a] = 0.5 * np.sum(W * dk_dr2 * (-2.0 * P[a] / ell2[a]))
            g[d] = 0.5 * np.trace(W) * (noise - 1e-6)
            # log prior gradient
            g[:d] += -(th[:d] - mu0) / sd0 ** 2
            g[d] += -(th[d] - math.log(1e-2)) / 4.0
            # ascent (Adam)
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g * g
            th = th + lr * (m / (1 - 0.9 ** it)) / (np.sqrt(v / (1 - 0.999 ** it)) + 1e-8)
            th[d] = max(th[d], math.log(1e-6))
        self.theta = th
        return th

    def propose(self, pool, ordered, prior=None):
        own = pool.observations
        if self.tables is None:
            self.tables = self._tables(pool, ordered)
        if len(own) < self.n_startup_trials or len(own.measured) < 3:
            rows = pool.random_untried(1, self.rng)
            return int(rows[0]) if len(rows) else None
        X = np.stack(own.measured)
        y = np.log(np.asarray(own.values))
        if own.slower:
            X = np.concatenate([X, np.stack(own.slower)]); y = np.concatenate([y, np.full(len(own.slower), y.max())])
        mean, sd = y.mean(), y.std() or 1.0
        ys = (y - mean) / sd
        parts = self._sqdist_parts(X, X)
        th = self._fit(parts, ys)
        d = len(parts)
        ell2 = np.exp(2 * th[:d])
        r2 = np.tensordot(1.0 / ell2, np.stack(parts), axes=1)
        K = self._matern(r2); K[np.diag_indices(len(ys))] += math.exp(th[d]) + 1e-6
        L = np.linalg.cholesky(K)
        alpha = np.linalg.solve(L.T, np.linalg.solve(L, ys))
        if pool.untried <= self.max_candidates:
            rows = np.flatnonzero(pool.tried == 0)
        else:
            rows = pool.random_untried(self.max_candidates // 2, self.rng)
            order = np.argsort(ys)[:10]
            rows = np.unique(np.concatenate([rows] + [pool.neighbours(X[i]) for i in order])).astype(np.int64)
        if not len(rows):
            return None
        C = pool.codes[rows]
        cparts = self._sqdist_parts(C, X)
        kc = self._matern(np.tensordot(1.0 / ell2, np.stack(cparts), axes=1))  # nc, n
        mu = kc @ alpha
        vsol = np.linalg.solve(L, kc.T)
        var = np.maximum(1.0 - np.sum(vsol ** 2, axis=0), 1e-12)
        s = np.sqrt(var)
        best = ys.min() - self.xi
        z = (best - mu) / s
        ei = s * (z * _norm_cdf(z) + np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi))
        logei = np.log(np.maximum(ei, 1e-300))
        # feasibility: failed configs (sharp kernel), like ParzenSearch
        if own.failed:
            F = np.stack(own.failed)
            ok = X

            def dens(O):
                same = np.ones((len(C), len(O)))
                for a, t in enumerate(self.tables):
                    if t is None: continue
                    same *= np.exp(-0.5 * (np.sqrt(t[C[:, a]][:, O[:, a]]) * (pool.levels[a]-1 if ordered[a] else 1) / 0.5) ** 2)
                return same.sum(axis=1)
            pf = dens(F); po = dens(ok)
            pok = (po + 1e-3) / (po + pf + 2e-3)
            logei = logei + np.log(pok)
        top = np.flatnonzero(logei >= logei.max() - 1e-12)
        return int(rows[top[self.rng.integers(len(top))]])


class Alternate:
    """ParzenSearch and GaussianSearch proposals in turn."""

    def __init__(self, seed=None):
        from tuner.search.parzen import ParzenSearch

        self.parzen, self.gp, self.calls = ParzenSearch(seed=seed), GaussianSearch(seed=seed), 0

    def propose(self, pool, ordered, prior=None):
        self.calls += 1
        return (self.gp if self.calls % 2 == 0 else self.parzen).propose(pool, ordered, prior)


class Late(Alternate):
    """ParzenSearch alone until START observations, then in turn with the GP."""

    START = 30

    def propose(self, pool, ordered, prior=None):
        if len(pool.observations) < self.START:
            return self.parzen.propose(pool, ordered, prior)
        return super().propose(pool, ordered, prior)
