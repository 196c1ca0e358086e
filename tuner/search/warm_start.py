"""Warm start: begin a new study (a new shape, a new GPU) with an earlier study's winners.

A source is an earlier study in the same storage or a recording of another GPU (a Kernel Tuner
cache, our CSV export: :func:`tuner.evaluate.replay.recording_source`), as a :class:`Source`.
The best configurations of the source, mapped onto this study's space (a value it does
not list, or a config it cannot run, moves to the nearest one it can: :mod:`tuner.search.transfer`)
and not tried yet, are queued as the first trials, so the sampler starts from what is known to
be fast instead of from random picks; the source's whole history, mapped the same way (a config
stopped as slower by its value, like a measured one), is the sampler's prior. Axes the source did
not tune say nothing of the source's configs, and one value taken for all of them would steer the
search to one part of the space: each queued config is tried at each combination of their values
(up to four; with more they take them in turn), and in the prior a source trial stands for each of
their values, sharing its weight. In tiered mode, tier-2 defines are held at their defaults as
tier 1 requires.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import UserError
from tuner.search.pool import PRIOR_WEIGHT, SLOWER_STATUSES, trial_params
from tuner.search.sampler import ordered_axis
from tuner.search.space import Space
from tuner.search.transfer import Mapped, SpaceMap
from tuner.store.results import value_of
from tuner.store.storage import stored_as

MARK = "warm_started_from"
#: a queued config's axes that were moved to fit this space
MOVED_MARK = "warm_moved"
#: how much a source trial counts in the prior, per define moved to fit this space
MOVED_WEIGHT = 0.5
#: at most this many configs stand for one source trial over the axes its source did not tune
SPREAD_MAX = 16
#: a queued config is tried at each combination of the values of the axes its source did not tune, up to this many
QUEUE_SPREAD_MAX = 4
START_MARK = "start_config"


@dataclass(frozen=True)
class Source:
    """What a warm start learns from: a name for messages and marks, its finished (complete or
    pruned) trials, and what a user should know of it (e.g. a recording cut short)."""

    name: str
    trials: list[FrozenTrial]
    note: str = ""
    #: the kernel it measured, where it names one
    kernel: str = ""

    @property
    def label(self) -> str:
        """The name as messages show it, with the note."""
        return f"{self.name} ({self.note})" if self.note else self.name


def finished_trial(state: TrialState, value: float | None, params: dict, distributions: dict, user_attrs: dict,
                   number: int = -1) -> FrozenTrial:
    """A finished trial as ``optuna.trial.create_trial`` makes one, without its per-trial conversion of
    the distributions (most of the time of a warm start from a recording of 18,000 configs)."""
    return FrozenTrial(number=number, trial_id=number, state=state, value=value, datetime_start=None,
                       datetime_complete=None, params=params, distributions=distributions, user_attrs=user_attrs,
                       system_attrs={}, intermediate_values={})


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


def space_map(space: Space, tiered: bool = False) -> SpaceMap:
    """Where source configs land in this study: its valid set (tiered: tier 1, tier 2 held at its defaults)."""
    ordered = [ordered_axis(values) for values in space.axes.values()]
    if tiered:
        return SpaceMap(space, space.tier1_candidates(), ordered, hold={a: space.defaults()[a] for a in space.tier2})
    return SpaceMap(space, space.valid, ordered)


def warm_start(study: optuna.Study, space: Space, sources: list[Source], top: int = 5, tiered: bool = False) -> list[Mapped] | None:
    """Queue up to ``top`` configs in all, shared among the sources (the first ones take what does not
    divide evenly, the next ones what a source short of valid configs leaves; five sources and a
    25-trial run would otherwise leave the search no trial), each source's best first, each mapped
    onto this space (:mod:`tuner.search.transfer`) and at the values of the axes its source did not
    tune (:func:`_untuned_values`); returns what was queued, or None when this study was warm-started
    before (a resume: nothing is queued again)."""
    if study.user_attrs.get(MARK):
        return None
    mapper = space_map(space, tiered)
    queue = _Queue(study, space)
    queued: list[Mapped] = []
    left = top
    for index, source in enumerate(sources):
        share = -(-left // (len(sources) - index))  # the rest rounded up: a short source's share passes on
        if not share:
            continue
        ranked = sorted((t for t in source.trials if t.state == TrialState.COMPLETE), key=value_of)
        taken = 0
        for trial, config in _exact_first(mapper, ranked):
            untuned = tuple(a for a in space.axis_names if a not in trial.params and a not in mapper.hold)  # tiered: tier 2 held
            added = False
            spreads = _untuned_values(trial.params, space, taken)
            for spread in spreads:
                at = config
                if spread is not trial.params:
                    at = dataclasses.replace(mapper.map(spread) or config, untuned=untuned, each_value=len(spreads) > 1)
                attrs: dict = {MARK: f"{source.name}#{trial.number}"}
                if at.moved:
                    attrs[MOVED_MARK] = list(at.moved)
                if queue.add(at.params, attrs):
                    queued.append(at)
                    added = True
            if added:
                taken += 1
                if taken == share:
                    break
        left -= taken
    study.set_user_attr(MARK, [source.name for source in sources])
    return queued


def _exact_first(mapper: SpaceMap, ranked: list[FrozenTrial]) -> Iterator[tuple[FrozenTrial, Mapped]]:
    """The source's configs mapped onto this space, in the source's order, those that need no move
    first: the source measured an exact config as it runs here, a moved one is a guess. Mapped as
    they are taken, so a queue of five from a recording of 18,000 configs maps a few."""
    moved = []
    for trial in ranked:
        config = mapper.map(trial.params)
        if config is None:
            continue
        if config.moved:
            moved.append((trial, config))
        else:
            yield trial, config
    yield from moved


def _ranked(trial: FrozenTrial) -> bool:
    """Whether a source trial has a value to rank it by: measured to the end, or stopped as slower than
    the source's best at the running value it had then (with the pruner on, most of a study's trials)."""
    if not trial.values or not math.isfinite(trial.values[0]):
        return False
    return trial.state == TrialState.COMPLETE or trial.user_attrs.get("status") in SLOWER_STATUSES


def _untuned_values(params: dict, space: Space, index: int) -> list[dict]:
    """``params`` at the values to queue it with on the axes its source did not tune: each combination
    (up to ``QUEUE_SPREAD_MAX``), as a config queued at a value that is slow here would be slow whatever
    its other axes, and teach the search that they are (FC1 from patch_embed on an H200: its best
    config was queued at GELU_H2 = 0, 1.34 x its time at 1). With more combinations, the ``index``-th
    (the queued configs take them in turn)."""
    spread = [config for config, _ in spread_untuned(params, space)]
    if len(spread) <= QUEUE_SPREAD_MAX:
        return spread
    return [spread[index % len(spread)]]


def check_shares_axes(space: Space, source: Source) -> None:
    """A source that tunes none of this study's defines says nothing of its configs (each would stand for
    one default config of this space): one line naming both sets of defines."""
    tuned = set().union(*(trial.params for trial in source.trials))
    if not tuned or tuned & set(space.axis_names):
        return
    hint = ""
    if {a.lower() for a in tuned} & {a.lower() for a in space.axis_names}:
        hint = " (the names differ in case: defines are case-sensitive)"
    raise UserError(f"--warm-start: {source.name} tunes none of this study's defines{hint}: it tunes "
                    f"{_names(sorted(tuned))}, this study {_names(space.axis_names)}; start from a study or "
                    "recording of this kernel")


def _names(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 8 else ", ".join(names[:8]) + f", ... ({len(names)})"


def study_source(storage: optuna.storages.BaseStorage, name: str) -> Source:
    """The finished trials of the study ``name`` in ``storage``: its GPU run, else its grid, else its
    replay, as ``tuner best`` finds a study file's."""
    names = optuna.get_all_study_names(storage)
    found = stored_as(name, names)
    if found is None:
        raise UserError(f"--warm-start: no study {name!r} in this storage, nor a recording file of that name; "
                        f"studies there: {', '.join(names) or 'none'}")
    source = optuna.load_study(study_name=found, storage=storage)
    return Source(found, source.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)),
                  kernel=str(source.user_attrs.get("kernel") or ""))


def prior_trials(space: Space, sources: list[Source]) -> list[FrozenTrial]:
    """The finished trials of the sources, as the sampler's prior, on this space: a config
    measured, or stopped as slower at a running value, mapped onto it (:mod:`tuner.search.transfer`),
    counting ``MOVED_WEIGHT`` less for each define moved (its time is a guess there); a failed one, or
    one stopped without a value, only where it needs no move (it says something of its own config
    only). Values are relative to each source's best, so sources of different speeds mix."""
    mapper = space_map(space)
    distributions = dict(space.distributions)
    prior = []
    for source in sources:
        best = min((value_of(t) for t in source.trials if t.state == TrialState.COMPLETE and t.values and t.values[0]),
                   default=1.0)
        for trial in source.trials:
            for params, share in spread_untuned(trial.params, space):
                mapped = mapper.map(params)
                if mapped is None or (mapped.moved and not _ranked(trial)):
                    continue
                prior.append(finished_trial(
                    trial.state, value_of(trial) / best if trial.values else None,  # a stopped one: its estimate
                    mapped.params, distributions,
                    {"status": trial.user_attrs.get("status", ""), MARK: f"{source.name}#{trial.number}",
                     PRIOR_WEIGHT: share * MOVED_WEIGHT ** len(mapped.moved)}))
    return prior


def prior_sources(prior: list[FrozenTrial]) -> int:
    """How many source trials ``prior`` holds (one stands for each value of an axis its source did not tune)."""
    return len({t.user_attrs.get(MARK) for t in prior})


def spread_untuned(params: dict, space: Space) -> list[tuple[dict, float]]:
    """``params`` at each combination of the values of this space's axes that its source did not tune,
    each with its share of the trial's weight; ``params`` alone (share 1) when there are none, or
    more than ``SPREAD_MAX`` combinations (then the defaults stand in)."""
    untuned = [a for a in space.axis_names if a not in params]
    combinations = math.prod(len(space.axes[a]) for a in untuned)
    if not untuned or combinations > SPREAD_MAX:
        return [(params, 1.0)]
    return [({**params, **dict(zip(untuned, values, strict=True))}, 1.0 / combinations)
            for values in itertools.product(*(space.axes[a] for a in untuned))]


def other_kernels(sources: list[Source], kernel: str) -> str:
    """What the run says of sources that name a kernel other than this study's: '' where none does
    (what one kernel learnt may not carry over to another whose defines share names)."""
    other = [f"{s.name} measured {s.kernel}" for s in sources if s.kernel and kernel and s.kernel != kernel]
    return f" (another kernel: {'; '.join(other)}; this study's is {kernel})" if other else ""


def transfer_message(queued: list[Mapped] | None, prior: int, source_names: list[str]) -> str:
    """What a warm start transferred, for the run's first lines: e.g. 'warm start: 5 configs queued
    (2 moved to the nearest valid: EXTRA_TMA), prior from 240 trials of patch_embed_sm90a'."""
    parts = []
    if queued is not None:
        text = f"{_count(len(queued), 'config')} queued"
        moved = [m for m in queued if m.moved]
        notes = []
        if moved:
            notes.append(f"{len(moved)} moved to the nearest valid: {', '.join(sorted({a for m in moved for a in m.moved}))}")
        untuned = sorted({a for m in queued for a in m.untuned})
        if untuned:
            its = "its" if len(untuned) == 1 else "their"
            how = f"each config at each of {its} values" if any(m.each_value for m in queued) else f"{its} values in turn"
            notes.append(f"{', '.join(untuned)} not in the source: {how}")
        left_out = sorted({a for m in queued for a in m.left_out})
        if left_out:
            notes.append(f"the source's {', '.join(left_out)} not in this kernel: left out")
        if notes:
            text += f" ({'; '.join(notes)})"
        parts.append(text)
    parts.append(f"prior from {_count(prior, 'trial')} of {', '.join(source_names)}")
    return "warm start: " + ", ".join(parts)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def queue_start_configs(study: optuna.Study, space: Space, params_list: list[dict]) -> list[dict]:
    """Queue the start configs not tried yet as the first trials, once per study."""
    if not params_list or study.user_attrs.get(START_MARK):
        return []
    queue = _Queue(study, space)
    for i, params in enumerate(params_list):
        queue.add(params, {START_MARK: i + 1})
    study.set_user_attr(START_MARK, len(params_list))
    return queue.queued
