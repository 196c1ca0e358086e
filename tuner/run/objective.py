"""The Optuna objective: one trial = one configuration, evaluated once.

The objective asks the trial for the axes (the sampler has already chosen a valid,
untried config), reuses the stored result of a repeat, and otherwise hands the config
to an evaluator (GPU or replay). Block medians flow back as intermediate values so the
pruner can stop a clearly slower config. Every outcome is written to the trial as the
user attributes of docs/ENGINE.md; failures become PRUNED trials with a status and a reason.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import optuna
from optuna.trial import FrozenTrial, TrialState

from tuner.contract.kernel_spec import Value
from tuner.evaluate.evaluator import Evaluator
from tuner.lifetime import stop_if_asked
from tuner.measurement import pareto
from tuner.measurement.paired import SlowerTest
from tuner.measurement.value import COMPLETE_STATUSES, Measurement
from tuner.search.distributions import suggest
from tuner.search.pruner import BEST_MAX_AGE_S, BestValue
from tuner.search.space import Space
from tuner.store import optuna_private
from tuner.store.liveness import StaleCheck, runner_dead

CLAIM = "tuner:measuring"  # system attr: this trial is measuring its config
#: longest wait for a twin whose liveness cannot be checked (a runner on another host, on a
#: storage without a heartbeat); a twin whose runner is dead is never waited for
TWIN_WAIT_S = 1800.0


@dataclass
class Begun:
    """A trial between :meth:`Objective.begin` and :meth:`Objective.finish`."""

    params: dict[str, Value]
    config: dict[str, Value]


class Objective:
    def __init__(self, space: Space, evaluator: Evaluator, flops: float | None = None, phase: str = "joint",
                 on_result=None, artifact_dir: str | None = None, slower_test: SlowerTest | None = None,
                 energy: str | None = None, best_max_age_s: float = BEST_MAX_AGE_S):
        self.space = space
        self.evaluator = evaluator
        self.flops = flops
        self.phase = phase
        self.on_result = on_result  # called with (trial number, params, Measurement)
        self.artifact_dir = artifact_dir  # compile logs kept as optuna artifacts when set
        #: stops a measurement whose samples say it is slower than the best (else Optuna's pruner decides)
        self.slower_test = slower_test
        self._best_value = BestValue(best_max_age_s)  # the incumbent the slower test compares with
        self._keys: dict[int, tuple] = {}  # trial number -> config key
        self.energy = energy  # the energy metric of a time-and-energy study (None: time alone)
        #: block values become intermediate values and may stop the trial (off while a probe holds
        #: the first trials: their ratios are to a reference about to be replaced, :mod:`tuner.run.probe`)
        self.reports = True
        self._feed: optuna_private.TrialFeed | None = None  # the trials this objective has not seen finished
        self._finished_by_key: dict[tuple | None, list[FrozenTrial]] = {}  # finished trials by config, by number

    def __call__(self, trial: optuna.Trial) -> float | list[float]:
        return self.finish(trial, self.begin(trial))

    def begin(self, trial: optuna.Trial) -> Begun:
        """The trial's config, recorded on it at once (params, phase): other workers see it in
        flight from here on (its runner was stored as it was created). An evaluator that can
        work ahead (compile) is told."""
        # one of the axis' own values (Optuna's return type is wider)
        params = {a: cast(Value, suggest(trial, a, d)) for a, d in self.space.distributions.items()}
        trial.set_user_attr("phase", self.phase)
        begun = Begun(params, self.space.full_config(params))
        if self.space.check(params) is None:
            self.evaluator.prefetch(begun.config)
        return begun

    def finish(self, trial: optuna.Trial, begun: Begun) -> float | list[float]:
        """Measure and record: the value, or TrialPruned."""
        return self.record(trial, begun, self.measure(trial, begun))

    def measure(self, trial: optuna.Trial, begun: Begun) -> Measurement:
        """The trial's outcome: a stored or concurrent result reused, or the evaluator's."""
        params, config = begun.params, begun.config
        measurement = self._reuse(trial, params)
        if measurement is None:
            reason = self.space.check(params)
            if reason is not None:  # only an enqueued trial can get here
                measurement = Measurement("invalid", reason=reason)
            else:
                try:
                    stop_if_asked()  # (a replay's trials never wait on the worker)
                    measurement = self.evaluator.evaluate(params, config, self._reporter(trial))
                except KeyboardInterrupt:  # Ctrl-C: Optuna fails the trial; say why, then stop
                    trial.set_user_attr("status", "interrupted")
                    trial.set_user_attr("reason", "interrupted by the user (Ctrl-C)")
                    raise
        return measurement

    def record(self, trial: optuna.Trial, begun: Begun, measurement: Measurement) -> float | list[float]:
        """Write the outcome on the trial (the trial-record attributes); the value, or TrialPruned."""
        if not measurement.flags:
            measurement.flags = self.space.spec.flags(begun.config, self.space.problem)
        optuna_private.set_user_attrs(trial, measurement.user_attrs(self.flops))
        if self.artifact_dir and measurement.artifacts:
            self._attach(trial, measurement.artifacts, self.artifact_dir)
        if self.on_result:
            self.on_result(trial.number, begun.params, measurement)
        if self.energy is not None:
            return self._values(trial, measurement)
        if measurement.status in COMPLETE_STATUSES and measurement.objective is not None:
            return measurement.objective
        raise optuna.TrialPruned(f"{measurement.status}: {measurement.reason}")

    def _values(self, trial: optuna.Trial, measurement: Measurement) -> list[float]:
        """Time and energy, or TrialPruned: a config measured without its energy is not COMPLETE
        (a made-up energy would mislead the sampler and the front)."""
        values = pareto.values(measurement, self.energy) if measurement.status in COMPLETE_STATUSES else None
        if values is not None:
            return values
        if measurement.status in COMPLETE_STATUSES:
            extra = measurement.extra
            note = (extra.get("energy_note")
                    or (extra.get("reference_energy_note") and f"the reference: {extra['reference_energy_note']}")
                    or "no energy per launch was measured")
            trial.set_user_attr("status", pareto.NO_ENERGY)
            trial.set_user_attr("reason", note)
            raise optuna.TrialPruned(f"{pareto.NO_ENERGY}: {note}")
        raise optuna.TrialPruned(f"{measurement.status}: {measurement.reason}")

    def _attach(self, trial: optuna.Trial, files: dict[str, str], artifact_dir: str) -> None:
        import warnings

        try:
            from tuner.store.notes import attach_trial_artifacts

            attach_trial_artifacts(trial, files, artifact_dir)
        except Exception as exc:  # artifacts are a convenience: never lose a trial over them
            warnings.warn(f"could not store artifacts of trial {trial.number}: {exc}", stacklevel=2)

    def _reporter(self, trial: optuna.Trial) -> Callable[[int, float, list[float]], bool]:
        """Each block: its running value becomes an intermediate value; then stop or go on."""
        seen: list[float] = []

        def report(step: int, value: float, samples: list[float]) -> bool:
            if not self.reports or self.energy is not None:  # Optuna takes none of a multi-objective trial
                return False
            trial.report(value, step)
            if self.slower_test is None:
                return trial.should_prune()
            seen.extend(samples)
            return self.slower_test.slower(seen, self._best_value(trial.study))

        return report

    def _reuse(self, trial: optuna.Trial, params: dict[str, Any]) -> Measurement | None:
        """A stored or concurrent result of the same config, else None (then this trial measures).

        This runs on the measuring thread between two GPU jobs, so it reads the study once
        (twins waited for re-read it).
        """
        key = self.space.key(params)
        running = self._look_up(trial.study)
        stored = self._stored(trial, key)
        if stored is None:
            stored = self._await_twin(running, trial, key)
        return stored

    def _key_of(self, trial: FrozenTrial) -> tuple | None:
        """A trial's config key, computed once (a trial's params never change once all are set)."""
        key = self._keys.get(trial.number)
        if key is None and len(trial.params) == len(self.space.axes):
            key = self._keys[trial.number] = self.space.key(trial.params)
        return key

    def _stored(self, trial: optuna.Trial, key: tuple, twin: bool = False) -> Measurement | None:
        """A repeat of a finished configuration reuses its stored result: no GPU time.

        Only complete measurements count: a config stopped by the pruner is measured
        again if it comes back (the bar it failed may have moved) -- unless it is a
        ``twin``, measured by another worker at the same moment: then the bar is the same.
        """
        started = trial.datetime_start  # a twin that finished after this trial began ran alongside it
        for t in self._finished_by_key.get(key, []):
            if t.number == trial.number:
                continue
            status = t.user_attrs.get("status")
            concurrent = twin or (started is not None and t.datetime_complete is not None and t.datetime_complete >= started)
            if status is None or (status == "pruned_slow" and not concurrent) or (status == "duplicate" and t.state != TrialState.COMPLETE):
                continue
            stored = Measurement.from_attrs(t.user_attrs)  # ms, ratio, reference_ms as they were stored
            stored.status = "duplicate"
            stored.value = t.values[0] if t.state == TrialState.COMPLETE else None  # the objective: a ratio, or ms
            if stored.value is None:
                stored.ms = None
            for attr in pareto.ENERGY_ATTRS.values():  # the energy objective of a repeat, as stored
                if attr in t.user_attrs:
                    stored.extra[attr] = t.user_attrs[attr]
            stored.reason = f"repeat of trial {t.number} ({status}); stored result reused"
            return stored
        return None

    def _look_up(self, study: optuna.Study) -> list[FrozenTrial]:
        """Index the trials finished since the last look by config, once each (a look-up then
        costs the same however many trials finished); returns the RUNNING ones."""
        if self._feed is None or self._feed.study is not study:
            self._feed = optuna_private.TrialFeed(study)
        running = []
        for t in self._feed.read():
            if t.state in (TrialState.COMPLETE, TrialState.PRUNED):
                bisect.insort(self._finished_by_key.setdefault(self._key_of(t), []), t, key=lambda f: f.number)
            elif t.state == TrialState.RUNNING:
                running.append(t)
        return running

    def _await_twin(self, running: list[FrozenTrial], trial: optuna.Trial, key: tuple) -> Measurement | None:
        """Another worker is measuring this very config (both sampled it at once): wait, reuse.

        Params are stored before this check; a trial waits for a same-config RUNNING
        trial that is older or has claimed the measurement, then reuses its result (a
        duplicate, no GPU time). Both measure only if each checks before the other's
        params land -- a window of one storage write.
        If the twin dies or is pruned, this trial measures after all: a twin counts while its
        runner lives (:mod:`tuner.store.liveness`: its process in this PID space, else its lease;
        stale trials are failed and queued again here).
        """
        deadline = time.monotonic() + TWIN_WAIT_S
        pause = 0.02
        waited = False
        stale_check = StaleCheck(trial.study, self.space.axis_names, first_now=False)
        while time.monotonic() < deadline:
            stale_check()  # a twin on a dead host stops counting
            twins = [t for t in running if t.number != trial.number
                     and (t.number < trial.number or t.system_attrs.get(CLAIM))
                     and self._key_of(t) == key and not runner_dead(t)]
            if not twins:
                stored = self._stored(trial, key, twin=True) if waited else None
                if stored is None:  # this trial measures: a twin arriving later waits for it
                    optuna_private.set_trial_system_attr(trial, CLAIM, True)
                return stored
            waited = True
            time.sleep(pause)
            pause = min(1.0, pause * 2)
            running = self._look_up(trial.study)
        return None
