"""Run a study: open or resume it, bind it to its device and source, optimise, summarise.

The loop itself is :class:`tuner.run.pipeline.Pipeline` (Optuna's ask and tell); this module
chooses the sampler, pruner and evaluator, keeps a study from mixing results of different GPUs, kernel
sources or compilers, re-queues trials a dead process left RUNNING, and runs the
tiered plan (tier 1, then tier 2 on the tier-1 winner) when asked.
"""

from __future__ import annotations

import bisect
import datetime as _dt
import math
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from tuner import __version__
from tuner.errors import UserError, first_line
from tuner.evaluate.evaluator import Evaluator
from tuner.evaluate.replay import recording_source
from tuner.measurement import pareto
from tuner.measurement.paired import SlowerTest
from tuner.measurement.value import Measurement
from tuner.progress import Shown
from tuner.run.objective import Objective
from tuner.run.pipeline import Pipeline, Timeline
from tuner.run.probe import Probe, adopt
from tuner.run.summary import summarize
from tuner.search.distributions import store_axes, stored_axes
from tuner.search.pruner import BEST_MAX_AGE_S, MarginPruner
from tuner.search.sampler import ValidOnlySampler, make_proposer
from tuner.search.space import Space
from tuner.search.start import start_params
from tuner.search.warm_start import (
    Mapped,
    Source,
    check_shares_axes,
    other_kernels,
    prior_sources,
    prior_trials,
    queue_start_configs,
    study_source,
    transfer_message,
    warm_start,
)
from tuner.store.liveness import recover_stale_trials
from tuner.store.locks import ProposalLock
from tuner.store.optuna_private import TrialFeed, waiting_trials
from tuner.store.results import best_trial, metric_of, value_of, value_text
from tuner.store.storage import PLANNER_STATISTICS_FROM, give_planner_statistics, open_storage, resolve_url
from tuner.store.url import redact
from tuner.study.file import SearchSettings

#: study attribute: the sampler and seed of a study's first run
SEARCH_ATTR = "search"
#: fingerprint keys a resumed study must match
BINDING_KEYS = ("kind", "device_name", "source_hash", "nvrtc_version", "arch", "problem", "objective", "recording")
#: what the values of a study without an objective record mean (a replay's): milliseconds
MS_OBJECTIVE = {"metric": "ms"}
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
STORAGE_WAIT_S = 60.0  # how long to wait for a restarted database; 3 outages ridden out per phase


def _storage_error(exc: BaseException):
    """The database error behind ``exc`` (Optuna may wrap it while failing the trial), or None."""
    import sqlalchemy.exc

    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            return None
        if isinstance(seen, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _one_line(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {redact(first_line(getattr(exc, 'orig', None) or exc, 160))}"


@dataclass(kw_only=True)
class RunSettings(SearchSettings):
    """A study file's search settings, plus what one run adds to them."""

    study_name: str
    accept_mismatch: bool = False
    #: how the trials' progress shows: a bar, lines (off a terminal) or None (tuner.progress.display)
    progress: Shown = "bar"
    artifact_dir: str | None = None
    warm_start: list[str] = field(default_factory=list)  # earlier studies whose winners go first
    warm_start_top: int = 5
    study_attrs: dict[str, Any] = field(default_factory=dict)
    started: float | None = None  # time.monotonic() when the command started (time to first trial)
    peers: int = 1  # processes sharing the budget (`tuner run --workers N`): none asks ahead beyond its share


def setup_differences(stored: Mapping[str, Any], now: Mapping[str, Any], keys: Iterable[str]) -> list[str]:
    """The fingerprint keys ``keys`` on which a study's stored setup and this one differ, each as
    "key: stored X, now Y"."""
    return [f"{k}: stored {stored.get(k)!r}, now {now.get(k)!r}" for k in keys if stored.get(k) != now.get(k)]


def bind_study(study: optuna.Study, attrs: dict[str, Any], accept_mismatch: bool) -> None:
    """Record the study's fingerprint, or stop if a resumed study was made elsewhere."""
    stored = {"objective": MS_OBJECTIVE, **study.user_attrs}  # one read: a second may see another worker's "kind"
    objective = stored["objective"]
    if isinstance(objective, dict) and "precision" not in objective and "precision" in attrs.get("objective", {}):
        stored["objective"] = {**objective, "precision": "fast"}  # checked as the spec says: the default class
    if stored.get("kind") == "replay" and "recording" not in stored:
        stored["recording"] = attrs.get("recording")  # a replay stored before its recording was fingerprinted
    if not stored.get("kind"):
        # "kind" is written last: it marks the binding complete, so a worker starting at
        # the same moment never compares against a half-written fingerprint.
        for key, value in attrs.items():
            if key != "kind":
                study.set_user_attr(key, value)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            time_metric = attrs.get("objective", MS_OBJECTIVE)["metric"]
            study.set_metric_names(pareto.metric_names(time_metric, pareto.OBJECTIVES[:len(study.directions)]))
        study.set_user_attr("kind", attrs.get("kind"))
        return
    if stored.get("axes") is not None and attrs.get("axes") is not None and stored["axes"] != attrs["axes"]:
        raise UserError(
            f"study {study.study_name!r} searches the defines {', '.join(map(str, stored['axes']))}, this run "
            f"{', '.join(map(str, attrs['axes']))}: a study keeps one space (--accept-mismatch does not change that); "
            "start a new study with --study-name NEW"
        )
    differs = setup_differences(stored, attrs, BINDING_KEYS)
    if not differs:
        return
    if not accept_mismatch:
        raise UserError(
            f"study {study.study_name!r} was recorded under a different setup ({'; '.join(differs)}): "
            "start a new study with --study-name NEW, or add to this one anyway with --accept-mismatch"
        )
    history = list(stored.get("accepted_mismatches", []))
    history.append({"at": _now(), "differs": differs})
    study.set_user_attr("accepted_mismatches", history)


def check_same_objectives(study: optuna.Study, objectives: Sequence[str]) -> None:
    """A study keeps the objectives it was created with (Optuna stores its directions once)."""
    stored = pareto.OBJECTIVES[:len(study.directions)]
    if list(stored) != list(objectives):
        raise UserError(
            f"study {study.study_name!r} was created with objectives {list(stored)}, this run asks for "
            f"{list(objectives)}: keep them (--accept-mismatch does not change that), or start a new study "
            "with --study-name NEW")


def note_search(study: optuna.Study, sampler: str, seed: int | None) -> str:
    """Store a new study's sampler and seed; for a later run with others, one line saying that its
    trials join the study's (a comparison of searches wants a study each)."""
    now = {"sampler": sampler, "seed": seed}
    stored = study.user_attrs.get(SEARCH_ATTR)
    if stored is None:
        if not study.get_trials(deepcopy=False):
            study.set_user_attr(SEARCH_ATTR, now)
        return ""
    if stored == now:
        return ""
    def search(s: dict) -> str:
        return f"sampler {s['sampler']}, " + ("no fixed seed" if s["seed"] is None else f"seed {s['seed']}")

    return (f"study {study.study_name} was searched with {search(stored)}; this run adds trials with {search(now)} "
            "to it (--study-name NEW keeps a comparison apart)")


def check_same_choices(study: optuna.Study, space: Space) -> None:
    """Each define keeps the values it had in the study (stored once on it, or on the trials
    of a study stored before that: :func:`tuner.search.distributions.stored_axes`)."""
    stored = stored_axes(study) or {}
    for name, values in space.axes.items():
        choices = stored.get(name)
        if choices is not None and list(choices) != list(values):
            shown = choices if len(choices) <= 20 else [*choices[:10], "...", *choices[-3:]]
            now = list(values) if len(values) <= 20 else [*values[:10], "...", *values[-3:]]
            raise UserError(
                f"study {study.study_name!r} searched {name} over {shown}, this run over "
                f"{now}: keep the values, or start a new study with --study-name NEW"
            )


def warm_source(storage: optuna.storages.BaseStorage, name: str) -> Source:
    """A warm start's source: the recording ``name`` where that file exists (a Kernel Tuner cache of
    another GPU, our CSV export), the stored study of a study file, else the study of that name in
    ``storage``."""
    if Path(name).suffix == ".toml":
        from tuner.study.file import load_study

        if not Path(name).is_file():
            raise UserError(f"--warm-start {name}: no such study file (give a study file, a recording, or the name "
                            "of a study in this storage)")
        return study_source(storage, load_study(name).name)
    if Path(name).is_file():
        return recording_source(name)
    return study_source(storage, name)


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")


def study_attrs(kind: str, space: Space, arch: str, device: dict, nvrtc: str, shape: str, extra: dict | None = None) -> dict:
    spec = space.spec
    attrs = {
        "kind": kind,
        "shape": shape,
        "problem": dict(space.problem),
        "arch": arch,
        "kernel": spec.name,
        "kernel_path": str(spec.path),
        "source_hash": spec.source_hash(),
        "device": device,
        "device_name": device.get("name", ""),
        "nvrtc_version": nvrtc,
        "tool_version": __version__,
        "axes": space.axis_names,
        "tier1": list(space.tier1),
        "tier2": list(space.tier2),
        "flops": float(spec.flops(space.problem)),
        "created": _now(),
        "objective": MS_OBJECTIVE,
    }
    attrs.update(extra or {})
    return attrs


@dataclass
class _Tally:
    """What each trial means for one phase's budget: its config key and whether it takes a
    place. A finished trial's is computed once (it never changes) and summed as it arrives;
    a check reads only the trials in flight and those finished since the last one
    (:class:`~tuner.store.optuna_private.TrialFeed`): the cost of a trial stays flat as the study
    grows (bench/bench_trial_cost.py)."""

    feed: TrialFeed
    key_of: Callable[[FrozenTrial], tuple | None]
    counts: Callable[[FrozenTrial], bool]
    untried: set  # the phase's candidates no finished trial took
    used: int = 0  # finished trials that take a place
    _counting: list[int] = field(default_factory=list)  # their numbers, sorted

    def facts(self, t: FrozenTrial) -> tuple[tuple | None, bool]:
        """A trial's config key, and whether it takes a place (a finished one's is asked once)."""
        return self.key_of(t), self.counts(t)

    def open_trials(self) -> list[FrozenTrial]:
        """Tally the trials finished since the last call and return those in flight (RUNNING,
        WAITING), by number. A FAILed trial took no config and no place."""
        open_trials = []
        for t in self.feed.read():
            if t.state in FINISHED:
                key, counts = self.facts(t)
                self.untried.discard(key)
                if counts:
                    self.used += 1
                    bisect.insort(self._counting, t.number)
            elif not t.state.is_finished():
                open_trials.append(t)
        return open_trials

    def counting_before(self, number: int) -> int:
        """Finished trials numbered below ``number`` that take a place."""
        return bisect.bisect_left(self._counting, number)


def _open_or_create(storage: optuna.storages.BaseStorage, name: str, sampler: optuna.samplers.BaseSampler,
                    pruner: optuna.pruners.BasePruner, directions: list[StudyDirection]) -> optuna.Study:
    """The stored study, created only where it is missing: a journal file records a creation even of a
    study it holds (each run of a stored study, a refused one too, would add a line)."""
    try:
        return optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
    except KeyError:  # (another worker may create it meanwhile: load_if_exists takes that one)
        return optuna.create_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner,
                                   directions=directions, load_if_exists=True)


class Runner:
    def __init__(self, space: Space, evaluator: Evaluator, settings: RunSettings, storage_url: str | None = None,
                 storage: optuna.storages.BaseStorage | None = None):
        """``storage``: the storage ``storage_url`` names, already open (:class:`tuner.store.storage.OpeningStorage`)."""
        start = start_params(space, settings.start, settings.mode == "tiered")   # bad input fails before a study exists
        # so does a space without a valid config; a start config, or one drawn at random, proves it has
        # one without the valid set, which may take seconds to enumerate (_queued_while_enumerating)
        if not start and not space.draw_valid(1, np.random.default_rng(0)):
            space.require_valid()
        self.space = space
        self.evaluator = evaluator
        self.settings = settings
        self.storage_url = resolve_url(storage_url)
        self.storage = storage if storage is not None else open_storage(self.storage_url)
        self.multi = pareto.multi(settings.objectives)
        # several objectives: Optuna's multi-objective TPE inside our valid-only wrapper (tuner.measurement.pareto)
        base = (pareto.sampler(settings.seed) if self.multi and settings.sampler == "tpe"
                else make_proposer(settings.sampler, settings.seed))
        self.sampler = ValidOnlySampler(space, base, seed=settings.seed)
        pruner = self._pruner()
        sources = [warm_source(self.storage, name) for name in settings.warm_start]  # a bad one: before a study exists
        for source in sources:
            check_shares_axes(space, source)
        self.study = _open_or_create(self.storage, settings.study_name, self.sampler, pruner,
                                     pareto.directions(settings.objectives))
        self._bind_study()
        self.lock = ProposalLock(self.storage, self.storage_url, settings.study_name)
        with self.lock:  # runs starting together: one chooses the study's reference
            #: the study's first configs, held until they choose its reference (None: it has one)
            self.probe = Probe.plan(self.study, evaluator)
        warm_queued = self._queue_first_configs(sources, start)
        self.transfer = self._take_prior(sources, warm_queued) if sources else ""  # what the warm start transferred
        if len(self.study.get_trials(deepcopy=False)) >= PLANNER_STATISTICS_FROM:  # a resumed study past that size
            give_planner_statistics(self.storage)
        self._bar = None
        self.flops = settings.study_attrs.get("flops") or None
        self.timeline = Timeline(started=settings.started if settings.started is not None else time.monotonic())

    def _pruner(self) -> optuna.pruners.BasePruner:
        """The pruner Optuna holds (``prune_by = "margin"``), and the sign test the loop applies itself."""
        settings = self.settings
        prunes = settings.pruner and not self.multi  # the pruner judges time alone: off for a front
        # a replayed block takes microseconds: the best is read after every one, so a replay stops the configs
        # the GPU run it stands for would stop (at BEST_MAX_AGE_S, a whole replayed run sees no best at all)
        self.best_max_age_s = 0.0 if self.evaluator.kind == "replay" else BEST_MAX_AGE_S
        self.slower_test = SlowerTest() if prunes and settings.prune_by == "sign" else None
        if prunes and settings.prune_by == "margin":
            return MarginPruner(settings.pruner_margin, settings.pruner_min_blocks, self.best_max_age_s)
        return optuna.pruners.NopPruner()

    def _bind_study(self) -> None:
        """Check the stored study against this run's setup (or bind a new one to it); a mismatch is refused."""
        study, settings = self.study, self.settings
        #: no run had bound this study to its setup before: this one made it (or found it empty)
        self.started_study = not study.user_attrs.get("kind")
        check_same_objectives(study, settings.objectives)
        adopt(study, self.evaluator, settings.study_attrs)  # the reference the study chose, on any GPU
        bind_study(study, settings.study_attrs, settings.accept_mismatch)
        check_same_choices(study, self.space)
        self.space.adopt_stored(study)  # a study stored before compact axes keeps its kinds
        store_axes(study, self.space.axes)
        #: a line when this run searches the study otherwise than its first run did
        self.search_changed = note_search(study, settings.sampler, settings.seed)
        self.evaluator.bind(study)

    def _queue_first_configs(self, sources: list[Source], start: list[dict]) -> list[Mapped] | None:
        """Queue what the study measures first: trials a dead process left, the warm start's configs
        (returned: None without a source), the start configs, the reference probe's draws."""
        settings = self.settings
        with self.lock:  # workers starting together queue each config once
            self.requeued = recover_stale_trials(self.study, self.space.axis_names)
            warm_queued = (warm_start(self.study, self.space, sources, settings.warm_start_top, settings.mode == "tiered")
                           if sources else None)
            self.start_queued = queue_start_configs(self.study, self.space, start)
            if self.probe is not None and self._alone_and_joint and settings.sampler != "grid":
                # (a grid walk spreads its first configs over the valid set: it needs that set)
                self.probe.queue_draws(self.space, self._waiting(), settings.trials, settings.seed)
        return warm_queued

    def _take_prior(self, sources: list[Source], warm_queued: list[Mapped] | None) -> str:
        """The sources' trials shape the sampler's model (each run: a resume too); what was transferred, in words."""
        prior = prior_trials(self.space, sources)
        self.sampler.set_prior(prior)
        return (transfer_message(warm_queued, prior_sources(prior), [source.label for source in sources])
                + other_kernels(sources, str(self.settings.study_attrs.get("kernel") or "")))

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> dict:
        try:
            self._queued_while_enumerating()
            self.space.require_valid()
            if self.settings.mode == "tiered":
                target1 = self._phase_target(self.space.tier1_candidates())
                self._optimize("tier1", self.space.tier1_candidates(), target1)
                winner = self.best_params(phase="tier1")
                if winner is not None:
                    tier2 = self.space.tier2_candidates(winner)
                    self._optimize("tier2", tier2, len(tier2))
            else:
                self._optimize("joint", self.space.valid, self._phase_target(self.space.valid))
        finally:
            self.lock.close()  # (its file or connection: a notebook runs many studies in one process)
        return self.summary()

    def _phase_target(self, candidates: list) -> int:
        return min(self.settings.trials or len(candidates), len(candidates))

    def _queued_while_enumerating(self) -> None:
        """Measure the queued configs (a study's start configs, or the probe's) while the valid set is
        still being enumerated -- seconds for a large space with an empty cache -- so that the first
        result does not wait for it; the search proper starts once the valid set is known, and a
        probe measures all its configs first (:attr:`_alone_and_joint`)."""
        if self.space.enumerated or not self._alone_and_joint or not self._waiting():
            return
        target = self.settings.trials or math.inf

        def may_ask() -> bool:
            if (self.probe is None and self.space.enumerated) or not self._waiting():
                return False
            used = sum(1 for t in self.study.get_trials(deepcopy=False) if self._counts(t, "joint", None))
            return used < target

        objective, deadline = self._objective("joint"), self._deadline()
        try:
            if self.probe is not None:
                self._run_probe(objective, min(self.probe.k, len(self._waiting())), deadline, may_ask, lambda trial: True)
            else:
                Pipeline(self.study, objective, self.ahead, may_ask, lambda trial: True, self.timeline, deadline,
                         self.lock, depth=self.depth).run(max_trials=len(self._waiting()))
        except Exception as exc:
            if _storage_error(exc) is None:
                raise  # (a lost storage: the search below meets it too, and waits for it)

    @property
    def _alone_and_joint(self) -> bool:
        """One process searching all axes at once: the queued configs may be measured before the valid
        set is known (a worker of several shares a budget counted over it; a tier is a part of it)."""
        return self.settings.mode == "joint" and self.settings.peers <= 1

    def _waiting(self) -> list[FrozenTrial]:
        return waiting_trials(self.study)

    def _objective(self, phase: str) -> Objective:
        return Objective(self.space, self.evaluator, self.flops, phase, on_result=self._on_result,
                         artifact_dir=self.settings.artifact_dir, slower_test=self.slower_test,
                         energy=pareto.energy_metric(self.study), best_max_age_s=self.best_max_age_s)

    def _deadline(self) -> float | None:
        timeout = self.settings.timeout_min * 60 if self.settings.timeout_min else None
        return self.timeline.started + timeout if timeout else None

    def _optimize(self, phase: str, candidates: list, target: int, retries: int = 3) -> None:
        self.sampler.set_candidates(candidates)
        keys = self.space.valid_keys if candidates is self.space.valid else {self.space.key(c) for c in candidates}
        done = [t for t in self.study.get_trials(deepcopy=False, states=FINISHED) if self._counts(t, phase, keys)]
        tried = {self.space.key(t.params) for t in done}
        todo = min(target - len(done), len(keys - tried))
        queued = len(self._waiting())
        todo = max(todo, queued if phase != "tier2" else 0)
        if todo <= 0:
            return
        objective = self._objective(phase)
        deadline = self._deadline()
        # Asked-ahead trials hold places in the budget: a worker keeps at most its share of what is left
        ahead = min(self.ahead, max(0, -(-todo // max(1, self.settings.peers)) - 1))
        pipeline = Pipeline(self.study, objective, ahead, self._may_ask(phase, keys, target),
                            self._admits(phase, keys, target), self.timeline, deadline, self.lock, depth=self.depth)
        self._open_bar(phase, todo)
        try:
            if self.probe is not None:
                self._run_probe(objective, min(todo, self.probe.k), deadline, self._may_ask(phase, keys, target),
                                self._admits(phase, keys, target))
                if self.probe is not None:  # stopped before a config was measured: nothing is told before the choice
                    return
            # duplicates do not count against the budget: room for them beyond ``todo``
            pipeline.run(max_trials=todo + queued + len(keys))
        except Exception as exc:
            cause = _storage_error(exc)
            if cause is None:
                raise
            self._close_bar()
            if retries <= 0 or not self._storage_back():
                raise UserError(
                    f"lost the storage {redact(self.storage_url)} ({_one_line(cause)}); finished trials are stored: "
                    "rerun the same command to resume"
                ) from None
            print(f"tuner: storage connection lost ({_one_line(cause)}); reconnected, going on", file=sys.stderr)
            recover_stale_trials(self.study, self.space.axis_names, mine=True)
            return self._optimize(phase, candidates, target, retries - 1)
        finally:
            self._close_bar()

    def _run_probe(self, objective: Objective, n: int, deadline: float | None, may_ask: Callable[[], bool],
                   admits: Callable[[optuna.Trial], bool]) -> None:
        """The first ``n`` trials, measured to the end against the defaults and told once they chose the reference."""
        assert self.probe is not None
        objective.reports = False  # no intermediate values: they would be ratios to the defaults
        try:
            Pipeline(self.study, objective, min(self.ahead, n - 1), may_ask, admits, self.timeline, deadline,
                     self.lock, hold=self.probe, depth=self.depth).run(n)
        finally:
            objective.reports = True
        if self.probe.chosen:
            self.probe = None

    @property
    def ahead(self) -> int:
        """Trials proposed beyond the one measured: the evaluator's compile processes (replay: 0)."""
        return self.evaluator.ahead

    @property
    def depth(self) -> Callable[[], int]:
        """How many of ``ahead`` pay now (:mod:`tuner.evaluate.ahead`)."""
        return self.evaluator.depth

    def _counts(self, t, phase: str, keys: set | None) -> bool:
        """Does trial ``t`` take a place in this phase's budget? Finished (a duplicate
        reused a stored value: no) of this phase's candidates (``None``: any config), or still in flight."""
        if t.state == TrialState.RUNNING:
            return True
        return (t.state in FINISHED and t.user_attrs.get("status") != "duplicate" and t.user_attrs.get("phase") == phase
                and all(a in t.params for a in self.space.axis_names)  # (a damaged journal line can lose one)
                and (keys is None or self.space.key(t.params) in keys))

    def _may_ask(self, phase: str, keys: set, target: int):
        """Ask another trial while candidates are left untried and the study (all workers
        together) has fewer than ``target`` trials of this phase done or in flight."""
        tally = self._tally(phase, keys)

        def may_ask() -> bool:
            in_flight: set = set()
            queued = False
            open_trials = tally.open_trials()
            used = tally.used  # after the newly finished are tallied
            for t in open_trials:
                key, counts = tally.facts(t)
                used += counts
                if t.state == TrialState.WAITING:  # a queued config: the next ask runs it
                    queued = True
                elif key is not None:
                    in_flight.add(key)
            return (queued or bool(tally.untried - in_flight)) and used < target

        return may_ask

    def _admits(self, phase: str, keys: set, target: int):
        """After the trial's params are stored: is it within the budget, counting the trials
        numbered before it? Two workers that asked at once cannot both take the last place."""
        tally = self._tally(phase, keys)

        def admits(trial) -> bool:
            # a WAITING trial takes no place (Runner._counts) until it runs
            open_before = sum(1 for t in tally.open_trials() if t.number < trial.number and tally.facts(t)[1])
            return tally.counting_before(trial.number) + open_before < target

        return admits

    def _tally(self, phase: str, keys: set) -> _Tally:
        return _Tally(TrialFeed(self.study), self.sampler.trial_key, lambda t: self._counts(t, phase, keys), set(keys))

    def _storage_back(self, wait_s: float = STORAGE_WAIT_S) -> bool:
        """Wait for a restarted database server (pool_pre_ping reconnects once it is up)."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            time.sleep(1.0)
            try:
                self.storage.get_study_id_from_name(self.study.study_name)
                return True
            except Exception:
                continue
        return False

    # -- progress -------------------------------------------------------------------------
    def _open_bar(self, phase: str, total: int) -> None:
        from tuner.progress import display

        self._bar = display(self.settings.progress, total, f"{self.settings.study_name} [{phase}]", "trial")

    def _close_bar(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def _on_result(self, number: int, params: dict, m: Measurement) -> None:
        if number + 1 == PLANNER_STATISTICS_FROM:  # the study has grown past what a plan without statistics serves well
            give_planner_statistics(self.storage)
        if self._bar is None:
            return
        done = best_trial(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        best = value_text(value_of(done), metric_of(self.study)) if done is not None else "-"
        self._bar.set_postfix_str(f"last={m.status} best={best}", refresh=False)
        self._bar.update(1)

    # -- results --------------------------------------------------------------------------
    def best_params(self, phase: str | None = None) -> dict | None:
        best = best_trial(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)), phase=phase)
        return None if best is None else dict(best.params)

    def summary(self) -> dict:
        return {**summarize(self.study, self.storage_url), **self.timeline.report()}
