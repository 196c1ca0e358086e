"""How a search axis is stored on Optuna trials: compact, however long the axis.

Optuna writes a parameter's distribution with every trial, and a ``CategoricalDistribution``
carries all its choices: an axis of 10^6 values cost 7.9 MB per trial. An axis of more than
:data:`LONG_AXIS` integers is stored as an ``IntDistribution`` over its range instead (the
trial's param is still the value itself: the sampler only ever proposes one of the axis'
values), and the study keeps every axis' values once, in the system attribute
:data:`AXES_ATTR`. Shorter axes and axes of names stay categorical (optuna-dashboard lists
their choices). A study stored before keeps the kinds its trials have: Optuna refuses to
change a parameter's distribution within a study.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from tuner.contract.kernel_spec import Value
from tuner.store import optuna_private

#: the most values an integer axis stores as a categorical on every trial
LONG_AXIS = 64
#: the study system attribute holding {axis: values}, written once
AXES_ATTR = "tuner:axes"


def axis_distribution(values: Sequence[Value]) -> BaseDistribution:
    if len(values) > LONG_AXIS and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return IntDistribution(int(min(values)), int(max(values)))  # type: ignore[type-var]
    return CategoricalDistribution(list(values))


def space_distributions(axes: dict[str, list[Value]], study: optuna.Study | None = None) -> dict[str, BaseDistribution]:
    """Each axis' distribution: compact where long, the stored kind where ``study`` has trials."""
    stored = _stored_distributions(study) if study is not None else {}
    out: dict[str, BaseDistribution] = {}
    for name, values in axes.items():
        if isinstance(stored.get(name), CategoricalDistribution):  # a study whose trials hold categorical ones
            out[name] = CategoricalDistribution(list(values))
        else:
            out[name] = axis_distribution(values)
    return out


def _stored_distributions(study: optuna.Study) -> dict[str, BaseDistribution]:
    for trial in study.get_trials(deepcopy=False):
        if trial.distributions:
            return dict(trial.distributions)
    return {}


def suggest(trial: optuna.Trial, name: str, distribution: BaseDistribution) -> Any:
    """``trial``'s value of ``name`` under ``distribution`` (the sampler's proposal)."""
    if isinstance(distribution, IntDistribution):
        return trial.suggest_int(name, distribution.low, distribution.high)
    if isinstance(distribution, CategoricalDistribution):
        return trial.suggest_categorical(name, distribution.choices)  # type: ignore[arg-type]
    raise TypeError(f"axis {name}: unexpected distribution {distribution!r}")


def store_axes(study: optuna.Study, axes: dict[str, list[Value]]) -> None:
    """Keep the axes' values once on the study (written when missing)."""
    if AXES_ATTR not in optuna_private.study_system_attrs(study):
        optuna_private.set_study_system_attr(study, AXES_ATTR, {a: list(v) for a, v in axes.items()})


def stored_axes(study: optuna.Study) -> dict[str, list[Value]] | None:
    """The axes' values the study was searched over: its system attribute, else (a study
    stored before it existed) the choices of its first trial's categorical distributions."""
    attrs = optuna_private.study_system_attrs(study)
    if isinstance(attrs.get(AXES_ATTR), dict):
        return {a: list(v) for a, v in attrs[AXES_ATTR].items()}
    stored = _stored_distributions(study)
    if not stored:
        return None
    return {a: list(d.choices) for a, d in stored.items() if isinstance(d, CategoricalDistribution)}  # type: ignore[arg-type]
