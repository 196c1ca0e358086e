"""The Optuna objective: one trial = one configuration, evaluated once.

The objective asks the trial for the axes (the sampler has already chosen a valid,
untried config), reuses the stored result of a repeat, and otherwise hands the config
to an evaluator (GPU or replay). Block medians flow back as intermediate values so the
pruner can stop a clearly slower config. Every outcome is written to the trial as the
DESIGN's user attributes; failures become PRUNED trials with a status and a reason.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import optuna
from optuna.trial import TrialState

from tuner.record import COMPLETE_STATUSES, Measurement
from tuner.space import Space
from tuner.spec import Value, define_flags
from tuner.storage import mark_runner


class Evaluator(Protocol):
    kind: str

    def evaluate(
        self, params: dict[str, Value], config: dict[str, Value], report: Callable[[int, float], bool]
    ) -> Measurement: ...


class Objective:
    def __init__(self, space: Space, evaluator: Evaluator, flops: float | None = None, phase: str = "joint", on_result=None):
        self.space = space
        self.evaluator = evaluator
        self.flops = flops
        self.phase = phase
        self.on_result = on_result  # called with (trial number, params, Measurement)

    def __call__(self, trial: optuna.Trial) -> float:
        params = {a: trial.suggest_categorical(a, v) for a, v in self.space.axes.items()}
        mark_runner(trial)
        trial.set_user_attr("phase", self.phase)
        config = self.space.full_config(params)

        measurement = self._stored(trial, params)
        if measurement is None:
            reason = self.space.check(params)
            if reason is not None:  # only an enqueued trial can get here
                measurement = Measurement("invalid", reason=reason)
            else:
                measurement = self.evaluator.evaluate(params, config, self._reporter(trial))
        if not measurement.flags:
            defines = self.space.spec.defines(config, self.space.problem)
            measurement.flags = " ".join(define_flags(defines))
        for key, value in measurement.user_attrs(self.flops).items():
            trial.set_user_attr(key, value)
        if self.on_result:
            self.on_result(trial.number, params, measurement)
        if measurement.status in COMPLETE_STATUSES and measurement.ms is not None:
            return measurement.ms
        raise optuna.TrialPruned(f"{measurement.status}: {measurement.reason}")

    def _reporter(self, trial: optuna.Trial) -> Callable[[int, float], bool]:
        def report(step: int, value: float) -> bool:
            trial.report(value, step)
            return trial.should_prune()

        return report

    def _stored(self, trial: optuna.Trial, params: dict[str, Any]) -> Measurement | None:
        """A repeat of a finished configuration reuses its stored result: no GPU time.

        Only complete measurements count: a config stopped by the pruner is measured
        again if it comes back (the bar it failed may have moved).
        """
        key = self.space.key(params)
        finished = trial.study._get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED), use_cache=False)
        for t in finished:
            if t.number == trial.number or not t.params or self.space.key(t.params) != key:
                continue
            status = t.user_attrs.get("status")
            if status is None or status == "pruned_slow" or (status == "duplicate" and t.state != TrialState.COMPLETE):
                continue
            stored = Measurement.from_attrs(t.user_attrs)
            stored.status = "duplicate"
            stored.ms = t.value if t.state == TrialState.COMPLETE else None
            stored.reason = f"repeat of trial {t.number} ({status}); stored result reused"
            return stored
        return None
