"""A portfolio of proposers with a bandit (issue 30 names it; an experiment, not product code).

Two arms share the study's observations: the default Parzen search (one density over all axes) and the
same search with per-axis densities (plain Optuna TPE's independent model, which does better on
convolution A100 and worse elsewhere). Each proposal after the start-up goes to an arm drawn by Thompson
sampling; an arm's reward for a proposal is the share of earlier measured values its config beat (0 for
a failure), discounted so that the bandit follows the phase of the search. Compare with

    cd docs/experiments && PYTHONPATH=. python3 sampler_sim.py --seeds 40 --budget 100 --paired portfolio_variants:Bandit

Results: results_sampler.md, "2026-11-27".
"""

import numpy as np

import tuner.search.parzen as P

DISCOUNT = 0.95


class Independent(P.ParzenSearch):
    """The default search with every density a product of per-axis mixtures."""

    def propose(self, pool, ordered, prior=None):
        original = P.Mixture.log_density
        P.Mixture.log_density = _independent_log_density
        try:
            return super().propose(pool, ordered, prior)
        finally:
            P.Mixture.log_density = original


def _independent_log_density(mix, candidates, rng):
    if not len(mix) or mix.sharp:  # the feasibility model keeps its joint kernel
        return ORIGINAL_LOG_DENSITY(mix, candidates, rng)
    obs = mix.codes
    weights = np.asarray(mix.weights, dtype=float)
    total = 1.0 + weights.sum()
    shrink = P.scott_shrink(len(mix), mix.levels)
    out = np.zeros(len(candidates))
    for axis, n in enumerate(mix.levels):
        if n == 1:
            continue
        factor = P._kernel(n, mix.ordered[axis], shrink)[:, obs[:, axis]].take(candidates[:, axis], axis=0)
        out += np.log((1.0 / n + factor @ weights) / total)
    return out


ORIGINAL_LOG_DENSITY = P.Mixture.log_density


class Bandit:
    """Thompson sampling between the joint and the per-axis search."""

    def __init__(self, seed=None):
        self.arms = [P.ParzenSearch(seed=seed), Independent(seed=None if seed is None else seed + 10_000)]
        self.rng = np.random.default_rng(seed)
        self.wins = np.ones(len(self.arms))
        self.losses = np.ones(len(self.arms))
        self.pending = None  # (arm, measured configs before the proposal, observations before it)
        self.chosen = []  # each proposal's arm, for inspection

    def _credit(self, pool):
        """The last proposal's reward, once its observation is in: the share of earlier values it beat."""
        if self.pending is None:
            return
        arm, measured, total = self.pending
        obs = pool.observations
        if len(obs) == total:
            return
        if len(obs.measured) > measured:
            earlier = np.asarray(obs.values[:-1])
            reward = float(np.mean(earlier > obs.values[-1])) if len(earlier) else 0.5
        else:  # failed, or stopped as slower
            reward = 0.0
        self.wins *= DISCOUNT
        self.losses *= DISCOUNT
        self.wins[arm] += reward
        self.losses[arm] += 1.0 - reward
        self.pending = None

    def propose(self, pool, ordered, prior=None):
        self._credit(pool)
        obs = pool.observations
        started = len(obs) + len(pool.in_flight_codes())
        if started < self.arms[0].n_startup_trials:
            arm = 0
        else:
            arm = int(np.argmax(self.rng.beta(self.wins, self.losses)))
        self.pending = (arm, len(obs.measured), len(obs))
        self.chosen.append(arm)
        return self.arms[arm].propose(pool, ordered, prior)
