"""A sampler that proposes only valid configurations nobody has tried yet.

Kernel spaces are small and enumerable, and most of a cross product is often invalid.
The valid set of the phase is held as an integer index (:mod:`tuner.search.pool`), and a proposal
is always one of its untried rows:

* ``tpe`` (the default) scores a bounded sample of the untried configs, plus the one-axis
  neighbours of the best ones, by a Parzen density ratio over ordinal level indices times a
  feasibility model learnt from failures (:mod:`tuner.search.parzen`); a related study's trials
  can serve as its prior (``--warm-start``);
* ``gp`` and ``random`` are Optuna samplers: their proposal is used when it is valid and
  untried, else moved to the nearest untried config (fewest differing axes, then fewest
  level steps, ties at random: no axis is favoured for having more values);
* ``grid`` measures 10 configs spread evenly over the valid set, then walks it in order
  (Optuna's BruteForceSampler semantics, without visiting invalid configurations).

The work per proposal does not depend on the size of the space nor on the number of
finished trials (only trials new since the last proposal, and those in flight, are read).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, GPSampler, RandomSampler
from optuna.trial import FrozenTrial

from tuner.errors import UserError
from tuner.search.parzen import ParzenSearch
from tuner.search.pool import TRIED_STATES, Observations, Pool, distance_ranks, trial_params
from tuner.search.space import Space

__all__ = ["PROPOSERS", "TRIED_STATES", "GridWalk", "OptunaProposer", "ParzenProposer", "Proposer", "RandomPick",
           "ValidOnlySampler", "as_proposer", "make_proposer"]

#: candidates drawn when an Optuna sampler's proposal has no untried one-axis neighbour
NEAREST_SAMPLE = 2048
#: how many values 0..k-1 read as the codes of unordered choices
CHOICE_CODES = (3, 4)


def _gp(seed: int | None, n_startup_trials: int) -> BaseSampler:
    try:
        import torch  # noqa: F401  (GPSampler needs it)
    except ImportError:
        raise UserError("sampler 'gp' needs PyTorch: pip install 'kernel-tuner-service[gp]', or use sampler = 'tpe'") from None
    return GPSampler(seed=seed, n_startup_trials=n_startup_trials)


class Proposer:
    """Chooses the next row of the pool among the untried ones (None: none left to choose)."""

    def propose(self, sampler: ValidOnlySampler, study, trial: FrozenTrial, search_space, pool: Pool) -> int | None:
        raise NotImplementedError

    def restart(self) -> None:
        """The candidates changed (a new tier): forget where a walk was."""

    def before_trial(self, study, trial) -> None:
        pass

    def after_trial(self, study, trial, state, values) -> None:
        pass

    def reseed_rng(self) -> None:
        pass


class GridWalk(Proposer):
    """The valid set in order (Optuna's BruteForceSampler semantics, without the invalid configs),
    after ``spread`` configs evenly spaced over it: a grid stopped early, and a reference chosen
    from a study's first configs (:mod:`tuner.run.probe`), have seen every part of the space, not
    only the first values of its first axes."""

    def __init__(self, spread: int = 0) -> None:
        self.spread = spread
        self._cursor = 0  # rows before it are tried

    def propose(self, sampler, study, trial, search_space, pool) -> int | None:
        if self.spread > 1 and pool.size > self.spread:
            for i in range(self.spread):
                row = i * (pool.size - 1) // (self.spread - 1)
                if pool.tried[row] == 0:
                    return row
        found = pool.first_untried(self._cursor)
        self._cursor = found if found is not None else pool.size
        return found

    def restart(self) -> None:
        self._cursor = 0


class RandomPick(Proposer):
    """An untried valid config at random."""

    def propose(self, sampler, study, trial, search_space, pool) -> int | None:
        return _first(pool.random_untried(1, sampler._rng))


class ParzenProposer(Proposer):
    """Ours (``tpe``): :class:`tuner.search.parzen.ParzenSearch` scores untried configs directly."""

    def __init__(self, search: ParzenSearch):
        self.search = search

    def propose(self, sampler, study, trial, search_space, pool) -> int | None:
        return self.search.propose(pool, sampler._ordered, sampler.prior_observations())

    def reseed_rng(self) -> None:
        self.search.reseed_rng()


class OptunaProposer(Proposer):
    """An Optuna sampler's proposal, moved to the nearest untried valid config."""

    def __init__(self, sampler: BaseSampler):
        self.sampler = sampler

    def propose(self, sampler, study, trial, search_space, pool) -> int | None:
        proposal = self.sampler.sample_relative(study, trial, search_space)
        pool.update(study, exclude=trial.number)  # other workers started trials while the base sampler thought
        if len(proposal) != len(search_space) or pool.untried == 0:  # base sampler still in its random start-up
            return _first(pool.random_untried(1, sampler._rng))
        return sampler.nearest(pool.encode(sampler._snap(proposal)))

    def before_trial(self, study, trial) -> None:
        self.sampler.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.sampler.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.sampler.reseed_rng()


#: sampler name -> factory(seed, n_startup_trials) of its proposer.
#: The study-file key and the --sampler flag take their choices from here.
PROPOSERS: dict[str, Callable[[int | None, int], Proposer]] = {
    "tpe": lambda seed, n_startup_trials: ParzenProposer(ParzenSearch(seed=seed, n_startup_trials=n_startup_trials)),
    "gp": lambda seed, n_startup_trials: OptunaProposer(_gp(seed, n_startup_trials)),
    "random": lambda seed, n_startup_trials: OptunaProposer(RandomSampler(seed=seed)),
    "grid": lambda seed, n_startup_trials: GridWalk(spread=n_startup_trials),
}


def make_proposer(name: str, seed: int | None, n_startup_trials: int = 10) -> Proposer:
    if name not in PROPOSERS:
        raise UserError(f"unknown sampler {name!r}: use {', '.join(PROPOSERS)}")
    return PROPOSERS[name](seed, n_startup_trials)


def as_proposer(base: Proposer | ParzenSearch | BaseSampler | None) -> Proposer:
    """A proposer as given, or one around our search or an Optuna sampler (None: random untried)."""
    if isinstance(base, Proposer):
        return base
    if isinstance(base, ParzenSearch):
        return ParzenProposer(base)
    if isinstance(base, BaseSampler):
        return OptunaProposer(base)
    return RandomPick()


def ordered_axis(values: Sequence[Any]) -> bool:
    """Does the order of an axis' values mean something? Numbers do (sizes, counts), except the
    codes 0, 1, 2(, 3) of a handful of choices (a method, a variant), whose neighbours are no
    closer; a longer run 0..k-1 is more likely a count."""
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        return False
    return not (len(values) in CHOICE_CODES and sorted(values) == list(range(len(values))))


class ValidOnlySampler(BaseSampler):
    """Every proposal is a valid, not-yet-tried config of ``space``, chosen by ``base``."""

    def __init__(self, space: Space, base: Proposer | ParzenSearch | BaseSampler | None, seed: int | None = None):
        self.space = space
        self.proposer = as_proposer(base)
        self._rng = np.random.default_rng(seed)
        self._candidates: list[dict[str, Any]] | None = None  # None: the whole valid set, enumerated on first use
        self._pool: Pool | None = None
        self._ordered = [ordered_axis(values) for values in space.axes.values()]
        self._prior_trials: list[FrozenTrial] = []
        self._prior: Observations | None = None
        self.exhausted = False

    # -- what the study should sample ----------------------------------------------------
    @property
    def candidates(self) -> list[dict[str, Any]]:
        return self.space.valid if self._candidates is None else self._candidates

    def set_candidates(self, candidates: Sequence[dict[str, Any]]) -> None:
        """Restrict proposals (tiered mode: tier-1 set, then tier 2 on the winner)."""
        self._candidates = list(candidates)
        self._pool = None
        self.proposer.restart()
        self.exhausted = False

    def set_prior(self, trials: Sequence[FrozenTrial]) -> None:
        """Finished trials of a related study (same axes) that shape the first proposals."""
        self._prior_trials = list(trials)
        self._prior = None

    @property
    def pool(self) -> Pool:
        if self._pool is None:
            self._pool = Pool(self.space, self.candidates)
            self._prior = None
        return self._pool

    def infer_relative_search_space(self, study, trial) -> dict[str, BaseDistribution]:
        return dict(self.space.distributions)

    def sample_relative(self, study, trial: FrozenTrial, search_space) -> dict[str, Any]:
        if trial.system_attrs.get("fixed_params"):  # an enqueued trial: keep its params
            return {}
        pool = self.pool
        pool.update(study, exclude=trial.number)
        if pool.untried == 0:
            self.exhausted = True
            return dict(self.candidates[0]) if self.candidates else {}
        row = self.proposer.propose(self, study, trial, search_space, pool)
        if row is None:
            self.exhausted = True
            return dict(self.candidates[0])
        return pool.decode(pool.codes[row])

    def _snap(self, proposal: dict[str, Any]) -> dict[str, Any]:
        """An Optuna sampler's proposal on the axes' own values: a long integer axis is an
        integer range to it (:mod:`tuner.search.distributions`), so its value may fall between two."""
        snapped = {}
        for axis, value in proposal.items():
            values = self.space.axes[axis]
            if value not in values and isinstance(value, (int, float)):
                value = min((v for v in values if isinstance(v, (int, float))), key=lambda v: abs(v - value))
            snapped[axis] = value
        return snapped

    def prior_observations(self) -> Observations | None:
        if self._prior is None and self._prior_trials:
            prior = Pool(self.space, [])
            for trial in self._prior_trials:
                prior._read(trial)
            self._prior = prior.observations
        return self._prior

    def sample_independent(self, study, trial, param_name, param_distribution):
        # Only reached for params outside the space (none in tuner studies).
        return RandomSampler().sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        self.proposer.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        self.proposer.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.proposer.reseed_rng()

    # -- helpers --------------------------------------------------------------------------
    def trial_key(self, trial: FrozenTrial) -> tuple | None:
        """The config a trial ran or will run (an enqueued trial has only fixed params yet)."""
        params = trial_params(trial, self.space.axis_names)
        return None if params is None else self.space.key(params)

    def nearest(self, code: Sequence[int]) -> int:
        """The untried row closest to ``code``: fewest differing axes, then fewest level steps
        (raw steps: an axis with many values is not favoured); ties at random."""
        pool = self.pool
        row = pool.row(code)
        if row is not None and pool.tried[row] == 0:
            return row
        rows = pool.neighbours(code)
        if not len(rows):
            rows = pool.random_untried(NEAREST_SAMPLE, self._rng)
        score = distance_ranks(pool.codes[rows], np.asarray(code), self._ordered)
        best = np.flatnonzero(score == score.min())
        return int(rows[best[self._rng.integers(len(best))]])


def _first(rows: np.ndarray) -> int | None:
    return int(rows[0]) if len(rows) else None
