"""A reference that stays comparable: a study's first configs choose it.

Every value is a paired ratio to one reference config (:mod:`tuner.measurement.paired`). A reference
unlike the candidates (the spec's defaults are often another kind of kernel: other tiles,
another bound) scales otherwise with the clock state than they do, so the same study's
values moved by 0.7 % (median, 2.3 % max) between two H200s and the winner changed; against
a near-top reference they agreed within 0.05 % (docs/experiments/MEASUREMENT.md, 2026-11-27, H200s). So a study that names
neither ``[measure] reference`` nor ``[search] start`` chooses its own: its first run
measures the first ``reference_probe`` configs against the spec's defaults, each to the end
(nothing to prune against yet), holds them untold, takes the fastest that measured ok (its
output checked) as the reference, measures the others that measured ok again against it and
tells them (Optuna's values are final once told, so none is told before). The choice is stored on
the study (:data:`CHOICE`); every later run, on any GPU, pairs with the same config.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.errors import UserError
from tuner.measurement.value import Measurement
from tuner.run.objective import Begun
from tuner.search.pool import trial_params
from tuner.store.liveness import HOST_ATTR, PID_ATTR, runner_alive, runner_attrs

if TYPE_CHECKING:
    from tuner.evaluate.evaluator import Evaluator
    from tuner.search.space import Space

#: study user attr: how the reference was chosen, and the config (absent: the study was
#: measured against the reference its settings name, or the defaults)
CHOICE = "reference_choice"
PROBING = "probing"  # CHOICE's state while the first run measures its first configs
#: the probe's draws take their own stream of the study's seed (the sampler's stays as it was)
DRAW_STREAM = 1


def provisional(evaluator: Evaluator) -> bool:
    """The evaluator pairs with the spec's defaults only until the study chooses (None: its reference was named)."""
    return evaluator.reference_probe is not None


def adopt(study: optuna.Study, evaluator: Evaluator, attrs: dict[str, Any]) -> None:
    """Pair with the reference the study chose, and name it in the fingerprint (``attrs``), before
    the study is bound: a resumed study keeps its reference on any GPU."""
    choice = study.user_attrs.get(CHOICE)
    if not choice or not provisional(evaluator):
        return
    if "config" in choice:
        evaluator.use_reference(choice["config"])
        attrs.update(evaluator.objective_attrs())
    elif not evaluator.reference_probe and not _measured(study):  # a probe under way, or one that died
        raise UserError(f"study {study.study_name!r} is choosing its reference (the fastest of its first "
                        f"{choice.get('probed')} configs) in its first run: join once that run has measured them, "
                        "or choose it with `tuner run` (reference_probe > 0)")


#: a probe of another host or PID space this old is taken for dead (its first configs take minutes)
PROBE_ABANDONED_S = 1800.0


def _abandoned(choice: dict[str, Any]) -> bool:
    """A probe whose run is gone (or was this process's: a notebook's call stopped mid-probe): its
    process, where this process can see it, else its age."""
    mine = runner_attrs()
    if {k: choice.get(k) for k in mine} == mine:
        return True
    alive = runner_alive(choice)
    if alive is not None:
        return not alive
    at = choice.get("at")
    return not isinstance(at, (int, float)) or time.time() - at > PROBE_ABANDONED_S


def _measured(study: optuna.Study) -> bool:
    return bool(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)))


class Probe:
    """The first run's first configs, held untold until the reference is chosen among them."""

    def __init__(self, study: optuna.Study, evaluator: Evaluator, k: int):
        self.study, self.evaluator, self.k = study, evaluator, k
        #: measured and not told yet, in the order measured (the pipeline tells them, and fails
        #: and queues again those left when a run stops)
        self.held: list[tuple[optuna.Trial, Begun, Measurement]] = []
        self.chosen = False

    @classmethod
    def plan(cls, study: optuna.Study, evaluator: Evaluator) -> Probe | None:
        """A probe when this process may run one and the study has neither a choice nor a measured trial
        (one measured against the defaults without a choice keeps them: its values are relative to them)."""
        k = evaluator.reference_probe or 0
        choice = study.user_attrs.get(CHOICE) or {}
        if k <= 0 or "config" in choice or _measured(study):
            return None
        if choice.get("state") == PROBING and not _abandoned(choice):  # values on one reference, or none
            raise UserError(f"study {study.study_name!r} is choosing its reference in another run ({choice.get(HOST_ATTR)} "
                            f"pid {choice.get(PID_ATTR)}: the fastest of its first {choice.get('probed')} configs): run "
                            "this again once that run has measured them, or join it with `tuner worker`")
        # a worker or run joining now waits (adopt, above); one that finds this run gone takes over
        study.set_user_attr(CHOICE, {"state": PROBING, "probed": k, "at": time.time(), **runner_attrs()})
        return cls(study, evaluator, k)

    def queue_draws(self, space: Space, waiting: list[FrozenTrial], budget: int | None, seed: int | None) -> int:
        """Queue the probe's configs at random, drawn without the space's valid set, so that they can
        be measured while it is enumerated (seconds for a large space with an empty cache); the same
        configs whether or not it is known yet. ``waiting``: the study's queue, measured first and
        counted in the probe; ``budget``: the run's trials (None: no limit). Returns how many were
        queued: none where the space is too sparse to draw them, and the search draws them from the
        valid set as before."""
        wanted = min(self.k, budget or self.k) - len(waiting)
        if wanted <= 0:
            return 0
        queued = {space.key(p) for p in (trial_params(t, space.axis_names) for t in waiting) if p is not None}
        rng = np.random.default_rng(None if seed is None else (seed, DRAW_STREAM))
        drawn = space.draw_valid(wanted, rng, exclude=queued)
        if len(drawn) < wanted:
            return 0
        for params in drawn:
            self.study.enqueue_trial(params, skip_if_exists=False)
        return wanted

    def hold(self, trial: optuna.Trial, begun: Begun, measured: Measurement) -> None:
        self.held.append((trial, begun, measured))

    def choose(self) -> dict[str, Any] | None:
        """The fastest held config that measured ok becomes the reference, and the others that
        measured ok are measured again against it (a value re-based by the probe's own ratio carried
        that one measurement's error into every value, and the first configs of a session are the
        least settled: on an H100 one invocation's probe values sat 0.7-0.9 % off the others');
        where a second measurement fails, the first is re-based. The record stored on the study,
        or None with nothing held."""
        if not self.held:
            return None
        n = len(self.held)
        ok = [(trial, begun, m) for trial, begun, m in self.held if m.status == "ok" and m.ratio]
        defaults = self.evaluator.objective_attrs()["objective"]["reference"]
        chosen: optuna.Trial | None = None
        factor = 1.0
        if ok:
            chosen, begun, fastest = min(ok, key=lambda held: held[2].ratio or 0.0)
            factor = float(fastest.ratio or 1.0)
            self.evaluator.use_reference(begun.config, factor)
            record = {"why": f"chosen as the fastest of the first {n} configs", "trial": chosen.number,
                      "to_defaults": factor}
        else:
            record = {"why": f"the spec's defaults: none of the first {n} configs measured ok"}
        objective = self.evaluator.objective_attrs()["objective"]
        reference = self.evaluator.reference
        assert isinstance(reference, dict), "a study chooses a config as its reference, never a baseline"
        record.update(config=dict(reference), flags=objective["reference"], probed=n, defaults=defaults)
        # the choice before any value: a run stopped while telling leaves the rest to be measured against it
        self.study.set_user_attr(CHOICE, record)
        self.study.set_user_attr("objective", objective)
        self.chosen = True
        if chosen is not None:
            self.held = [(trial, begun, self._against_chosen(trial is chosen, begun, m, factor))
                         for trial, begun, m in self.held]
        return record

    def _against_chosen(self, is_chosen: bool, begun: Begun, first: Measurement, factor: float) -> Measurement:
        if first.status == "ok" and first.ratio and not is_chosen:
            again = self.evaluator.evaluate(begun.params, begun.config, lambda step, value, samples: False)
            if again.status == "ok" and again.ratio:
                again.extra["probe_ratio"] = first.ratio  # to the defaults, while the study was choosing
                return again
        self.evaluator.rebase(first, factor)
        return first


def describe(study: optuna.Study) -> str | None:
    """One line: which reference the study chose and why (None: it chose none)."""
    choice = study.user_attrs.get(CHOICE) or {}
    if "config" not in choice:
        return None
    where = f", trial {choice['trial']}" if "trial" in choice else ""
    return f"reference: {choice['why']}{where}  {choice['flags']}"
