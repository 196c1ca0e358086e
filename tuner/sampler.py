"""A sampler that proposes only valid configurations nobody has tried yet.

Kernel spaces are small and enumerable, and most of a cross product is often invalid.
Optuna's TPE ignores FAIL trials and proposes many duplicates in small discrete spaces,
so this sampler wraps a base sampler (TPE, GP, random) and moves its proposal onto the
set of *valid, untried* configurations:

1. the base sampler proposes a full configuration (``sample_relative``);
2. if that configuration is valid and untried, it is used as is;
3. otherwise the nearest valid untried configuration is used (fewest differing axes,
   then the smallest step along ordered axes), so the search keeps the base sampler's
   sense of direction without ever spending a compile on an invalid config or a GPU
   run on a repeat.

``grid`` walks the valid set in order (Optuna's BruteForceSampler semantics, without
visiting invalid configurations).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution
from optuna.samplers import BaseSampler, GPSampler, RandomSampler, TPESampler
from optuna.trial import FrozenTrial, TrialState

from tuner import optuna_private
from tuner.errors import UserError
from tuner.space import Space

TRIED_STATES = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING, TrialState.WAITING)


def _tpe(seed: int | None, n_startup_trials: int) -> BaseSampler:
    return TPESampler(
        seed=seed,
        multivariate=True,  # proposes whole configurations: defines interact
        constant_liar=True,  # trials in flight (asked ahead, other workers') count as bad: no piling on one region
        n_startup_trials=n_startup_trials,
    )


def _gp(seed: int | None, n_startup_trials: int) -> BaseSampler:
    try:
        import torch  # noqa: F401  (GPSampler needs it)
    except ImportError:
        raise UserError("sampler 'gp' needs PyTorch: pip install 'kernel-tuner-service[gp]', or use sampler = 'tpe'") from None
    return GPSampler(seed=seed, n_startup_trials=n_startup_trials)


#: sampler name -> factory(seed, n_startup_trials); None walks the valid set in order.
#: The study-file key and the --sampler flag take their choices from here.
BASE_SAMPLERS: dict[str, Callable[[int | None, int], BaseSampler | None]] = {
    "tpe": _tpe,
    "gp": _gp,
    "random": lambda seed, n_startup_trials: RandomSampler(seed=seed),
    "grid": lambda seed, n_startup_trials: None,
}


def make_base_sampler(name: str, seed: int | None, n_startup_trials: int = 10) -> BaseSampler | None:
    if name not in BASE_SAMPLERS:
        raise UserError(f"unknown sampler {name!r}: use {', '.join(BASE_SAMPLERS)}")
    return BASE_SAMPLERS[name](seed, n_startup_trials)


class ValidOnlySampler(BaseSampler):
    """Wraps ``base`` so every proposal is a valid, not-yet-tried config of ``space``."""

    def __init__(self, space: Space, base: BaseSampler | None, seed: int | None = None, order: str = "random"):
        self.space = space
        self.base = base
        self.order = order  # "grid": walk candidates in order; else random fallback
        self._rng = np.random.default_rng(seed)
        self.candidates: list[dict[str, Any]] = list(space.valid)
        self._axis_values = {a: list(v) for a, v in space.axes.items()}
        self._ordered_axes = {a for a, v in space.axes.items() if all(isinstance(x, int) for x in v)}
        self.exhausted = False

    # -- what the study should sample ----------------------------------------------------
    def set_candidates(self, candidates: Sequence[dict[str, Any]]) -> None:
        """Restrict proposals (tiered mode: tier-1 set, then tier 2 on the winner)."""
        self.candidates = list(candidates)
        self.exhausted = False

    def infer_relative_search_space(self, study, trial) -> dict[str, BaseDistribution]:
        return {a: CategoricalDistribution(v) for a, v in self.space.axes.items()}

    def sample_relative(self, study, trial: FrozenTrial, search_space) -> dict[str, Any]:
        if trial.system_attrs.get("fixed_params"):  # an enqueued trial: keep its params
            return {}
        tried = self.tried_keys(study, exclude=trial.number)
        remaining = [c for c in self.candidates if self.space.key(c) not in tried]
        if not remaining:
            self.exhausted = True
            return dict(self.candidates[0]) if self.candidates else {}
        if self.base is None:
            if self.order == "grid":
                return dict(remaining[0])
            return dict(remaining[self._rng.integers(len(remaining))])
        proposal = self.base.sample_relative(study, trial, search_space)
        # Other workers started (or even finished) trials while the base sampler thought: drop those too.
        remaining = self._drop_running(study, trial.number, remaining)
        if not remaining:
            self.exhausted = True
            return dict(self.candidates[0])
        if len(proposal) != len(search_space):  # base sampler still in its random start-up
            return dict(remaining[self._rng.integers(len(remaining))])
        return self.nearest(proposal, remaining)

    def sample_independent(self, study, trial, param_name, param_distribution):
        # Only reached for params outside the space (none in tuner studies).
        return RandomSampler().sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study, trial) -> None:
        if self.base is not None:
            self.base.before_trial(study, trial)

    def after_trial(self, study, trial, state, values) -> None:
        if self.base is not None:
            self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        if self.base is not None:
            self.base.reseed_rng()

    # -- helpers --------------------------------------------------------------------------
    def trial_key(self, trial: FrozenTrial) -> tuple | None:
        """The config a trial ran or will run (an enqueued trial has only fixed params yet)."""
        params = trial.params or trial.system_attrs.get("fixed_params") or {}
        if all(a in params for a in self.space.axis_names):
            return self.space.key(params)
        return None

    def tried_keys(self, study: optuna.Study, exclude: int | None = None) -> set[tuple]:
        trials = optuna_private.cached_trials(study, TRIED_STATES)
        keys = {self.trial_key(t) for t in trials if t.number != exclude}
        keys.discard(None)
        return keys

    def _drop_running(self, study: optuna.Study, number: int, remaining: list[dict[str, Any]]) -> list[dict[str, Any]]:
        axes = self.space.axis_names
        busy = set()
        for t in study.get_trials(deepcopy=False, states=TRIED_STATES[:3]):
            if t.number != number and all(a in t.params for a in axes):
                busy.add(tuple(t.params[a] for a in axes))
        if not busy:
            return remaining
        return [c for c in remaining if self.space.key(c) not in busy]

    def nearest(self, proposal: dict[str, Any], remaining: list[dict[str, Any]]) -> dict[str, Any]:
        """The remaining config closest to ``proposal``; ties broken at random."""
        best_score, best = None, []
        for cand in remaining:
            differing = 0
            steps = 0.0
            for axis, value in proposal.items():
                other = cand[axis]
                if other == value:
                    continue
                differing += 1
                if axis in self._ordered_axes:
                    values = self._axis_values[axis]
                    steps += abs(values.index(other) - values.index(value)) / max(1, len(values) - 1)
                else:
                    steps += 1.0
            score = (differing, steps)
            if best_score is None or score < best_score:
                best_score, best = score, [cand]
            elif score == best_score:
                best.append(cand)
        return dict(best[self._rng.integers(len(best))])
