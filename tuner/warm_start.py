"""Warm start: begin a new study (a new shape, a new GPU) with an earlier study's winners.

The best configurations of the source study that are valid in this study's space and not
tried yet are queued as the first trials, so the sampler starts from what is known to be
fast instead of from random picks. Defines the source did not tune take this space's
defaults; in tiered mode, tier-2 defines are held at their defaults as tier 1 requires.
"""

from __future__ import annotations

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner import optuna_private
from tuner.errors import UserError
from tuner.pool import trial_params
from tuner.results import value_of
from tuner.space import Space

MARK = "warm_started_from"
START_MARK = "start_config"


class _Queue:
    """Enqueues configs this study has not tried (nor queued) yet, each at most once."""

    def __init__(self, study: optuna.Study, space: Space):
        self.study, self.space = study, space
        held = (trial_params(t, space.axis_names) for t in study.get_trials(deepcopy=False) if t.state != TrialState.FAIL)
        self.tried = {space.key(params) for params in held if params is not None}  # queued ones too
        self.queued: list[dict] = []

    def add(self, params: dict, user_attrs: dict) -> bool:
        key = self.space.key(params)
        if key in self.tried:
            return False
        self.study.enqueue_trial(params, user_attrs=user_attrs)
        self.tried.add(key)
        self.queued.append(params)
        return True


def _hold_tier2(space: Space, params: dict, tiered: bool) -> dict:
    """In tiered mode tier 1 is searched first with tier 2 at its defaults."""
    return {**params, **{a: space.defaults()[a] for a in space.tier2}} if tiered else params


def warm_start(study: optuna.Study, space: Space, source_names: list[str], top: int = 5, tiered: bool = False) -> list[dict]:
    """Queue up to ``top`` configs from each source study; returns what was queued.

    Runs once per study: a resumed study is not queued again.
    """
    if study.user_attrs.get(MARK):
        return []
    defaults = space.defaults()
    queue = _Queue(study, space)
    for name in source_names:
        source = _load_source(study, name)
        ranked = sorted(source.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), key=value_of)
        taken = 0
        for trial in ranked:
            params = _hold_tier2(space, {a: trial.params.get(a, defaults[a]) for a in space.axes}, tiered)
            if any(params[a] not in values for a, values in space.axes.items()):
                continue  # a value this study does not search
            if space.is_valid(params) and queue.add(params, {MARK: f"{name}#{trial.number}"}):
                taken += 1
                if taken == top:
                    break
    study.set_user_attr(MARK, source_names)
    return queue.queued


def _load_source(study: optuna.Study, name: str) -> optuna.Study:
    try:
        return optuna.load_study(study_name=name, storage=optuna_private.storage_of(study))
    except KeyError:
        names = optuna.get_all_study_names(optuna_private.storage_of(study))
        raise UserError(f"--warm-start: no study {name!r} in this storage; studies there: {', '.join(names) or 'none'}") from None


def prior_trials(study: optuna.Study, space: Space, source_names: list[str]) -> list[FrozenTrial]:
    """The finished trials of the source studies, as the sampler's prior: their configs
    completed with this space's defaults, those with a value this study does not search left out.
    Values are relative to each source's best, so sources of different speeds mix."""
    defaults = space.defaults()
    prior = []
    for name in source_names:
        trials = _load_source(study, name).get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
        best = min((t.value for t in trials if t.state == TrialState.COMPLETE and t.value), default=1.0)
        for trial in trials:
            params = {a: trial.params.get(a, defaults[a]) for a in space.axes}
            if all(params[a] in values for a, values in space.axes.items()):
                prior.append(optuna.trial.create_trial(
                    state=trial.state, value=value_of(trial) / best if trial.state == TrialState.COMPLETE else None,
                    params=params, distributions=dict(space.distributions),
                    user_attrs={"status": trial.user_attrs.get("status", "")}))
    return prior


def start_params(space: Space, configs: list[dict], tiered: bool = False, what: str = "[search.start] #{}") -> list[dict]:
    """The study file's ``[search] start`` configs as full parameter sets (axes not named take the
    defaults; in tiered mode tier 2 is held at its defaults); one the constraint model rejects is an
    error that says why (``what`` names it), raised before anything is stored."""
    out = []
    for i, config in enumerate(configs):
        params = _hold_tier2(space, {**space.defaults(), **config}, tiered)
        reason = space.check(params)
        if reason:
            raise UserError(f"{what.format(i + 1)} is rejected by the kernel's constraint model: {reason}")
        out.append(params)
    return out


def queue_start_configs(study: optuna.Study, space: Space, params_list: list[dict]) -> list[dict]:
    """Queue the start configs not tried yet as the first trials, once per study."""
    if not params_list or study.user_attrs.get(START_MARK):
        return []
    queue = _Queue(study, space)
    for i, params in enumerate(params_list):
        queue.add(params, {START_MARK: i + 1})
    study.set_user_attr(START_MARK, len(params_list))
    return queue.queued
